#include "generate/openai_server.h"

#include <atomic>
#include <chrono>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/jsonl.h"
#include "tokenizer/chat_template.h"

namespace mc::gen {
namespace {

using json = nlohmann::json;

// A request the client got wrong: answered with 400 and the message.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T field(const json& body, const char* key, T fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  try {
    return body[key].get<T>();
  } catch (const std::exception&) {
    throw BadRequest(fmt::format("\"{}\" has the wrong type: {}", key, body[key].dump()));
  }
}

}  // namespace

struct OpenAIServer::Impl {
  GenerationEngine& engine;
  const tok::BpeTokenizer& tok;
  ModelServerOptions opts;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  int32_t im_end = -1;

  Impl(GenerationEngine& e, const tok::BpeTokenizer& t, ModelServerOptions o) : engine(e), tok(t), opts(std::move(o)) {
    im_end = tok.token_to_id("<|im_end|>");
  }

  SamplingParams sampling(const json& body, int default_max_tokens) {
    SamplingParams p;
    p.n = field<int>(body, "n", 1);
    p.temperature = field<float>(body, "temperature", 1.0f);
    p.top_p = field<float>(body, "top_p", 1.0f);
    p.top_k = std::max(0, field<int>(body, "top_k", 0));  // vLLM's extension: -1 or 0 = off
    p.max_new_tokens = field<int>(body, "max_completion_tokens", field<int>(body, "max_tokens", default_max_tokens));
    if (body.contains("seed") && !body["seed"].is_null()) p.seed = field<uint64_t>(body, "seed", 0);
    if (body.contains("stop") && !body["stop"].is_null()) {
      if (body["stop"].is_string()) p.stop.push_back(body["stop"]);
      else p.stop = field<std::vector<std::string>>(body, "stop", {});
    }
    p.stop_token_ids = field<std::vector<int32_t>>(body, "stop_token_ids", {});
    p.ignore_eos = field<bool>(body, "ignore_eos", false);
    p.loop_window = field<int>(body, "loop_window", 0);  // ours: stop a degenerate loop (engine.h)
    if (field<bool>(body, "stream", false)) throw BadRequest("\"stream\": true is not supported; ask without streaming");
    return p;
  }

  json usage(size_t prompt, const std::vector<Completion>& cs) {
    size_t gen = 0;
    for (const auto& c : cs) gen += c.tokens.size();
    return {{"prompt_tokens", prompt}, {"completion_tokens", gen}, {"total_tokens", prompt + gen}};
  }

  // submit() validates the request: what it refuses is the client's error (400); what fails
  // later, inside the engine, surfaces from get() as a server error (500).
  std::future<std::vector<Completion>> submit(GenerationRequest r) {
    try {
      return engine.submit(std::move(r));
    } catch (const Error& e) {
      throw BadRequest(e.what());
    }
  }

  json completions(const json& body) {
    std::vector<std::vector<int32_t>> prompts;
    const json& pr = body["prompt"];
    if (pr.is_string()) {
      prompts.push_back(tok.encode(pr.get<std::string>()));
    } else if (pr.is_array() && !pr.empty() && pr[0].is_number_integer()) {
      prompts.push_back(field<std::vector<int32_t>>(body, "prompt", {}));
    } else if (pr.is_array() && !pr.empty()) {
      for (const auto& x : pr) {
        if (x.is_string()) prompts.push_back(tok.encode(x.get<std::string>()));
        else if (x.is_array()) prompts.push_back(x.get<std::vector<int32_t>>());
        else throw BadRequest("\"prompt\" must be a string, a list of strings, or token ids");
      }
    } else {
      throw BadRequest("\"prompt\" must be a string, a list of strings, or token ids");
    }
    SamplingParams sp = sampling(body, 16);  // OpenAI's default max_tokens for completions
    bool want_lp = body.contains("logprobs") && !body["logprobs"].is_null() && body["logprobs"] != false;
    bool echo = field<bool>(body, "echo", false);
    if (echo) throw BadRequest("\"echo\" is not supported");
    json choices = json::array();
    size_t prompt_tokens = 0;
    std::vector<Completion> all;
    // All prompts go to the engine at once, so they are batched together.
    std::vector<std::future<std::vector<Completion>>> futures;
    for (auto& ids : prompts) {
      prompt_tokens += ids.size();
      futures.push_back(submit({ids, sp}));
    }
    for (auto& f : futures) {
      auto cs = f.get();
      for (auto& c : cs) {
        json ch{{"index", choices.size()}, {"text", c.text}, {"finish_reason", c.finish_reason}, {"token_ids", c.tokens}};
        if (want_lp) {
          json toks = json::array(), offs = json::array();
          size_t off = 0;
          for (int32_t t : c.tokens) {
            std::string s = tok.decode({t});
            toks.push_back(s);
            offs.push_back(off);
            off += s.size();
          }
          ch["logprobs"] = {{"tokens", toks}, {"token_logprobs", c.logprobs}, {"top_logprobs", nullptr}, {"text_offset", offs}};
        } else {
          ch["logprobs"] = nullptr;
        }
        choices.push_back(ch);
        all.push_back(std::move(c));
      }
    }
    return {{"id", fmt::format("cmpl-{}", next_id++)},
            {"object", "text_completion"},
            {"created", std::time(nullptr)},
            {"model", opts.model_name},
            {"choices", choices},
            {"usage", usage(prompt_tokens, all)}};
  }

  json chat(const json& body) {
    std::string text;
    try {
      text = tok::render_chat(opts.chat, tok::turns_from_json(body.value("messages", json())),
                              /*add_generation_prompt=*/true);
    } catch (const Error& e) {
      throw BadRequest(e.what());
    }
    SamplingParams sp = sampling(body, engine.options().max_seq_len);
    if (im_end >= 0) sp.stop_token_ids.push_back(im_end);
    bool want_lp = field<bool>(body, "logprobs", false);
    if (field<int>(body, "top_logprobs", 0) > 0) throw BadRequest("\"top_logprobs\" > 0 is not supported");
    auto ids = tok.encode(text);
    // Without an explicit limit, generate as far as the context allows.
    if (!body.contains("max_tokens") && !body.contains("max_completion_tokens"))
      sp.max_new_tokens = std::max<int>(1, engine.options().max_seq_len - ids.size());
    auto cs = submit({ids, sp}).get();
    json choices = json::array();
    for (size_t i = 0; i < cs.size(); ++i) {
      const auto& c = cs[i];
      json ch{{"index", i},
              {"message", {{"role", "assistant"}, {"content", c.text}}},
              {"finish_reason", c.finish_reason},
              {"token_ids", c.tokens}};
      if (want_lp) {
        json content = json::array();
        for (size_t k = 0; k < c.tokens.size(); ++k) {
          std::string s = tok.decode({c.tokens[k]});
          std::vector<int> bytes(s.begin(), s.end());
          for (auto& b : bytes) b &= 0xff;
          content.push_back({{"token", s}, {"logprob", c.logprobs[k]}, {"bytes", bytes}, {"top_logprobs", json::array()}});
        }
        ch["logprobs"] = {{"content", content}};
      } else {
        ch["logprobs"] = nullptr;
      }
      choices.push_back(ch);
    }
    return {{"id", fmt::format("chatcmpl-{}", next_id++)},
            {"object", "chat.completion"},
            {"created", std::time(nullptr)},
            {"model", opts.model_name},
            {"choices", choices},
            {"usage", usage(ids.size(), cs)}};
  }

  void route(const char* path, json (Impl::*handler)(const json&)) {
    http.Post(path, [this, handler, path](const httplib::Request& req, httplib::Response& res) {
      auto error = [&](int status, const std::string& type, const std::string& msg) {
        res.status = status;
        res.set_content(dump_json({{"error", {{"message", msg}, {"type", type}}}}), "application/json");
      };
      json body;
      try {
        body = json::parse(req.body);
      } catch (const std::exception& e) {
        return error(400, "invalid_request_error", std::string("request body is not JSON: ") + e.what());
      }
      if (!body.is_object()) return error(400, "invalid_request_error", "request body must be a JSON object");
      try {
        if (std::string(path) == "/v1/completions" && !body.contains("prompt"))
          return error(400, "invalid_request_error", "missing \"prompt\"");
        res.set_content(dump_json((this->*handler)(body)), "application/json");
      } catch (const BadRequest& e) {
        error(400, "invalid_request_error", e.what());
      } catch (const std::exception& e) {
        error(500, "server_error", e.what());
      }
    });
  }
};

OpenAIServer::OpenAIServer(GenerationEngine& engine, const tok::BpeTokenizer& tokenizer, ModelServerOptions opts)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(opts))) {
  Impl& m = *impl_;
  m.route("/v1/completions", &Impl::completions);
  m.route("/v1/chat/completions", &Impl::chat);
  m.http.Get("/v1/models", [&m](const httplib::Request&, httplib::Response& res) {
    json j{{"object", "list"}, {"data", {{{"id", m.opts.model_name}, {"object", "model"}, {"owned_by", "musacoder"}}}}};
    res.set_content(j.dump(), "application/json");
  });
  m.http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
}

OpenAIServer::~OpenAIServer() { stop(); }

int OpenAIServer::bind() {
  Impl& m = *impl_;
  int port = m.opts.port == 0 ? m.http.bind_to_any_port(m.opts.host) : (m.http.bind_to_port(m.opts.host, m.opts.port) ? m.opts.port : -1);
  MC_CHECK(port > 0, "cannot listen on ", m.opts.host, ":", m.opts.port);
  return port;
}

void OpenAIServer::serve() {
  impl_->engine.start();
  impl_->http.listen_after_bind();
}

void OpenAIServer::stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace mc::gen
