// A verification job: one candidate answer for one problem under one eval config. Jobs travel
// as JSON (HTTP bodies, Redis stream entries) and carry the problem's source, so a worker on
// another machine needs no copy of the problem folder.
//
// The job id is a digest of (problem source, answer, eval config, GPU kind): a resubmitted
// candidate maps to the same id and gets the stored result instead of a second run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/clock.h"  // unix_now, for the users of jobs
#include "eval/candidates.h"
#include "eval/eval_config.h"
#include "eval/problem.h"
#include "eval/result.h"

namespace mc::serve {

struct Job {
  std::string id;
  eval::ProblemPtr problem;
  std::string answer;
  std::string sample_id = "0";
  eval::EvalConfig config;
  std::string gpu_kind;  // "cpu" or the GPU's name; part of the id: timings differ per GPU
  double submitted_at = 0;  // unix seconds
};

std::string make_job_id(const eval::Problem& problem, const std::string& answer,
                        const eval::EvalConfig& cfg, const std::string& gpu_kind);

nlohmann::json job_to_json(const Job& job);
// Rebuilds a job (the problem file is written under `cache_dir`/problems/ so the judge can
// import it). Throws mc::Error naming the bad field.
Job job_from_json(const nlohmann::json& j, const std::string& cache_dir);

eval::Candidate to_candidate(const Job& job);

// A problem given as source text: written (content-addressed) under `cache_dir`/problems/ so
// the judge can import it, then checked like a problem file. Throws mc::Error naming the fault.
eval::ProblemPtr materialize_problem(const std::string& source, const std::string& stem,
                                     int level, const std::string& key,
                                     const std::string& cache_dir);

// The result row of a job, with the job id added.
nlohmann::json result_row(const Job& job, const eval::EvalResult& r);

// A final result for a job that never got a verdict of its own (delivery limit, bad payload).
nlohmann::json infra_result_row(const std::string& job_id, const std::string& why);

}  // namespace mc::serve
