// `musacoder synth` end to end: generate -> de-duplicate -> decontaminate -> write problems ->
// validity probe (MooreEval's reference execution) -> teacher solutions -> MooreEval
// verification -> dataset rows and a closing report.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/eval_config.h"
#include "eval/evaluator.h"
#include "synth/decontaminate.h"
#include "synth/generator.h"

namespace mc::synth {

// How a teacher answers: the problem file and the graph it came from in, verified solutions out.
struct TeacherAnswer {
  std::string format;    // "native" | "kernelbench"
  std::string solution;  // source (builtin) or the model's whole answer (LLM)
  nlohmann::json trace = nlohmann::json::array();  // LLM: the turns (prompt, answer, feedback)
};

struct SynthOptions {
  std::vector<int> levels = {1, 2, 3};
  int count = 100;                 // problems to keep, spread evenly over the levels
  uint64_t seed = 0;
  std::string out_dir;
  // Folders to keep clear of (none: no decontamination): a benchmark checkout, and in a recipe
  // the other synthesized sets (RL's problems are kept clear of both SFT's and evaluation's).
  std::vector<std::string> decontaminate_dirs;
  DecontaminationOptions decontamination;
  std::string teacher = "builtin";  // builtin | none | an OpenAI-compatible base URL
  std::string teacher_model;        // LLM teacher: model name sent to the endpoint
  int teacher_samples = 4;          // LLM teacher: answers per problem
  int teacher_turns = 2;            // LLM teacher: repair turns after a failed answer
  int teacher_concurrency = 8;
  std::string teacher_api_key;      // LLM teacher: bearer token ("" : none)
  GeneratorOptions generator;
  std::string formats = "both";     // teacher formats: native | kernelbench | both
  // The prompt of a kernelbench-format task, in the dataset and problems.jsonl (what RFT and RL
  // ask): musacoder (task_prompt: the program with its input and state tables) or kernelbench
  // (KernelBench's own one-shot prompt, what `bench-model --prompt kernelbench` asks).
  std::string prompt = "musacoder";
  std::string verify = "gpu";       // gpu: full MooreEval | compile: compile only | none
  bool probe = true;                // validity probe (reference execution)
  double min_eager_us = 2, max_eager_us = 200000;  // eager runtime band (gpu)
  int max_per_structure = 3;        // problems sharing one op structure (different shapes)
  double oversample = 1.6;          // candidates generated per problem to keep
  std::string order = "curriculum"; // dataset order: curriculum (by difficulty) | generation
  // The target of the data. musa: every solution is verified as CUDA (MooreEval has no MUSA
  // judge here), then ported with `musacoder port`'s rules; prompts ask for MUSA, and each row
  // records the port's changes and warnings (builtin teacher only).
  std::string backend = "cuda";
  eval::EvalConfig eval_config;
  eval::EvaluatorOptions evaluator;
  bool progress = true;
};

struct SynthReport {
  nlohmann::json json;   // everything below, for programs (written to report.json)
  std::string table;     // for people
};

SynthReport run_synthesis(const SynthOptions& opts);

// Why a problem's validity probe (Evaluator::probe) disqualifies it, "" when it is valid.
// `stage` becomes "validity", or "infra" when the probe itself failed.
std::string invalid_reason(const nlohmann::json& probe, const SynthOptions& opts, std::string* stage);

}  // namespace mc::synth
