#include "common/jsonl.h"

#include <fstream>

#include "common/check.h"

namespace mc {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  MC_CHECK(in, "cannot read ", path);
  std::vector<nlohmann::json> rows;
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      rows.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      throw Error(str_cat(path, ":", n, ": not JSON: ", e.what()));
    }
    MC_CHECK(rows.back().is_object(), path, ":", n, ": expected a JSON object");
  }
  return rows;
}

}  // namespace mc
