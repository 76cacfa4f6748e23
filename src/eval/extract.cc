#include "eval/extract.h"

#include <algorithm>
#include <regex>
#include <vector>

namespace mc::eval {
namespace {

bool is_blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

bool has_model_new(const std::string& s) {
  static const std::regex re(R"((^|\n)\s*class\s+ModelNew\s*[\(:])");
  return std::regex_search(s, re);
}

bool has_native_entry(const std::string& s) {
  static const std::regex re(R"(\bmc_forward\s*\()");
  return std::regex_search(s, re) && s.find("extern") != std::string::npos;
}

std::string strip_think(const std::string& text) {
  std::string out = text;
  for (size_t open; (open = out.find("<think>")) != std::string::npos;) {
    size_t close = out.find("</think>", open);
    // An unclosed think block means the answer never left its reasoning.
    out.erase(open, close == std::string::npos ? std::string::npos : close + 8 - open);
  }
  return out;
}

// Fenced blocks in order; `complete` is false for a trailing unterminated fence.
struct Block {
  std::string lang, body;
};

std::vector<Block> fenced_blocks(const std::string& text) {
  std::vector<Block> blocks;
  size_t pos = 0;
  while (true) {
    size_t open = text.find("```", pos);
    if (open == std::string::npos) break;
    size_t eol = text.find('\n', open);
    if (eol == std::string::npos) break;
    std::string lang = text.substr(open + 3, eol - open - 3);
    lang.erase(lang.find_last_not_of(" \t\r") + 1);
    size_t close = text.find("\n```", eol);
    Block b{lang, text.substr(eol + 1, close == std::string::npos ? std::string::npos
                                                                   : close + 1 - (eol + 1))};
    blocks.push_back(std::move(b));
    if (close == std::string::npos) break;
    pos = close + 4;
  }
  return blocks;
}

}  // namespace

const char* to_string(SolutionFormat f) {
  return f == SolutionFormat::kNative ? "native" : "kernelbench";
}

Extraction extract_solution(const std::string& answer) {
  Extraction ex;
  if (is_blank(answer)) {
    ex.error = "empty answer";
    return ex;
  }
  std::string text = strip_think(answer);
  if (is_blank(text)) {
    ex.error = "the answer holds only reasoning (<think> block) and no code";
    return ex;
  }
  std::vector<std::string> candidates;
  if (text.find("```") != std::string::npos) {
    for (auto& b : fenced_blocks(text)) candidates.push_back(std::move(b.body));
  }
  // Last fenced block first; the whole text (plain source) only when no block is complete.
  std::reverse(candidates.begin(), candidates.end());
  candidates.push_back(text);
  for (const auto& c : candidates) {
    if (has_model_new(c)) {
      ex.ok = true;
      ex.format = SolutionFormat::kKernelBench;
      ex.code = c;
      return ex;
    }
    if (has_native_entry(c)) {
      ex.ok = true;
      ex.format = SolutionFormat::kNative;
      ex.code = c;
      return ex;
    }
  }
  ex.error = candidates.size() > 1
                 ? "no code block defines `class ModelNew` or an extern \"C\" `mc_forward`"
                 : "no `class ModelNew` or extern \"C\" `mc_forward` found in the answer";
  return ex;
}

}  // namespace mc::eval
