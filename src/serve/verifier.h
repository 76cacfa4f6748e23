// How answers sampled from a policy (RL rollouts, bench-model) reach MooreEval. In process
// (the default): an eval::Evaluator that lives as long as the run, so its compile pool and its
// judges stay warm across steps; an answer is submitted the moment it is sampled and its
// compile starts while the rest are still being generated. Through the service (--verifier
// URL): answers are sent in one batch per collect(), for GPU pools on other machines. Either
// way a verifier failure comes back as an infra_error row, which carries no reward and is never
// a score.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "eval/candidates.h"
#include "eval/eval_config.h"
#include "eval/evaluator.h"
#include "eval/result.h"

namespace mc::serve {

class Verifier {
 public:
  virtual ~Verifier() = default;
  using Results = std::vector<std::pair<size_t, eval::EvalResult>>;
  // Queues one answer under `id` (the caller's, unique among those not yet collected); its
  // result comes back from collect().
  virtual void submit(size_t id, eval::Candidate c) = 0;
  // Waits for the answers submitted under `ids` and returns them as (id, result) pairs in id
  // order; answers submitted under other ids stay outstanding (an RL step's answers are
  // collected while the next step's are already being judged). An id never submitted, or
  // already collected, is an internal error.
  virtual Results collect(const std::vector<size_t>& ids) = 0;
  // Every answer not yet collected.
  Results collect() { return collect(outstanding()); }
  // Waits until at least one answer under `ids` is judged and returns every one of them that
  // is, in id order, so that a long evaluation can write each verdict as it comes (a stopped
  // run then keeps them). The service judges a batch at a time, so there it is collect(ids).
  virtual Results collect_any(const std::vector<size_t>& ids) { return collect(ids); }
  // The answers under `ids` judged by now, in id order, without waiting. The service judges a
  // batch at a time, when collected: there, none.
  virtual Results collect_ready(const std::vector<size_t>& ids) { (void)ids; return {}; }
  virtual std::vector<size_t> outstanding() const = 0;
  // Held: no judge times until released (compiles and correctness trials go on), and hold(true)
  // returns once no judge is timing. In process, with EvaluatorOptions::timing_gate.
  virtual void hold(bool) {}
  virtual std::string describe() const = 0;
  // The digest of the settings this verifier judges with (EvalConfig::config_hash): results
  // are comparable only under the same one.
  virtual std::string config_hash() const = 0;
};

std::unique_ptr<Verifier> make_in_process_verifier(const eval::EvalConfig& cfg, const eval::EvaluatorOptions& opts);
// The service judges with its own configuration (the one it was started with), so it must be
// the client's `expect`: a service started with other settings is refused (check_service_config).
std::unique_ptr<Verifier> make_service_verifier(const std::string& url, const std::string& token,
                                                const eval::EvalConfig& expect);

// Throws mc::Error unless the service at `url`, whose /health answer is `health`, judges under
// `expect` (its config hash), naming the settings that differ both ways.
void check_service_config(const std::string& url, const nlohmann::json& health, const eval::EvalConfig& expect);

}  // namespace mc::serve
