#include "bench/answer_source.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/subprocess.h"
#include "tokenizer/chat_template.h"

namespace mc::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `musacoder-model generate --stream`: rows arrive on its stdout as each sample finishes. One
// engine run per distinct n (turn 1 asks n per prompt, repair turns one each).
class EngineSource : public AnswerSource {
 public:
  explicit EngineSource(EngineSourceOptions o) : o_(std::move(o)) {
    MC_CHECK(fs::is_regular_file(fs::path(o_.model_dir) / "config.json"), "--model: ", o_.model_dir,
             " is not a Hugging Face model directory (no config.json)");
    MC_CHECK(fs::is_regular_file(fs::path(o_.model_dir) / "tokenizer.json"), "--model: ", o_.model_dir,
             " has no tokenizer.json (prompts are text)");
    // The engine renders ChatML; the model's own template may add a default system turn.
    chat_ = tok::read_chat_format(o_.model_dir);
    MC_CHECK(chat_.chatml, chat_.source, ": the chat template is not ChatML, which our engine renders (Qwen2/Qwen3); "
             "serve the model with a server that applies its template and use --endpoint");
  }

  void generate(const std::vector<Conversation>& convs, const Sampling& s,
                const std::function<void(const Answer&)>& on_answer) override {
    std::map<int, std::vector<const Conversation*>> by_n;
    for (const auto& c : convs) by_n[c.n].push_back(&c);
    for (const auto& [n, group] : by_n) run(n, group, s, on_answer);
  }

  std::string describe() const override { return "engine (musacoder-model generate) on " + o_.model_dir; }

 private:
  void run(int n, const std::vector<const Conversation*>& group, const Sampling& s,
           const std::function<void(const Answer&)>& on_answer) {
    const fs::path work(o_.work_dir);
    std::string prompts;
    for (const auto* c : group) {
      std::vector<tok::ChatTurn> turns;
      for (const auto& m : c->messages) turns.push_back({m.role, m.content});
      json msgs = json::array();
      for (const auto& t : tok::with_default_system(chat_, turns)) msgs.push_back({{"role", t.role}, {"content", t.content}});
      prompts += json{{"id", c->id}, {"messages", msgs}}.dump() + "\n";
    }
    write_file_atomic(work / "engine_prompts.jsonl", prompts);
    SubprocessOptions so;
    so.argv = {o_.model_exe, "generate", "--model", o_.model_dir, "--prompts", (work / "engine_prompts.jsonl").string(),
               "--chat", "--stream", "--no-progress", "--n", std::to_string(n), "--temperature", fmt::format("{}", s.temperature),
               "--top-p", fmt::format("{}", s.top_p), "--max-new-tokens", std::to_string(s.max_new_tokens), "--seed",
               std::to_string(s.seed), "--device", o_.device, "--max-batch", std::to_string(o_.max_batch)};
    if (s.loop_window > 0) so.argv.insert(so.argv.end(), {"--stop-loops", std::to_string(s.loop_window)});
    so.capture_stdout = true;
    so.capture_stderr = false;
    so.stderr_file = (work / "engine.log").string();
    Subprocess gen(so);
    std::map<std::string, int> got;
    while (auto line = gen.read_line(-1)) {
      if (line->empty()) continue;
      json r = json::parse(*line, nullptr, false);
      MC_CHECK(r.is_object() && r.contains("id") && r.contains("sample"), "engine: unexpected output line: ",
               line->substr(0, 200));
      Answer a;
      a.id = r["id"].get<std::string>();
      a.index = r["sample"].get<int>();
      a.text = r.value("text", "");
      a.finish_reason = r.value("finish_reason", "");
      ++got[a.id];
      on_answer(a);
    }
    ExitStatus st = gen.wait();
    if (!st.ok()) {
      std::string log = fs::exists(so.stderr_file) ? read_file(so.stderr_file) : "";
      if (log.size() > 2000) log = "..." + log.substr(log.size() - 2000);
      throw Error(str_cat("musacoder-model generate failed (", st.describe(), "); its log, ", so.stderr_file, ":\n", log));
    }
    for (const auto* c : group)
      MC_CHECK(got[c->id] == n, "engine: ", got[c->id], " answers for ", c->id, ", expected ", n);
  }

  EngineSourceOptions o_;
  tok::ChatFormat chat_;
};

// Chat completions, one request per conversation asking for all n answers; if the server gives
// fewer (or refuses n > 1), the rest are asked one at a time.
class EndpointSource : public AnswerSource {
 public:
  explicit EndpointSource(EndpointSourceOptions o) : o_(std::move(o)), client_(o_.client) {
    auto models = client_.models();
    bool served = models.empty();
    for (const auto& m : models) served |= m == o_.model_name;
    MC_CHECK(served, "endpoint ", o_.client.base_url, " does not serve model '", o_.model_name, "' (it serves: ",
             fmt::format("{}", fmt::join(models, ", ")), ")");
  }

  void generate(const std::vector<Conversation>& convs, const Sampling& s,
                const std::function<void(const Answer&)>& on_answer) override {
    std::mutex mu;
    auto deliver = [&](Answer a) {
      std::lock_guard<std::mutex> lock(mu);
      on_answer(a);
    };
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next++) < convs.size();) answer(convs[i], s, static_cast<long long>(i), deliver);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::min<int>(o_.client.concurrency, static_cast<int>(convs.size())); ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }

  std::string describe() const override { return fmt::format("endpoint {} (model {})", o_.client.base_url, o_.model_name); }

 private:
  // The seed of conversation i is seed + i, as our engine seeds prompt i.
  void answer(const Conversation& c, const Sampling& s, long long i, const std::function<void(Answer)>& deliver) {
    llm::SamplingParams p;
    p.seed = s.seed + i;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.max_tokens = s.max_new_tokens;
    p.loop_window = s.loop_window;
    int index = 0;
    auto ask = [&](int n) {
      p.n = n;
      auto got = client_.chat(o_.model_name, c.messages, p);
      for (size_t k = 0; k < got.size() && index < c.n; ++k) deliver({c.id, index++, got[k].text, got[k].finish_reason, ""});
      return got.size();
    };
    try {
      try {
        ask(c.n);
      } catch (const llm::RequestError& e) {
        if (c.n == 1) throw;  // a refused n > 1 is retried below, one answer a request
      }
      for (int tries = 0; index < c.n && tries < 2 * c.n; ++tries) {
        p.seed = s.seed + i + 100003LL * (index + 1);  // each single answer its own stream
        ask(1);
      }
      MC_CHECK(index == c.n, "endpoint gave ", index, " of ", c.n, " answers");
    } catch (const std::exception& e) {
      for (; index < c.n; ++index) deliver({c.id, index, "", "", e.what()});
    }
  }

  EndpointSourceOptions o_;
  llm::OpenAIClient client_;
};

}  // namespace

std::unique_ptr<AnswerSource> make_engine_source(const EngineSourceOptions& o) { return std::make_unique<EngineSource>(o); }
std::unique_ptr<AnswerSource> make_endpoint_source(const EndpointSourceOptions& o) {
  return std::make_unique<EndpointSource>(o);
}

}  // namespace mc::bench
