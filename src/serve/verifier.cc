#include "serve/verifier.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "common/check.h"
#include "eval/executor.h"
#include "serve/client.h"

namespace mc::serve {
namespace {

using Results = Verifier::Results;

// The answers under `ids`, taken out of `done` (every one must be there), in id order.
Results take(std::map<size_t, eval::EvalResult>& done, std::set<size_t>& outstanding, std::vector<size_t> ids) {
  std::sort(ids.begin(), ids.end());
  Results out;
  for (size_t id : ids) {
    auto it = done.find(id);
    MC_INTERNAL_ASSERT(it != done.end(), "verifier: collect() of an answer never submitted or already collected");
    out.emplace_back(id, std::move(it->second));
    done.erase(it);
    outstanding.erase(id);
  }
  return out;
}

class InProcessVerifier : public Verifier {
 public:
  InProcessVerifier(const eval::EvalConfig& cfg, const eval::EvaluatorOptions& opts)
      : opts_(opts), config_hash_(cfg.config_hash()), ev_(cfg, opts) {}
  void submit(size_t id, eval::Candidate c) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      MC_INTERNAL_ASSERT(outstanding_.insert(id).second, "verifier: id ", id, " submitted twice");
    }
    ev_.submit(std::move(c), [this, id](eval::EvalResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace(id, std::move(r));
      cv_.notify_all();
    });
  }
  using Verifier::collect;
  Results collect(const std::vector<size_t>& ids) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t id : ids) MC_INTERNAL_ASSERT(outstanding_.count(id), "verifier: collect() of id ", id, ", which is not outstanding");
    cv_.wait(lock, [&] { return std::all_of(ids.begin(), ids.end(), [&](size_t id) { return done_.count(id) > 0; }); });
    return take(done_, outstanding_, ids);
  }
  Results collect_any(const std::vector<size_t>& ids) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t id : ids) MC_INTERNAL_ASSERT(outstanding_.count(id), "verifier: collect_any() of id ", id, ", which is not outstanding");
    if (ids.empty()) return {};
    std::vector<size_t> ready;
    cv_.wait(lock, [&] { return !(ready = judged(ids)).empty(); });
    return take(done_, outstanding_, ready);
  }
  Results collect_ready(const std::vector<size_t>& ids) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t id : ids) MC_INTERNAL_ASSERT(outstanding_.count(id), "verifier: collect_ready() of id ", id, ", which is not outstanding");
    return take(done_, outstanding_, judged(ids));
  }
  std::vector<size_t> outstanding() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return {outstanding_.begin(), outstanding_.end()};
  }
  void hold(bool h) override {
    if (opts_.timing_gate) ev_.hold_timing(h);
  }
  std::string describe() const override {
    std::string gpus;
    for (int g : opts_.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    // Lanes (judges) per GPU: "1 judges on cuda 0" once read as one judge where there were four.
    const int lanes = eval::default_lanes(opts_.device, opts_.lanes);
    return fmt::format("in-process MooreEval ({} judge(s): {} on each of {} {})", lanes * static_cast<int>(opts_.gpus.size()),
                       lanes, opts_.device, gpus);
  }
  std::string config_hash() const override { return config_hash_; }

 private:
  // Those of `ids` whose verdict is in (under mu_).
  std::vector<size_t> judged(const std::vector<size_t>& ids) const {
    std::vector<size_t> ready;
    for (size_t id : ids)
      if (done_.count(id)) ready.push_back(id);
    return ready;
  }

  eval::EvaluatorOptions opts_;
  std::string config_hash_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<size_t> outstanding_;
  std::map<size_t, eval::EvalResult> done_;
  eval::Evaluator ev_;  // last: destroyed first, while what its callbacks touch still exists
};

class ServiceVerifier : public Verifier {
 public:
  ServiceVerifier(const std::string& url, const std::string& token, const eval::EvalConfig& expect) {
    co_.url = url;
    co_.token = token;
    VerifyClient probe(co_);
    nlohmann::json h;
    try {
      h = probe.health();
    } catch (const std::exception& e) {
      throw Error(str_cat("--verifier ", url, ": the MooreEval service does not answer (", e.what(), ")"));
    }
    config_hash_ = h.value("config_hash", std::string());
    check_service_config(url, h, expect);
  }
  void submit(size_t id, eval::Candidate c) override {
    MC_INTERNAL_ASSERT(outstanding_.insert(id).second, "verifier: id ", id, " submitted twice");
    queued_.emplace_back(id, std::move(c));
  }
  // Everything queued goes in one batch (answers of a later step too), and what was not asked
  // for waits in done_ for its own collect().
  using Verifier::collect;
  Results collect(const std::vector<size_t>& ids) override {
    if (!std::all_of(ids.begin(), ids.end(), [&](size_t id) { return done_.count(id) > 0; })) send_queued();
    return take(done_, outstanding_, ids);
  }
  std::vector<size_t> outstanding() const override { return {outstanding_.begin(), outstanding_.end()}; }
  std::string describe() const override { return "MooreEval service at " + co_.url; }
  // As the service said at start-up; a service restarted with other settings mid-run is caught
  // by each result's own hash (VerdictMemory keeps only results under this one).
  std::string config_hash() const override { return config_hash_; }

 private:
  void send_queued() {
    std::vector<VerifyItem> items;
    std::vector<size_t> ids;
    for (auto& [id, c] : queued_) {
      items.push_back(verify_item(c));
      ids.push_back(id);
    }
    std::vector<nlohmann::json> got;
    std::string failure;
    if (!items.empty()) {
      try {
        got = VerifyClient(co_).verify(items);
      } catch (const std::exception& e) {
        failure = e.what();  // every answer of this batch: an infra error, not a score
      }
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      eval::EvalResult r;
      if (failure.empty()) {
        r = eval::result_from_json(got[k]);
      } else {
        r.problem_key = queued_[k].second.problem->key;
        r.sample_id = queued_[k].second.sample_id;
        r.verdict = eval::Verdict::kInfraError;
        r.infra_error = "verifier service: " + failure;
      }
      done_.emplace(ids[k], std::move(r));
    }
    queued_.clear();
  }

  ClientOptions co_;
  std::string config_hash_;
  std::vector<std::pair<size_t, eval::Candidate>> queued_;
  std::set<size_t> outstanding_;
  std::map<size_t, eval::EvalResult> done_;
};

}  // namespace

std::unique_ptr<Verifier> make_in_process_verifier(const eval::EvalConfig& cfg, const eval::EvaluatorOptions& opts) {
  return std::make_unique<InProcessVerifier>(cfg, opts);
}

void check_service_config(const std::string& url, const nlohmann::json& health, const eval::EvalConfig& expect) {
  const std::string theirs_hash = health.value("config_hash", std::string());
  if (theirs_hash == expect.config_hash()) return;
  // Name what differs; a service too old to say its settings is named by hash alone.
  const nlohmann::json mine = eval::to_json(expect), theirs = health.value("config", nlohmann::json::object());
  std::string diff;
  for (const auto& [k, v] : mine.items())
    if (theirs.contains(k) && theirs[k] != v)
      diff += str_cat(diff.empty() ? "" : ", ", k, " ", theirs[k].dump(), " there, ", v.dump(), " here");
  throw Error(str_cat("--verifier ", url, " judges under other settings than this run's (",
                      diff.empty() ? str_cat("config ", theirs_hash, " against ", expect.config_hash()) : diff,
                      "): its verdicts and rewards would not be the ones asked for. Start the service with the "
                      "same settings (musacoder serve --timing-budget, --speed-weight, --speed-cap, ...), or pass "
                      "them here"));
}

std::unique_ptr<Verifier> make_service_verifier(const std::string& url, const std::string& token,
                                                const eval::EvalConfig& expect) {
  return std::make_unique<ServiceVerifier>(url, token, expect);
}

}  // namespace mc::serve
