// Where a benchmarked model's answers come from: our engine (`musacoder-model generate`, one
// prefill shared by the samples of a prompt, answers streamed as each finishes; ChatML, with
// the default system turn of the model's chat template, tok::read_chat_format) or any
// OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API, `musacoder serve-model`)
// with bounded concurrency and retries on transient errors only. An answer the source could not
// produce comes back with `error` set: an infrastructure failure, never a score.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llm/openai_client.h"

namespace mc::bench {

struct Conversation {
  std::string id;                         // the caller's, echoed in each Answer
  std::vector<llm::ChatMessage> messages; // ends with a user turn
  int n = 1;                              // answers wanted
};

struct Answer {
  std::string id;
  int index = 0;                          // 0..n-1 within its conversation
  std::string text, finish_reason;
  std::string error;                      // non-empty: no answer (an infra error)
};

struct Sampling {
  double temperature = 0.9, top_p = 0.95;
  int max_new_tokens = 4096;
  long long seed = 0;
  int loop_window = 0;  // > 0: stop an answer caught in a loop (generate/repetition.h)
};

class AnswerSource {
 public:
  virtual ~AnswerSource() = default;
  // Answers every conversation; on_answer is called once per answer, as it arrives, from any
  // thread but never two at once. Throws mc::Error only when the source as a whole is broken
  // (the engine crashed); answers delivered before that stand.
  virtual void generate(const std::vector<Conversation>& convs, const Sampling& s,
                        const std::function<void(const Answer&)>& on_answer) = 0;
  virtual std::string describe() const = 0;
};

struct EngineSourceOptions {
  std::string model_exe;      // musacoder-model
  std::string model_dir;
  std::string device = "auto";
  int max_batch = 256;
  std::string work_dir;       // prompts and the engine's log go here
};
std::unique_ptr<AnswerSource> make_engine_source(const EngineSourceOptions& o);

struct EndpointSourceOptions {
  llm::OpenAIClientOptions client;
  std::string model_name;     // the "model" field of each request
};
// Throws mc::Error naming the URL when the server does not answer GET /v1/models.
std::unique_ptr<AnswerSource> make_endpoint_source(const EndpointSourceOptions& o);

}  // namespace mc::bench
