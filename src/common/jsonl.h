// JSONL input: one JSON object per line, blank lines skipped; and JSON output of text from
// outside.
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

// j as compact JSON, with invalid UTF-8 in its strings written as U+FFFD. For JSON holding text
// from outside (model-written answers, a sample cut inside a character), which a plain dump()
// refuses with an exception.
std::string dump_json(const nlohmann::json& j);

}  // namespace mc
