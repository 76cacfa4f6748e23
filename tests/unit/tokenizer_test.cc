// Tokenizer pieces that need no reference library: ChatML rendering, and clear errors for
// malformed or unsupported tokenizer.json files, concurrent encoding. Parity with HF `tokenizers` is
// tests/python/test_tokenizer.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

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

// serve-model's HTTP handlers encode at once: the tokenizer's word cache must hold under
// concurrent inserts (it crashed the server on the H100 before it took a lock). A byte-level
// vocabulary of all 256 bytes, a few merges, and 8 threads encoding distinct words.
TEST(BpeTokenizer, ConcurrentEncodeAgreesWithSerial) {
  // GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 + k.
  nlohmann::json vocab = nlohmann::json::object();
  int k = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = printable ? b : 256 + k++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
    vocab[s] = b;
  }
  vocab["ab"] = 256, vocab["abc"] = 257, vocab["Ġa"] = 258;
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c", "Ġ a"}}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  auto tok = BpeTokenizer::from_json(j.dump());
  auto text = [](int t, int i) {
    std::string s;
    for (int w = 0; w < 40; ++w) s += " abc" + std::to_string(t * 1000003 + i * 41 + w) + "x";
    return s;
  };
  std::vector<std::vector<std::vector<int32_t>>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) got[t].push_back(tok.encode(text(t, i)));
    });
  for (auto& th : threads) th.join();
  auto fresh = BpeTokenizer::from_json(j.dump());
  for (int t = 0; t < 8; ++t)
    for (int i = 0; i < 300; i += 37) {
      ASSERT_EQ(got[t][i], fresh.encode(text(t, i))) << t << " " << i;
      EXPECT_EQ(fresh.decode(got[t][i]), text(t, i));
    }
}

// The chat format from tokenizer_config.json: Qwen2/Qwen2.5 templates add a default system
// turn (read from the template's literal), Qwen3's does not, a non-ChatML template is named
// as such, and a folder without a template is plain ChatML.
TEST(ChatFormat, ReadsTheTemplatesDefaultSystemTurn) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("mc_chat_format_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto with = [&](const nlohmann::json& cfg) {
    std::ofstream(dir / "tokenizer_config.json") << cfg.dump();
    return read_chat_format(dir.string());
  };
  const std::string qwen25 =
      "{%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
      "You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}";
  auto f = with({{"chat_template", qwen25}});
  EXPECT_TRUE(f.chatml);
  EXPECT_EQ(f.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  f = with({{"chat_template", {{{"name", "default"}, {"template", "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"}}}}});
  EXPECT_EQ(f.default_system, "You are a helpful assistant.");
  f = with({{"chat_template", "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
                              "'<|im_end|>\\n' }}{%- endif %}"}});  // Qwen3: no default
  EXPECT_TRUE(f.chatml);
  EXPECT_EQ(f.default_system, "");
  f = with({{"chat_template", "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"}});
  EXPECT_FALSE(f.chatml);
  fs::remove(dir / "tokenizer_config.json");
  f = read_chat_format(dir.string());
  EXPECT_TRUE(f.chatml);
  EXPECT_EQ(f.default_system, "");
  fs::remove_all(dir);
}
