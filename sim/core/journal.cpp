#include "sim/core/journal.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "sim/core/error.hpp"

namespace stepcast::core {

namespace {

constexpr const char* kMarker = "stepcast_journal";
constexpr const char* kAfresh = "; remove the file to start afresh";

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

Journal::Journal(Json header, const std::string& previous, const std::string& source, std::string path)
    : path_(std::move(path)), source_(source) {
  header[kMarker] = 1;
  std::vector<std::string> kept;  // the previous run's complete lines, header first
  if (!previous.empty()) {
    std::istringstream in(previous);
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      // A last line without its newline was cut by the interruption; it is dropped.
      if (in.eof()) break;
      const std::string where = source + ":" + std::to_string(number) + ": ";
      Json j;
      try {
        j = Json::parse(line);
      } catch (const Json::parse_error&) {
        throw UserError(where + "not a journal line" + kAfresh);
      }
      if (number == 1) {
        if (!j.is_object() || !j.contains(kMarker)) throw UserError(where + "not a stepcast journal" + kAfresh);
        for (const auto& [k, value] : header.items()) {
          if (!j.contains(k) || j[k] != value) {
            throw UserError(source + ": written by a different run (" + k + " " + (j.contains(k) ? show(j[k]) : "absent") + ", this run " +
                            show(value) + "); its results do not describe this one" + kAfresh);
          }
        }
      } else {
        if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || !j.contains("value") || !j.contains("spent_s") ||
            !j["spent_s"].is_number()) {
          throw UserError(where + "not a journal entry (key, value, spent_s)" + kAfresh);
        }
        recorded_[j["key"].get<std::string>()] = Entry{j["value"], j["spent_s"].get<double>()};
      }
      kept.push_back(line);
    }
  }
  if (!path_.empty()) {
    // The journal restarts from what is kept (through a renamed temporary, so an interruption
    // here leaves the previous journal whole), then grows by appending.
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw UserError(path_ + ": cannot write the journal");
      if (kept.empty()) kept.push_back(header.dump());
      for (const auto& l : kept) out << l << '\n';
      out.flush();
      if (!out) throw UserError(path_ + ": cannot write the journal");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path_, ec);
    if (ec) throw UserError(path_ + ": cannot write the journal (" + ec.message() + ")");
    file_ = std::fopen(path_.c_str(), "ab");
    if (file_ == nullptr) throw UserError(path_ + ": cannot write the journal");
  }
  start_s_ = now_s();
}

Journal::~Journal() {
  if (file_ != nullptr) std::fclose(file_);
}

std::string Journal::key(const std::string& name) const {
  const auto it = occurrences_.find(name);
  return name + "#" + std::to_string(it == occurrences_.end() ? 0 : it->second);
}

bool Journal::recorded(const std::string& name) const { return recorded_.count(key(name)) > 0; }

void Journal::append(const Json& line) {
  if (file_ == nullptr) return;
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    throw UserError(path_ + ": cannot write the journal");
  }
  // On disk before the work goes on: a crash of the machine keeps it too.
  (void)::fdatasync(fileno(file_));
}

Json Journal::record(const std::string& name, const std::function<Json()>& run) {
  const std::string k = key(name);
  ++occurrences_[name];
  if (const auto it = recorded_.find(k); it != recorded_.end()) {
    ++reused_;
    credited_s_ += it->second.spent_s;
    Json value = std::move(it->second.value);
    recorded_.erase(it);
    return value;
  }
  const double t0 = now_s();
  Json value = run();
  ++done_;
  append(Json{{"key", k}, {"value", value}, {"spent_s", now_s() - t0}});
  return value;
}

std::vector<double> Journal::measure(const std::string& name, const std::function<std::vector<double>()>& run) {
  const Json v = record(name, [&] { return Json(run()); });
  std::vector<double> out;
  if (v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number()) break;
      out.push_back(x.get<double>());
    }
  }
  if (!v.is_array() || out.size() != v.size()) throw UserError(source_ + ": the recorded value of " + name + " is not a list of numbers" + kAfresh);
  return out;
}

double Journal::measure(const std::string& name, const std::function<double()>& run) {
  const auto v = measure(name, [&] { return std::vector<double>{run()}; });
  if (v.size() != 1) throw UserError(source_ + ": the recorded value of " + name + " is not one number" + kAfresh);
  return v.front();
}

double Journal::elapsed_s() const { return credited_s_ + (now_s() - start_s_); }

size_t Journal::unused() const { return recorded_.size(); }

std::string previous_journal(const std::string& path, bool resume, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  if (!resume) throw UserError(path + ": " + what + " are here; pass --resume to reuse them, or remove the file to start afresh");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot read the journal");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string digest(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace stepcast::core
