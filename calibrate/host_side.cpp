#include "calibrate/host_side.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "calibrate/cpu_kernels.hpp"
#include "calibrate/measure.hpp"
#include "sim/core/error.hpp"

namespace stepcast::calibrate {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs body(t) on `threads` threads at once and returns the wall time of the slowest.
double timed_parallel(int threads, const std::function<void(int)>& body) {
  const double t0 = now_s();
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& th : pool) th.join();
  return now_s() - t0;
}

}  // namespace

int host_threads(int local_ranks) {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(cores) / std::max(1, local_ranks));
}

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

double host_copy_bandwidth(int threads, const MeasureOptions& mo) {
  if (threads < 1) throw core::InternalError("host_copy_bandwidth: threads < 1");
  const size_t bytes = size_t{64} << 20;
  // Per thread: three buffers, copied round robin, so neither end is the last one written.
  std::vector<std::vector<std::vector<char>>> bufs(static_cast<size_t>(threads));
  for (auto& b : bufs) {
    b.assign(3, std::vector<char>(bytes));
    for (size_t i = 0; i < b.size(); ++i) std::memset(b[i].data(), static_cast<int>(i + 1), bytes);
  }
  int round = 0;
  const Measurement m = measure(
      [&]() {
        const int r = round++;
        return timed_parallel(threads, [&](int t) {
          auto& b = bufs[static_cast<size_t>(t)];
          std::memcpy(b[static_cast<size_t>((r + 1) % 3)].data(), b[static_cast<size_t>(r % 3)].data(), bytes);
        });
      },
      mo);
  if (bufs[0][static_cast<size_t>(round % 3)][bytes / 2] == 0) throw core::InternalError("calibrate: the host copy did not copy");
  return 2.0 * static_cast<double>(bytes) * threads / m.median_s;
}

double host_optimizer_rate(int threads, const MeasureOptions& mo) {
  if (threads < 1) throw core::InternalError("host_optimizer_rate: threads < 1");
  const size_t n = size_t{4} << 20;
  struct State {
    std::vector<float> w, g, m, v;
  };
  std::vector<State> st(static_cast<size_t>(threads));
  for (auto& s : st) s = {std::vector<float>(n, 1.0f), std::vector<float>(n, 0.01f), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  const Measurement m = measure(
      [&]() {
        return timed_parallel(threads, [&](int t) {
          auto& s = st[static_cast<size_t>(t)];
          adam_step(s.w.data(), s.g.data(), s.m.data(), s.v.data(), n);
        });
      },
      mo);
  for (const auto& s : st) {
    if (!std::isfinite(s.w[n / 2]) || s.w[n / 2] >= 1.0f) throw core::InternalError("calibrate: the host Adam step did not update the weights");
  }
  return static_cast<double>(n) * threads / m.median_s;
}

}  // namespace stepcast::calibrate
