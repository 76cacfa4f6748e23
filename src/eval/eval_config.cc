#include "eval/eval_config.h"

#include <fmt/format.h>

#include "common/check.h"
#include "common/hash.h"

namespace mc::eval {

std::string EvalConfig::config_hash() const {
  KeyBuilder k;
  k.add("eval-config-v1").add(precision).add(std::to_string(trials)).add(std::to_string(seed));
  k.add(fmt::format("{:.6g}/{:.6g}", effective_atol(), effective_rtol()));
  for (const auto& a : allow) k.add("allow:" + a);
  k.add(timing ? "timed" : "untimed");
  k.add(fmt::format("{:.4g}/{:.4g}/{}/{:.4g}", timing_budget_s, timing_target_rel_err,
                    timing_input_sets, speedup_review_bound));
  k.add(fmt::format("{:.4g}/{:.4g}", reward.lambda, reward.nu_max));
  return k.hex().substr(0, 16);
}

void validate(const EvalConfig& c) {
  MC_CHECK(c.precision == "fp32" || c.precision == "fp16" || c.precision == "bf16",
           "precision must be fp32, fp16 or bf16, got '", c.precision, "'");
  MC_CHECK(c.trials >= 1 && c.trials <= 100, "trials must be in 1..100, got ", c.trials);
  MC_CHECK(c.timing_input_sets >= 1 && c.timing_input_sets <= 16,
           "timing input sets must be in 1..16, got ", c.timing_input_sets);
  MC_CHECK(c.timing_budget_s > 0, "timing budget must be positive");
  MC_CHECK(c.speedup_review_bound > 1, "speedup review bound must exceed 1");
  static const std::set<std::string> kKnown = {"cublas", "cudnn", "half_precision",
                                               "torch_compute", "try_except_fallback"};
  for (const auto& a : c.allow)
    MC_CHECK(kKnown.count(a), "unknown --allow entry '", a,
             "' (known: cublas, cudnn, half_precision, torch_compute, try_except_fallback)");
}

}  // namespace mc::eval
