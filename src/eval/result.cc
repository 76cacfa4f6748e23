#include "eval/result.h"

#include "common/check.h"

namespace mc::eval {
namespace {

nlohmann::json timing_json(const std::optional<TimingStats>& t) {
  if (!t) return nullptr;
  return {{"median_us", t->median_us}, {"trimmed_mean_us", t->trimmed_mean_us},
          {"mean_us", t->mean_us}, {"std_us", t->std_us},
          {"p10_us", t->p10_us},       {"p90_us", t->p90_us},   {"n", t->n}};
}

}  // namespace

std::optional<TimingStats> timing_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  TimingStats t;
  t.median_us = j.value("median_us", 0.0);
  t.mean_us = j.value("mean_us", 0.0);
  t.trimmed_mean_us = j.value("trimmed_mean_us", t.median_us);
  t.std_us = j.value("std_us", 0.0);
  t.p10_us = j.value("p10_us", 0.0);
  t.p90_us = j.value("p90_us", 0.0);
  t.n = j.value("n", 0);
  return t;
}

bool EvalResult::legal() const {
  return verdict != Verdict::kIllegal && verdict != Verdict::kStaticViolation &&
         verdict != Verdict::kTimingError;
}

nlohmann::json to_json(const EvalResult& r) {
  nlohmann::json v = nlohmann::json::array();
  for (const auto& x : r.violations)
    v.push_back({{"rule", x.rule}, {"line", x.line}, {"message", x.message}, {"snippet", x.snippet}});
  nlohmann::json j = {
      {"format_version", kResultFormatVersion},
      {"problem", r.problem_key},
      {"problem_id", r.problem_id},
      {"problem_name", r.problem_name},
      {"level", r.level},
      {"sample_id", r.sample_id},
      {"solution_format", r.solution_format},
      {"config_hash", r.config_hash},
      {"status", r.is_infra() ? "infra_error" : r.verdict == Verdict::kCompiled ? "not_scored" : "scored"},
      {"verdict", to_string(r.verdict)},
      {"stage", to_string(r.stage)},
      {"rule", r.rule},
      {"reason", r.reason},
      {"infra_error", r.infra_error},
      {"violations", v},
      {"compiled", r.compiled},
      {"compile_cached", r.compile_cached},
      {"compile_s", r.compile_s},
      {"compile_path", r.compile_path},
      {"compile_log", r.compile_log},
      {"correct", r.correct()},
      {"legal", r.legal()},
      {"trials_passed", r.trials_passed},
      {"trials_total", r.trials_total},
      {"mismatch", r.mismatch},
      {"runtime_error", r.runtime_error},
      {"degenerate_reference", r.degenerate_reference},
      {"candidate_time", timing_json(r.candidate_time)},
      {"reference_time", timing_json(r.reference_time)},
      {"speedup", r.speedup ? nlohmann::json(*r.speedup) : nlohmann::json(nullptr)},
      {"speedup_flagged", r.speedup_flagged},
      {"reward", r.reward ? nlohmann::json(*r.reward) : nlohmann::json(nullptr)},
      {"feedback", r.feedback},
      {"gpu", r.gpu},
      {"torch_version", r.torch_version},
      {"wall_s", r.wall_s},
      {"finished_at", r.finished_at},
      {"exec_s", r.exec_s},
      {"exec_stages", r.exec_stages},
      {"judge_details", r.judge_details},
  };
  return j;
}

EvalResult result_from_json(const nlohmann::json& j) {
  MC_CHECK(j.is_object(), "result row is not a JSON object");
  int version = j.value("format_version", 0);
  MC_CHECK(version == kResultFormatVersion, "result row has format_version ", version,
           ", this build reads ", kResultFormatVersion);
  EvalResult r;
  try {
    r.problem_key = j.at("problem");
    r.problem_id = j.value("problem_id", -1);
    r.problem_name = j.value("problem_name", "");
    r.level = j.value("level", 0);
    r.sample_id = j.value("sample_id", "");
    r.solution_format = j.value("solution_format", "");
    r.config_hash = j.value("config_hash", "");
    auto v = verdict_from_string(j.at("verdict"));
    MC_CHECK(v, "unknown verdict '", j.at("verdict").get<std::string>(), "'");
    r.verdict = *v;
    r.stage = stage_from_string(j.value("stage", "done")).value_or(Stage::kDone);
    r.rule = j.value("rule", "");
    r.reason = j.value("reason", "");
    r.infra_error = j.value("infra_error", "");
    for (const auto& x : j.value("violations", nlohmann::json::array()))
      r.violations.push_back({x.at("rule"), x.value("message", ""), x.value("line", 0),
                              x.value("snippet", "")});
    r.compiled = j.value("compiled", false);
    r.compile_cached = j.value("compile_cached", false);
    r.compile_s = j.value("compile_s", 0.0);
    r.compile_path = j.value("compile_path", "");
    r.compile_log = j.value("compile_log", "");
    r.trials_passed = j.value("trials_passed", 0);
    r.trials_total = j.value("trials_total", 0);
    r.mismatch = j.value("mismatch", nlohmann::json());
    r.runtime_error = j.value("runtime_error", "");
    r.degenerate_reference = j.value("degenerate_reference", false);
    r.candidate_time = timing_from_json(j.value("candidate_time", nlohmann::json()));
    r.reference_time = timing_from_json(j.value("reference_time", nlohmann::json()));
    if (j.contains("speedup") && !j["speedup"].is_null()) r.speedup = j["speedup"].get<double>();
    r.speedup_flagged = j.value("speedup_flagged", false);
    if (j.contains("reward") && !j["reward"].is_null()) r.reward = j["reward"].get<double>();
    r.feedback = j.value("feedback", "");
    r.gpu = j.value("gpu", "");
    r.torch_version = j.value("torch_version", "");
    r.wall_s = j.value("wall_s", 0.0);
    r.finished_at = j.value("finished_at", 0.0);
    r.exec_s = j.value("exec_s", 0.0);
    r.exec_stages = j.value("exec_stages", nlohmann::json());
    r.judge_details = j.value("judge_details", nlohmann::json());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("malformed result row: ", e.what()));
  }
  return r;
}

}  // namespace mc::eval
