// Path-aware JSON object reader used by every stepcast input.
//
// An ObjectReader wraps one JSON object at a known path ("$.parallel"). Each getter marks its
// key as read and records a problem (path, bad value, what is allowed) in the shared Issues
// instead of throwing, so validation reports everything at once. finish() reports every key
// that no getter read and that is not in the caller's list of accepted-but-ignored keys.
// Getters return the default when the key is absent or invalid; callers check
// issues.empty() before trusting the result.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/error.hpp"
#include "sim/core/units.hpp"

namespace stepcast::core {

using Json = nlohmann::json;

// Renders a JSON value compactly for error messages (truncated when long).
std::string show(const Json& v);

// The keys of an object other than `except`, quoted and comma-separated, for a message such as
// "a {\"path\": ...} model takes no other keys (got 'hidden_size')".
std::string other_keys(const Json& obj, const std::string& except);

// Parses text as JSON; throws UserError naming the source and the byte offset on failure.
Json parse_json_text(const std::string& text, const std::string& source_name);

// The names `key` most likely meant, for an "unknown name" error: case, '-', '_' and '.' are
// ignored ("Llama-3.1-8B" finds "llama3.1-8b"); else every candidate the key begins ("h100"
// finds "h100-pcie-8x" and "h100-sxm"); else the nearest misspelling (at most a third of the key
// edited). Empty when none is close. `did_you_mean` words the list ("; did you mean 'a' or 'b'?").
std::vector<std::string> likely_names(std::string_view key, const std::vector<std::string>& candidates);
std::string did_you_mean(std::string_view key, const std::vector<std::string>& candidates);
// Reads and parses a file; throws UserError when it cannot be read or parsed.
Json load_json_file(const std::string& path);
// A text input file whole (run files, configs, launch scripts), refused when it is a directory,
// cannot be opened or grows past 64 MiB (a device or pipe that never ends, /dev/zero).
std::string load_text_file(const std::string& path);

// Sets the value at a dotted path ("parallel.tp"), creating missing objects on the way. An
// intermediate value that is not an object is replaced by one when `replace` is true; otherwise
// the call changes nothing and returns that intermediate's dotted path and value.
struct BlockedPath {
  std::string path;
  Json value;
};
std::optional<BlockedPath> set_json_path(Json& j, const std::string& dotted, const Json& v, bool replace);

// A command-line setting's VALUE: JSON when it parses, else the text as a string.
Json setting_value(const std::string& text);

// Applies "PATH=VALUE" overrides (VALUE is JSON when it parses, else a string), as the CLI's
// --set gives them; `flag` names the option in errors.
void apply_overrides(Json& j, const std::vector<std::string>& overrides, const std::string& flag);

class ObjectReader {
 public:
  // Records a problem (and behaves as an empty object) when j is not an object.
  ObjectReader(const Json& j, std::string path, Issues& issues);

  [[nodiscard]] bool has(std::string_view key) const;
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string child_path(std::string_view key) const;
  Issues& issues() { return *issues_; }

  // Integer in [lo, hi]. Accepts JSON integers and integral floats.
  std::optional<int64_t> get_int(std::string_view key, int64_t lo, int64_t hi);
  int64_t get_int(std::string_view key, int64_t lo, int64_t hi, int64_t fallback);
  int64_t require_int(std::string_view key, int64_t lo, int64_t hi);

  std::optional<double> get_number(std::string_view key, double lo, double hi);
  double get_number(std::string_view key, double lo, double hi, double fallback);
  double require_number(std::string_view key, double lo, double hi);

  std::optional<bool> get_bool(std::string_view key);
  bool get_bool(std::string_view key, bool fallback);

  std::optional<std::string> get_string(std::string_view key);
  // A string from a fixed set; the error lists the allowed values.
  std::optional<std::string> get_choice(std::string_view key, const std::vector<std::string>& allowed);
  std::string get_choice(std::string_view key, const std::vector<std::string>& allowed,
                         const std::string& fallback);

  // Unit-suffixed strings or bare numbers in base units; must be >= 0 (> 0 when positive).
  std::optional<Bytes> get_bytes(std::string_view key, bool positive = true);
  // Durations also refuse values above max_seconds (no hardware latency or overhead lasts a
  // second; an unbounded one would only overflow the prediction).
  std::optional<Duration> get_duration(std::string_view key, bool positive = true,
                                       double max_seconds = std::numeric_limits<double>::infinity());
  std::optional<Bandwidth> get_bandwidth(std::string_view key, bool positive = true);
  std::optional<FlopRate> get_flop_rate(std::string_view key, bool positive = true);

  // Raw access (marks the key read). nullptr when absent.
  const Json* get_raw(std::string_view key);

  // A null value is an error ("give a value or omit the key") unless this is called: model
  // configs from a hub write null for settings they leave unset, which then read as absent.
  void accept_null_as_absent() { nulls_absent_ = true; }

  // Marks keys as accepted-and-ignored (they never raise "unknown key").
  void ignore(std::initializer_list<std::string_view> keys);
  void ignore(const std::vector<std::string>& keys);
  // Reports unread keys as "unknown key" with the list of known ones.
  void finish();

 private:
  const Json* fetch(std::string_view key);
  void bad(std::string_view key, const Json& value, const std::string& expectation);

  const Json* obj_ = nullptr;
  bool nulls_absent_ = false;
  std::string path_;
  Issues* issues_;
  std::set<std::string, std::less<>> read_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace stepcast::core
