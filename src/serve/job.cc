#include "serve/job.h"

#include <regex>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"

namespace mc::serve {

std::string make_job_id(const eval::Problem& problem, const std::string& answer,
                        const eval::EvalConfig& cfg, const std::string& gpu_kind) {
  KeyBuilder k;
  k.add("job-v1").add(problem.source).add(answer).add(cfg.config_hash()).add(gpu_kind);
  return k.hex().substr(0, 32);
}

nlohmann::json job_to_json(const Job& job) {
  return {{"id", job.id},
          {"problem",
           {{"key", job.problem->key},
            {"stem", job.problem->stem},
            {"level", job.problem->level},
            {"source", job.problem->source}}},
          {"answer", job.answer},
          {"sample_id", job.sample_id},
          {"config", eval::to_json(job.config)},
          {"gpu_kind", job.gpu_kind},
          {"submitted_at", job.submitted_at}};
}

Job job_from_json(const nlohmann::json& j, const std::string& cache_dir) {
  MC_CHECK(j.is_object(), "job must be a JSON object");
  auto str = [&](const nlohmann::json& o, const char* k) {
    MC_CHECK(o.contains(k) && o[k].is_string(), "job field '", k, "' must be a string");
    return o[k].get<std::string>();
  };
  Job job;
  job.id = str(j, "id");
  MC_CHECK(j.contains("problem") && j["problem"].is_object(), "job field 'problem' must be an object");
  const auto& p = j["problem"];
  job.problem = materialize_problem(str(p, "source"), str(p, "stem"), p.value("level", 0),
                                    p.value("key", std::string()), cache_dir);
  job.answer = str(j, "answer");
  job.sample_id = j.value("sample_id", std::string("0"));
  job.config = eval::eval_config_from_json(j.value("config", nlohmann::json::object()));
  job.gpu_kind = j.value("gpu_kind", std::string());
  job.submitted_at = j.value("submitted_at", 0.0);
  std::string want = make_job_id(*job.problem, job.answer, job.config, job.gpu_kind);
  MC_CHECK(want == job.id, "job id ", job.id, " does not match its contents (", want, ")");
  return job;
}

eval::ProblemPtr materialize_problem(const std::string& source, const std::string& stem,
                                     int level, const std::string& key,
                                     const std::string& cache_dir) {
  static const std::regex stem_re(R"(^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,119}$)");
  MC_CHECK(std::regex_match(stem, stem_re), "problem name '", stem.substr(0, 60),
           "' is not a plain file name (letters, digits, _ . -)");
  MC_CHECK(level >= 0 && level <= 9, "problem level must be in 0..9, got ", level);
  // Content-addressed, so concurrent writers put the same bytes in the same place.
  fs::path dir = fs::path(cache_dir) / "problems" / sha256_hex(source).substr(0, 24);
  fs::path file = dir / (stem + ".py");
  if (!fs::exists(file)) {
    fs::create_directories(dir);
    write_file_atomic(file, source);
  }
  auto prob = std::const_pointer_cast<eval::Problem>(eval::load_problem(file.string(), level));
  if (!key.empty()) prob->key = key;
  return prob;
}

eval::Candidate to_candidate(const Job& job) {
  eval::Candidate c;
  c.problem = job.problem;
  c.problem_ref = job.problem->key;
  c.sample_id = job.sample_id;
  c.answer = job.answer;
  c.origin = "job " + job.id;
  return c;
}

nlohmann::json result_row(const Job& job, const eval::EvalResult& r) {
  nlohmann::json row = eval::to_json(r);
  row["job_id"] = job.id;
  return row;
}

nlohmann::json infra_result_row(const std::string& job_id, const std::string& why) {
  eval::EvalResult r;
  r.verdict = eval::Verdict::kInfraError;
  r.stage = eval::Stage::kDone;
  r.infra_error = why;
  nlohmann::json row = eval::to_json(r);
  row["job_id"] = job_id;
  return row;
}

}  // namespace mc::serve
