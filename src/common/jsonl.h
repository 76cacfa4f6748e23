// JSONL input: one JSON object per line, blank lines skipped.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc {

// Calls fn(row, line) for each non-blank line (lines count from 1, blank ones included), as it
// reads. Throws mc::Error naming the file and line of a line that is not a JSON object.
void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, size_t)>& fn);

// Every row. Throws mc::Error naming the file and line of a line that is not a JSON object.
std::vector<nlohmann::json> read_jsonl(const std::string& path);

}  // namespace mc
