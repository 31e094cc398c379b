// Data files compiled into the stepcast binary (model zoo, hardware profiles), so the tool
// runs from any directory. The sources live in models/zoo/*.json and configs/hardware/*.json;
// cmake/embed_files.cmake turns them into one generated translation unit.
#pragma once

#include <string_view>
#include <vector>

namespace stepcast::embedded {

struct Entry {
  std::string_view name;  // file stem, e.g. "llama3.1-8b"
  std::string_view text;  // file contents
};

const std::vector<Entry>& zoo_models();
const std::vector<Entry>& hardware_profiles();

}  // namespace stepcast::embedded
