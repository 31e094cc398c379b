#include "sim/report/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "sim/core/error.hpp"

namespace stepcast::report {

using core::Json;

namespace {

constexpr double kGiB = 1073741824.0;

std::string num(double x, const char* f = "%.3f") {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A result's number: `where` names the result in errors; a missing optional field reads 0.
double number_field(const Json& j, const char* key, const std::string& where, bool required) {
  if (!j.contains(key)) {
    if (required) throw core::UserError(where + ": \"" + key + "\" is missing; results from stepcast plan --json or sweep carry it");
    return 0.0;
  }
  const Json& v = j[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || (required && v.get<double>() <= 0)) {
    throw core::UserError(where + ": \"" + key + "\" is " + core::show(v) + "; expected a " + (required ? "positive" : "non-negative") + " number");
  }
  return v.get<double>();
}

ReportRow row_from(const Json& j, const std::string& label, const std::string& where) {
  ReportRow r;
  r.label = label;
  r.step_time_s = number_field(j, "step_time_s", where, true);
  r.peak_memory_bytes = number_field(j, "peak_memory_bytes", where, false);
  r.mfu = number_field(j, "mfu", where, false);
  r.tokens_per_s_per_gpu = number_field(j, "tokens_per_s_per_gpu", where, false);
  r.bubble_fraction = number_field(j, "bubble_fraction", where, false);
  r.breakdown = j.contains("breakdown") && j["breakdown"].is_object() ? j["breakdown"] : Json();
  if (j.contains("simulated") && j["simulated"].is_boolean()) r.source = j["simulated"].get<bool>() ? "simulated" : "estimate";
  return r;
}

// Breakdown segments in a fixed order with fixed colours.
std::vector<std::pair<std::string, double>> segments(const Json& b) {
  std::vector<std::pair<std::string, double>> s;
  if (!b.is_object()) return s;
  // The output contract's names (compute_s, ...); plan JSON written before schema 1 carried
  // them without the unit suffix.
  auto get = [&](const char* key) {
    const std::string k = key;
    if (b.contains(k + "_s") && b[k + "_s"].is_number()) return b[k + "_s"].get<double>();
    return b.contains(k) && b[k].is_number() ? b[k].get<double>() : 0.0;
  };
  const double compute = get("compute"), recompute = get("recompute"), host = get("host");
  s.emplace_back("compute", compute - recompute - host);
  s.emplace_back("recompute", recompute);
  s.emplace_back("host", host);
  s.emplace_back("bubble", get("bubble"));
  const Json* comm = b.contains("exposed_comm_s") ? &b["exposed_comm_s"] : b.contains("exposed_comm") ? &b["exposed_comm"] : nullptr;
  if (comm != nullptr && comm->is_object()) {
    for (const char* k : {"tp", "cp", "ep", "pp", "dp", "offload"}) s.emplace_back(std::string("comm ") + k, comm->value(k, 0.0));
  }
  s.emplace_back("optimizer", get("optimizer"));
  return s;
}

const std::map<std::string, std::string>& palette() {
  static const std::map<std::string, std::string> p = {
      {"compute", "#4e79a7"},   {"recompute", "#a0cbe8"}, {"host", "#d4a6c8"}, {"bubble", "#e15759"},    {"comm tp", "#f28e2b"},
      {"comm cp", "#ffbe7d"},   {"comm ep", "#b07aa1"},   {"comm pp", "#59a14f"},   {"comm dp", "#8cd17d"},   {"comm offload", "#76b7b2"},
      {"optimizer", "#79706e"}, {"weights", "#4e79a7"},   {"gradients", "#f28e2b"}, {"optimizer state", "#59a14f"},
      {"activations", "#e15759"}, {"transient", "#b07aa1"}, {"logits", "#edc948"},  {"kept outputs", "#ff9da7"}, {"buffers", "#9c755f"},
      {"runtime", "#bab0ac"},   {"forward", "#4e79a7"},   {"backward", "#f28e2b"},  {"weight grad", "#ffbe7d"},
      {"tp/cp/ep comm", "#b07aa1"}, {"pp send", "#59a14f"}, {"dp comm", "#8cd17d"}, {"optimizer step", "#79706e"},
      {"other", "#bab0ac"}, {"predicted", "#4e79a7"}, {"measured", "#f28e2b"}};
  return p;
}

std::string color(const std::string& k) {
  const auto it = palette().find(k);
  return it == palette().end() ? "#bab0ac" : it->second;
}

std::string legend(const std::vector<std::string>& keys, double x, double y) {
  std::ostringstream o;
  double cx = x;
  for (const auto& k : keys) {
    o << "<rect x=\"" << num(cx, "%.1f") << "\" y=\"" << num(y - 9, "%.1f") << "\" width=\"10\" height=\"10\" fill=\"" << color(k)
      << "\"/><text x=\"" << num(cx + 14, "%.1f") << "\" y=\"" << num(y, "%.1f") << "\" class=\"small\">" << esc(k) << "</text>";
    cx += 24 + 7.0 * static_cast<double>(k.size());
  }
  return o.str();
}

// Room for the longest bar label (11 px text, about 6.2 px a character), the bars 480 px wide.
double label_room(size_t chars) { return std::clamp(6.2 * static_cast<double>(chars) + 30.0, 200.0, 760.0); }

// Horizontal bars with their values; the first highlighted when `highlight_first`.
std::string bars_svg(const std::string& id, const std::vector<std::pair<std::string, double>>& bars, const std::string& unit,
                     const char* fmt, bool highlight_first) {
  size_t longest = 0;
  for (const auto& [label, v] : bars) longest = std::max(longest, label.size());
  // 400 px of bars, then room for the value and its unit (about 6.2 px a character).
  const double left = label_room(longest), w = left + 440 + 6.2 * (12.0 + static_cast<double>(unit.size())), bar_h = 18,
               h = 40 + bar_h * static_cast<double>(bars.size()) * 1.3;
  double mx = 0;
  for (const auto& [label, v] : bars) mx = std::max(mx, v);
  std::ostringstream o;
  o << "<svg id=\"" << esc(id) << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& [label, v] = bars[i];
    const double y = 20 + static_cast<double>(i) * bar_h * 1.3;
    const double bw = mx > 0 ? 400.0 * std::max(0.0, v) / mx : 0;
    o << "<text x=\"" << left - 6 << "\" y=\"" << y + 13 << "\" text-anchor=\"end\" class=\"small\">" << esc(label)
      << "</text><rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << num(bw, "%.1f") << "\" height=\"" << bar_h
      << "\" fill=\"" << (i == 0 && highlight_first ? "#59a14f" : "#4e79a7") << "\"/><text x=\"" << num(left + bw + 4, "%.1f") << "\" y=\"" << y + 13
      << "\" class=\"small\">" << num(v, fmt) << (unit.empty() ? "" : " " + esc(unit)) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string ranked_svg(const ReportData& d) {
  std::vector<std::pair<std::string, double>> bars;
  for (size_t i = 0; i < std::min<size_t>(d.rows.size(), 15); ++i) bars.emplace_back(std::to_string(i + 1) + ". " + d.rows[i].label, d.rows[i].step_time_s);
  return bars_svg("ranked", bars, "s", "%.3f", true);
}

std::string pareto_svg(const ReportData& d) {
  const double w = 700, h = 420, l = 70, b = 50, t = 20, rgt = 20;
  std::vector<const ReportRow*> pts;
  for (const auto& r : d.rows) {
    if (r.step_time_s > 0 && r.peak_memory_bytes > 0) pts.push_back(&r);
  }
  std::ostringstream o;
  o << "<svg id=\"pareto\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  if (pts.empty()) return o.str() + "<text x=\"20\" y=\"40\">no points</text></svg>";
  double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = 0;
  for (const auto* p : pts) {
    x0 = std::min(x0, p->step_time_s), x1 = std::max(x1, p->step_time_s);
    y0 = std::min(y0, p->peak_memory_bytes / kGiB), y1 = std::max(y1, p->peak_memory_bytes / kGiB);
  }
  if (x1 <= x0) x1 = x0 * 1.1 + 1e-9;
  if (y1 <= y0) y1 = y0 * 1.1 + 1e-9;
  auto X = [&](double v) { return l + (w - l - rgt) * (v - x0) / (x1 - x0); };
  auto Y = [&](double v) { return h - b - (h - b - t) * (v - y0) / (y1 - y0); };
  o << "<line x1=\"" << l << "\" y1=\"" << h - b << "\" x2=\"" << w - rgt << "\" y2=\"" << h - b << "\" stroke=\"#333\"/>"
    << "<line x1=\"" << l << "\" y1=\"" << t << "\" x2=\"" << l << "\" y2=\"" << h - b << "\" stroke=\"#333\"/>"
    << "<text x=\"" << (l + w) / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">step time (s)</text>"
    << "<text x=\"16\" y=\"" << (h - b) / 2 << "\" transform=\"rotate(-90 16 " << (h - b) / 2
    << ")\" text-anchor=\"middle\">peak memory (GiB)</text>";
  for (int k = 0; k <= 4; ++k) {
    const double xv = x0 + (x1 - x0) * k / 4.0, yv = y0 + (y1 - y0) * k / 4.0;
    o << "<text x=\"" << num(X(xv), "%.1f") << "\" y=\"" << h - b + 16 << "\" text-anchor=\"middle\" class=\"small\">" << num(xv)
      << "</text><text x=\"" << l - 6 << "\" y=\"" << num(Y(yv) + 4, "%.1f") << "\" text-anchor=\"end\" class=\"small\">"
      << num(yv, "%.1f") << "</text>";
  }
  // Pareto front: sorted by step time, keep points with lower memory than every faster one.
  std::vector<const ReportRow*> sorted = pts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const ReportRow* a, const ReportRow* c) {
    return a->step_time_s != c->step_time_s ? a->step_time_s < c->step_time_s : a->peak_memory_bytes < c->peak_memory_bytes;
  });
  std::vector<const ReportRow*> front;
  double best_mem = 1e300;
  for (const auto* p : sorted) {
    if (p->peak_memory_bytes < best_mem) {
      front.push_back(p);
      best_mem = p->peak_memory_bytes;
    }
  }
  for (const auto* p : pts) {
    o << "<circle cx=\"" << num(X(p->step_time_s), "%.1f") << "\" cy=\"" << num(Y(p->peak_memory_bytes / kGiB), "%.1f")
      << "\" r=\"3\" fill=\"#4e79a7\" fill-opacity=\"0.5\"><title>" << esc(p->label) << "</title></circle>";
  }
  std::string path;
  for (size_t i = 0; i < front.size(); ++i) {
    path += (i ? " L " : "M ") + num(X(front[i]->step_time_s), "%.1f") + " " + num(Y(front[i]->peak_memory_bytes / kGiB), "%.1f");
  }
  o << "<path class=\"front\" d=\"" << path << "\" fill=\"none\" stroke=\"#e15759\" stroke-width=\"2\"/>";
  for (const auto* p : front) {
    o << "<circle class=\"front-point\" cx=\"" << num(X(p->step_time_s), "%.1f") << "\" cy=\""
      << num(Y(p->peak_memory_bytes / kGiB), "%.1f") << "\" r=\"5\" fill=\"#e15759\"><title>" << esc(p->label) << "</title></circle>";
  }
  o << "</svg>";
  return o.str();
}

std::string stacked_svg(const char* id, const std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>>& bars,
                        const char* unit, double unit_scale) {
  size_t longest = 0;
  for (const auto& b : bars) longest = std::max(longest, b.first.size());
  const double left = label_room(longest), w = left + 480, bar_h = 18;
  const double h = 50 + bar_h * 1.3 * static_cast<double>(bars.size());
  double mx = 0;
  std::vector<std::string> keys;
  for (const auto& [label, segs] : bars) {
    double tot = 0;
    for (const auto& [k, v] : segs) {
      tot += v;
      if (v > 0 && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    mx = std::max(mx, tot);
  }
  std::ostringstream o;
  o << "<svg id=\"" << id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = 30 + static_cast<double>(i) * bar_h * 1.3;
    o << "<text x=\"" << left - 6 << "\" y=\"" << y + 13 << "\" text-anchor=\"end\" class=\"small\">" << esc(bars[i].first) << "</text>";
    double x = left, tot = 0;
    for (const auto& [k, v] : bars[i].second) {
      if (v <= 0) continue;
      const double bw = mx > 0 ? (w - left - 90) * v / mx : 0;
      o << "<rect x=\"" << num(x, "%.1f") << "\" y=\"" << y << "\" width=\"" << num(bw, "%.1f") << "\" height=\"" << bar_h
        << "\" fill=\"" << color(k) << "\"><title>" << esc(k) << ": " << num(v / unit_scale) << " " << unit << "</title></rect>";
      x += bw;
      tot += v;
    }
    o << "<text x=\"" << num(x + 4, "%.1f") << "\" y=\"" << y + 13 << "\" class=\"small\">" << num(tot / unit_scale, "%.2f") << " "
      << unit << "</text>";
  }
  o << legend(keys, 10, 14) << "</svg>";
  return o.str();
}

std::string timeline_svg(const Json& tl) {
  const double w = 1100, left = 120, row_h = 14;
  std::map<std::pair<int64_t, std::string>, int> rows;
  double t1 = 0;
  for (const auto& e : tl) {
    rows.emplace(std::make_pair(e.value("stage", int64_t{0}), e.value("stream", std::string())), 0);
    t1 = std::max(t1, e.value("end_s", 0.0));
  }
  int k = 0;
  for (auto& [key, idx] : rows) idx = k++;
  const double h = 50 + row_h * 1.4 * static_cast<double>(rows.size());
  std::ostringstream o;
  o << "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  for (const auto& [key, idx] : rows) {
    o << "<text x=\"" << left - 6 << "\" y=\"" << 40 + idx * row_h * 1.4 + 11 << "\" text-anchor=\"end\" class=\"small\">stage " << key.first
      << " " << esc(key.second) << "</text>";
  }
  std::vector<std::string> keys;
  for (const auto& e : tl) {
    const int idx = rows[{e.value("stage", int64_t{0}), e.value("stream", std::string())}];
    const double s = e.value("start_s", 0.0), en = e.value("end_s", 0.0);
    const std::string kind = e.value("kind", std::string("other"));
    if (std::find(keys.begin(), keys.end(), kind) == keys.end()) keys.push_back(kind);
    const double x = left + (w - left - 10) * s / std::max(t1, 1e-12);
    const double bw = std::max(0.5, (w - left - 10) * (en - s) / std::max(t1, 1e-12));
    o << "<rect x=\"" << num(x, "%.2f") << "\" y=\"" << num(40 + idx * row_h * 1.4, "%.1f") << "\" width=\"" << num(bw, "%.2f")
      << "\" height=\"" << row_h << "\" fill=\"" << color(kind) << "\"><title>" << esc(e.value("label", kind)) << " "
      << num(s * 1e3) << "-" << num(en * 1e3) << " ms</title></rect>";
  }
  o << legend(keys, 10, 14) << "<text x=\"" << w - 10 << "\" y=\"" << h - 6 << "\" text-anchor=\"end\" class=\"small\">0 - "
    << num(t1 * 1e3, "%.1f") << " ms</text></svg>";
  return o.str();
}

}  // namespace

namespace {
ReportData load_report_data_unchecked(const std::string& text, const std::string& source);

// A validation's plans, each checked for the fields the page draws (named when missing).
Json checked_validation(const Json& whole, const std::string& source) {
  if (!whole["plans"].is_array() || whole["plans"].empty()) {
    throw core::UserError(source + ": \"plans\" is " + core::show(whole["plans"]) + "; expected the plans stepcast validate compared");
  }
  size_t i = 0;
  for (const auto& p : whole["plans"]) {
    const std::string where = source + ": plans[" + std::to_string(i++) + "]";
    if (!p.is_object() || !p.contains("run") || !p["run"].is_string()) throw core::UserError(where + ": expected a plan object with \"run\"");
    for (const char* part : {"predicted", "measured"}) {
      if (!p.contains(part) || !p[part].is_object()) throw core::UserError(where + ": \"" + part + "\" is missing; stepcast validate writes it");
      (void)number_field(p[part], "step_time_s", where + "." + part, true);
    }
    for (const char* list : {"phases", "memory"}) {
      if (!p.contains(list) || !p[list].is_array()) throw core::UserError(where + ": \"" + list + "\" is missing or not a list");
    }
    for (const auto& ph : p["phases"]) {
      if (!ph.is_object() || !ph.contains("phase") || !ph["phase"].is_string()) throw core::UserError(where + ".phases: an entry without its \"phase\"");
      (void)number_field(ph, "predicted_s", where + ".phases", false);
      (void)number_field(ph, "measured_s", where + ".phases", false);
    }
    for (const auto& m : p["memory"]) {
      if (!m.is_object()) throw core::UserError(where + ".memory: an entry that is not an object");
      (void)number_field(m, "predicted_bytes", where + ".memory", true);
      (void)number_field(m, "measured_bytes", where + ".memory", true);
    }
  }
  return whole;
}

// A validate phase's colour: the breakdown's key for the same time.
std::string phase_key(const std::string& phase) {
  if (phase == "compute" || phase == "optimizer") return phase;
  if (phase.rfind("tensor-parallel", 0) == 0) return "comm tp";
  if (phase.rfind("context-parallel", 0) == 0) return "comm cp";
  if (phase.rfind("expert-parallel", 0) == 0) return "comm ep";
  if (phase.rfind("pipeline", 0) == 0) return "comm pp";
  if (phase.rfind("data-parallel", 0) == 0) return "comm dp";
  return "other";
}

std::string file_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// The rank whose peak memory the ledger missed most.
const Json& worst_rank(const Json& plan) {
  const Json* worst = &plan["memory"].front();
  for (const auto& m : plan["memory"]) {
    auto err = [](const Json& x) { return std::abs(x["predicted_bytes"].get<double>() / x["measured_bytes"].get<double>() - 1.0); };
    if (err(m) > err(*worst)) worst = &m;
  }
  return *worst;
}

std::string validation_html(const ReportData& d) {
  const Json& v = d.validation;
  std::ostringstream o;
  const Json& s = v.value("summary", Json::object());
  if (s.is_object() && s.contains("median_abs_step_error")) {
    o << "<p id=\"summary\">" << v["plans"].size() << " plans: median absolute step-time error " << num(100.0 * s.value("median_abs_step_error", 0.0), "%.1f")
      << "%, largest " << num(100.0 * s.value("max_abs_step_error", 0.0), "%.1f") << "%; largest peak-memory error "
      << num(100.0 * s.value("worst_memory_error", 0.0), "%.1f") << "%; the machine's speed drifted up to "
      << num(100.0 * s.value("max_abs_reference_drift", 0.0), "%.1f") << "% from its profile (at its current speed median error "
      << num(100.0 * s.value("median_abs_drift_adjusted_error", 0.0), "%.1f") << "%"
      << (s.contains("max_abs_drift_adjusted_error") ? ", largest " + num(100.0 * s.value("max_abs_drift_adjusted_error", 0.0), "%.1f") + "%" : std::string())
      << ").</p>\n";
  }
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> steps, memory;
  for (const auto& p : v["plans"]) {
    const std::string name = file_name(p["run"].get<std::string>());
    std::vector<std::pair<std::string, double>> predicted, measured;
    for (const auto& ph : p["phases"]) {
      predicted.emplace_back(phase_key(ph["phase"].get<std::string>()), ph.value("predicted_s", 0.0));
      measured.emplace_back(phase_key(ph["phase"].get<std::string>()), ph.value("measured_s", 0.0));
    }
    steps.emplace_back(name + " predicted", predicted);
    steps.emplace_back(name + " measured", measured);
    const Json& m = worst_rank(p);
    const std::string rank = " rank " + m.value("rank", Json(0)).dump();
    memory.emplace_back(name + rank + " predicted", std::vector<std::pair<std::string, double>>{{"predicted", m["predicted_bytes"].get<double>()}});
    memory.emplace_back(name + rank + " measured", std::vector<std::pair<std::string, double>>{{"measured", m["measured_bytes"].get<double>()}});
  }
  o << "<h2>Step time per plan: predicted against measured, by phase</h2>\n<p class=\"small\">Each phase as validate books it "
       "(measured communication includes waiting for the group).</p>\n"
    << stacked_svg("steps", steps, "s", 1.0) << "\n";
  o << "<h2>Peak memory per plan (the rank the ledger missed most)</h2>\n" << stacked_svg("memory", memory, "GiB", kGiB) << "\n";
  o << "<h2>Table</h2>\n<table><tr><th>plan</th><th>predicted ms</th><th>measured ms</th><th>error</th><th>error at the machine's speed</th>"
       "<th>worst memory error</th></tr>\n";
  for (const auto& p : v["plans"]) {
    const double pred = p["predicted"]["step_time_s"].get<double>(), meas = p["measured"]["step_time_s"].get<double>();
    const Json& drift = p.value("drift_adjusted", Json::object());
    o << "<tr><td>" << esc(p["run"].get<std::string>()) << "</td><td>" << num(pred * 1e3, "%.1f") << "</td><td>" << num(meas * 1e3, "%.1f")
      << "</td><td>" << num(100.0 * (pred / meas - 1.0), "%+.1f") << "%</td><td>"
      << (drift.is_object() && drift.contains("step_time_error") ? num(100.0 * drift["step_time_error"].get<double>(), "%+.1f") + "%" : "-")
      << "</td><td>" << num(100.0 * p.value("memory_worst_error", 0.0), "%.1f") << "%</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}
}  // namespace

ReportData load_report_data(const std::string& text, const std::string& source) {
  try {
    return load_report_data_unchecked(text, source);
  } catch (const Json::exception& e) {
    // A field of the wrong type deep in a plan's detail: one message naming the file.
    throw core::UserError(source + ": not results stepcast wrote (" + std::string(e.what()).substr(std::string(e.what()).find(']') + 2) + ")");
  }
}

namespace {

const Json& checked_array(const Json& whole, const char* key, const std::string& source, const char* what) {
  if (!whole[key].is_array() || whole[key].empty()) {
    throw core::UserError(source + ": \"" + key + "\" is " + core::show(whole[key]) + "; expected the " + what);
  }
  return whole[key];
}

std::string string_field(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string()) throw core::UserError(where + ": \"" + key + "\" is missing or not a string");
  return j[key].get<std::string>();
}

// stepcast scaling --json: tokens/s per GPU, step time and (with a budget) days by GPU count.
TableReport scaling_table(const Json& whole, const std::string& source, std::string& explanation) {
  TableReport t;
  BarChart rate{"rate", "Tokens/s per GPU by GPU count", "tokens/s", "%.0f", {}}, step{"step", "Step time by GPU count", "s", "%.3f", {}},
      days{"days", "Days to train the budget (with failures, checkpoints and restarts)", "days", "%.2f", {}};
  t.columns = {"GPUs", "layout", "step s", "tokens/s per GPU", "MFU", "scaling", "days", "days with failures", "GPU-hours", "cost USD"};
  double first = 0;
  size_t i = 0;
  for (const auto& p : checked_array(whole, "points", source, "GPU counts stepcast scaling evaluated")) {
    const std::string where = source + ": points[" + std::to_string(i++) + "]";
    if (!p.is_object()) throw core::UserError(where + ": expected a point object, got " + core::show(p));
    const double gpus = number_field(p, "gpus", where, true);
    const std::string label = num(gpus, "%.0f") + " GPUs";
    if (p.contains("error")) {
      t.rows.push_back({num(gpus, "%.0f"), string_field(p, "error", where), "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    const double per_gpu = number_field(p, "tokens_per_s", where, true) / gpus;
    if (first == 0) first = per_gpu;
    rate.bars.emplace_back(label, per_gpu);
    step.bars.emplace_back(label, number_field(p, "step_time_s", where, true));
    const bool budget = number_field(p, "steps", where, false) > 0;
    const Json& g = p.value("goodput", Json::object());
    const double expected = budget && g.is_object() ? number_field(g, "expected_wall_days", where + ".goodput", false) : 0.0;
    if (budget) days.bars.emplace_back(label, expected);
    t.rows.push_back({num(gpus, "%.0f"), string_field(p, "layout", where), num(number_field(p, "step_time_s", where, true)), num(per_gpu, "%.0f"),
                      num(100.0 * number_field(p, "mfu", where, false), "%.1f") + "%", num(100.0 * per_gpu / first, "%.1f") + "%",
                      budget ? num(number_field(p, "wall_days", where, false), "%.2f") : "-", budget ? num(expected, "%.2f") : "-",
                      budget ? num(number_field(p, "gpu_hours", where, false), "%.0f") : "-", budget ? num(number_field(p, "cost_usd", where, false), "%.0f") : "-"});
  }
  for (auto* c : {&rate, &step, &days}) {
    if (!c->bars.empty()) t.charts.push_back(*c);
  }
  if (!rate.bars.empty()) {
    explanation = "Scaling: tokens/s per GPU at " + rate.bars.back().first + " is " + num(100.0 * rate.bars.back().second / first, "%.1f") + "% of " +
                  rate.bars.front().first + ".";
  }
  return t;
}

// stepcast sensitivity --json: elasticity and step time by resource.
TableReport sensitivity_table(const Json& whole, const std::string& source, std::string& explanation) {
  TableReport t;
  BarChart el{"elasticity", "Elasticity by resource (1: the step scales fully with it)", "", "%.2f", {}},
      step{"step", "Step time with the resource better", "s", "%.4f", {}};
  t.columns = {"resource", "step s", "change", "elasticity", "what is scaled"};
  const Json& base = whole["base"];
  if (!base.is_object()) throw core::UserError(source + ": \"base\" is " + core::show(base) + "; expected the run as given");
  const double base_step = number_field(base, "step_time_s", source + ": base", true);
  step.bars.emplace_back("as given", base_step);
  t.rows.push_back({"(as given)", num(base_step, "%.4f"), "", "", ""});
  size_t i = 0;
  for (const auto& r : checked_array(whole, "resources", source, "resources stepcast sensitivity varied")) {
    const std::string where = source + ": resources[" + std::to_string(i++) + "]";
    if (!r.is_object()) throw core::UserError(where + ": expected a resource object, got " + core::show(r));
    const std::string name = string_field(r, "resource", where);
    const double s = number_field(r, "step_time_s", where, true);
    if (!r.contains("elasticity") || !r["elasticity"].is_number() || !std::isfinite(r["elasticity"].get<double>())) {
      throw core::UserError(where + ": \"elasticity\" is missing or not a finite number");
    }
    const double e = r["elasticity"].get<double>();
    el.bars.emplace_back(name, e);
    step.bars.emplace_back(name, s);
    t.rows.push_back({name, num(s, "%.4f"), num(100.0 * (s / base_step - 1.0), "%+.1f") + "%", num(e, "%.2f"), r.value("what", std::string())});
  }
  t.charts = {el, step};
  explanation = whole.value("summary", std::string());
  return t;
}

std::string table_html(const TableReport& t) {
  std::ostringstream o;
  for (const auto& c : t.charts) o << "<h2>" << esc(c.title) << "</h2>\n" << bars_svg(c.id, c.bars, c.unit, c.format.c_str(), false) << "\n";
  o << "<h2>Table</h2>\n<table><tr>";
  for (const auto& c : t.columns) o << "<th>" << esc(c) << "</th>";
  o << "</tr>\n";
  for (const auto& row : t.rows) {
    o << "<tr>";
    for (const auto& cell : row) o << "<td>" << esc(cell) << "</td>";
    o << "</tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

ReportData load_report_data_unchecked(const std::string& text, const std::string& source) {
  ReportData d;
  const Json whole = Json::parse(text, nullptr, false);
  if (!whole.is_discarded() && whole.is_object() && whole.contains("plans")) {
    d.title = "stepcast validate: " + source;
    d.validation = checked_validation(whole, source);
    return d;
  }
  if (!whole.is_discarded() && whole.is_object() && whole.contains("points")) {
    d.title = "stepcast scaling: " + source;
    d.table = scaling_table(whole, source, d.explanation);
    return d;
  }
  if (!whole.is_discarded() && whole.is_object() && whole.contains("resources") && whole.contains("base")) {
    d.title = "stepcast sensitivity: " + source;
    d.table = sensitivity_table(whole, source, d.explanation);
    return d;
  }
  if (!whole.is_discarded() && whole.is_object() && whole.contains("a") && whole.contains("b") && whole.contains("verdict")) {
    // stepcast compare --json: the two runs as two rows, A first.
    d.title = "stepcast compare: " + source;
    for (const char* side : {"a", "b"}) {
      const Json& s = whole[side];
      const std::string where = source + ": " + side;
      if (!s.is_object()) throw core::UserError(where + ": expected a run object, got " + core::show(s));
      const std::string name = s.contains("name") && s["name"].is_string() ? s["name"].get<std::string>() : "?";
      d.rows.push_back(row_from(s, std::string(side[0] == 'a' ? "A: " : "B: ") + name, where));
    }
    const std::string differs = whole.value("differs_in", std::string());
    d.explanation = (differs.empty() ? "" : "Differs in: " + differs + ". ") + (whole["verdict"].is_string() ? whole["verdict"].get<std::string>() : "");
    return d;
  }
  if (!whole.is_discarded() && whole.is_object() && whole.contains("layouts")) {
    d.title = "stepcast plan: " + whole.value("title", source);
    if (!whole["layouts"].is_array()) throw core::UserError(source + ": \"layouts\" is " + core::show(whole["layouts"]) + "; expected an array");
    size_t i = 0;
    for (const auto& l : whole["layouts"]) {
      const std::string where = source + ": layouts[" + std::to_string(i++) + "]";
      if (!l.is_object()) throw core::UserError(where + ": expected a layout object, got " + core::show(l));
      const std::string label = l.contains("layout") && l["layout"].is_string() ? l["layout"].get<std::string>() : "?";
      d.rows.push_back(row_from(l, label, where));
    }
    d.explanation = whole.value("explanation", std::string());
    if (whole.contains("detail")) {
      d.ledger = whole["detail"].value("ledger", Json());
      d.timeline = whole["detail"].value("timeline", Json());
    }
    return d;
  }
  // Sweep JSONL: one object per point.
  d.title = "stepcast sweep: " + source;
  std::istringstream in(text);
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      throw core::UserError(source + ":" + std::to_string(lineno) + ": not plan JSON and not a sweep result line");
    }
    if (!j.value("ok", false)) continue;
    std::string label;
    if (j.contains("settings") && j["settings"].is_object()) {
      for (const auto& [k, v] : j["settings"].items()) {
        if (!label.empty()) label += ' ';
        label += k.substr(k.rfind('.') + 1);
        label += '=';
        label += v.is_string() ? v.get<std::string>() : v.dump();
      }
    }
    d.rows.push_back(row_from(j, label.empty() ? "point " + j.value("point", Json()).dump() : label, source + ":" + std::to_string(lineno)));
  }
  if (d.rows.empty()) throw core::UserError(source + ": no successful results to report");
  std::stable_sort(d.rows.begin(), d.rows.end(), [](const ReportRow& a, const ReportRow& b) { return a.step_time_s < b.step_time_s; });
  return d;
}

}  // namespace

std::string render_html(const ReportData& d) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << esc(d.title) << "</title><style>"
    << "body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
    << "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    << "td:first-child,th:first-child{text-align:left}.small{font-size:11px}svg{display:block;margin:8px 0}</style></head><body>\n";
  o << "<h1>" << esc(d.title) << "</h1>\n";
  if (d.validation.is_object()) {
    o << validation_html(d) << "</body></html>\n";
    return o.str();
  }
  if (!d.explanation.empty()) o << "<p id=\"explanation\">" << esc(d.explanation) << "</p>\n";
  if (!d.table.columns.empty()) {
    o << table_html(d.table) << "</body></html>\n";
    return o.str();
  }
  o << "<h2>Ranked layouts (step time)</h2>\n" << ranked_svg(d) << "\n";
  o << "<h2>Pareto front: step time against peak memory</h2>\n<p class=\"small\">Red: layouts no other layout beats on both.</p>\n"
    << pareto_svg(d) << "\n";
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> bars;
  for (size_t i = 0; i < std::min<size_t>(d.rows.size(), 10); ++i) {
    if (d.rows[i].breakdown.is_object()) bars.emplace_back(d.rows[i].label, segments(d.rows[i].breakdown));
  }
  if (!bars.empty()) o << "<h2>Time breakdown per layout</h2>\n" << stacked_svg("breakdown", bars, "s", 1.0) << "\n";
  if (d.ledger.is_object() && d.ledger.contains("stages")) {
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> mem;
    for (const auto& s : d.ledger["stages"]) {
      mem.emplace_back("stage " + s["stage"].dump(),
                       std::vector<std::pair<std::string, double>>{{"weights", s.value("weights_bytes", 0.0)},
                                                                   {"gradients", s.value("gradients_bytes", 0.0)},
                                                                   {"optimizer state", s.value("optimizer_bytes", 0.0)},
                                                                   {"activations", s.value("activations_bytes", 0.0)},
                                                                   {"transient", std::max(s.value("transient_bytes", 0.0), s.value("logits_bytes", 0.0))},
                                                                   {"kept outputs", s.value("kept_outputs_bytes", 0.0)},
                                                                   {"buffers", s.value("buffers_bytes", 0.0)},
                                                                   {"runtime", s.value("runtime_bytes", 0.0)}});
    }
    o << "<h2>Memory ledger of the best layout (per GPU, by pipeline stage)</h2>\n" << stacked_svg("ledger", mem, "GiB", kGiB) << "\n";
    // CPU offload: what the layout keeps in host memory instead.
    if (d.ledger.value("host_per_node_bytes", 0.0) > 0) {
      std::ostringstream host;
      host << "<p class=\"small\">Offloaded to host memory (CPU offload), GiB per GPU:";
      for (const auto& s : d.ledger["stages"]) host << " stage " << s["stage"].dump() << " " << num(s.value("host_bytes", 0.0) / kGiB, "%.2f") << ";";
      host << " per node " << num(d.ledger.value("host_per_node_bytes", 0.0) / kGiB, "%.1f") << " of "
           << num(d.ledger.value("host_capacity_bytes", 0.0) / kGiB, "%.1f") << ".</p>\n";
      o << host.str();
    }
  }
  if (d.timeline.is_array() && !d.timeline.empty()) {
    o << "<h2>Timeline excerpt of the best layout</h2>\n" << timeline_svg(d.timeline) << "\n";
  }
  o << "<h2>Table</h2>\n<table><tr><th>layout</th><th>step s</th><th>from</th><th>tokens/s/GPU</th><th>MFU</th><th>peak GiB</th><th>bubble</th></tr>\n";
  for (size_t i = 0; i < std::min<size_t>(d.rows.size(), 50); ++i) {
    const auto& r = d.rows[i];
    o << "<tr><td>" << esc(r.label) << "</td><td>" << num(r.step_time_s) << "</td><td>" << r.source << "</td><td>" << num(r.tokens_per_s_per_gpu, "%.1f")
      << "</td><td>" << num(100.0 * r.mfu, "%.1f") << "%</td><td>" << num(r.peak_memory_bytes / kGiB, "%.2f") << "</td><td>"
      << num(100.0 * r.bubble_fraction, "%.1f") << "%</td></tr>\n";
  }
  o << "</table>\n</body></html>\n";
  return o.str();
}

std::string render_markdown(const ReportData& d) {
  std::ostringstream o;
  o << "# " << d.title << "\n\n";
  if (d.validation.is_object()) {
    o << "| plan | predicted ms | measured ms | error | worst memory error |\n|---|---:|---:|---:|---:|\n";
    for (const auto& p : d.validation["plans"]) {
      const double pred = p["predicted"]["step_time_s"].get<double>(), meas = p["measured"]["step_time_s"].get<double>();
      o << "| " << p["run"].get<std::string>() << " | " << num(pred * 1e3, "%.1f") << " | " << num(meas * 1e3, "%.1f") << " | "
        << num(100.0 * (pred / meas - 1.0), "%+.1f") << "% | " << num(100.0 * p.value("memory_worst_error", 0.0), "%.1f") << "% |\n";
    }
    return o.str();
  }
  if (!d.explanation.empty()) o << d.explanation << "\n\n";
  if (!d.table.columns.empty()) {
    o << "|";
    for (const auto& c : d.table.columns) o << " " << c << " |";
    o << "\n|";
    for (size_t i = 0; i < d.table.columns.size(); ++i) o << (i == 0 ? "---|" : "---:|");
    o << "\n";
    for (const auto& row : d.table.rows) {
      o << "|";
      for (const auto& cell : row) o << " " << cell << " |";
      o << "\n";
    }
    return o.str();
  }
  o << "| rank | layout | step s | from | tokens/s/GPU | MFU | peak GiB | bubble |\n|---:|---|---:|---|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < d.rows.size(); ++i) {
    const auto& r = d.rows[i];
    o << "| " << i + 1 << " | " << r.label << " | " << num(r.step_time_s) << " | " << r.source << " | " << num(r.tokens_per_s_per_gpu, "%.1f") << " | "
      << num(100.0 * r.mfu, "%.1f") << "% | " << num(r.peak_memory_bytes / kGiB, "%.2f") << " | " << num(100.0 * r.bubble_fraction, "%.1f")
      << "% |\n";
  }
  return o.str();
}

std::string render_csv(const ReportData& d) {
  std::ostringstream o;
  if (d.validation.is_object()) {
    o << "plan,predicted_step_time_s,measured_step_time_s,step_time_error,memory_worst_error\n";
    for (const auto& p : d.validation["plans"]) {
      const double pred = p["predicted"]["step_time_s"].get<double>(), meas = p["measured"]["step_time_s"].get<double>();
      o << "\"" << p["run"].get<std::string>() << "\"," << num(pred, "%.6f") << "," << num(meas, "%.6f") << "," << num(pred / meas - 1.0, "%.6f") << ","
        << num(p.value("memory_worst_error", 0.0), "%.6f") << "\n";
    }
    return o.str();
  }
  if (!d.table.columns.empty()) {
    auto csv = [](const std::string& cell) {
      std::string q = "\"";
      for (char c : cell) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      return q + "\"";
    };
    for (size_t i = 0; i < d.table.columns.size(); ++i) o << (i ? "," : "") << csv(d.table.columns[i]);
    o << "\n";
    for (const auto& row : d.table.rows) {
      for (size_t i = 0; i < row.size(); ++i) o << (i ? "," : "") << csv(row[i]);
      o << "\n";
    }
    return o.str();
  }
  o << "rank,layout,step_time_s,source,tokens_per_s_per_gpu,mfu,peak_memory_bytes,bubble_fraction\n";
  for (size_t i = 0; i < d.rows.size(); ++i) {
    const auto& r = d.rows[i];
    o << i + 1 << ",\"" << r.label << "\"," << num(r.step_time_s, "%.6f") << "," << r.source << "," << num(r.tokens_per_s_per_gpu, "%.3f") << ","
      << num(r.mfu, "%.6f") << "," << num(r.peak_memory_bytes, "%.0f") << "," << num(r.bubble_fraction, "%.6f") << "\n";
  }
  return o.str();
}

}  // namespace stepcast::report
