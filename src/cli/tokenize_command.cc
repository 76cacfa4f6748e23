#include "cli/tokenize_command.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/progress.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "train/dataset.h"

namespace mc::cli {

struct TokenizeCommand::Impl {
  CLI::App* cmd = nullptr;
  std::string tokenizer, input, output;
  bool decode = false, training = false, no_progress = false;
};

TokenizeCommand::TokenizeCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand("tokenize", "byte-level BPE from a tokenizer.json: texts (JSONL) to ids (JSONL)");
  m.cmd->add_option("--tokenizer", m.tokenizer, "tokenizer.json")->required();
  m.cmd->add_option("--input", m.input,
                    "JSONL, one {\"text\": ...} or {\"messages\": [...]} per line ({\"ids\": [...]} with --decode); messages "
                    "are rendered as the tokenizer's model folder prompts (its chat format, the generation prompt added)")
      ->required();
  m.cmd->add_option("--output", m.output, "JSONL, one {\"ids\": [...]} per line ({\"text\": ...} with --decode)")->required();
  m.cmd->add_flag("--decode", m.decode, "ids to text instead");
  m.cmd->add_flag("--training", m.training,
                  "training rows ({messages}, {prompt, completion} or {text}) to {\"ids\", \"loss_mask\"}, rendered as "
                  "`musacoder train` renders them for the tokenizer's model folder");
  m.cmd->add_flag("--no-progress", m.no_progress, "no progress bar");
}

TokenizeCommand::~TokenizeCommand() = default;

std::optional<int> TokenizeCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  auto tok = tok::BpeTokenizer::from_file(m.tokenizer);
  // The chat format of the folder the tokenizer is in (tokenizer_config.json beside it).
  const auto format = tok::read_chat_format(fs::path(m.tokenizer).parent_path().string());
  std::ifstream in(m.input);
  MC_CHECK(in, "cannot read ", m.input);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  ProgressBar bar(m.decode ? "decode" : "tokenize", lines.size(), !m.no_progress);
  size_t tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(lines[i]);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}:{}: not JSON: {}", m.input, i + 1, e.what()));
    }
    if (m.training) {
      train::Example ex;
      try {
        ex = train::render_row(lines[i], tok, format);
      } catch (const Error& e) {
        throw Error(fmt::format("{}:{}: {}", m.input, i + 1, e.what()));
      }
      tokens += ex.tokens.size();
      out += nlohmann::json{{"ids", ex.tokens}, {"loss_mask", ex.loss_mask}}.dump() + "\n";
    } else if (m.decode) {
      MC_CHECK(j.contains("ids") && j["ids"].is_array(), m.input, ":", i + 1, ": no \"ids\" array");
      out += nlohmann::json{{"text", tok.decode(j["ids"].get<std::vector<int32_t>>())}}.dump() + "\n";
    } else if (j.contains("messages")) {
      const auto turns = tok::turns_from_json(j["messages"], fmt::format("{}:{}", m.input, i + 1));
      auto ids = tok.encode(tok::render_chat(format, turns, /*add_generation_prompt=*/true));
      tokens += ids.size();
      out += nlohmann::json{{"ids", ids}}.dump() + "\n";
    } else {
      MC_CHECK(j.contains("text") && j["text"].is_string(), m.input, ":", i + 1, ": no \"text\" or \"messages\"");
      auto ids = tok.encode(j["text"].get<std::string>());
      tokens += ids.size();
      out += nlohmann::json{{"ids", ids}}.dump() + "\n";
    }
    bar.advance();
  }
  std::ofstream o(m.output, std::ios::binary);
  MC_CHECK(o, "cannot write ", m.output);
  o << out;
  fmt::print(stderr, "{} lines, {} tokens -> {}\n", lines.size(), tokens, m.output);
  return 0;
}

}  // namespace mc::cli
