#include "train/dataset.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "tokenizer/chat_template.h"

namespace mc::train {
namespace {

using json = nlohmann::json;

// Appends the tokens of `text` with the given mask value.
void append(Example& ex, const tok::BpeTokenizer& tok, const std::string& text, uint8_t loss) {
  if (text.empty()) return;
  auto ids = tok.encode(text);
  ex.tokens.insert(ex.tokens.end(), ids.begin(), ids.end());
  ex.loss_mask.insert(ex.loss_mask.end(), ids.size(), loss);
}

std::string string_field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  MC_CHECK(it != obj.end(), where, "has no \"", key, "\"");
  MC_CHECK(it->is_string(), where, "\"", key, "\" must be a string, got ", it->type_name());
  return it->get<std::string>();
}

// ChatML as chat_template.cc renders it. Everything but an assistant turn's content and its
// <|im_end|> is context. The text before each assistant content is tokenized as one piece, as
// the generation prompt is at inference, and the content on its own, as the model produced it.
// An assistant turn with "weight": 0 (axolotl's per-message convention) is context too: a
// repair conversation shows a failed answer, and only the repaired one is learned.
Example render_chat(const json& messages, const tok::BpeTokenizer& tok, const tok::ChatFormat& chat) {
  MC_CHECK(messages.is_array() && !messages.empty(), "\"messages\" must be a non-empty array");
  std::vector<tok::ChatTurn> turns;
  std::vector<uint8_t> weights;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    std::string where = str_cat("messages[", i, "] ");
    MC_CHECK(m.is_object(), where, "must be an object with \"role\" and \"content\"");
    turns.push_back({string_field(m, "role", where), string_field(m, "content", where)});
    uint8_t w = 1;
    if (auto it = m.find("weight"); it != m.end()) {
      MC_CHECK(it->is_number() && (*it == 0 || *it == 1), where, "\"weight\" must be 0 or 1, got ", it->dump());
      MC_CHECK(turns.back().role == "assistant", where, "\"weight\" applies to assistant turns only");
      w = it->get<int>() != 0;
    }
    weights.push_back(w);
  }
  tok::render_chatml(turns, false);  // validates the roles
  if (auto with = tok::with_default_system(chat, turns); with.size() > turns.size()) {
    turns = std::move(with);
    weights.insert(weights.begin(), 1);
  }
  Example ex;
  std::string context;
  bool any_assistant = false;
  for (size_t i = 0; i < turns.size(); ++i) {
    const auto& t = turns[i];
    if (t.role != "assistant" || !weights[i]) {
      context += "<|im_start|>" + t.role + "\n" + t.content + "<|im_end|>\n";
      continue;
    }
    any_assistant = true;
    append(ex, tok, context + "<|im_start|>assistant\n", 0);
    append(ex, tok, t.content, 1);
    append(ex, tok, "<|im_end|>", 1);
    context = "\n";
  }
  MC_CHECK(any_assistant, "\"messages\" has no assistant turn to learn from (none, or all of weight 0)");
  append(ex, tok, context, 0);
  return ex;
}

}  // namespace

int64_t Example::loss_tokens() const {
  int64_t n = 0;
  for (size_t i = 1; i < loss_mask.size(); ++i) n += loss_mask[i];
  return n;
}

Example render_row(const std::string& line, const tok::BpeTokenizer& tok, const tok::ChatFormat& chat) {
  json row;
  try {
    row = json::parse(line);
  } catch (const json::parse_error& e) {
    throw Error(str_cat("not valid JSON (", e.what(), ")"));
  }
  MC_CHECK(row.is_object(), "a row must be a JSON object, got ", row.type_name());
  if (row.contains("messages")) return render_chat(row["messages"], tok, chat);
  if (row.contains("prompt") || row.contains("completion")) {
    json messages = json::array({{{"role", "user"}, {"content", string_field(row, "prompt", "")}},
                                 {{"role", "assistant"}, {"content", string_field(row, "completion", "")}}});
    return render_chat(messages, tok, chat);
  }
  if (row.contains("text")) {
    Example ex;
    ex.plain_text = true;
    append(ex, tok, string_field(row, "text", ""), 1);
    int32_t eos = tok.token_to_id("<|endoftext|>");
    if (eos >= 0) {
      ex.tokens.push_back(eos);
      ex.loss_mask.push_back(1);
    }
    return ex;
  }
  throw Error("a row needs \"messages\", \"prompt\" and \"completion\", or \"text\"");
}

std::vector<Example> load_examples(const std::vector<std::string>& paths, const tok::BpeTokenizer& tok, int64_t max_len,
                                   DatasetStats* stats, const tok::ChatFormat& chat) {
  MC_CHECK(!paths.empty(), "no data file given");
  MC_CHECK(max_len >= 2, "--max-len must be at least 2, got ", max_len);
  DatasetStats st;
  std::vector<Example> out;
  for (const auto& path : paths) {
    std::ifstream in(path);
    MC_CHECK(in, "cannot read data file ", path);
    std::string line;
    for (int64_t no = 1; std::getline(in, line); ++no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Example ex;
      try {
        ex = render_row(line, tok, chat);
      } catch (const Error& e) {
        throw Error(str_cat(path, ":", no, ": ", e.what()));
      }
      ex.origin = str_cat(path, ":", no);
      ++st.rows;
      if (ex.plain_text && static_cast<int64_t>(ex.tokens.size()) > max_len) {
        // A long document: consecutive pieces of max_len tokens (a last piece of one token has
        // nothing to predict and is dropped).
        ++st.split;
        const int64_t n = static_cast<int64_t>(ex.tokens.size());
        for (int64_t at = 0, k = 0; n - at >= 2; at += max_len, ++k) {
          const int64_t end = std::min(n, at + max_len);
          Example piece;
          piece.plain_text = true;
          piece.origin = str_cat(ex.origin, "#", k);
          piece.tokens.assign(ex.tokens.begin() + at, ex.tokens.begin() + end);
          piece.loss_mask.assign(ex.loss_mask.begin() + at, ex.loss_mask.begin() + end);
          st.tokens += piece.tokens.size();
          st.loss_tokens += piece.loss_tokens();
          out.push_back(std::move(piece));
        }
        continue;
      }
      if (static_cast<int64_t>(ex.tokens.size()) > max_len) {
        ex.tokens.resize(max_len);
        ex.loss_mask.resize(max_len);
        ++st.truncated;
      }
      int64_t lt = ex.loss_tokens();
      if (lt == 0) {
        ++st.skipped_no_loss;
        continue;
      }
      st.tokens += ex.tokens.size();
      st.loss_tokens += lt;
      out.push_back(std::move(ex));
    }
  }
  if (stats) *stats = st;
  MC_CHECK(!out.empty(), "the training data is empty: ", st.rows, " rows read from ", paths.size(), " file(s)",
           st.skipped_no_loss ? str_cat(", ", st.skipped_no_loss, " with no assistant token within --max-len ", max_len) : "");
  return out;
}

void check_tokenizer_fits(const tok::BpeTokenizer& tok, int64_t model_vocab, const std::string& model_dir) {
  MC_CHECK(static_cast<int64_t>(tok.vocab_size()) <= model_vocab, model_dir, "/tokenizer.json does not match the model: it has ",
           tok.vocab_size(), " token ids but config.json's vocab_size is ", model_vocab);
  for (const char* special : {"<|im_start|>", "<|im_end|>"})
    MC_CHECK(tok.token_to_id(special) >= 0, model_dir, "/tokenizer.json has no ", special,
             " token, which the chat format (ChatML) needs");
}

std::vector<std::string> split_paths(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace mc::train
