#include "serve/client.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/jsonl.h"

namespace mc::serve {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

VerifyItem verify_item(const eval::Candidate& c) {
  VerifyItem it;
  it.problem_source = c.problem->source;
  it.problem_name = c.problem->stem;
  it.level = c.problem->level;
  it.answer = c.answer;
  it.sample_id = c.sample_id;
  return it;
}

namespace {

nlohmann::json item_json(const VerifyItem& it) {
  nlohmann::json j = {{"answer", it.answer}, {"sample_id", it.sample_id}};
  if (!it.problem_source.empty()) {
    j["problem_source"] = it.problem_source;
    j["problem_name"] = it.problem_name.empty() ? "problem" : it.problem_name;
    if (it.level > 0) j["level"] = it.level;
  } else {
    j["problem"] = it.problem;
  }
  return j;
}

}  // namespace

VerifyClient::VerifyClient(ClientOptions opts) : opts_(std::move(opts)) {
  MC_CHECK(opts_.url.rfind("http://", 0) == 0 || opts_.url.rfind("https://", 0) == 0,
           "server URL must start with http:// or https://, got '", opts_.url, "'");
  MC_CHECK(opts_.concurrency >= 1 && opts_.batch >= 1, "concurrency and batch must be >= 1");
}

// POST with retries on transient failures only. Returns the parsed body of a 2xx answer.
nlohmann::json VerifyClient::post(const std::string& path, const nlohmann::json& body) {
  httplib::Client cli(opts_.url);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(static_cast<time_t>(opts_.poll_wait_s + 60), 0);
  cli.set_write_timeout(60, 0);
  httplib::Headers headers;
  if (!opts_.token.empty()) headers.emplace("Authorization", "Bearer " + opts_.token);
  // Model-written answers may hold invalid UTF-8 (a sample cut inside a character), which JSON
  // cannot carry: such bytes travel as U+FFFD instead of failing the request (an infra error).
  std::string payload = dump_json(body);
  int transient = 0;
  double backoff = 0.2;
  while (true) {
    auto res = cli.Post(path, headers, payload, "application/json");
    if (res && res->status >= 200 && res->status < 300) {
      auto j = nlohmann::json::parse(res->body, nullptr, false);
      MC_CHECK(!j.is_discarded(), "server answered ", path, " with a body that is not JSON");
      return j;
    }
    if (res && res->status == 429) {  // back-pressure: wait as told; not counted as a failure
      double after = 1;
      if (res->has_header("Retry-After")) after = std::atof(res->get_header_value("Retry-After").c_str());
      std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(after, 0.05, 60.0)));
      continue;
    }
    bool retryable = !res || res->status == 502 || res->status == 503 || res->status == 504;
    if (!retryable) {
      auto j = nlohmann::json::parse(res->body, nullptr, false);
      std::string msg = !j.is_discarded() && j.is_object() ? j.value("error", res->body) : res->body;
      throw ClientError(res->status, fmt::format("{} {}: {}", path, res->status, msg));
    }
    if (++transient > opts_.max_transient_retries)
      throw Error(fmt::format("{}: server unreachable after {} tries ({})", opts_.url, transient,
                              res ? std::to_string(res->status) : httplib::to_string(res.error())));
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 5.0);
  }
}

std::vector<nlohmann::json> VerifyClient::verify(const std::vector<VerifyItem>& items,
                                                 const std::function<void(size_t)>& on_done) {
  std::vector<nlohmann::json> rows(items.size());
  auto deadline = Clock::now() + std::chrono::duration<double>(opts_.timeout_s);
  std::atomic<size_t> next_batch{0};
  size_t nbatches = (items.size() + opts_.batch - 1) / opts_.batch;
  std::mutex mu;
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      while (true) {
        size_t b = next_batch++;
        if (b >= nbatches) return;
        {
          std::lock_guard lk(mu);
          if (failure) return;
        }
        size_t lo = b * opts_.batch, hi = std::min(items.size(), lo + opts_.batch);
        nlohmann::json req = {{"candidates", nlohmann::json::array()}};
        for (size_t i = lo; i < hi; ++i) req["candidates"].push_back(item_json(items[i]));
        auto sub = post("/v1/verify", req);
        std::vector<std::string> ids;
        for (const auto& j : sub.at("jobs")) ids.push_back(j.at("id").get<std::string>());
        MC_CHECK(ids.size() == hi - lo, "server accepted ", ids.size(), " of ", hi - lo, " jobs");
        std::vector<bool> have(ids.size(), false);
        size_t left = ids.size();
        auto take = [&](const nlohmann::json& jobs) {
          for (size_t k = 0; k < jobs.size() && k < ids.size(); ++k) {
            if (have[k] || jobs[k].value("status", "") != "done") continue;
            have[k] = true;
            --left;
            rows[lo + k] = jobs[k].at("result");
            if (on_done) {
              std::lock_guard lk(mu);
              on_done(lo + k);
            }
          }
        };
        take(sub.at("jobs"));
        while (left > 0) {
          MC_CHECK(Clock::now() < deadline, "timed out waiting for results from ", opts_.url);
          nlohmann::json pending = nlohmann::json::array();
          for (size_t k = 0; k < ids.size(); ++k)
            if (!have[k]) pending.push_back(ids[k]);
          auto got = post("/v1/results", {{"ids", pending}, {"wait_s", opts_.poll_wait_s}});
          // Map the answer (for the pending subset) back to positions.
          nlohmann::json full = nlohmann::json::array();
          size_t p = 0;
          for (size_t k = 0; k < ids.size(); ++k)
            full.push_back(have[k] ? nlohmann::json{{"status", "taken"}} : got.at("jobs").at(p++));
          for (size_t k = 0; k < ids.size(); ++k)
            if (!have[k] && full[k].value("status", "") == "unknown")
              throw Error("server lost job " + ids[k] + " (restarted without a shared store?)");
          take(full);
        }
      }
    } catch (...) {
      std::lock_guard lk(mu);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  int n = static_cast<int>(std::min<size_t>(opts_.concurrency, std::max<size_t>(1, nbatches)));
  for (int i = 0; i < n; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  return rows;
}

nlohmann::json VerifyClient::health() {
  httplib::Client cli(opts_.url);
  cli.set_connection_timeout(5, 0);
  auto res = cli.Get("/health");
  MC_CHECK(res, "server ", opts_.url, " unreachable: ", httplib::to_string(res.error()));
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  MC_CHECK(!j.is_discarded(), "health answer is not JSON");
  return j;
}

}  // namespace mc::serve
