// Client for any OpenAI-compatible server (vLLM, SGLang, llama.cpp, `musacoder serve-model`):
// chat and text completions with bounded concurrency (calls from many threads share
// `concurrency` connections' worth of requests in flight), retries on transient failures only
// (connection errors, 408/429/5xx, honouring Retry-After), and timeouts. Other 4xx answers
// throw at once: the request is wrong and retrying cannot help.
#pragma once

#include <memory>
#include <semaphore>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace mc::llm {

struct OpenAIClientOptions {
  std::string base_url = "http://127.0.0.1:8000";  // with or without a trailing /v1
  std::string api_key;                              // bearer token ("" : none)
  int concurrency = 8;
  double timeout_s = 600;                           // per request
  int max_retries = 5;
  double backoff_s = 1.0;                           // first retry delay (doubles)
};

struct ChatMessage {
  std::string role, content;
};

struct SamplingParams {
  int n = 1;
  double temperature = 1.0, top_p = 1.0;
  int max_tokens = 4096;
  std::vector<std::string> stop;
  long long seed = -1;  // < 0: not sent
  int loop_window = 0;  // > 0: sent as "loop_window", our server's loop stop (generate/repetition.h)
};

struct Completion {
  std::string text;
  std::string finish_reason;
};

// A request the server refused (4xx other than 408/429).
class RequestError : public Error {
 public:
  RequestError(int status, const std::string& msg) : Error(msg), status(status) {}
  int status;
};

class OpenAIClient {
 public:
  explicit OpenAIClient(OpenAIClientOptions opts);
  std::vector<Completion> chat(const std::string& model, const std::vector<ChatMessage>& messages,
                               const SamplingParams& params);
  std::vector<Completion> complete(const std::string& model, const std::string& prompt, const SamplingParams& params);
  // GET /v1/models: the served model ids. Throws mc::Error naming the URL when the server does
  // not answer or refuses (one try: this is the reachability check before a run).
  std::vector<std::string> models();

 private:
  nlohmann::json post(const std::string& path, const nlohmann::json& body);
  OpenAIClientOptions opts_;
  std::string host_, prefix_;  // "http://h:p" and "/v1"
  std::unique_ptr<std::counting_semaphore<1024>> slots_;
};

}  // namespace mc::llm
