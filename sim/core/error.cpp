#include "sim/core/error.hpp"

#include <utility>

namespace stepcast::core {
namespace {

std::string join_issues(const std::vector<std::string>& issues) {
  if (issues.size() == 1) return issues.front();
  // Every problem up to a screenful; a file with thousands (a stray paste) shows the first.
  constexpr size_t kShown = 40;
  std::string out = std::to_string(issues.size()) + " problems in the input:";
  for (size_t i = 0; i < issues.size() && i < kShown; ++i) out += "\n  - " + issues[i];
  if (issues.size() > kShown) out += "\n  ... and " + std::to_string(issues.size() - kShown) + " more";
  return out;
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> issues)
    : UserError(join_issues(issues)), issues_(std::move(issues)) {}

void Issues::add(const std::string& path, const std::string& message) {
  for (const auto& w : wrong_type_) {
    const bool under = path.size() > w.size() && path.compare(0, w.size(), w) == 0 && (path[w.size()] == '.' || path[w.size()] == '[');
    if (path == w || under) return;
  }
  lines_.push_back(path.empty() ? message : path + ": " + message);
}

void Issues::add_wrong_type(const std::string& path, const std::string& message) {
  add(path, message);
  if (!path.empty()) wrong_type_.push_back(path);
}

void Issues::throw_if_any() const {
  if (!lines_.empty()) throw ConfigError(lines_);
}

void internal_failure(const char* expr, const char* file, int line, const std::string& msg) {
  throw InternalError(std::string("internal check failed: ") + expr + " (" + msg + ") at " + file +
                      ":" + std::to_string(line));
}

}  // namespace stepcast::core
