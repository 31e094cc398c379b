#include "calibrate/coll_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace stepcast::calibrate {

size_t coll_output_count(const std::string& op, size_t count, int ranks) {
  if (ranks < 1) throw std::invalid_argument("collective check: ranks must be at least 1");
  const size_t per = count / static_cast<size_t>(ranks);
  if (op == "reduce_scatter") return per;
  if (op == "all_gather" || op == "all_to_all") return per * static_cast<size_t>(ranks);
  if (op == "all_reduce" || op == "broadcast" || op == "send_recv") return count;
  throw std::invalid_argument("collective check: unknown operation '" + op + "'");
}

double coll_expected(const std::string& op, int rank, int ranks, size_t count, size_t j, double unset) {
  const size_t per = count / static_cast<size_t>(ranks);
  if (op == "all_reduce" || op == "reduce_scatter") {
    const size_t i = op == "all_reduce" ? j : static_cast<size_t>(rank) * per + j;
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += coll_check_value(r, i);
    return sum;
  }
  if (op == "all_gather") return coll_check_value(static_cast<int>(j / per), j % per);
  // Output chunk p is peer p's input chunk number `rank`.
  if (op == "all_to_all") return coll_check_value(static_cast<int>(j / per), static_cast<size_t>(rank) * per + j % per);
  if (op == "broadcast") return coll_check_value(0, j);
  if (op == "send_recv") {
    const int peer = rank ^ 1;
    return peer < ranks ? coll_check_value(peer, j) : unset;
  }
  throw std::invalid_argument("collective check: unknown operation '" + op + "'");
}

std::vector<size_t> coll_sample_indices(size_t n, size_t samples) {
  std::vector<size_t> idx;
  if (n == 0) return idx;
  if (n <= samples) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  const size_t stride = (n - 1) / (samples - 1);
  for (size_t i = 0; i < n && idx.size() + 1 < samples; i += stride) idx.push_back(i);
  if (idx.back() != n - 1) idx.push_back(n - 1);
  return idx;
}

std::string coll_verify(const std::string& op, int rank, int ranks, size_t count, const std::vector<size_t>& indices,
                        const std::vector<double>& values, double rel_tol, double unset) {
  if (indices.size() != values.size()) throw std::invalid_argument("collective check: indices and values differ in length");
  for (size_t s = 0; s < indices.size(); ++s) {
    const double want = coll_expected(op, rank, ranks, count, indices[s], unset);
    if (std::abs(values[s] - want) > rel_tol * std::max(1.0, std::abs(want))) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s result check failed on rank %d of %d: element %zu is %g, expected %g", op.c_str(), rank,
                    ranks, indices[s], values[s], want);
      return buf;
    }
  }
  return "";
}

}  // namespace stepcast::calibrate
