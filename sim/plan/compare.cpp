#include "sim/plan/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/report/output.hpp"

namespace stepcast::plan {

using core::Json;

namespace {

constexpr double kGiB = 1073741824.0;

double lookup(const std::vector<std::pair<std::string, double>>& rows, const std::string& key) {
  for (const auto& [k, v] : rows) {
    if (k == key) return v;
  }
  return 0.0;
}

std::string signed_fmt(const char* f, double v) {
  std::string out = v >= 0 ? "+" : "";
  out += core::fmt(f, v);
  return out;
}

// "A is 12.3% faster than B (2.190 s against 2.450 s per step)." and what the faster avoids.
std::string verdict(const Side& a, const Side& b) {
  const double ta = a.c.step_s(), tb = b.c.step_s();
  if (std::abs(ta - tb) <= 1e-3 * std::max(ta, tb)) return "A and B take the same step time (within 0.1%, " + core::fmt("%.3f", ta) + " s).";
  const bool a_faster = ta < tb;
  const Side& fast = a_faster ? a : b;
  const Side& slow = a_faster ? b : a;
  const std::string f = a_faster ? "A" : "B", w = a_faster ? "B" : "A";
  std::string s = f + " is " + core::fmt("%.1f", 100.0 * (slow.c.step_s() / fast.c.step_s() - 1.0)) + "% faster than " + w + " (" +
                  core::fmt("%.3f", fast.c.step_s()) + " s against " + core::fmt("%.3f", slow.c.step_s()) + " s per step).";
  const std::string why = compare_text(fast.c, slow.c, f);
  return why.empty() ? s : s + " " + why;
}

}  // namespace

Side evaluate_side(const config::RunConfig& rc, const std::string& name, bool simulate) {
  Side s;
  s.name = name;
  s.c.rc = rc;
  s.c.est = estimate::estimate_step(rc);
  s.capacity_bytes = s.c.est.memory.capacity.value();
  s.c.peak_memory_bytes = s.c.est.memory.peak().value();
  if (simulate) s.c.simulate();
  s.fits = s.c.peak_memory_bytes <= s.capacity_bytes;
  return s;
}

Json side_json(const Side& s) {
  const Row x = row_of(s.c);
  return {{"name", s.name},
          {"run", report::run_summary_json(s.c.rc)},
          {"simulated", x.simulated},
          {"step_time_s", x.step},
          {"estimate_step_time_s", x.est_step},
          {"tokens_per_s", x.tok_s},
          {"tokens_per_s_per_gpu", x.tok_gpu},
          {"mfu", x.mfu},
          {"bubble_fraction", x.bubble},
          {"peak_memory_bytes", s.c.peak_memory_bytes},
          {"memory_capacity_bytes", s.capacity_bytes},
          {"fits", s.fits},
          {"breakdown", report::breakdown_json(s.c.breakdown())}};
}

std::string run_diff(const config::RunConfig& a, const config::RunConfig& b) {
  std::vector<std::string> d;
  auto text = [&](const char* what, const std::string& x, const std::string& y) {
    if (x != y) d.push_back(std::string(what) + " " + x + " vs " + y);
  };
  text("model", a.model.name, b.model.name);
  if (a.model.name == b.model.name && a.model.total_params() != b.model.total_params()) {
    d.push_back("model parameters " + core::fmt("%.3g", a.model.total_params()) + " vs " + core::fmt("%.3g", b.model.total_params()));
  }
  text("hardware", a.hardware.name, b.hardware.name);
  text("GPUs", std::to_string(a.cluster.num_gpus), std::to_string(b.cluster.num_gpus));
  text("GPUs per node", std::to_string(a.cluster.gpus_per_node), std::to_string(b.cluster.gpus_per_node));
  text("sequence", std::to_string(a.training.seq_len), std::to_string(b.training.seq_len));
  text("global batch", std::to_string(a.training.global_batch_size), std::to_string(b.training.global_batch_size));
  text("precision", hw::to_string(a.training.precision), hw::to_string(b.training.precision));
  text("LoRA", config::lora_label(a.training.lora), config::lora_label(b.training.lora));
  text("attention", config::to_string(a.training.attention), config::to_string(b.training.attention));
  auto docs = [](const config::RunConfig& rc) {
    return rc.training.packed_document_tokens > 0 ? std::to_string(rc.training.packed_document_tokens) + "-token documents" : "none";
  };
  text("packing", docs(a), docs(b));
  if (const std::string l = layout_diff(a.parallel, b.parallel); !l.empty()) d.push_back(l);
  if (d.empty()) return "nothing in model, hardware, cluster, sequence, batch, precision, fine-tuning, attention kernel or layout";
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) s += ", ";
    s += d[i];
  }
  return s;
}

std::string compare_table(const Side& a, const Side& b) {
  std::ostringstream o;
  const Row ra = row_of(a.c), rb = row_of(b.c);
  const char* how = a.c.simulated && b.c.simulated ? "simulated" : "estimated";
  o << "compare (" << how << "):\n";
  o << "  A  " << a.name << ": " << a.c.rc.model.name << " on " << a.c.rc.cluster.num_gpus << "x " << a.c.rc.hardware.name << ", " << ra.layout
    << "\n";
  o << "  B  " << b.name << ": " << b.c.rc.model.name << " on " << b.c.rc.cluster.num_gpus << "x " << b.c.rc.hardware.name << ", " << rb.layout
    << "\n";
  o << "  differs in: " << run_diff(a.c.rc, b.c.rc) << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s %9s\n", "", "A", "B", "B - A", "B / A");
  o << line;
  auto row = [&](const std::string& what, double x, double y, const char* f, bool ratio) {
    const std::string rel = ratio && x != 0 ? signed_fmt("%.1f", 100.0 * (y / x - 1.0)) + "%" : "";
    std::snprintf(line, sizeof line, "  %-34s %12s %12s %12s %9s", what.c_str(), core::fmt(f, x).c_str(), core::fmt(f, y).c_str(),
                  signed_fmt(f, y - x).c_str(), rel.c_str());
    std::string text = line;
    text.erase(text.find_last_not_of(' ') + 1);
    o << text << "\n";
  };
  row("step time (s)", ra.step, rb.step, "%.3f", true);
  row("tokens/s per GPU", ra.tok_gpu, rb.tok_gpu, "%.1f", true);
  row("MFU (%)", 100.0 * ra.mfu, 100.0 * rb.mfu, "%.1f", false);
  row("pipeline bubble (% of pipeline)", 100.0 * ra.bubble, 100.0 * rb.bubble, "%.1f", false);
  row("peak memory (GiB)", ra.peak_gib, rb.peak_gib, "%.2f", true);
  row("memory free (GiB)", (a.capacity_bytes - a.c.peak_memory_bytes) / kGiB, (b.capacity_bytes - b.c.peak_memory_bytes) / kGiB, "%.2f",
      false);
  const auto ta = time_categories(a.c.breakdown()), tb = time_categories(b.c.breakdown());
  std::vector<std::string> keys;
  for (const auto& t : {ta, tb}) {
    for (const auto& [k, v] : t) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  for (const auto& k : keys) {
    const double x = lookup(ta, k), y = lookup(tb, k);
    if (x == 0 && y == 0) continue;
    row(k + " (s)", x, y, "%.3f", false);
  }
  o << "\n" << verdict(a, b) << "\n";
  for (const Side* s : {&a, &b}) {
    if (!s->fits) {
      o << (s == &a ? "A" : "B") << " does not fit: " << core::fmt("%.2f", s->c.peak_memory_bytes / kGiB) << " GiB of "
        << core::fmt("%.2f", s->capacity_bytes / kGiB) << " GiB per GPU.\n";
    }
  }
  return o.str();
}

Json compare_json(const Side& a, const Side& b, const std::string& command) {
  Json out = report::provenance_json(command);
  out["a"] = side_json(a);
  out["b"] = side_json(b);
  const Row ra = row_of(a.c), rb = row_of(b.c);
  Json delta = {{"step_time_s", rb.step - ra.step},
                {"step_time_ratio", rb.step / ra.step},
                {"tokens_per_s_per_gpu", rb.tok_gpu - ra.tok_gpu},
                {"mfu", rb.mfu - ra.mfu},
                {"peak_memory_bytes", b.c.peak_memory_bytes - a.c.peak_memory_bytes}};
  Json times = Json::object();
  const auto ta = time_categories(a.c.breakdown()), tb = time_categories(b.c.breakdown());
  for (const auto& t : {ta, tb}) {
    for (const auto& [k, v] : t) times[k] = lookup(tb, k) - lookup(ta, k);
  }
  delta["time_s"] = times;
  out["delta"] = delta;
  out["differs_in"] = run_diff(a.c.rc, b.c.rc);
  out["verdict"] = verdict(a, b);
  return out;
}

}  // namespace stepcast::plan
