// The C++ OpenAI client (src/llm) against `musacoder serve-model` (src/generate): a real
// server process on loopback serving a tiny Qwen2 model that the test makes with transformers.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "common/subprocess.h"
#include "llm/openai_client.h"

namespace {

namespace fs = std::filesystem;

TEST(ModelServer, AnswersTheCppClient) {
  fs::path dir = fs::temp_directory_path() / ("mc-model-" + std::to_string(::getpid()));
  mc::SubprocessOptions make;
  make.argv = {"python3", "tiny_models.py", dir.string(), "qwen2"};
  make.cwd = std::string(MUSACODER_SOURCE_DIR) + "/tests/python";
  auto made = mc::run_command(make, 300000);
  if (!made.status.ok() && made.err.find("No module named 'transformers'") != std::string::npos)
    GTEST_SKIP() << "transformers is not installed (scripts/setup.sh installs it)";
  ASSERT_TRUE(made.status.ok()) << made.err;

  mc::SubprocessOptions so;
  so.argv = {MUSACODER_BINARY, "serve-model", "--model", dir.string(), "--device", "cpu", "--port", "0",
             "--max-seq-len", "256"};
  mc::Subprocess server(so);
  auto line = server.read_line(120000);
  ASSERT_TRUE(line) << server.stderr_text();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*line, m, std::regex(R"(http://127\.0\.0\.1:(\d+)/v1)"))) << *line;

  mc::llm::OpenAIClientOptions o;
  o.base_url = "http://127.0.0.1:" + m[1].str() + "/v1";
  o.max_retries = 1;
  mc::llm::OpenAIClient client(o);
  mc::llm::SamplingParams p;
  p.n = 3;
  p.temperature = 0.8;
  p.max_tokens = 10;
  p.seed = 5;
  auto chat = client.chat("tiny", {{"system", "You write CUDA."}, {"user", "relu kernel"}}, p);
  ASSERT_EQ(chat.size(), 3u);
  for (const auto& c : chat) EXPECT_TRUE(c.finish_reason == "stop" || c.finish_reason == "length");
  EXPECT_EQ(client.chat("tiny", {{"system", "You write CUDA."}, {"user", "relu kernel"}}, p)[0].text, chat[0].text)
      << "same seed, same answer";
  p.n = 1;
  p.temperature = 0;
  auto done = client.complete("tiny", "__global__ void", p);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].finish_reason.empty());
  // A request the server refuses is a RequestError (4xx, not retried), and the server goes on.
  p.max_tokens = 100000;
  EXPECT_THROW(client.complete("tiny", "x", p), mc::llm::RequestError);
  p.max_tokens = 2;
  EXPECT_EQ(client.complete("tiny", "x", p).size(), 1u);
  server.kill_group(SIGTERM);
  server.wait(30000);
  fs::remove_all(dir);
}

}  // namespace
