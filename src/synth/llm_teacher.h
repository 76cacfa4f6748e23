// The LLM teacher: any OpenAI-compatible endpoint answers each problem's task prompt; every
// answer is verified by MooreEval (rejection sampling); a failed answer gets repair turns with
// MooreEval's feedback, and the whole exchange (failed answer, feedback, repaired answer) is
// kept as a multi-turn repair trace.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "llm/openai_client.h"
#include "synth/graph.h"

namespace mc::synth {

struct LlmTeacherOptions {
  llm::OpenAIClientOptions client;
  std::string model;
  std::string format = "native";
  int samples = 4;       // first-turn answers per problem
  int repair_turns = 2;  // per failed answer, while no answer of the problem passed
  double temperature = 0.8;
  int max_tokens = 8192;
};

struct LlmTeacherResult {
  // One entry per verified answer: {"solution", "turns", "messages", "result"}.
  std::vector<nlohmann::json> verified;
  // Every answer's verdict, for the report: {"turn", "verdict"}.
  std::vector<nlohmann::json> attempts;
  std::string error;  // the endpoint failed (infra: the problem is not counted as unsolved)
};

// Verifies candidates through `ev` (blocking); results in order. `on_each(i)` is called as
// candidate i finishes (from a pipeline thread).
std::vector<eval::EvalResult> verify_all(eval::Evaluator& ev, std::vector<eval::Candidate> cands,
                                         const std::function<void(size_t)>& on_each = {});

// `prompt`: the task's first user turn, as the policy will be asked it (the dataset's rows keep it).
LlmTeacherResult llm_teach(const LlmTeacherOptions& opts, llm::OpenAIClient& client, eval::Evaluator& ev,
                           const std::string& prompt, const eval::ProblemPtr& problem);

}  // namespace mc::synth
