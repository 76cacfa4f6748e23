#include "llm/openai_client.h"

#include <chrono>
#include <thread>

#include <httplib.h>

namespace mc::llm {

OpenAIClient::OpenAIClient(OpenAIClientOptions opts) : opts_(std::move(opts)) {
  MC_CHECK(opts_.concurrency >= 1 && opts_.concurrency <= 1024, "concurrency must be in 1..1024");
  std::string u = opts_.base_url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  MC_CHECK(u.starts_with("http://") || u.starts_with("https://"), "endpoint URL must start with http:// or https://, got '",
           opts_.base_url, "'");
  size_t path = u.find('/', u.find("://") + 3);
  host_ = path == std::string::npos ? u : u.substr(0, path);
  prefix_ = path == std::string::npos ? "" : u.substr(path);
  if (!prefix_.ends_with("/v1")) prefix_ += "/v1";
  slots_ = std::make_unique<std::counting_semaphore<1024>>(opts_.concurrency);
}

nlohmann::json OpenAIClient::post(const std::string& path, const nlohmann::json& body) {
  slots_->acquire();
  struct Release {
    std::counting_semaphore<1024>& s;
    ~Release() { s.release(); }
  } release{*slots_};
  httplib::Client cli(host_);
  auto secs = static_cast<time_t>(opts_.timeout_s);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(secs, 0);
  cli.set_write_timeout(60, 0);
  httplib::Headers headers;
  if (!opts_.api_key.empty()) headers.emplace("Authorization", "Bearer " + opts_.api_key);
  std::string payload = body.dump();
  double delay = opts_.backoff_s;
  std::string last;
  for (int attempt = 0; attempt <= opts_.max_retries; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay)), delay *= 2;
    auto res = cli.Post(prefix_ + path, headers, payload, "application/json");
    if (!res) {
      last = "no answer from " + host_ + ": " + httplib::to_string(res.error());
      continue;
    }
    int st = res->status;
    if (st == 200) {
      try {
        return nlohmann::json::parse(res->body);
      } catch (const std::exception& e) {
        throw Error("endpoint " + host_ + " answered 200 with a body that is not JSON: " + res->body.substr(0, 200));
      }
    }
    last = "HTTP " + std::to_string(st) + ": " + res->body.substr(0, 500);
    if (st == 408 || st == 429 || st >= 500) {
      if (res->has_header("Retry-After")) {
        try {
          delay = std::max(delay, std::stod(res->get_header_value("Retry-After")));
        } catch (...) {
        }
      }
      continue;
    }
    throw RequestError(st, "endpoint " + host_ + prefix_ + path + " refused the request: " + last);
  }
  throw Error("endpoint " + host_ + " failed after " + std::to_string(opts_.max_retries + 1) + " tries: " + last);
}

namespace {

nlohmann::json sampling_json(const SamplingParams& p) {
  nlohmann::json j = {{"n", p.n}, {"temperature", p.temperature}, {"top_p", p.top_p}, {"max_tokens", p.max_tokens}};
  if (!p.stop.empty()) j["stop"] = p.stop;
  if (p.seed >= 0) j["seed"] = p.seed;
  if (p.loop_window > 0) j["loop_window"] = p.loop_window;
  return j;
}

std::vector<Completion> choices(const nlohmann::json& r, bool chat) {
  MC_CHECK(r.contains("choices") && r["choices"].is_array(), "endpoint answer has no choices: ", r.dump().substr(0, 300));
  std::vector<Completion> out;
  for (const auto& c : r["choices"]) {
    Completion x;
    if (chat) {
      const auto& m = c.at("message");
      x.text = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    } else {
      x.text = c.value("text", "");
    }
    x.finish_reason = c.contains("finish_reason") && c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace

std::vector<Completion> OpenAIClient::chat(const std::string& model, const std::vector<ChatMessage>& messages,
                                           const SamplingParams& params) {
  nlohmann::json body = sampling_json(params);
  body["model"] = model;
  for (const auto& m : messages) body["messages"].push_back({{"role", m.role}, {"content", m.content}});
  return choices(post("/chat/completions", body), true);
}

std::vector<Completion> OpenAIClient::complete(const std::string& model, const std::string& prompt,
                                               const SamplingParams& params) {
  nlohmann::json body = sampling_json(params);
  body["model"] = model;
  body["prompt"] = prompt;
  return choices(post("/completions", body), false);
}

std::vector<std::string> OpenAIClient::models() {
  httplib::Client cli(host_);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(30, 0);
  httplib::Headers headers;
  if (!opts_.api_key.empty()) headers.emplace("Authorization", "Bearer " + opts_.api_key);
  auto res = cli.Get(prefix_ + "/models", headers);
  MC_CHECK(res, "endpoint ", opts_.base_url, " does not answer (", httplib::to_string(res.error()), ")");
  MC_CHECK(res->status == 200, "endpoint ", opts_.base_url, ": GET ", prefix_, "/models answered HTTP ", res->status, ": ",
           res->body.substr(0, 300));
  std::vector<std::string> out;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array())
    for (const auto& m : j["data"])
      if (m.contains("id") && m["id"].is_string()) out.push_back(m["id"]);
  return out;
}

}  // namespace mc::llm
