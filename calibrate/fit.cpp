#include "calibrate/fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "sim/core/stats.hpp"

namespace stepcast::calibrate {

namespace {
double ramp(double x, double h) { return x / (x + h); }
}  // namespace

double gemm_model_seconds(const GemmFit& f, double m, double n, double k) {
  const double flops = 2.0 * m * n * k;
  return flops / (f.rate * ramp(m, f.half_dim) * ramp(n, f.half_dim) * ramp(k, f.half_dim)) + f.overhead_s;
}

namespace {

double rms_rel_error(const GemmFit& f, const std::vector<GemmSample>& samples) {
  double sq = 0;
  for (const auto& s : samples) {
    const double e = gemm_model_seconds(f, s.m, s.n, s.k) / s.seconds - 1.0;
    sq += e * e;
  }
  return samples.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(samples.size()));
}

}  // namespace

std::vector<DtypeGemmFit> fit_gemm_dtypes(const std::vector<DtypeGemmSamples>& by_dtype, double overhead_s) {
  // log(F / (t - o)) - log(r(m) r(n) r(k)) = log S_d: one unknown per dtype (a one-hot design).
  std::vector<std::pair<size_t, const GemmSample*>> rows;
  for (size_t d = 0; d < by_dtype.size(); ++d) {
    for (const auto& s : by_dtype[d].samples) rows.emplace_back(d, &s);
  }
  std::vector<DtypeGemmFit> best;
  if (rows.empty()) return best;
  const auto n = static_cast<Eigen::Index>(rows.size());
  const auto cols = static_cast<Eigen::Index>(by_dtype.size());
  double best_res = 1e300, best_h = 0;
  Eigen::VectorXd best_x;
  for (double h = 1.0; h <= 4096.0; h *= 1.05) {
    Eigen::MatrixXd A = Eigen::MatrixXd::Zero(n, cols);
    Eigen::VectorXd y(n);
    bool ok = true;
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto& [d, s] = rows[static_cast<size_t>(i)];
      const double t = s->seconds - overhead_s;
      if (t <= 0) {
        ok = false;
        break;
      }
      A(i, static_cast<Eigen::Index>(d)) = 1.0;
      y(i) = std::log(2.0 * s->m * s->n * s->k / t) - std::log(ramp(s->m, h) * ramp(s->n, h) * ramp(s->k, h));
    }
    if (!ok) continue;
    const Eigen::VectorXd x = A.colPivHouseholderQr().solve(y);
    const double res = (A * x - y).squaredNorm();
    if (res < best_res) {
      best_res = res;
      best_h = h;
      best_x = x;
    }
  }
  if (best_x.size() == 0) return best;
  for (size_t d = 0; d < by_dtype.size(); ++d) {
    DtypeGemmFit f{by_dtype[d].dtype, {}};
    f.fit.rate = by_dtype[d].samples.empty() ? 0.0 : std::exp(best_x(static_cast<Eigen::Index>(d)));
    f.fit.half_dim = best_h;
    f.fit.overhead_s = overhead_s;
    f.fit.rms_rel_error = rms_rel_error(f.fit, by_dtype[d].samples);
    best.push_back(f);
  }
  return best;
}

GemmFit fit_gemm(const std::vector<GemmSample>& samples, double overhead_s) {
  GemmFit best;
  best.overhead_s = overhead_s;
  double best_res = 1e300;
  const auto n = static_cast<Eigen::Index>(samples.size());
  for (double h = 1.0; h <= 4096.0; h *= 1.05) {
    // log(F / (t - o)) = log S + log r(m) + log r(n) + log r(k): one unknown, log S.
    Eigen::MatrixXd A = Eigen::MatrixXd::Ones(n, 1);
    Eigen::VectorXd y(n);
    bool ok = true;
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto& s = samples[static_cast<size_t>(i)];
      const double t = s.seconds - overhead_s;
      if (t <= 0) {
        ok = false;
        break;
      }
      const double flops = 2.0 * s.m * s.n * s.k;
      y(i) = std::log(flops / t) - std::log(ramp(s.m, h) * ramp(s.n, h) * ramp(s.k, h));
    }
    if (!ok) continue;
    const Eigen::VectorXd x = A.colPivHouseholderQr().solve(y);
    const double res = (A * x - y).squaredNorm();
    if (res < best_res) {
      best_res = res;
      best.rate = std::exp(x(0));
      best.half_dim = h;
    }
  }
  best.rms_rel_error = rms_rel_error(best, samples);
  return best;
}

CollFit fit_collective(const std::string& op, int64_t ranks, double bus_factor, std::vector<CollSample> samples) {
  CollFit f;
  f.op = op;
  f.ranks = ranks;
  f.bus_factor = bus_factor;
  std::sort(samples.begin(), samples.end(), [](const CollSample& a, const CollSample& b) { return a.bytes < b.bytes; });
  for (const auto& s : samples) f.plateau_busbw = std::max(f.plateau_busbw, s.bytes * bus_factor / s.seconds);
  for (const auto& s : samples) f.curve.emplace_back(s.bytes, s.bytes * bus_factor / s.seconds);
  const auto n = static_cast<Eigen::Index>(samples.size());
  if (n >= 2) {
    // Relative least squares: divide each row by the measured time.
    Eigen::MatrixXd A(n, 2);
    Eigen::VectorXd y(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto& s = samples[static_cast<size_t>(i)];
      A(i, 0) = 1.0 / s.seconds;
      A(i, 1) = s.bytes / s.seconds;
      y(i) = 1.0;
    }
    const Eigen::VectorXd x = A.colPivHouseholderQr().solve(y);
    f.alpha_s = x(0);
    f.beta_s_per_byte = x(1);
  }
  return f;
}

std::vector<double> speed_adjusted_runs(const std::vector<double>& before_runs, const std::vector<double>& after_runs, const std::vector<double>& runs) {
  const size_t passes = std::min({before_runs.size(), after_runs.size(), runs.size()});
  if (passes == 0) throw std::invalid_argument("speed_adjusted_runs: needs a pass measuring all three");
  const double before = core::median(before_runs), after = core::median(after_runs);
  std::vector<double> adjusted;
  for (size_t p = 0; p < passes; ++p) adjusted.push_back(runs[p] / std::sqrt(before_runs[p] / before * (after_runs[p] / after)));
  return adjusted;
}

std::vector<double> within_pass_errors(double lo_bytes, const std::vector<double>& lo_runs, double hi_bytes, const std::vector<double>& hi_runs,
                                       double bytes, const std::vector<double>& runs) {
  const size_t passes = std::min({lo_runs.size(), hi_runs.size(), runs.size()});
  if (passes == 0 || !(lo_bytes < bytes && bytes < hi_bytes)) {
    throw std::invalid_argument("within_pass_errors: needs lo_bytes < bytes < hi_bytes and a pass measuring all three");
  }
  const double w = (std::log(bytes) - std::log(lo_bytes)) / (std::log(hi_bytes) - std::log(lo_bytes));
  std::vector<double> errors;
  for (size_t p = 0; p < passes; ++p) {
    const double predicted = std::exp(std::log(lo_runs[p]) + w * (std::log(hi_runs[p]) - std::log(lo_runs[p])));
    errors.push_back(predicted / runs[p] - 1.0);
  }
  return errors;
}

double collective_sms_from(double alone_s, double beside_s, int sm_count) {
  if (alone_s <= 0 || beside_s <= 0 || sm_count <= 0) return 0.0;
  const double share = std::clamp(1.0 - alone_s / beside_s, 0.0, 0.9);
  return share * static_cast<double>(sm_count);
}

}  // namespace stepcast::calibrate
