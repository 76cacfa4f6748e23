// OpenAI-compatible HTTP API over the generation engine: /v1/completions,
// /v1/chat/completions (ChatML), /v1/models, /health. Requests from many clients are batched
// together by the engine (continuous batching). No streaming.
#pragma once

#include <memory>
#include <string>

#include "generate/engine.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace mc::gen {

struct ModelServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;           // 0: any free port (see port())
  std::string model_name = "musacoder";
  tok::ChatFormat chat;      // how /v1/chat/completions renders messages (the model's default system turn)
};

class OpenAIServer {
 public:
  // The engine must have been built with this tokenizer; both outlive the server.
  OpenAIServer(GenerationEngine& engine, const tok::BpeTokenizer& tokenizer, ModelServerOptions opts);
  ~OpenAIServer();
  int bind();     // binds, returns the port; throws mc::Error when it cannot
  void serve();   // blocks until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::gen
