// The MPI world of a stepcast process (rank, size, slowest-rank max, sum, barrier, gather to rank 0),
// for the code built into the tool that runs under mpirun (the CPU calibration suite and the
// validate executor). Without MPI, or when MPI is not initialised, it is one rank.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::calibrate {

struct MpiWorld {
  int rank = 0, size = 1;
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
  [[nodiscard]] double max(double x) const {
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      double m = x;
      MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return m;
    }
#endif
    return x;
  }
  [[nodiscard]] double sum(double x) const {
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      double s = x;
      MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      return s;
    }
#endif
    return x;
  }
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
  // Every rank's vector, concatenated on rank 0 (with each rank's offset).
  [[nodiscard]] std::vector<double> gather(const std::vector<double>& mine, std::vector<int>& displs) const {
    displs.assign(static_cast<size_t>(size), 0);
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      int n = static_cast<int>(mine.size());
      std::vector<int> counts(static_cast<size_t>(size));
      MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::vector<double> all;
      if (rank == 0) {
        int off = 0;
        for (int r = 0; r < size; ++r) displs[static_cast<size_t>(r)] = off, off += counts[static_cast<size_t>(r)];
        all.resize(static_cast<size_t>(off));
      }
      MPI_Gatherv(mine.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
      return all;
    }
#endif
    return mine;
  }
};

}  // namespace stepcast::calibrate
