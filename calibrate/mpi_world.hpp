// The MPI world of a stepcast process (rank, size, slowest-rank max, sum, barrier, gather to rank 0),
// for the code built into the tool that runs under mpirun (the CPU calibration suite and the
// validate executor). Without MPI, or when MPI is not initialised, it is one rank.
#pragma once

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::calibrate {

struct MpiWorld {
  int rank = 0, size = 1;
  enum Reduce { kMax, kSum };
  // x reduced over every rank (x itself on one rank).
  [[nodiscard]] double all_reduce(double x, Reduce op) const {
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      double out = x;
      MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, op == kMax ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
      return out;
    }
#endif
    (void)op;
    return x;
  }
  MpiWorld() {
#ifdef STEPCAST_HAVE_MPI
    int on = 0;
    MPI_Initialized(&on);
    if (on) {
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
#endif
  }
  void barrier() const {
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
  }
  [[nodiscard]] double max(double x) const { return all_reduce(x, kMax); }
  [[nodiscard]] double sum(double x) const { return all_reduce(x, kSum); }
  // Rank 0's text, on every rank.
  [[nodiscard]] std::string broadcast(std::string text) const {
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      unsigned long long n = text.size();
      MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
      text.resize(static_cast<size_t>(n));
      // In pieces: a count is an int.
      for (size_t off = 0; off < text.size(); off += size_t{1} << 30) {
        MPI_Bcast(text.data() + off, static_cast<int>(std::min(text.size() - off, size_t{1} << 30)), MPI_CHAR, 0, MPI_COMM_WORLD);
      }
    }
#endif
    return text;
  }
  // Every rank's text, in rank order, on rank 0 (empty on the others). A count is an int, so a
  // text over 2 GiB is refused (std::length_error) rather than cut.
  [[nodiscard]] std::vector<std::string> gather(const std::string& mine) const {
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      if (mine.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
        throw std::length_error("rank " + std::to_string(rank) + " has " + std::to_string(mine.size()) +
                                " bytes to gather, over MPI's 2 GiB count");
      }
      const int n = static_cast<int>(mine.size());
      std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
      MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::string all;
      if (rank == 0) {
        long long off = 0;
        for (int r = 0; r < size; ++r) displs[static_cast<size_t>(r)] = static_cast<int>(off), off += counts[static_cast<size_t>(r)];
        all.resize(static_cast<size_t>(off));
      }
      MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
      std::vector<std::string> out;
      for (int r = 0; rank == 0 && r < size; ++r) {
        out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]), static_cast<size_t>(counts[static_cast<size_t>(r)])));
      }
      return out;
    }
#endif
    return {mine};
  }
};

}  // namespace stepcast::calibrate
