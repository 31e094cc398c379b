#include "calibrate/journal.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "sim/core/error.hpp"

namespace stepcast::calibrate {

using core::Json;

namespace {

constexpr const char* kMarker = "stepcast_calibration_journal";

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

Journal::Journal(Json header, const std::string& previous, const std::string& source, std::string path) : path_(std::move(path)) {
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
        throw core::UserError(where + "not a calibration journal line; remove the file to calibrate afresh");
      }
      if (number == 1) {
        if (!j.is_object() || !j.contains(kMarker)) throw core::UserError(where + "not a stepcast calibration journal; remove the file to calibrate afresh");
        for (const auto& [key, value] : header.items()) {
          if (!j.contains(key) || j[key] != value) {
            throw core::UserError(source + ": written by a different calibration (" + key + " " + (j.contains(key) ? core::show(j[key]) : "absent") +
                                  ", this run " + core::show(value) + "); its measurements do not describe this one; remove the file to calibrate afresh");
          }
        }
      } else {
        if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || !j.contains("values") || !j["values"].is_array() ||
            !j.contains("spent_s") || !j["spent_s"].is_number()) {
          throw core::UserError(where + "not a calibration journal entry (key, values, spent_s); remove the file to calibrate afresh");
        }
        Entry e;
        for (const auto& v : j["values"]) {
          if (!v.is_number()) throw core::UserError(where + "a recorded value is not a number; remove the file to calibrate afresh");
          e.values.push_back(v.get<double>());
        }
        e.spent_s = j["spent_s"].get<double>();
        recorded_[j["key"].get<std::string>()] = std::move(e);
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
      if (!out) throw core::UserError(path_ + ": cannot write the calibration journal");
      if (kept.empty()) kept.push_back(header.dump());
      for (const auto& l : kept) out << l << '\n';
      out.flush();
      if (!out) throw core::UserError(path_ + ": cannot write the calibration journal");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path_, ec);
    if (ec) throw core::UserError(path_ + ": cannot write the calibration journal (" + ec.message() + ")");
    file_ = std::fopen(path_.c_str(), "ab");
    if (file_ == nullptr) throw core::UserError(path_ + ": cannot write the calibration journal");
  }
  start_s_ = now_s();
}

Journal::Journal(Journal&& o) noexcept { *this = std::move(o); }

Journal& Journal::operator=(Journal&& o) noexcept {
  if (this != &o) {
    if (file_ != nullptr) std::fclose(file_);
    recorded_ = std::move(o.recorded_);
    occurrences_ = std::move(o.occurrences_);
    path_ = std::move(o.path_);
    file_ = std::exchange(o.file_, nullptr);
    start_s_ = o.start_s_;
    credited_s_ = o.credited_s_;
    reused_ = o.reused_;
    measured_ = o.measured_;
  }
  return *this;
}

Journal::~Journal() {
  if (file_ != nullptr) std::fclose(file_);
}

void Journal::append(const Json& line) {
  if (file_ == nullptr) return;
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    throw core::UserError(path_ + ": cannot write the calibration journal");
  }
  // On disk before the next measurement starts: a crash of the machine keeps it too.
  (void)::fdatasync(fileno(file_));
}

std::vector<double> Journal::measure(const std::string& name, const std::function<std::vector<double>()>& run) {
  const std::string key = name + "#" + std::to_string(occurrences_[name]++);
  if (const auto it = recorded_.find(key); it != recorded_.end()) {
    ++reused_;
    credited_s_ += it->second.spent_s;
    std::vector<double> values = std::move(it->second.values);
    recorded_.erase(it);
    return values;
  }
  const double t0 = now_s();
  std::vector<double> values = run();
  ++measured_;
  append(Json{{"key", key}, {"values", values}, {"spent_s", now_s() - t0}});
  return values;
}

double Journal::measure(const std::string& name, const std::function<double()>& run) {
  return measure(name, [&] { return std::vector<double>{run()}; }).at(0);
}

double Journal::elapsed_s() const { return credited_s_ + (now_s() - start_s_); }

size_t Journal::unused() const { return recorded_.size(); }

std::string previous_journal(const std::string& path, bool resume) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  if (!resume) {
    throw core::UserError(path + ": an interrupted calibration's measurements are here; pass --resume to reuse them, or remove the file to calibrate afresh");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::UserError(path + ": cannot read the calibration journal");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace stepcast::calibrate
