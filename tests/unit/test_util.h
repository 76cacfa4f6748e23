// Helpers shared by the unit tests: paths of the source tree and of the case files.
#pragma once

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/fs.h"

namespace mc::test {

inline std::string source_dir() { return MUSACODER_SOURCE_DIR; }
inline std::string cases_dir() { return source_dir() + "/tests/cases"; }
inline std::string test_cache_dir() { return MUSACODER_TEST_CACHE; }

// The value of a `# key: value` (or `// key: value`) header line, "" if absent.
inline std::string case_header(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::regex re("^\\s*(#|//)\\s*" + key + ":\\s*(.+?)\\s*$");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, re)) return m[2];
  return "";
}

inline std::vector<std::string> case_files(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(cases_dir() + "/" + folder))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mc::test
