// Multi-turn rollouts with execution feedback. For each prompt of the step (a task, or a
// Buffered Dynamic Retry repair task whose conversation already holds a failed answer and
// MooreEval's feedback on it):
//   turn 1   G answers from the engine (one prefill shared by the G samples), each with the
//            engine's log-probability of every sampled token; each answer goes to MooreEval the
//            moment it is sampled, so its compile runs while the others are still generated;
//   turn k   every trajectory that has not passed continues the conversation: MooreEval's
//            feedback becomes the next user turn (synth::repair_prompt), and the policy answers
//            again, up to max_turns. A trajectory stops once it passes, when its verification
//            failed (infra error: never scored), or when the conversation no longer fits.
// On a GPU shared with generation, timing is held while the engine runs (compiles and the
// correctness trials go on) and released between turns, so no timing is taken while our own
// kernels occupy the GPU.
//
// A step's rollouts are a RolloutBatch, advanced one turn at a time (generate_turn, then
// collect_turn); overlapped (RolloutOptions::pipeline, rl/pipelined_turns.h), one loop takes each
// verdict as it comes, with the next step's batch decoded beside.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/result.h"
#include "generate/engine.h"
#include "model/qwen_model.h"
#include "rl/verdict_memory.h"
#include "serve/verifier.h"
#include "synth/task_set.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace mc::rl {

struct RolloutPrompt {
  size_t task = 0;                      // index into the task set
  bool repair = false;                  // a repair task from the retry buffer
  std::vector<tok::ChatTurn> messages;  // the conversation the first answer continues
  uint64_t seed = 0;                    // sampling seed of this prompt's group
};

struct TurnRecord {
  std::vector<int32_t> context;  // the prompt tokens this answer continued
  std::vector<int32_t> tokens;   // the answer, its stop token included
  std::vector<float> logprobs;   // the rollout policy's, one per token
  std::string text, finish_reason;
  eval::EvalResult result;
  bool planted = false;          // tests: the answer was injected, not sampled
  // (trajectory, turn) of an identical answer judged earlier in the step, whose verdict this
  // one shares (it was not judged again).
  std::optional<std::pair<size_t, int>> twin_of;
  bool reused = false;           // the verdict of the same answer judged in an earlier step (VerdictMemory)
  bool passed() const { return result.verdict == eval::Verdict::kOk; }
  bool infra() const { return result.is_infra() || !result.reward; }
  double score() const { return result.reward.value_or(0.0); }  // s_k
};

struct Trajectory {
  size_t prompt = 0;  // index into the step's prompts
  int sample = 0;
  std::vector<TurnRecord> turns;
  std::string stop_reason;  // passed | max_turns | infra_error | context_full
  double reward = 0, advantage = 0;
  int64_t kv = -1;  // RolloutOptions::reuse_kv: the engine's kept cache of the last answer (not saved)
  bool infra() const { return stop_reason == "infra_error"; }
  int first_pass() const;  // 1-based turn of the first passing answer; 0: none
};

// Test hook: answers that replace the model's for (problem key, step, turn, sample); a row
// without a step applies to every step. Their log-probabilities are computed by the model
// itself, as the engine would report them.
struct PlantedAnswers {
  std::map<std::tuple<std::string, int64_t, int, int>, std::string> answers;  // step 0: any
  // JSONL rows {"problem", "step"?, "turn", "sample", "answer"}; throws mc::Error naming a bad row.
  static PlantedAnswers load(const std::string& path);
  const std::string* find(const std::string& problem, int64_t step, int turn, int sample) const;
};

struct RolloutOptions {
  int group_size = 8, max_turns = 3;
  gen::SamplingParams sampling;  // temperature, top_p, max_new_tokens (n and seed are set per prompt)
  bool hold_judges = true;       // hold the judges while generating (they share our GPU)
  bool progress = true;
  std::string tag;               // sample ids: "<tag>-p<prompt>-g<sample>-t<turn>"
  int64_t step = 0;              // 1-based, for planted answers and MooreEval's priority (this step first)
  VerdictMemory* memory = nullptr;  // verdicts of earlier steps' answers (null: judge every answer)
  // Turns 2 and on pipelined: a trajectory's next answer is asked for as soon as its verdict
  // is in, while other answers are still decoded or judged, instead of after the whole turn's
  // verdicts. Which answers share a decode step then depends on when verdicts come, so the
  // sampled text is no longer bit-reproducible on a GPU (the seeds are the same either way).
  bool pipeline = false;
  // A trajectory's next turn continues the engine's cache of its conversation (gen::
  // GenerationRequest::keep_kv): only the feedback turn, and whatever of the answer its text
  // re-tokenizes differently, is prefilled, instead of the whole conversation. The owner calls
  // the engine's release_kept() when the weights change.
  bool reuse_kv = false;
};

// Wall time, as spent by whoever passes it (a step's, the next step's first turn included).
struct RolloutStats {
  double generate_s = 0, verify_wait_s = 0;  // engine time; waiting for MooreEval after generating
  int64_t generated_tokens = 0;
  // What the wait was made of: the answers whose verdict came after it began (by the result's
  // finished_at), and their MooreEval work in seconds by stage ("compile", and the judge's own
  // stages: "take", "load", "trials", "timing", ...; the trials' parts as "trials.reference",
  // "trials.candidate", ...; the candidate process's start-up as "start.imports", ...,
  // "start.total"; and, as counts, "process.forked" / "process.started": zygote-forked or started
  // afresh). Lanes work in parallel, so these are work
  // seconds, not wall: they say which stage the tail of a step consists of.
  int64_t wait_answers = 0;
  std::map<std::string, double> wait_work_s;
  // RolloutOptions::pipeline: later answers asked for while the engine was decoding others
  // (their verdict's wait hidden behind that decoding).
  int64_t asked_while_decoding = 0;
  // RolloutOptions::pipeline with a batch beside: engine time after this step's own
  // trajectories had all stopped, spent finishing the batch beside's answers already asked for
  // (the step cannot train before they are done: training changes the weights they decode with).
  double drain_s = 0;
  // Host work on the rollout's thread, between engine steps or inside them (an answer lands in
  // the engine's completion callback): handing answers to MooreEval (extraction, static checks,
  // the compile's submission) and making later turns' prompts (the conversation tokenized again).
  double submit_s = 0, ask_s = 0;
};

// One step's prompts and trajectories, and how far they have got: `turns` turns generated,
// the last one's verdicts collected or not. Verifier ids are id_base + trajectory index.
struct RolloutBatch {
  std::vector<RolloutPrompt> prompts;
  RolloutOptions opts;
  std::vector<Trajectory> traj;
  std::vector<std::vector<tok::ChatTurn>> convo;  // per trajectory: the conversation so far
  // (problem, answer text) -> (trajectory, turn) of the first such answer judged in the batch.
  std::map<std::pair<std::string, std::string>, std::pair<size_t, int>> judged;
  int turns = 0;  // the most turns any trajectory has answered
  bool collected = true;
  // Trajectories whose last answer awaits its verdict: the last turn generated.
  std::vector<size_t> answering;
  std::vector<size_t> twins;  // ... of which share an earlier answer's verdict
  size_t id_base = 0;
  // Checkpoints: a batch whose last turn is collected (tasks by problem key). `opts` is not
  // saved: the owner sets it (the trainer derives it from the step).
  nlohmann::json to_json(const std::vector<synth::Task>& tasks) const;
  static RolloutBatch from_json(const nlohmann::json& j, const std::map<std::string, size_t>& task_by_key);
};

class PipelinedTurns;

class RolloutRunner {
 public:
  // All references must outlive the runner. `planted` may be null. Conversations are rendered
  // in `chat`'s format (the model's default system turn first).
  RolloutRunner(gen::GenerationEngine& engine, const model::QwenModel& model, const tok::BpeTokenizer& tok,
                serve::Verifier& verifier, const PlantedAnswers* planted, tok::ChatFormat chat = {});
  // Trajectories prompt by prompt, G each, in order: start, then finish.
  std::vector<Trajectory> run(const std::vector<RolloutPrompt>& prompts, const std::vector<synth::Task>& tasks,
                              const RolloutOptions& o, RolloutStats* stats);
  // A batch with its first turn generated and submitted (with o.pipeline: nothing generated yet;
  // finish() decodes the first turn in its loop, so that a failed answer's second turn runs
  // beside the first turn's longest answers). `id_base` keeps its verifier ids apart from any
  // other batch's still outstanding.
  RolloutBatch start(const std::vector<RolloutPrompt>& prompts, const std::vector<synth::Task>& tasks,
                     const RolloutOptions& o, size_t id_base, RolloutStats* stats);
  // Collects and generates turn after turn until every trajectory has stopped. `beside` (with
  // b.opts.pipeline: the next step's batch, fresh from start()) has its first turn decoded in the
  // same loop, beside this batch's turns, each answer going to MooreEval as it lands; finish()
  // returns once this batch has stopped and `beside`'s answers are sampled, which leaves
  // `beside` with turn 1 submitted and its verdicts not collected.
  void finish(RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats, RolloutBatch* beside = nullptr);
  // One step of each: the next turn for every trajectory still going (false: none), and the
  // wait for its verdicts.
  // generate_turn needs every running trajectory at the same turn (mc::Error otherwise);
  // collect_turn waits for every answer of `answering`.
  bool generate_turn(RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats);
  void collect_turn(RolloutBatch& b, RolloutStats* stats);
  // The conversation in the model's chat format with the generation prompt, tokenized.
  std::vector<int32_t> encode_conversation(const std::vector<tok::ChatTurn>& messages) const;

 private:
  friend class PipelinedTurns;  // finish() with RolloutOptions::pipeline (pipelined_turns.h)
  // Prompt p's first turn: G samples of one request.
  gen::GenerationRequest first_request(const RolloutBatch& b, size_t p, const std::vector<synth::Task>& tasks) const;
  // Trajectory i's answer at `turn`: its conversation gets the last answer and MooreEval's
  // feedback. False (stop_reason context_full) when that answer would not fit.
  bool next_request(RolloutBatch& b, size_t i, int turn, gen::GenerationRequest* r, RolloutStats* stats) const;
  // How the answer just recorded on trajectory i gets its verdict.
  enum class Judged { kSubmitted, kTwin, kReused };
  Judged submit_answer(RolloutBatch& b, size_t i, int turn, const std::vector<synth::Task>& tasks, RolloutStats* stats);
  // Gives the engine back trajectory t's kept cache (reuse_kv), once it will not answer again.
  void let_go(Trajectory& t) const;
  // A planted answer (tests) in place of the sampled one, with the policy's log-probabilities.
  void plant(TurnRecord& rec, const std::string& text, float temperature) const;

  gen::GenerationEngine& engine_;
  const model::QwenModel& model_;
  const tok::BpeTokenizer& tok_;
  serve::Verifier& verifier_;
  const PlantedAnswers* planted_;
  tok::ChatFormat chat_;
  int32_t im_end_ = -1;
};

}  // namespace mc::rl
