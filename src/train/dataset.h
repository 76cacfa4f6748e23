// Training examples from JSONL: token ids and a loss mask, rendered the way the model will be
// prompted. Four row shapes are read (the first that fits wins):
//   {"messages": [{"role", "content"}, ...]}   chat (musacoder synth's dataset.jsonl, OpenAI/HF
//                                               style): ChatML; loss on assistant turns only
//   {"prompt": "...", "completion": "..."}      one user turn and the assistant's answer
//   {"text": "..."}                             raw text: loss on every token
// An assistant turn's loss covers its content and the closing <|im_end|> (what the model must
// learn to produce and to stop on), not the "<|im_start|>assistant\n" header the prompt gives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace mc::train {

struct Example {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;  // 1 where tokens[i] is a target of the loss
  std::string origin;              // "file:line", for messages
  bool plain_text = false;         // a {"text"} row: causal LM on every token (pretraining)
  int64_t loss_tokens() const;
};

struct DatasetStats {
  int64_t rows = 0, truncated = 0, split = 0, skipped_no_loss = 0, tokens = 0, loss_tokens = 0;
};

// Reads every file (comma-separated list or several paths) in order. Chat and prompt/completion
// rows longer than max_len tokens are truncated (counted: their start is the prompt); {"text"}
// rows (pretraining documents) are split into consecutive pieces of max_len tokens instead
// (counted), so no part of a long document is lost. Rows left with no loss token are skipped
// (counted). Throws
// mc::Error naming the file and line of a malformed row, and for an empty result.
// Chat rows are rendered in `chat`'s format (tok::render_chat: the model's default system turn
// first when a conversation has none).
std::vector<Example> load_examples(const std::vector<std::string>& paths, const tok::BpeTokenizer& tok, int64_t max_len,
                                   DatasetStats* stats = nullptr, const tok::ChatFormat& chat = {});

// One row, already parsed (exposed for tests and RFT): throws mc::Error saying what is wrong.
Example render_row(const std::string& json_line, const tok::BpeTokenizer& tok, const tok::ChatFormat& chat = {});

// Checks that the tokenizer has the special tokens ChatML needs and that the model's vocabulary
// covers every id it can produce; throws naming the mismatch.
void check_tokenizer_fits(const tok::BpeTokenizer& tok, int64_t model_vocab, const std::string& model_dir);

std::vector<std::string> split_paths(const std::string& comma_separated);

}  // namespace mc::train
