// Test helpers for run files.
#pragma once

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::test {

// The message a refused run file gets ("" when it is accepted).
inline std::string parse_error(const core::Json& j, const std::string& source) {
  try {
    config::parse_run(j, source, "");
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace stepcast::test
