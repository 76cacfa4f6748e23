#include "serve/verifier.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

#include "common/check.h"
#include "serve/client.h"

namespace mc::serve {
namespace {

using Results = std::vector<std::pair<size_t, eval::EvalResult>>;

void sort_by_id(Results& r) {
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

class InProcessVerifier : public Verifier {
 public:
  InProcessVerifier(const eval::EvalConfig& cfg, const eval::EvaluatorOptions& opts) : opts_(opts), ev_(cfg, opts) {}
  void submit(size_t id, eval::Candidate c) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++submitted_;
    }
    ev_.submit(std::move(c), [this, id](eval::EvalResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace_back(id, std::move(r));
      cv_.notify_all();
    });
  }
  Results collect() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.size() == submitted_; });
    Results out = std::move(done_);
    done_.clear();
    submitted_ = 0;
    sort_by_id(out);
    return out;
  }
  void hold(bool h) override {
    if (opts_.timing_gate) ev_.hold_timing(h);
  }
  std::string describe() const override {
    std::string gpus;
    for (int g : opts_.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    return fmt::format("in-process MooreEval ({} judges on {} {})", opts_.gpus.size(), opts_.device, gpus);
  }

 private:
  eval::EvaluatorOptions opts_;
  eval::Evaluator ev_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t submitted_ = 0;
  Results done_;
};

class ServiceVerifier : public Verifier {
 public:
  ServiceVerifier(const std::string& url, const std::string& token) {
    co_.url = url;
    co_.token = token;
    VerifyClient probe(co_);
    try {
      probe.health();
    } catch (const std::exception& e) {
      throw Error(str_cat("--verifier ", url, ": the MooreEval service does not answer (", e.what(), ")"));
    }
  }
  void submit(size_t id, eval::Candidate c) override { queued_.emplace_back(id, std::move(c)); }
  Results collect() override {
    Results out;
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
      out.emplace_back(ids[k], std::move(r));
    }
    queued_.clear();
    sort_by_id(out);
    return out;
  }
  std::string describe() const override { return "MooreEval service at " + co_.url; }

 private:
  ClientOptions co_;
  std::vector<std::pair<size_t, eval::Candidate>> queued_;
};

}  // namespace

std::unique_ptr<Verifier> make_in_process_verifier(const eval::EvalConfig& cfg, const eval::EvaluatorOptions& opts) {
  return std::make_unique<InProcessVerifier>(cfg, opts);
}

std::unique_ptr<Verifier> make_service_verifier(const std::string& url, const std::string& token) {
  return std::make_unique<ServiceVerifier>(url, token);
}

}  // namespace mc::serve
