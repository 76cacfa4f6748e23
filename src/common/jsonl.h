// JSONL input: one JSON object per line, blank lines skipped.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc {

// Throws mc::Error naming the file and line of a line that is not a JSON object.
std::vector<nlohmann::json> read_jsonl(const std::string& path);

}  // namespace mc
