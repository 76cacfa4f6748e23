// Byte-level BPE exactly as a Hugging Face `tokenizer.json` defines it (GPT-2, Qwen2/3 style):
// added and special tokens split out first, the pre-tokenizer's regex (Unicode classes, via
// PCRE2 in UTF/UCP mode, the same semantics as the Oniguruma patterns `tokenizers` uses),
// the byte-to-unicode map, merges by rank, and decoding back to text.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mc::tok {

class BpeTokenizer {
 public:
  // Throws mc::Error naming the file and what is unsupported or malformed.
  static BpeTokenizer from_file(const std::string& tokenizer_json);
  static BpeTokenizer from_json(const std::string& json_text, const std::string& origin = "tokenizer.json");
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Added tokens (e.g. <|im_start|>) in the text are matched as such. encode and decode are
  // thread-safe (a server's handlers encode at once while its engine decodes).
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  int32_t token_to_id(const std::string& token) const;  // -1 when absent
  const std::string& id_to_token(int32_t id) const;     // throws for an unknown id
  size_t vocab_size() const;                            // largest id + 1

 private:
  BpeTokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::tok
