// stepcast errors.
//
// UserError: something the user wrote or asked for is wrong (bad JSON, unknown key, an
// impossible layout, a model that does not fit). Its message names the JSON path or the cause.
// ConfigError: a UserError that carries every problem found while validating one input, so a
// user fixes them all in one pass. Invariant violations inside the library use
// STEPCAST_CHECK, which throws InternalError with file and line; only main() turns an exception
// into an exit code.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::core {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ConfigError : public UserError {
 public:
  explicit ConfigError(std::vector<std::string> issues);
  [[nodiscard]] const std::vector<std::string>& issues() const { return issues_; }

 private:
  std::vector<std::string> issues_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Collects "path: message" lines; throws ConfigError once at the end of validation.
class Issues {
 public:
  void add(const std::string& path, const std::string& message);
  // A value of the wrong JSON type: recorded, and every later problem at or under `path` (a
  // required key missing from a section that is not an object, ...) is dropped as its echo.
  void add_wrong_type(const std::string& path, const std::string& message);
  [[nodiscard]] bool empty() const { return lines_.empty(); }
  [[nodiscard]] size_t size() const { return lines_.size(); }
  void throw_if_any() const;
  [[nodiscard]] const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
  std::vector<std::string> wrong_type_;
};

[[noreturn]] void internal_failure(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace stepcast::core

#define STEPCAST_CHECK(cond, msg)                                                       \
  do {                                                                                  \
    if (!(cond)) ::stepcast::core::internal_failure(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
