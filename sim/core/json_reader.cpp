#include "sim/core/json_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace stepcast::core {

std::string other_keys(const Json& obj, const std::string& except) {
  std::string out;
  if (!obj.is_object()) return out;
  for (const auto& [k, v] : obj.items()) {
    if (k != except) out += (out.empty() ? "'" : ", '") + k + "'";
  }
  return out;
}

std::string show(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

namespace {

// The JSON library's message without its "[json.exception.parse_error.101] " tag.
std::string library_message(const Json::exception& e) {
  std::string m = e.what();
  if (m.rfind("[json.exception.", 0) == 0) {
    const size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  // The library quotes the offending text whole (a 10,000-digit number, say).
  if (m.size() > 200) m = m.substr(0, 197) + "...";
  return m;
}

// Inputs nest a few levels; a file nested deeper than this is not an input (and would exhaust
// the stack of the recursive value it builds).
constexpr int kMaxNesting = 256;

}  // namespace

Json parse_json_text(const std::string& text, const std::string& source_name) {
  // Objects must not repeat a key: the library would keep the last silently. The callback
  // keeps the JSON path of every open container so the message can name where.
  struct Frame {
    bool array = false;
    size_t index = 0;  // elements of an array finished so far
    std::string path;
    std::set<std::string> keys;
  };
  std::vector<Frame> open;
  std::string current_key;
  std::string duplicate;
  auto child_path = [&]() {
    if (open.empty()) return std::string("$");
    const Frame& top = open.back();
    if (top.array) return top.path + "[" + std::to_string(top.index) + "]";
    // A key that would read ambiguously after a dot (empty, or with . [ ] or a quote) is bracketed.
    if (current_key.empty() || current_key.find_first_of(".[]\"") != std::string::npos) return top.path + "[\"" + current_key + "\"]";
    return top.path + "." + current_key;
  };
  const Json::parser_callback_t cb = [&](int depth, Json::parse_event_t ev, Json& parsed) {
    if ((ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start) && depth >= kMaxNesting) {
      throw UserError(source_name + ": JSON nested deeper than " + std::to_string(kMaxNesting) + " levels; stepcast inputs nest a few levels");
    }
    switch (ev) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start: {
        Frame f;
        f.array = ev == Json::parse_event_t::array_start;
        f.path = child_path();
        open.push_back(std::move(f));
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        if (!open.empty() && open.back().array) ++open.back().index;
        break;
      case Json::parse_event_t::key:
        current_key = parsed.get<std::string>();
        if (!open.empty() && !open.back().keys.insert(current_key).second && duplicate.empty()) {
          duplicate = "key \"" + current_key + "\" appears twice in " + open.back().path;
        }
        break;
      case Json::parse_event_t::value:
        if (!open.empty() && open.back().array) ++open.back().index;
        break;
    }
    return true;
  };
  Json out;
  try {
    out = Json::parse(text, cb);
  } catch (const Json::parse_error& e) {
    throw UserError(source_name + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + library_message(e));
  } catch (const Json::exception& e) {
    // A value the library cannot hold (a number beyond double range): name where it sits.
    throw UserError(source_name + ": unreadable JSON at " + child_path() + ": " + library_message(e));
  }
  if (!duplicate.empty()) throw UserError(source_name + ": " + duplicate + "; give each key once");
  return out;
}

std::string load_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(path + ": is a directory, not an input file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open file");
  // Read in chunks up to a bound: a device or pipe (/dev/zero) never ends, and no input a
  // person writes (run files, profiles, sweeps) comes near it.
  constexpr size_t kMaxInput = size_t{64} << 20;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInput) throw UserError(path + ": larger than 64 MiB; not a stepcast input (a run file, profile, sweep or config is a few KB)");
  }
  return text;
}

Json load_json_file(const std::string& path) { return parse_json_text(load_text_file(path), path); }

Json setting_value(const std::string& text) {
  const Json parsed = Json::parse(text, nullptr, false);
  return parsed.is_discarded() ? Json(text) : parsed;
}

std::optional<BlockedPath> set_json_path(Json& j, const std::string& dotted, const Json& v, bool replace) {
  Json* at = &j;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      (*at)[key] = v;
      return std::nullopt;
    }
    Json& next = (*at)[key];
    if (!next.is_object()) {
      if (!next.is_null() && !replace) return BlockedPath{dotted.substr(0, dot), next};
      next = Json::object();
    }
    at = &next;
    start = dot + 1;
  }
}

void apply_overrides(Json& j, const std::vector<std::string>& overrides, const std::string& flag) {
  if (!j.is_object()) return;  // the run file's own error comes first
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    const std::string path = o.substr(0, eq);
    const bool bad_path = path.empty() || path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos;
    if (eq == std::string::npos || bad_path) {
      throw UserError(flag + " " + o + ": expected PATH=VALUE, e.g. parallel.tp=4 or training.precision=fp8");
    }
    if (const auto blocked = set_json_path(j, path, setting_value(o.substr(eq + 1)), false)) {
      throw UserError(flag + " " + o + ": $." + blocked->path + " is " + show(blocked->value) + ", not an object; replace it whole (e.g. " +
                      flag + " " + blocked->path + "='{...}')");
    }
  }
}

ObjectReader::ObjectReader(const Json& j, std::string path, Issues& issues)
    : path_(std::move(path)), issues_(&issues) {
  if (j.is_object()) {
    obj_ = &j;
  } else {
    issues_->add_wrong_type(path_, "expected a JSON object, got " + show(j));
  }
}

bool ObjectReader::has(std::string_view key) const {
  return obj_ != nullptr && obj_->contains(std::string(key));
}

std::string ObjectReader::child_path(std::string_view key) const {
  return path_ + "." + std::string(key);
}

const Json* ObjectReader::fetch(std::string_view key) {
  known_.emplace(key);
  if (obj_ == nullptr) return nullptr;
  auto it = obj_->find(std::string(key));
  if (it == obj_->end()) return nullptr;
  read_.emplace(key);
  if (it->is_null()) {
    if (!nulls_absent_) issues_->add(child_path(key), "got null; give a value or omit the key for its default");
    return nullptr;
  }
  return &*it;
}

void ObjectReader::bad(std::string_view key, const Json& value, const std::string& expectation) {
  issues_->add(child_path(key), "got " + show(value) + "; " + expectation);
}

const Json* ObjectReader::get_raw(std::string_view key) { return fetch(key); }

std::optional<int64_t> ObjectReader::get_int(std::string_view key, int64_t lo, int64_t hi) {
  const Json* v = fetch(key);
  if (v == nullptr) return std::nullopt;
  const std::string range = "expected an integer in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]";
  int64_t out = 0;
  if (v->is_number_integer()) {
    out = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad(key, *v, range);
      return std::nullopt;
    }
    out = static_cast<int64_t>(u);
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9e15) {
      bad(key, *v, range);
      return std::nullopt;
    }
    out = static_cast<int64_t>(d);
  } else {
    bad(key, *v, range);
    return std::nullopt;
  }
  if (out < lo || out > hi) {
    bad(key, *v, range);
    return std::nullopt;
  }
  return out;
}

int64_t ObjectReader::get_int(std::string_view key, int64_t lo, int64_t hi, int64_t fallback) {
  return get_int(key, lo, hi).value_or(fallback);
}

int64_t ObjectReader::require_int(std::string_view key, int64_t lo, int64_t hi) {
  if (!has(key) || (nulls_absent_ && obj_->at(std::string(key)).is_null())) {
    known_.emplace(key);
    read_.emplace(key);
    issues_->add(child_path(key), "required integer is missing");
    return lo;
  }
  return get_int(key, lo, hi).value_or(lo);
}

std::optional<double> ObjectReader::get_number(std::string_view key, double lo, double hi) {
  const Json* v = fetch(key);
  if (v == nullptr) return std::nullopt;
  std::ostringstream range;
  range << "expected a number in [" << lo << ", " << hi << "]";
  if (!v->is_number()) {
    bad(key, *v, range.str());
    return std::nullopt;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    bad(key, *v, range.str());
    return std::nullopt;
  }
  return d;
}

double ObjectReader::get_number(std::string_view key, double lo, double hi, double fallback) {
  return get_number(key, lo, hi).value_or(fallback);
}

double ObjectReader::require_number(std::string_view key, double lo, double hi) {
  if (!has(key) || (nulls_absent_ && obj_->at(std::string(key)).is_null())) {
    known_.emplace(key);
    read_.emplace(key);
    issues_->add(child_path(key), "required number is missing");
    return lo;
  }
  return get_number(key, lo, hi).value_or(lo);
}

std::optional<bool> ObjectReader::get_bool(std::string_view key) {
  const Json* v = fetch(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    bad(key, *v, "expected true or false");
    return std::nullopt;
  }
  return v->get<bool>();
}

bool ObjectReader::get_bool(std::string_view key, bool fallback) {
  return get_bool(key).value_or(fallback);
}

std::optional<std::string> ObjectReader::get_string(std::string_view key) {
  const Json* v = fetch(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    bad(key, *v, "expected a string");
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<std::string> ObjectReader::get_choice(std::string_view key,
                                                    const std::vector<std::string>& allowed) {
  const Json* v = fetch(key);
  if (v == nullptr) return std::nullopt;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  if (v->is_string()) {
    const auto s = v->get<std::string>();
    for (const auto& a : allowed) {
      if (a == s) return s;
    }
  }
  bad(key, *v, "allowed: " + list);
  return std::nullopt;
}

std::string ObjectReader::get_choice(std::string_view key, const std::vector<std::string>& allowed,
                                     const std::string& fallback) {
  return get_choice(key, allowed).value_or(fallback);
}

namespace {

template <typename Q, typename Parse>
std::optional<Q> get_unit(ObjectReader& r, const Json* v, std::string_view key, bool positive,
                          Parse parse, const char* example, Issues& issues) {
  if (v == nullptr) return std::nullopt;
  Q q;
  try {
    if (v->is_number()) {
      q = Q(v->get<double>());
    } else if (v->is_string()) {
      q = parse(v->get<std::string>());
    } else {
      throw std::invalid_argument("expected a number or a string such as " + std::string(example));
    }
  } catch (const std::invalid_argument& e) {
    issues.add(r.child_path(key), "got " + show(*v) + "; " + e.what());
    return std::nullopt;
  }
  if (!std::isfinite(q.value()) || q.value() < 0.0 || (positive && q.value() == 0.0)) {
    issues.add(r.child_path(key), "got " + show(*v) + "; must be " +
                                      (positive ? "greater than zero" : "zero or more"));
    return std::nullopt;
  }
  return q;
}

}  // namespace

std::optional<Bytes> ObjectReader::get_bytes(std::string_view key, bool positive) {
  return get_unit<Bytes>(*this, fetch(key), key, positive, parse_bytes, "\"80GiB\"", *issues_);
}
std::optional<Duration> ObjectReader::get_duration(std::string_view key, bool positive, double max_seconds) {
  const Json* v = fetch(key);
  auto d = get_unit<Duration>(*this, v, key, positive, parse_duration, "\"2us\"", *issues_);
  if (d && d->value() > max_seconds) {
    issues_->add(child_path(key), "got " + show(*v) + "; must be at most " + format_duration(Duration(max_seconds)));
    return std::nullopt;
  }
  return d;
}
std::optional<Bandwidth> ObjectReader::get_bandwidth(std::string_view key, bool positive) {
  return get_unit<Bandwidth>(*this, fetch(key), key, positive, parse_bandwidth, "\"400GB/s\"",
                             *issues_);
}
std::optional<FlopRate> ObjectReader::get_flop_rate(std::string_view key, bool positive) {
  return get_unit<FlopRate>(*this, fetch(key), key, positive, parse_flop_rate, "\"989TFLOPS\"",
                            *issues_);
}

void ObjectReader::ignore(std::initializer_list<std::string_view> keys) {
  for (auto k : keys) {
    known_.emplace(k);
    if (has(k)) read_.emplace(k);
  }
}

void ObjectReader::ignore(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    known_.emplace(k);
    if (has(k)) read_.emplace(k);
  }
}

namespace {
// Edits (insert, delete, substitute) between two keys, for "did you mean".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The candidate nearest `key` by edits when it is a likely misspelling (at most a third of the
// key edited; ties go to the first), compared as `form` writes both; "" when none is that close.
template <class Names, class Form>
std::string nearest_misspelling(std::string_view key, const Names& candidates, Form form) {
  const std::string k = form(key);
  std::string nearest;
  size_t best = key.size() / 3 + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(k, form(c));
    if (d < best) best = d, nearest = c;
  }
  return nearest;
}
}  // namespace

std::vector<std::string> likely_names(std::string_view key, const std::vector<std::string>& candidates) {
  const auto plain = [](std::string_view k) {
    std::string out;
    for (char c : k) {
      if (c != '-' && c != '_' && c != '.') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
  };
  const std::string pk = plain(key);
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    if (plain(c) == pk) return {c};
  }
  for (const auto& c : candidates) {
    if (!pk.empty() && plain(c).rfind(pk, 0) == 0) out.push_back(c);
  }
  if (!out.empty()) return out;
  if (std::string near = nearest_misspelling(key, candidates, plain); !near.empty()) out.push_back(std::move(near));
  return out;
}

std::string did_you_mean(std::string_view key, const std::vector<std::string>& candidates) {
  const auto names = likely_names(key, candidates);
  if (names.empty()) return "";
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("'" + names[i] + "'");
  }
  return "; did you mean " + list + "?";
}

void ObjectReader::finish() {
  if (obj_ == nullptr) return;
  bool listed = false;
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (read_.count(it.key()) != 0) continue;
    // The nearest known key when it is a likely misspelling (at most a third of it edited).
    const std::string nearest = nearest_misspelling(it.key(), known_, [](std::string_view k) { return std::string(k); });
    std::string message = "unknown key";
    if (!nearest.empty()) message += "; did you mean '" + nearest + "'?";
    if (!listed) {
      // The known keys once per object, not once per unknown key.
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      message += (nearest.empty() ? "; known keys here: " : " Known keys here: ") + list;
      listed = true;
    }
    issues_->add(child_path(it.key()), message);
  }
}

}  // namespace stepcast::core
