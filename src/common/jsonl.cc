#include "common/jsonl.h"

#include <fstream>

#include "common/check.h"

namespace mc {

void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, size_t)>& fn) {
  std::ifstream in(path);
  MC_CHECK(in, "cannot read ", path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw Error(str_cat(path, ":", n, ": not JSON: ", e.what()));
    }
    MC_CHECK(row.is_object(), path, ":", n, ": expected a JSON object");
    fn(row, n);
  }
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  for_each_jsonl(path, [&](const nlohmann::json& row, size_t) { rows.push_back(row); });
  return rows;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mc
