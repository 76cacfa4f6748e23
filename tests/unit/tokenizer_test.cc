// Tokenizer pieces that need no reference library: ChatML rendering, and clear errors for
// malformed or unsupported tokenizer.json files. Parity with HF `tokenizers` is
// tests/python/test_tokenizer.py.
#include <gtest/gtest.h>

#include "common/check.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

using namespace mc::tok;

TEST(ChatML, RendersTurnsAndGenerationPrompt) {
  std::string s = render_chatml({{"system", "You write CUDA."}, {"user", "relu"}}, true);
  EXPECT_EQ(s, "<|im_start|>system\nYou write CUDA.<|im_end|>\n<|im_start|>user\nrelu<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chatml({{"assistant", "ok"}}, false), "<|im_start|>assistant\nok<|im_end|>\n");
  EXPECT_THROW(render_chatml({{"robot", "x"}}, false), mc::Error);
}

namespace {
std::string expect_error(const std::string& json) {
  try {
    BpeTokenizer::from_json(json, "t.json");
  } catch (const mc::Error& e) {
    return e.what();
  }
  return "";
}
const char* kMin = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})";
}  // namespace

TEST(BpeTokenizer, MalformedAndUnsupportedFilesAreNamed) {
  EXPECT_NE(expect_error("{not json").find("t.json: not valid JSON"), std::string::npos);
  EXPECT_NE(expect_error(R"({"model": {"type": "WordPiece", "vocab": {}}})").find("model type 'WordPiece' is not supported"),
            std::string::npos);
  EXPECT_NE(expect_error(R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Whitespace"}})")
                .find("pre-tokenizer 'Whitespace' is not supported"),
            std::string::npos);
  EXPECT_NE(expect_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": ["ab"]}})").find("malformed merge 'ab'"),
            std::string::npos);
  EXPECT_THROW(BpeTokenizer::from_file("/nonexistent/tokenizer.json"), mc::Error);
  // A vocabulary without the byte-level alphabet cannot encode arbitrary text: a clear error.
  auto t = BpeTokenizer::from_json(kMin);
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{2}));
  EXPECT_EQ(t.decode({2, 0}), "aba");
  EXPECT_THROW(t.encode("zz"), mc::Error);
  EXPECT_THROW(t.id_to_token(99), mc::Error);
}
