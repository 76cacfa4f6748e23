#include "eval/eval_config.h"

#include <fmt/format.h>

#include "common/check.h"
#include "common/hash.h"

namespace mc::eval {

std::string EvalConfig::config_hash() const {
  KeyBuilder k;
  k.add("eval-config-v2").add(precision).add(std::to_string(trials)).add(std::to_string(seed));
  k.add(fmt::format("{:.6g}/{:.6g}", effective_atol(), effective_rtol()));
  for (const auto& a : allow) k.add("allow:" + a);
  k.add(timing ? "timed" : "untimed");
  k.add(fmt::format("{:.4g}/{:.4g}/{}/{:.4g}", timing_budget_s, timing_target_rel_err,
                    timing_input_sets, speedup_review_bound));
  k.add(fmt::format("{:.4g}/{:.4g}", reward.lambda, reward.nu_max));
  k.add(fmt::format("trial-limit:{:.4g}/{:.4g}/{:.4g}", trial_timeout_s, trial_timeout_floor_s,
                    trial_timeout_ref_multiple));
  if (compile_only) k.add("compile-only");  // absent otherwise: earlier hashes stay valid
  if (!legality) k.add("no-legality");
  return k.hex().substr(0, 16);
}

nlohmann::json to_json(const EvalConfig& c) {
  return {{"precision", c.precision},
          {"trials", c.trials},
          {"seed", c.seed},
          {"atol", c.atol},
          {"rtol", c.rtol},
          {"allow", std::vector<std::string>(c.allow.begin(), c.allow.end())},
          {"timing", c.timing},
          {"timing_budget_s", c.timing_budget_s},
          {"timing_target_rel_err", c.timing_target_rel_err},
          {"timing_input_sets", c.timing_input_sets},
          {"speedup_review_bound", c.speedup_review_bound},
          {"reward_lambda", c.reward.lambda},
          {"reward_nu_max", c.reward.nu_max},
          {"load_timeout_s", c.load_timeout_s},
          {"trial_timeout_s", c.trial_timeout_s},
          {"trial_timeout_floor_s", c.trial_timeout_floor_s},
          {"trial_timeout_ref_multiple", c.trial_timeout_ref_multiple},
          {"timing_timeout_s", c.timing_timeout_s},
          {"compile_timeout_s", c.compile_timeout_s},
          {"compile_only", c.compile_only},
          {"legality", c.legality}};
}

EvalConfig eval_config_from_json(const nlohmann::json& j) {
  MC_CHECK(j.is_object(), "eval config must be a JSON object");
  EvalConfig c;
  const nlohmann::json known = to_json(c);
  for (auto& [k, v] : j.items()) {
    MC_CHECK(known.contains(k), "unknown eval config field '", k, "'");
    const auto& want = known[k];
    bool same_kind = (want.is_number() && v.is_number()) || (want.is_boolean() && v.is_boolean()) ||
                     (want.is_string() && v.is_string()) || (want.is_array() && v.is_array());
    MC_CHECK(same_kind, "eval config field '", k, "' must be ", want.type_name(), ", got ",
             v.type_name());
  }
  auto num = [&](const char* k, double& dst) { if (j.contains(k)) dst = j[k].get<double>(); };
  if (j.contains("precision")) c.precision = j["precision"].get<std::string>();
  if (j.contains("trials")) c.trials = j["trials"].get<int>();
  if (j.contains("seed")) c.seed = j["seed"].get<int>();
  num("atol", c.atol);
  num("rtol", c.rtol);
  if (j.contains("allow"))
    for (const auto& a : j["allow"]) {
      MC_CHECK(a.is_string(), "eval config field 'allow' must hold strings");
      c.allow.insert(a.get<std::string>());
    }
  if (j.contains("timing")) c.timing = j["timing"].get<bool>();
  num("timing_budget_s", c.timing_budget_s);
  num("timing_target_rel_err", c.timing_target_rel_err);
  if (j.contains("timing_input_sets")) c.timing_input_sets = j["timing_input_sets"].get<int>();
  num("speedup_review_bound", c.speedup_review_bound);
  num("reward_lambda", c.reward.lambda);
  num("reward_nu_max", c.reward.nu_max);
  num("load_timeout_s", c.load_timeout_s);
  num("trial_timeout_s", c.trial_timeout_s);
  num("trial_timeout_floor_s", c.trial_timeout_floor_s);
  num("trial_timeout_ref_multiple", c.trial_timeout_ref_multiple);
  num("timing_timeout_s", c.timing_timeout_s);
  num("compile_timeout_s", c.compile_timeout_s);
  if (j.contains("compile_only")) c.compile_only = j["compile_only"].get<bool>();
  if (j.contains("legality")) c.legality = j["legality"].get<bool>();
  validate(c);
  return c;
}

void validate(const EvalConfig& c) {
  MC_CHECK(c.precision == "fp32" || c.precision == "fp16" || c.precision == "bf16",
           "precision must be fp32, fp16 or bf16, got '", c.precision, "'");
  MC_CHECK(c.trials >= 1 && c.trials <= 100, "trials must be in 1..100, got ", c.trials);
  MC_CHECK(c.timing_input_sets >= 1 && c.timing_input_sets <= 16,
           "timing input sets must be in 1..16, got ", c.timing_input_sets);
  MC_CHECK(c.timing_budget_s > 0, "timing budget must be positive");
  MC_CHECK(c.speedup_review_bound > 1, "speedup review bound must exceed 1");
  MC_CHECK(c.trial_timeout_s > 0 && c.trial_timeout_floor_s > 0 && c.trial_timeout_ref_multiple >= 1,
           "trial limits must be positive (trial_timeout_s ", c.trial_timeout_s, ", floor ",
           c.trial_timeout_floor_s, ", reference multiple ", c.trial_timeout_ref_multiple, ")");
  static const std::set<std::string> kKnown = {"cublas", "cudnn", "half_precision",
                                               "torch_compute", "try_except_fallback"};
  for (const auto& a : c.allow)
    MC_CHECK(kKnown.count(a), "unknown --allow entry '", a,
             "' (known: cublas, cudnn, half_precision, torch_compute, try_except_fallback)");
}

}  // namespace mc::eval
