#include "rl/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/jsonl.h"
#include "common/low_prob.h"
#include "common/progress.h"
#include "generate/counter_rng.h"
#include "generate/engine.h"
#include "model/device.h"
#include "model/qwen_model.h"
#include "model/safetensors.h"
#include "rl/advantages.h"
#include "rl/mirror_pop.h"
#include "rl/rollout.h"
#include "serve/verifier.h"
#include "synth/prompt.h"
#include "synth/task_set.h"
#include "tokenizer/bpe_tokenizer.h"
#include "train/batching.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/distributed.h"
#include "train/loss.h"
#include "train/metrics.h"
#include "train/profiler.h"
#include "train/token_loss.h"

namespace mc::rl {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void check_options(const RlOptions& o) {
  MC_CHECK(fs::is_regular_file(fs::path(o.model_dir) / "config.json"), "--model ", o.model_dir,
           " is not a model directory (no config.json)");
  MC_CHECK(fs::is_regular_file(fs::path(o.model_dir) / "tokenizer.json"), "--model ", o.model_dir,
           " has no tokenizer.json (rollouts are ChatML conversations rendered by the model's tokenizer)");
  MC_CHECK(o.group_size >= 2, "--group-size ", o.group_size, ": GRPO compares the answers of a prompt with each other, so it needs at least 2");
  MC_CHECK(o.prompts_per_step >= 1, "--prompts-per-step must be at least 1");
  MC_CHECK(o.max_turns >= 1, "--max-turns must be at least 1");
  MC_CHECK(o.temperature > 0, "--temperature ", o.temperature, ": RL needs sampling (> 0); the policy ratio is taken at this temperature");
  MC_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p must be in (0, 1]");
  MC_CHECK(o.max_new_tokens >= 1 && o.max_new_tokens < o.max_seq_len, "--max-new-tokens ", o.max_new_tokens,
           " must be in [1, --max-seq-len ", o.max_seq_len, ")");
  MC_CHECK(o.micro_batch_tokens >= o.max_seq_len, "--micro-batch-tokens ", o.micro_batch_tokens, " is below --max-seq-len ",
           o.max_seq_len, ": a turn-1 sequence must fit one micro-batch");
  MC_CHECK(o.max_steps > 0 || o.epochs > 0, "give --max-steps or --epochs");
  MC_CHECK(o.max_problems >= 0, "--max-problems must be >= 0 (0: all)");
  MC_CHECK(o.anchor_every >= 1, "--anchor-every must be at least 1, got ", o.anchor_every);
  for (const auto& f : o.anchor_data) MC_CHECK(fs::is_regular_file(f), "--anchor-data: no file ", f);
  MC_CHECK(o.verdict_memory >= 0, "--verdict-memory must be >= 0 (0: judge every answer)");
  MC_CHECK(o.adv_std_floor >= 0, "--adv-std-floor must be >= 0 (0: plain group normalization), got ", o.adv_std_floor);
  MC_CHECK(o.loop_window == 0 || o.loop_window >= 16, "--stop-loops must be 0 (off) or at least 16 tokens, got ", o.loop_window);
  MC_CHECK(o.order == "curriculum" || o.order == "shuffle", "--order: '", o.order, "' is not curriculum or shuffle");
  MC_CHECK(o.mirror_delta >= 0, "--mirror-delta must be >= 0");
  MC_CHECK(o.prime_echo.alpha >= 0 && o.prime_echo.alpha <= 1, "--alpha must be in [0, 1]");
  MC_CHECK(o.save_every >= 0 && o.keep_last >= 1 && o.samples_every >= 0, "--save-every and --samples-every must be >= 0, --keep >= 1");
  MC_CHECK(!(o.async && o.off_policy > 0), "--async and --off-policy ", o.off_policy,
           " contradict each other: --async already trains on rollouts one step old (use one of them)");
  MC_CHECK(!o.repairs_ahead || (o.async && o.pipeline_turns),
           "--repairs-ahead asks for the next step's later turns beside this step's: it needs --async and --pipeline-turns");
  MC_CHECK(!o.carry_repairs || o.pipeline_turns,
           "--carry-repairs finishes a step's repair turns in the next steps' pipelined loops: it needs --pipeline-turns");
  MC_CHECK(!(o.carry_repairs && o.repairs_ahead), "--carry-repairs and --repairs-ahead contradict each other: the next "
           "step's repairs are asked for in this step, or this step's in the next (use one of them)");
  MC_CHECK(o.keep_solved.empty() || o.keep_varied.empty(),
           "--keep-solved and --keep-varied contradict each other: give one probe filter");
  MC_CHECK(o.verifier_url.empty() || o.evaluator.device == "cuda",
           "--verifier URL and --verify-device cpu contradict each other: the service's judges run where the service runs");
}

// Every rank's string, in rank order (c10d all-gather of the padded bytes).
std::vector<std::string> all_gather_strings(train::Distributed& dist, const std::string& s, c10::Device device) {
  if (dist.world() == 1) return {s};
  auto len = at::tensor({static_cast<int64_t>(s.size())}, at::kLong).to(device);
  dist.all_reduce_max(len);
  const int64_t n = std::max<int64_t>(1, len.item<int64_t>()) + 8;
  auto mine = at::zeros({n}, at::kByte);
  auto* p = mine.data_ptr<uint8_t>();
  const uint64_t size = s.size();
  std::memcpy(p, &size, 8);
  std::memcpy(p + 8, s.data(), s.size());
  auto in = mine.to(device), out = at::empty({n * dist.world()}, in.options());
  if (auto w = dist.all_gather(out, in)) w->wait();
  auto all = out.cpu();
  std::vector<std::string> r;
  for (int k = 0; k < dist.world(); ++k) {
    const uint8_t* q = all.data_ptr<uint8_t>() + k * n;
    uint64_t m = 0;
    std::memcpy(&m, q, 8);
    r.emplace_back(reinterpret_cast<const char*>(q + 8), m);
  }
  return r;
}

// Numbers add, objects merge key by key, arrays concatenate.
void merge_into(json& a, const json& b) {
  if (b.is_number()) {
    a = a.is_number() ? json(a.get<double>() + b.get<double>()) : b;
  } else if (b.is_object()) {
    if (!a.is_object()) a = json::object();
    for (auto& [k, v] : b.items()) merge_into(a[k], v);
  } else if (b.is_array()) {
    if (!a.is_array()) a = json::array();
    for (const auto& v : b) a.push_back(v);
  }
}

double num(const json& j, const std::string& k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0; }
double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

// The tasks a probe of the starting model (bench-model's results.jsonl of it on the same
// problems) shows something to learn from, by its turn-1 answers (infra errors count as none):
// - solved (--keep-solved): at least one answer passed;
// - varied (--keep-varied): the answers got different rewards, so a group of them has a spread
//   and GRPO an advantage. That is every problem solved some of the time, every partly correct
//   answer beside a wrong one, and none solved every time alike.
std::vector<synth::Task> keep_probed(std::vector<synth::Task> tasks, const std::string& path, bool varied, bool report) {
  const char* opt = varied ? "--keep-varied" : "--keep-solved";
  MC_CHECK(fs::is_regular_file(path), opt, ": no file ", path, " (bench-model's results.jsonl of the starting model)");
  struct Probe {
    int ok = 0, judged = 0;
    double lo = 1e300, hi = -1e300;
  };
  std::map<std::string, Probe> turn1;
  for_each_jsonl(path, [&](const json& r, size_t line) {
    MC_CHECK(r.contains("problem") && r["problem"].is_string() && r.contains("turn") &&
                 r["turn"].is_number_integer() && r.contains("result") && r["result"].is_object(),
             opt, " ", path, ":", line, ": not a row of bench-model's results.jsonl (problem, turn, result)");
    if (r["turn"].get<int>() != 1 || !r["result"].value("infra_error", std::string()).empty()) return;
    auto& c = turn1[r["problem"].get<std::string>()];
    c.ok += r["result"].value("verdict", std::string()) == "ok";
    c.judged += 1;
    if (varied) {
      MC_CHECK(r["result"].contains("reward") && r["result"]["reward"].is_number(), opt, " ", path, ":", line,
               ": no reward in the result (a judged answer's MooreEval reward)");
      double x = r["result"]["reward"].get<double>();
      c.lo = std::min(c.lo, x), c.hi = std::max(c.hi, x);
    }
  });
  const size_t n = tasks.size();
  size_t unjudged = 0, dropped = 0, solved = 0, always = 0;
  std::vector<synth::Task> kept;
  for (auto& t : tasks) {
    auto it = turn1.find(t.problem->key);
    if (it == turn1.end()) {
      ++unjudged;
      continue;
    }
    const Probe& c = it->second;
    bool keep = varied ? c.hi - c.lo > 1e-9 : c.ok > 0;
    if (!keep) {
      ++dropped;
      continue;
    }
    solved += c.ok > 0;
    always += c.ok == c.judged;
    kept.push_back(std::move(t));
  }
  MC_CHECK(unjudged < n, opt, " ", path, ": names none of the ", n, " problems (results of another problem set?)");
  MC_CHECK(!kept.empty(), opt, " ", path, ": the starting model ",
           varied ? "got the same reward for every turn-1 answer to each of the " : "solved none of the ", n - unjudged,
           " judged problems: nothing for RL to learn from");
  if (report) {
    if (varied)
      fmt::print(stderr, "rl: --keep-varied: {} of {} problems got different rewards at turn 1 ({} of them solved at least once); "
                 "{} alike, {} not in {}\n", kept.size(), n, solved, dropped, unjudged, path);
    else
      fmt::print(stderr, "rl: --keep-solved: {} of {} problems solved at turn 1 at least once ({} every time); {} never, {} not in {}\n",
                 kept.size(), n, always, dropped, unjudged, path);
  }
  return kept;
}

// Curriculum order: level, then synth's difficulty.
bool curriculum_before(const synth::Task& a, const synth::Task& b) {
  return std::tie(a.level, a.difficulty) < std::tie(b.level, b.difficulty);
}

// The order tasks are drawn in, for one epoch.
std::vector<size_t> epoch_order(const std::vector<synth::Task>& tasks, const std::string& order, uint64_t seed, int64_t epoch) {
  std::vector<size_t> idx(tasks.size());
  std::iota(idx.begin(), idx.end(), 0);
  if (order == "curriculum") {
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return curriculum_before(tasks[a], tasks[b]); });
  } else {
    std::mt19937_64 rng(gen::step_key(seed, static_cast<uint64_t>(epoch)));
    std::shuffle(idx.begin(), idx.end(), rng);
  }
  return idx;
}

// What the update needs of a turn-1 answer: its tokens after the prompt's, the rollout
// policy's log-probs, the advantage. Saved in checkpoints while it waits (--off-policy 1).
struct TrainSeq {
  std::vector<int32_t> tokens;  // context + answer
  size_t n_context = 0;
  std::vector<float> old_logp;  // one per answer token
  double advantage = 0;
};

json to_json(const std::vector<TrainSeq>& v) {
  json a = json::array();
  for (const auto& q : v)
    a.push_back({{"tokens", q.tokens}, {"n_context", q.n_context}, {"old_logp", q.old_logp}, {"advantage", q.advantage}});
  return a;
}

std::vector<TrainSeq> train_seqs_from_json(const json& a) {
  std::vector<TrainSeq> v;
  for (const auto& j : a)
    v.push_back({j.at("tokens").get<std::vector<int32_t>>(), j.at("n_context").get<size_t>(),
                 j.at("old_logp").get<std::vector<float>>(), j.at("advantage").get<double>()});
  return v;
}

// One step's prompts over all ranks, this rank's share, and its rollouts.
struct StepRollouts {
  size_t prompts = 0;                // over all ranks
  std::vector<size_t> global_index;  // this rank's prompts' indices among them
  size_t repairs_drawn = 0, repairs_skipped = 0;
  RolloutBatch batch;                // this rank's prompts (batch.prompts) and trajectories
};

// The next step's rollouts, the answers made so far with their verdicts, saved with a checkpoint (--async).
json to_json(const StepRollouts& s, const std::vector<synth::Task>& tasks) {
  return {{"prompts", s.prompts}, {"global_index", s.global_index}, {"repairs_drawn", s.repairs_drawn},
          {"repairs_skipped", s.repairs_skipped}, {"batch", s.batch.to_json(tasks)}};
}

StepRollouts step_rollouts_from_json(const json& j, const std::map<std::string, size_t>& task_by_key) {
  StepRollouts s;
  s.prompts = j.at("prompts").get<size_t>();
  s.global_index = j.at("global_index").get<std::vector<size_t>>();
  s.repairs_drawn = j.at("repairs_drawn").get<size_t>();
  s.repairs_skipped = j.at("repairs_skipped").get<size_t>();
  s.batch = RolloutBatch::from_json(j.at("batch"), task_by_key);
  return s;
}

// --carry-repairs: an earlier step's rollouts with groups not trained yet (`groups`, prompt
// indices), finished by the following steps: a group whose trajectories took k turns at most is
// trained k - 1 steps after its own. Saved with a checkpoint, its verdicts so far in.
struct Carried {
  StepRollouts from;
  int64_t step = 0;  // 0-based, the step that drew it
  std::vector<size_t> groups;
};

json to_json(const std::vector<Carried>& cs, const std::vector<synth::Task>& tasks) {
  json a = json::array();
  for (const auto& c : cs) a.push_back({{"step", c.step}, {"groups", c.groups}, {"rollouts", to_json(c.from, tasks)}});
  return a;
}

std::vector<Carried> carried_from_json(const json& a, const std::map<std::string, size_t>& task_by_key) {
  std::vector<Carried> cs;
  for (const auto& j : a)
    cs.push_back({step_rollouts_from_json(j.at("rollouts"), task_by_key), j.at("step").get<int64_t>(),
                  j.at("groups").get<std::vector<size_t>>()});
  return cs;
}

// Groups `groups` of `from` (G trajectories each) appended to `into`, their prompts re-indexed;
// a group's order among the step's (its retry-buffer events are applied in that order) is
// order_base + its index among its own step's prompts.
void take_groups(const StepRollouts& from, const std::vector<size_t>& groups, int G, size_t order_base, StepRollouts* into) {
  for (size_t p : groups) {
    const size_t q = into->batch.prompts.size();
    into->batch.prompts.push_back(from.batch.prompts[p]);
    into->global_index.push_back(order_base + from.global_index[p]);
    for (int g = 0; g < G; ++g) {
      Trajectory t = from.batch.traj[p * static_cast<size_t>(G) + static_cast<size_t>(g)];
      t.prompt = q;
      into->batch.traj.push_back(std::move(t));
    }
  }
}

json trajectory_json(const Trajectory& t, const RolloutPrompt& p, const synth::Task& task) {
  json turns = json::array();
  for (const auto& r : t.turns)
    turns.push_back({{"answer", r.text}, {"finish_reason", r.finish_reason}, {"tokens", r.tokens.size()},
                     {"verdict", eval::to_string(r.result.verdict)}, {"reason", r.result.reason}, {"rule", r.result.rule},
                     {"speedup", r.result.speedup ? json(*r.result.speedup) : json()},
                     {"score", r.result.reward ? json(*r.result.reward) : json()}, {"feedback", r.result.feedback},
                     {"planted", r.planted}, {"reused", r.reused}});
  json messages = json::array();
  for (const auto& m : p.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  return {{"problem", task.problem->key}, {"repair", p.repair}, {"sample", t.sample}, {"reward", t.reward},
          {"advantage", t.advantage}, {"first_pass", t.first_pass()}, {"stop", t.stop_reason}, {"prompt", messages},
          {"turns", turns}};
}

}  // namespace

RlResult run_rl(const RlOptions& o) {
  check_options(o);
  train::DistEnv env = train::dist_env_from_environment();
  c10::Device device = model::parse_device(o.device, env.local_rank);
  const bool main = env.rank == 0;
  {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    MC_CHECK(!ec, "cannot create the output folder ", o.out_dir, ": ", ec.message());
  }
  std::optional<train::CheckpointInfo> ckpt;
  if (o.resume) {
    ckpt = train::latest_checkpoint(o.out_dir);
    MC_CHECK(ckpt, "--resume: no checkpoint under ", (fs::path(o.out_dir) / "checkpoints").string(),
             " (a run saves with --save-every N and at its end)");
  }

  // The tasks, and the verifier, before anything heavy: their errors are the likely ones.
  auto tok = tok::BpeTokenizer::from_file((fs::path(o.model_dir) / "tokenizer.json").string());
  const auto chat = tok::read_chat_format(o.model_dir);
  auto all_tasks = synth::load_tasks(o.problems, o.format, o.level, o.backend);
  std::vector<synth::Task> tasks;
  size_t too_long = 0;
  for (auto& t : all_tasks) {
    auto n = tok.encode(tok::render_chat(chat, {{"user", t.prompt}}, true)).size();
    if (static_cast<int64_t>(n) + o.max_new_tokens > o.max_seq_len) ++too_long;
    else tasks.push_back(std::move(t));
  }
  MC_CHECK(!tasks.empty(), o.problems, ": nothing to train on: ", all_tasks.size(), " problem(s), and every prompt with --max-new-tokens ",
           o.max_new_tokens, " exceeds --max-seq-len ", o.max_seq_len);
  if (!o.keep_solved.empty()) tasks = keep_probed(std::move(tasks), o.keep_solved, false, main);
  if (!o.keep_varied.empty()) tasks = keep_probed(std::move(tasks), o.keep_varied, true, main);
  if (o.max_problems > 0 && static_cast<int64_t>(tasks.size()) > o.max_problems) {
    std::stable_sort(tasks.begin(), tasks.end(), curriculum_before);
    tasks.resize(static_cast<size_t>(o.max_problems));
  }
  std::map<std::string, size_t> task_by_key;
  for (size_t i = 0; i < tasks.size(); ++i) task_by_key[tasks[i].problem->key] = i;
  eval::EvaluatorOptions eopts = o.evaluator;
  eopts.timing_gate = o.hold_judges;  // they time on our GPU: not while we generate or train
  std::unique_ptr<serve::Verifier> verifier = o.verifier_url.empty()
                                           ? serve::make_in_process_verifier(o.eval_config, eopts)
                                           : serve::make_service_verifier(o.verifier_url, o.verifier_token,
                                                                          o.eval_config);
  PlantedAnswers planted;
  if (!o.planted.empty()) planted = PlantedAnswers::load(o.planted);

  train::Distributed dist(env, device);
  at::manual_seed(o.seed);
  auto model = model::QwenModel::load(ckpt ? ckpt->dir : o.model_dir, device, model::parse_dtype(o.dtype));
  train::check_tokenizer_fits(tok, model.config().vocab_size, o.model_dir);
  MC_CHECK(o.max_seq_len <= model.config().max_position_embeddings, "--max-seq-len ", o.max_seq_len,
           " exceeds the model's max_position_embeddings ", model.config().max_position_embeddings);
  std::vector<train::Example> anchor;
  if (!o.anchor_data.empty()) anchor = train::load_examples(o.anchor_data, tok, o.max_seq_len, nullptr, chat);
  std::optional<model::QwenModel> ref;
  if (o.loss.kl_coef > 0) ref.emplace(model::QwenModel::load(o.model_dir, device, model.dtype()));
  train::ShardedAdamW opt(model, dist, o.adamw);
  gen::EngineOptions eo;
  // Cache slots for the sequences a step can decode at once (this rank's prompts x the group;
  // later turns have fewer), not --max-batch's 256: at 16k positions that is 17 GB of cache
  // where 4 would do. A power of two, so the engine's batch buckets stay the same.
  // With --async --pipeline-turns the next step's first turn is decoded beside this step's: twice.
  const int64_t per_rank = (o.prompts_per_step + dist.world() - 1) / dist.world() * o.group_size *
                           (o.async && o.pipeline_turns ? 2 : 1);
  eo.max_batch = std::min<int64_t>(o.max_batch, gen::slots_for(per_rank));
  eo.max_seq_len = o.max_seq_len;
  eo.cuda_graphs = o.cuda_graphs;
  eo.cudnn_attention = o.cudnn_attention;
  eo.prefill_buckets = !o.exact_prefill;
  eo.overlap = o.overlap_decode;
  if (o.pipeline_turns) {
    eo.admit_together = o.admit_together;
    eo.admit_wait_steps = o.admit_wait_steps;
  }
  gen::GenerationEngine engine(model, &tok, eo);
  RolloutRunner runner(engine, model, tok, *verifier, o.planted.empty() ? nullptr : &planted, chat);

  RetryBufferOptions ro = o.retry;
  ro.seed = o.seed ^ 0xB0F5ull;
  RetryBuffer buffer(ro);
  VerdictMemory memory(static_cast<size_t>(o.verdict_memory), verifier->config_hash());
  auto memory_file = [&](const std::string& dir) { return fs::path(dir) / fmt::format("rl-verdicts-rank{:05d}.json", dist.rank()); };
  train::LrSchedule sched = o.schedule;
  sched.total_steps = o.max_steps > 0
                          ? o.max_steps
                          : (o.epochs * static_cast<int64_t>(tasks.size()) + o.prompts_per_step - 1) / o.prompts_per_step;
  const json fingerprint = {{"problems", fs::absolute(o.problems).string()}, {"tasks", tasks.size()}, {"seed", o.seed},
                            {"group_size", o.group_size}, {"prompts_per_step", o.prompts_per_step}, {"format", o.format},
                            {"order", o.order}, {"off_policy", o.off_policy}};
  auto next_file = [&](const std::string& dir) { return fs::path(dir) / fmt::format("rl-next-rank{:05d}.json", dist.rank()); };
  auto carry_file = [&](const std::string& dir) { return fs::path(dir) / fmt::format("rl-carry-rank{:05d}.json", dist.rank()); };
  std::optional<StepRollouts> next;  // --async: the next step's rollouts, first turn generated (and more: --repairs-ahead)
  std::vector<Carried> carried;       // --carry-repairs: earlier steps' groups with repairs, oldest first
  int64_t start = 0, epoch = 0, index = 0;
  double elapsed = 0;
  std::optional<double> anchor_start;  // the anchor set's loss before the first step
  std::vector<TrainSeq> pending;  // --off-policy 1: last step's rollouts, trained this step
  if (ckpt) {
    json st = train::load_checkpoint(*ckpt, opt, dist);
    MC_CHECK(st.value("kind", "") == "rl", ckpt->dir, " is not an RL checkpoint");
    for (auto& [k, v] : fingerprint.items())
      MC_CHECK(st["fingerprint"][k] == v, "--resume: ", k, " differs from the run in ", ckpt->dir, " (was ",
               st["fingerprint"][k].dump(), ", now ", v.dump(), ")");
    start = st.at("step").get<int64_t>();
    epoch = st.at("data_position").at("epoch").get<int64_t>();
    index = st.at("data_position").at("index").get<int64_t>();
    elapsed = st.value("elapsed_s", 0.0);
    if (st.contains("anchor_loss_start") && !anchor.empty()) anchor_start = st["anchor_loss_start"].get<double>();
    buffer = RetryBuffer::from_json(st.at("retry_buffer"), ro);
    if (fs::exists(memory_file(ckpt->dir))) {
      memory = VerdictMemory::from_json(json::parse(std::ifstream(memory_file(ckpt->dir))), static_cast<size_t>(o.verdict_memory),
                                        verifier->config_hash());
      if (memory.dropped_on_load() > 0)
        fmt::print(stderr, "rl: {} remembered verdicts were judged under other evaluation settings; judging those answers again\n",
                   memory.dropped_on_load());
    }
    MC_CHECK(st.value("async", false) == o.async, "--resume: the run in ", ckpt->dir, (o.async ? " ran without" : " ran with"),
             " --async (give the same)");
    if (o.async && fs::exists(next_file(ckpt->dir)))
      next = step_rollouts_from_json(json::parse(std::ifstream(next_file(ckpt->dir))), task_by_key);
    MC_CHECK(st.value("carry_repairs", false) == o.carry_repairs, "--resume: the run in ", ckpt->dir,
             (o.carry_repairs ? " ran without" : " ran with"), " --carry-repairs (give the same)");
    if (fs::exists(carry_file(ckpt->dir))) carried = carried_from_json(json::parse(std::ifstream(carry_file(ckpt->dir))), task_by_key);
    if (st.contains("pending")) {
      // Each rank's waiting sequences, in its own file.
      auto f = fs::path(ckpt->dir) / fmt::format("rl-pending-rank{:05d}.json", dist.rank());
      if (fs::exists(f)) pending = train_seqs_from_json(json::parse(std::ifstream(f)));
    }
    if (main) fmt::print(stderr, "rl: resumed from {} (step {})\n", ckpt->dir, start);
  }
  if (main)
    fmt::print(stderr,
               "rl: {} tasks ({} skipped: prompt too long), {} prompts x {} samples per step, {} turns, {} rank(s) on {}; "
               "verifier: {}\n",
               tasks.size(), too_long, o.prompts_per_step, o.group_size, o.max_turns, dist.world(), model::device_name(device),
               verifier->describe());
  if (main) {
    // What this run trains on, one key a line: `bench-model --subset` evaluates the same problems.
    std::string keys;
    for (const auto& t : tasks) keys += t.problem->key + "\n";
    write_file_atomic(fs::path(o.out_dir) / "problems.txt", keys);
  }
  if (!anchor.empty() && !anchor_start)
    anchor_start = train::mean_token_loss(model, anchor, o.micro_batch_tokens, dist);
  train::MetricsLog log(o.out_dir, start, main);
  std::vector<size_t> order = epoch_order(tasks, o.order, o.seed, epoch);

  RlResult result;
  result.steps = start;
  result.main_rank = main;
  auto save = [&](int64_t step) {
    json st = {{"kind", "rl"}, {"step", step}, {"data_position", {{"epoch", epoch}, {"index", index}}},
               {"retry_buffer", buffer.to_json()}, {"elapsed_s", elapsed}, {"world_size", dist.world()},
               {"fingerprint", fingerprint}, {"total_steps", sched.total_steps}, {"pending", o.off_policy > 0},
               {"async", o.async}, {"carry_repairs", o.carry_repairs}};
    if (anchor_start) st["anchor_loss_start"] = *anchor_start;
    // The next step's answers so far are saved with their verdicts: wait for them.
    if (next) runner.collect_turn(next->batch, nullptr);
    for (auto& c : carried) runner.collect_turn(c.from.batch, nullptr);
    train::save_checkpoint(o.out_dir, step, model, o.model_dir, opt, st, dist, static_cast<int>(o.keep_last),
                           [&](const std::string& dir) {
                             if (o.off_policy > 0)
                               std::ofstream(fs::path(dir) / fmt::format("rl-pending-rank{:05d}.json", dist.rank()))
                                   << to_json(pending).dump() << "\n";
                             if (next) std::ofstream(next_file(dir)) << dump_json(to_json(*next, tasks)) << "\n";
                             if (!carried.empty()) std::ofstream(carry_file(dir)) << dump_json(to_json(carried, tasks)) << "\n";
                             if (memory.enabled()) std::ofstream(memory_file(dir)) << dump_json(memory.to_json()) << "\n";
                           });
    result.last_checkpoint = (fs::path(o.out_dir) / "checkpoints" / fmt::format("step-{:08d}", step)).string();
  };

  // A step's prompts: repair tasks first, then the next tasks in order (identical on every rank),
  // and this rank's share. Moves the data position and the retry buffer's draws.
  auto draw = [&](int64_t step) {
    StepRollouts r;
    std::vector<RolloutPrompt> prompts;
    if (o.bdr) {
      for (auto& e : buffer.draw(static_cast<size_t>(o.prompts_per_step))) {
        ++r.repairs_drawn;
        auto it = task_by_key.find(e.problem);
        if (it == task_by_key.end()) continue;
        RolloutPrompt p;
        p.task = it->second;
        p.repair = true;
        p.messages = {{"user", tasks[p.task].prompt}, {"assistant", e.failed_answer}, {"user", synth::repair_prompt(e.feedback)}};
        if (static_cast<int64_t>(runner.encode_conversation(p.messages).size()) + o.max_new_tokens > o.max_seq_len) {
          ++r.repairs_skipped;
          continue;
        }
        prompts.push_back(std::move(p));
      }
    }
    while (static_cast<int>(prompts.size()) < o.prompts_per_step) {
      if (index >= static_cast<int64_t>(order.size())) {
        ++epoch;
        index = 0;
        order = epoch_order(tasks, o.order, o.seed, epoch);
      }
      RolloutPrompt p;
      p.task = order[static_cast<size_t>(index++)];
      p.messages = {{"user", tasks[p.task].prompt}};
      prompts.push_back(std::move(p));
    }
    for (size_t i = 0; i < prompts.size(); ++i)
      prompts[i].seed = gen::mix64(gen::step_key(o.seed, static_cast<uint64_t>(step)) + i);
    r.prompts = prompts.size();
    for (size_t i = 0; i < prompts.size(); ++i)
      if (static_cast<int>(i % dist.world()) == dist.rank()) {
        r.batch.prompts.push_back(prompts[i]);
        r.global_index.push_back(i);
      }
    return r;
  };
  auto rollout_options = [&](int64_t step) {
    RolloutOptions ropt;
    ropt.group_size = o.group_size;
    ropt.max_turns = o.max_turns;
    ropt.sampling.temperature = static_cast<float>(o.temperature);
    ropt.sampling.top_p = static_cast<float>(o.top_p);
    ropt.sampling.max_new_tokens = o.max_new_tokens;
    ropt.sampling.loop_window = o.loop_window;
    ropt.hold_judges = o.hold_judges;
    ropt.pipeline = o.pipeline_turns;
    ropt.reuse_kv = o.reuse_kv;
    ropt.carry_repairs = o.carry_repairs && step + 1 < sched.total_steps;  // the last step leaves nothing
    ropt.tag = fmt::format("s{}r{}", step, dist.rank());
    ropt.step = step + 1;
    ropt.memory = memory.enabled() ? &memory : nullptr;
    return ropt;
  };
  // Verifier ids of a step's answers, apart from the next step's (both outstanding with --async).
  auto id_base = [](int64_t step) { return static_cast<size_t>(step) << 32; };
  // Verifier failures, each with what the verifier said (OUT/infra_errors[-rankN].jsonl).
  std::ofstream infra_log(fs::path(o.out_dir) / (dist.world() > 1 ? fmt::format("infra_errors-rank{:05d}.jsonl", dist.rank())
                                                                    : std::string("infra_errors.jsonl")),
                          std::ios::app);
  ProgressBar bar("rl", static_cast<size_t>(std::max<int64_t>(0, sched.total_steps - start)), main && o.progress);
  for (int64_t step = start; step < sched.total_steps; ++step) {
    auto t_step = Clock::now();
    model::reset_peak_memory(device);
    std::optional<train::RegionProfiler> profiler;
    if (main && o.profile_step == step + 1) profiler.emplace(device.is_cuda());
    const gen::EngineStats gen0 = engine.stats();
    RolloutStats rstats;  // this step's wall time (the next step's first turn included)
    double prefetch_s = 0;
    // --- 1-2. prompts and rollouts (with --async, made during the last step)
    StepRollouts cur;
    if (next) {
      cur = std::move(*next);
      next.reset();
    } else {
      cur = draw(step);
      // Pipelined, its first turn is decoded in finish()'s loop, beside the second turns.
      cur.batch = runner.start(cur.batch.prompts, tasks, rollout_options(step), id_base(step), &rstats,
                               /*first_turn_now=*/false);
    }
    cur.batch.opts = rollout_options(step);  // a batch loaded from a checkpoint has none saved
    // --async: the next step's first turn, generated while this step's answers are judged: turn
    // by turn, whole, at this step's first wait; pipelined, decoded from the start beside this
    // step's turns, in the same loop (prefetch_generate_s is then 0: the engine's steps serve both),
    // and with --repairs-ahead its failed answers' next turns too, while this step's run.
    const bool prefetching = o.async && step + 1 < sched.total_steps;
    const bool beside = prefetching && o.pipeline_turns;
    auto draw_next = [&](bool first_turn_now) {
      StepRollouts n = draw(step + 1);
      n.batch = runner.start(n.batch.prompts, tasks, rollout_options(step + 1), id_base(step + 1), &rstats, first_turn_now);
      next = std::move(n);
    };
    if (beside) draw_next(/*first_turn_now=*/false);
    auto prefetch = [&] {
      if (!prefetching || beside) return;
      auto t = Clock::now();
      draw_next(/*first_turn_now=*/true);
      prefetch_s = since(t);
    };
    // --carry-repairs: earlier steps' batches, each due one turn further than at its last step
    // (the last step finishes them all).
    const bool last = step + 1 == sched.total_steps;
    std::vector<CarriedBatch> carrying;
    for (auto& c : carried) {
      c.from.batch.opts = rollout_options(c.step);  // (not saved in a checkpoint)
      const int due = last ? o.max_turns : static_cast<int>(step - c.step) + 1;
      MC_INTERNAL_ASSERT(due <= o.max_turns, "rl: a carried batch outlived its turns");
      carrying.push_back({&c.from.batch, due});
    }
    runner.finish(cur.batch, tasks, &rstats, prefetch, beside ? &next->batch : nullptr, beside && o.repairs_ahead, carrying);
    // What this step trains: each carried batch's groups through their due turn (oldest first),
    // then this step's own that stopped at turn 1 (all of them when it carries nothing).
    StepRollouts done;
    size_t carried_in = 0, carried_out = 0;
    if (carried.empty() && !cur.batch.opts.carry_repairs) {
      done = std::move(cur);
    } else {
      size_t base = 0;
      auto take = [&](const StepRollouts& from, std::vector<size_t>& groups, int due) {
        std::vector<size_t> now, later;
        for (size_t p : groups) (RolloutRunner::group_turns(from.batch, p) <= due ? now : later).push_back(p);
        take_groups(from, now, o.group_size, base, &done);
        base += from.prompts;
        groups = std::move(later);
        return now.size();
      };
      for (size_t k = 0; k < carried.size(); ++k) carried_in += take(carried[k].from, carried[k].groups, carrying[k].due);
      std::vector<size_t> own(cur.batch.prompts.size());
      std::iota(own.begin(), own.end(), 0);
      take(cur, own, cur.batch.opts.carry_repairs ? 1 : o.max_turns);
      carried_out = own.size();
      done.prompts = cur.prompts;
      done.repairs_drawn = cur.repairs_drawn;
      done.repairs_skipped = cur.repairs_skipped;
      std::erase_if(carried, [](const Carried& c) { return c.groups.empty(); });
      if (!own.empty()) carried.push_back({std::move(cur), step, std::move(own)});
    }
    const std::vector<RolloutPrompt>& mine = done.batch.prompts;
    const std::vector<size_t>& global_index = done.global_index;
    std::vector<Trajectory>& traj = done.batch.traj;
    const size_t repairs_drawn = done.repairs_drawn, repairs_skipped = done.repairs_skipped;

    // --- 3. rewards, advantages, retry-buffer events
    json acc = json::object();
    json events = json::array();
    auto add = [&](const std::string& k, double v) { merge_into(acc[k], json(v)); };
    add("carried_out", static_cast<double>(carried_out));
    add("carried_in", static_cast<double>(carried_in));
    for (const auto& t : traj)  // answers that shared another's verdict, in this step or an earlier one
      for (const auto& r : t.turns) {
        if (r.twin_of) add("twin_answers", 1);
        if (r.reused) add("reused_answers", 1);
      }
    for (size_t p = 0; p < mine.size(); ++p) {
      std::vector<size_t> scored;
      bool any_pass = false;
      for (int g = 0; g < o.group_size; ++g) {
        Trajectory& t = traj[p * o.group_size + g];
        if (t.infra()) continue;
        std::vector<Turn> turns;
        for (const auto& r : t.turns) turns.push_back({r.score(), r.passed()});
        t.reward = prime_echo_reward(turns, o.prime_echo);
        scored.push_back(p * o.group_size + g);
        any_pass |= t.first_pass() > 0;
      }
      std::vector<double> rewards;
      for (size_t i : scored) rewards.push_back(traj[i].reward);
      if (scored.size() >= 2) {
        auto adv = group_advantages(rewards, static_cast<int>(rewards.size()), 1e-6, o.adv_std_floor);
        for (size_t k = 0; k < scored.size(); ++k) traj[scored[k]].advantage = adv[k];
      }
      const std::string& key = tasks[mine[p].task].problem->key;
      add("groups", 1);
      if (mine[p].repair) add("repair_groups", 1);
      if (scored.empty()) continue;
      const bool signal = std::any_of(scored.begin(), scored.end(), [&](size_t i) { return traj[i].advantage != 0; });
      if (!signal) add("zero_signal_groups", 1);
      // Every answer passed at turn 1: what signal there is comes from the speed term alone.
      if (signal && std::all_of(scored.begin(), scored.end(), [&](size_t i) { return traj[i].first_pass() == 1; }))
        add("speed_only_groups", 1);
      if (!any_pass) {
        add("all_failed_groups", 1);
        const Trajectory& t = traj[scored[0]];
        events.push_back({{"prompt", global_index[p]}, {"kind", "add"}, {"problem", key}, {"answer", t.turns.back().text},
                          {"feedback", t.turns.back().result.feedback}});
      } else {
        if (mine[p].repair) add("repair_recovered", 1);
        events.push_back({{"prompt", global_index[p]}, {"kind", "repaired"}, {"problem", key}});
      }
    }
    for (const auto& t : traj) {
      add("trajectories", 1);
      if (t.infra()) {
        add("infra_trajectories", 1);
        continue;
      }
      if (t.stop_reason == "context_full") add("context_full", 1);
      add("scored", 1);
      add("reward_sum", t.reward);
      add("reward_sq", t.reward * t.reward);
      int fp = t.first_pass();
      if (fp > 0) add(fmt::format("first_pass_{}", fp), 1);
      for (size_t k = 0; k < t.turns.size(); ++k) {
        const TurnRecord& r = t.turns[k];
        add(fmt::format("answered_{}", k + 1), 1);
        if (r.passed()) add(fmt::format("passed_{}", k + 1), 1);
        add("answers", 1);
        add("answer_tokens", static_cast<double>(r.tokens.size()));
        merge_into(acc["verdicts"][eval::to_string(r.result.verdict)], json(1));
        // First answers alone: whether a step's failures are the model's first tries or repairs.
        if (k == 0) merge_into(acc["verdicts_turn1"][eval::to_string(r.result.verdict)], json(1));
        if (!r.result.rule.empty()) merge_into(acc["rules"][r.result.rule], json(1));
        for (const auto& v : r.result.violations) merge_into(acc["rules_all"][v.rule], json(1));
        // Later answers run to --max-new-tokens where a turn-1 answer does not: a turn lasts as
        // long as its longest answer, so one such repair holds up the whole step.
        if (k > 0 && r.finish_reason == "length") add("later_truncated", 1);
        if (r.passed() && r.result.speedup) {
          add("correct_answers", 1);
          add("speedup_log_sum", std::log(std::max(1e-9, *r.result.speedup)));
          if (k == 0 && *r.result.speedup > 1.0) add("fast1_turn1", 1);
        }
      }
      add("turn1_tokens", static_cast<double>(t.turns[0].tokens.size()));
      add("turn1_low_prob", count_low_prob(t.turns[0].logprobs.data(), t.turns[0].logprobs.size()));
      if (t.turns[0].finish_reason == "length") add("turn1_truncated", 1);
      if (t.turns[0].finish_reason == "loop") add("turn1_loop", 1);
    }
    for (const auto& t : traj)
      if (t.infra())
        for (const auto& r : t.turns) {
          add("infra_answers", 1);
          merge_into(acc["verdicts"][eval::to_string(r.result.verdict)], json(1));
          if (r.infra()) {
            // Never a score, never lost: what the verifier said, for whoever runs the service.
            infra_log << dump_json({{"step", step + 1}, {"problem", tasks[mine[t.prompt].task].problem->key},
                                    {"sample_id", r.result.sample_id}, {"verdict", eval::to_string(r.result.verdict)},
                                    {"infra_error", r.result.infra_error}, {"reason", r.result.reason}})
                      << "\n";
            infra_log.flush();
          }
        }

    // --- 4-5. recompute log-probs, MirrorPop, the clipped loss, backward
    auto t_train = Clock::now();
    // No judge times on our GPU while we train (with --async the next step's answers are being
    // judged now); compiles and correctness trials go on.
    if (o.hold_judges) verifier->hold(true);
    // This step's turn-1 sequences with a signal; with --off-policy 1 they are trained one step
    // later (after the update they did not see), and last step's are trained now.
    std::vector<TrainSeq> fresh;
    for (const Trajectory& t : traj) {
      if (t.infra() || (t.advantage == 0 && o.loss.kl_coef == 0)) continue;
      const TurnRecord& r = t.turns[0];
      TrainSeq q;
      q.tokens = r.context;
      q.tokens.insert(q.tokens.end(), r.tokens.begin(), r.tokens.end());
      q.n_context = r.context.size();
      q.old_logp = r.logprobs;
      q.advantage = t.advantage;
      fresh.push_back(std::move(q));
    }
    std::vector<TrainSeq> batch;
    if (o.off_policy == 0) {
      batch = std::move(fresh);
    } else {
      batch = std::move(pending);
      pending = std::move(fresh);
    }
    std::vector<train::Example> seqs;
    for (const TrainSeq& q : batch) {
      train::Example ex;
      ex.tokens = q.tokens;
      ex.loss_mask.assign(q.n_context, 0);
      ex.loss_mask.resize(ex.tokens.size(), 1);
      ex.origin = fmt::format("step {}", step + 1);
      seqs.push_back(std::move(ex));
    }
    std::vector<int64_t> all_seqs(seqs.size());
    std::iota(all_seqs.begin(), all_seqs.end(), 0);
    auto mbs = train::pack(seqs, all_seqs, o.micro_batch_tokens);
    opt.zero_grad();
    const double T = o.temperature;
    json dump_seqs = json::array();
    for (size_t j = 0; j < mbs.size(); ++j) {
      const train::MicroBatch& mb = mbs[j];
      opt.set_last_micro_batch(j + 1 == mbs.size());
      std::vector<float> old_lp, adv;
      std::vector<int64_t> cu = {0};
      for (int64_t e : mb.examples) {
        const TrainSeq& q = batch[static_cast<size_t>(e)];
        old_lp.insert(old_lp.end(), q.old_logp.begin(), q.old_logp.end());
        adv.insert(adv.end(), q.old_logp.size(), static_cast<float>(q.advantage));
        cu.push_back(cu.back() + static_cast<int64_t>(q.old_logp.size()));
      }
      auto h = model.hidden_states_packed(mb.tokens, o.grad_checkpoint);
      auto targets = mb.targets.to(h.device());
      auto rows = targets.ne(-100).nonzero().squeeze(1);
      auto hs = h.index_select(0, rows);
      auto tg = targets.index_select(0, rows);
      auto lp = train::linear_token_logprobs(hs, model.lm_head_weight(), tg, T);
      MC_INTERNAL_ASSERT(lp.logp.size(0) == static_cast<int64_t>(old_lp.size()), "turn-1 targets and rollout log-probs disagree");
      auto old_t = at::tensor(old_lp).to(h.device());
      auto adv_t = at::tensor(adv).to(h.device());
      auto mp = mirror_pop(lp.logp, old_t, at::tensor(cu), o.mirror_delta, o.mirror_pop);
      auto lengths = at::tensor(cu).slice(0, 1) - at::tensor(cu).slice(0, 0, -1);
      auto mask = at::repeat_interleave(mp.keep, lengths).to(h.device());
      at::Tensor ref_lp;
      if (ref) {
        c10::AutoGradMode no_grad(false);
        auto rh = ref->hidden_states_packed(mb.tokens, false).index_select(0, rows);
        ref_lp = train::linear_token_logprobs(rh, ref->lm_head_weight(), tg, T).logp;
      }
      auto pl = clipped_policy_loss(lp.logp, old_t, adv_t, mask, o.loss, ref_lp, /*normalizer=*/1.0);
      if (!o.dump_dir.empty()) {
        auto keep = mp.keep.to(at::kCPU);
        for (size_t k = 0; k < mb.examples.size(); ++k) {
          const TrainSeq& q = batch[static_cast<size_t>(mb.examples[k])];
          dump_seqs.push_back({{"tokens", q.tokens}, {"n_context", q.n_context}, {"old_logp", q.old_logp},
                               {"advantage", q.advantage}, {"kept", keep[static_cast<int64_t>(k)].item<bool>()}});
        }
      }
      pl.loss.backward();
      opt.after_backward();
      const int64_t S = mp.keep.size(0);
      add("seqs", static_cast<double>(S));
      add("seqs_kept", mp.keep.to(at::kDouble).sum().item<double>());
      add("abs_log_ratio_sum", mp.mean_abs_log_ratio.sum().item<double>());
      add("tokens_trained", pl.tokens);
      add("clip_sum", pl.clip_fraction * pl.tokens);
      add("kl_sum", pl.kl * pl.tokens);
      add("ratio_sum", pl.ratio_mean * pl.tokens);
      add("push_pos", pl.push_pos);
      add("push_neg", pl.push_neg);
      add("entropy_sum", (lp.entropy * mask.to(at::kFloat)).sum().item<double>());
    }
    if (mbs.empty()) {
      opt.set_last_micro_batch(true);
      opt.after_backward();
    }

    // Every rank's sums and retry-buffer events, merged the same way everywhere.
    json merged = json::object();
    json all_events = json::array();
    for (const auto& s : all_gather_strings(dist, dump_json(json{{"acc", acc}, {"events", events}}), device)) {
      json j = json::parse(s);
      merge_into(merged, j["acc"]);
      for (auto& e : j["events"]) all_events.push_back(e);
    }
    const double n_tokens = num(merged, "tokens_trained");
    double grad_norm = opt.finish_gradients(o.grad_clip, n_tokens > 0 ? 1.0 / n_tokens : 1.0);
    if (!o.dump_dir.empty()) {
      opt.expose_gradients();
      fs::create_directories(o.dump_dir);
      std::vector<at::Tensor> keep_alive;
      std::vector<model::TensorView> views;
      for (auto& [name, g] : model.named_gradients()) {
        if (!g.defined()) continue;
        keep_alive.push_back(g.to(at::kCPU, at::kFloat).contiguous());
        const at::Tensor& t = keep_alive.back();
        views.push_back({name, model::DType::kF32, t.sizes().vec(), static_cast<const uint8_t*>(t.data_ptr()), t.nbytes()});
      }
      const std::string base = (fs::path(o.dump_dir) / fmt::format("step-{:08d}", step + 1)).string();
      model::write_safetensors(base + ".safetensors", views);
      std::ofstream(base + ".json") << json{{"temperature", T}, {"clip_low", o.loss.clip_low}, {"clip_high", o.loss.clip_high},
                                            {"normalizer", n_tokens}, {"sequences", dump_seqs}}.dump() << "\n";
    }
    const double lr = sched.at(step);
    if (n_tokens > 0) {
      opt.step(lr);
      engine.release_kept();  // kept K/V are the old weights': a later turn prefills anew
    }
    const double train_s = since(t_train);
    std::optional<double> anchor_loss;
    double anchor_s = 0;
    if (!anchor.empty() && (step + 1) % o.anchor_every == 0) {
      auto t_anchor = Clock::now();
      anchor_loss = train::mean_token_loss(model, anchor, o.micro_batch_tokens, dist);
      anchor_s = since(t_anchor);
    }
    if (o.hold_judges) verifier->hold(false);

    std::stable_sort(all_events.begin(), all_events.end(),
                     [](const json& a, const json& b) { return a["prompt"].get<size_t>() < b["prompt"].get<size_t>(); });
    auto before = buffer.counters();
    for (const auto& e : all_events) {
      if (e["kind"] == "add") {
        if (o.bdr) buffer.add({e["problem"], e["answer"], e["feedback"], 0, step});
      } else {
        buffer.repaired(e["problem"].get<std::string>());
      }
    }
    const auto& after = buffer.counters();

    // --- 6. report
    const double step_s = since(t_step);
    elapsed += step_s;
    const json& m = merged;
    const gen::EngineStats gd = gen::stats_between(gen0, engine.stats());
    const double scored = num(m, "scored"), answers = num(m, "answers");
    const double rmean = ratio(num(m, "reward_sum"), scored);
    json row = {{"reward_mean", rmean},
                {"reward_std", std::sqrt(std::max(0.0, ratio(num(m, "reward_sq"), scored) - rmean * rmean))},
                {"trajectories", num(m, "trajectories")},
                {"infra_trajectories", num(m, "infra_trajectories")},
                {"prompts", static_cast<double>(done.prompts)},
                // --carry-repairs: groups trained (earlier steps' carried ones included), this
                // step's groups left to later steps, and earlier steps' trained here.
                {"trained_groups", num(m, "groups")},
                {"carried_groups", num(m, "carried_out")},
                {"carried_in_groups", num(m, "carried_in")},
                {"repair_prompts", num(m, "repair_groups")},
                {"all_failed_share", ratio(num(m, "all_failed_groups"), num(m, "groups"))},
                {"zero_signal_share", ratio(num(m, "zero_signal_groups"), num(m, "groups"))},
                {"speed_only_share", ratio(num(m, "speed_only_groups"), num(m, "groups"))},
                {"bdr_size", static_cast<double>(buffer.size())},
                {"bdr_added", static_cast<double>(after.added - before.added)},
                {"bdr_reissued", static_cast<double>(repairs_drawn)},
                {"bdr_skipped_too_long", static_cast<double>(repairs_skipped)},
                {"bdr_recovered", num(m, "repair_recovered")},
                {"bdr_repaired_removed", static_cast<double>(after.repaired - before.repaired)},
                {"bdr_evicted", static_cast<double>(after.evicted - before.evicted)},
                {"bdr_expired", static_cast<double>(after.expired - before.expired)},
                {"fast1_share", ratio(num(m, "fast1_turn1"), num(m, "answered_1"))},
                {"speedup_geomean_correct", num(m, "correct_answers") > 0 ? std::exp(num(m, "speedup_log_sum") / num(m, "correct_answers")) : 0.0},
                {"mirrorpop_filtered_share", ratio(num(m, "seqs") - num(m, "seqs_kept"), num(m, "seqs"))},
                {"mirrorpop_mean_abs_log_ratio", ratio(num(m, "abs_log_ratio_sum"), num(m, "seqs"))},
                {"trained_sequences", num(m, "seqs_kept")},
                {"trained_tokens", n_tokens},
                {"clip_fraction", ratio(num(m, "clip_sum"), n_tokens)},
                {"ratio_mean", ratio(num(m, "ratio_sum"), n_tokens)},
                {"kl", ratio(num(m, "kl_sum"), n_tokens)},
                {"neg_push_share", ratio(num(m, "push_neg"), num(m, "push_pos") + num(m, "push_neg"))},
                {"entropy", ratio(num(m, "entropy_sum"), n_tokens)},
                {"grad_norm", grad_norm},
                {"lr", lr},
                {"updated", n_tokens > 0},
                {"turn1_tokens_mean", ratio(num(m, "turn1_tokens"), scored)},
                {"turn1_truncated_share", ratio(num(m, "turn1_truncated"), scored)},
                {"turn1_loop_share", ratio(num(m, "turn1_loop"), scored)},
                {"later_truncated_share", ratio(num(m, "later_truncated"), answers - scored)},
                {"turn1_low_prob_per_1000", ratio(1000 * num(m, "turn1_low_prob"), num(m, "turn1_tokens"))},
                {"answer_tokens_mean", ratio(num(m, "answer_tokens"), answers)},
                {"answers", answers},
                {"twin_answers_share", ratio(num(m, "twin_answers"), num(m, "answers") + num(m, "infra_answers"))},
                {"reused_verdicts_share", ratio(num(m, "reused_answers"), num(m, "answers") + num(m, "infra_answers"))},
                {"context_full", num(m, "context_full")},
                {"generate_s", rstats.generate_s},
                {"verify_wait_s", rstats.verify_wait_s},
                {"wait_answers", rstats.wait_answers},
                {"wait_work_s", rstats.wait_work_s},
                {"asked_while_decoding", rstats.asked_while_decoding},
                {"asked_ahead", rstats.asked_ahead},
                {"drain_s", rstats.drain_s},
                // Host work of the rollout loop (RolloutStats): answers handed to MooreEval
                // (inside generation: they land in the engine's callbacks) and later turns' prompts.
                {"submit_s", rstats.submit_s},
                {"ask_s", rstats.ask_s},
                {"prefetch_generate_s", prefetch_s},
                // What waiting for MooreEval adds to generation and training (issue target: <= 0.25).
                {"verify_overhead", ratio(rstats.verify_wait_s, rstats.generate_s + train_s)},
                {"train_s", train_s},
                {"step_s", step_s},
                {"gen_tokens_per_s", ratio(static_cast<double>(rstats.generated_tokens), rstats.generate_s)},
                // Inside generation (this step's, the next step's first turn included with --async).
                {"gen_decode_steps", static_cast<double>(gd.decode_steps)},
                {"gen_rows_per_decode_step", ratio(static_cast<double>(gd.decode_rows), static_cast<double>(gd.decode_steps))},
                {"gen_span_mean", ratio(static_cast<double>(gd.decode_span), static_cast<double>(gd.decode_steps))},
                {"gen_decode_step_ms", ratio(gd.step_wall_ms, static_cast<double>(gd.decode_steps))},
                {"gen_model_gpu_ms", ratio(gd.decode_gpu_ms, static_cast<double>(gd.decode_steps))},
                {"gen_sample_gpu_ms", ratio(gd.sample_gpu_ms, static_cast<double>(gd.decode_steps))},
                {"gen_prefill_s", gd.prefill_wall_ms / 1e3},
                {"gen_prefill_calls", static_cast<double>(gd.prefill_calls)},
                // Prefill's model calls on the GPU (what they computed: gen_prompt_tokens -
                // gen_reused_tokens, packed).
                {"gen_prefill_gpu_s", gd.prefill_gpu_ms / 1e3},
                {"gen_padded_tokens", static_cast<double>(gd.padded_tokens)},
                {"gen_discarded_rows", static_cast<double>(gd.discarded_rows)},
                {"gen_admissions_held", static_cast<double>(gd.admissions_held)},
                {"gen_graphs_captured", static_cast<double>(gd.graphs_captured)},
                {"gen_slot_moves", static_cast<double>(gd.slot_moves)},
                // --reuse-kv: prompts that continued a kept cache, the prompt tokens that spared
                // prefilling, of all prompt tokens, and kept caches given up for room.
                {"gen_continued", static_cast<double>(gd.continued)},
                {"gen_reused_tokens", static_cast<double>(gd.reused_tokens)},
                {"gen_prompt_tokens", static_cast<double>(gd.prompt_tokens)},
                {"gen_kept_evicted", static_cast<double>(gd.kept_evicted)},
                {"epoch", epoch + static_cast<double>(index) / static_cast<double>(tasks.size())}};
    for (int k = 1; k <= o.max_turns; ++k) {
      row[fmt::format("pass_rate_turn{}", k)] = ratio(num(m, fmt::format("passed_{}", k)), num(m, fmt::format("answered_{}", k)));
      double cum = 0;
      for (int q = 1; q <= k; ++q) cum += num(m, fmt::format("first_pass_{}", q));
      row[fmt::format("solved_by_turn{}", k)] = ratio(cum, scored);
      if (k >= 2) row[fmt::format("rescued_turn{}", k)] = ratio(num(m, fmt::format("first_pass_{}", k)), scored);
    }
    if (anchor_loss) {
      row["anchor_loss"] = *anchor_loss;
      row["anchor_loss_change"] = *anchor_loss - *anchor_start;
      row["anchor_s"] = anchor_s;
    }
    if (m.contains("verdicts")) row["verdicts"] = m["verdicts"];
    if (m.contains("verdicts_turn1")) row["verdicts_turn1"] = m["verdicts_turn1"];
    if (m.contains("rules")) row["rules"] = m["rules"];
    if (auto mem = model::peak_memory_gib(device)) {
      auto t = at::tensor({mem->first, mem->second}, at::kDouble).to(device);
      dist.all_reduce_max(t);
      row["peak_alloc_gib"] = t[0].item<double>();
      row["peak_reserved_gib"] = t[1].item<double>();
    }
    log.log("rl", step + 1, row);
    if (profiler) {
      // Phases the step measured itself; generation's parts from the engine's own clocks.
      const double gen_s = rstats.generate_s;
      json phases = json::array({{{"name", "generate"}, {"s", gen_s}}});
      for (const auto& p : train::engine_phases(gd)) phases.push_back(p);
      phases.push_back({{"name", "between decode steps (taking tokens, answers to MooreEval)"},
                        {"s", std::max(0.0, gen_s - gd.step_wall_ms / 1e3 - gd.prefill_wall_ms / 1e3)}, {"of", "generate"}});
      phases.push_back({{"name", "answers handed to MooreEval (extraction, static checks, compile submitted)"},
                        {"s", rstats.submit_s}, {"of", "generate"}});
      phases.push_back({{"name", "waiting for MooreEval"}, {"s", rstats.verify_wait_s}});
      phases.push_back({{"name", "train"}, {"s", train_s}});
      phases.push_back({{"name", "rest of the step (rewards, advantages, bookkeeping)"},
                        {"s", std::max(0.0, step_s - gen_s - rstats.verify_wait_s - train_s)}});
      const std::string base = (fs::path(o.out_dir) / "profile" / fmt::format("step-{}", step + 1)).string();
      json p = profiler->stop(base,
                              fmt::format("RL step {} ({} decode steps, {:.0f} rows each, span {:.0f}; profiler on, so "
                                          "slower than the other steps)",
                                          step + 1, gd.decode_steps, row["gen_rows_per_decode_step"].get<double>(),
                                          row["gen_span_mean"].get<double>()),
                              phases, o.profile_trace);
      fmt::print(stderr, "rl: profile of step {} in {}.md (GPU busy {:.0f}% of it)\n", step + 1, base,
                 100 * p.value("gpu_busy_share", 0.0));
      profiler.reset();
    }
    if (main && o.samples_every > 0 && (step + 1) % o.samples_every == 0) {
      fs::create_directories(fs::path(o.out_dir) / "samples");
      std::ofstream f(fs::path(o.out_dir) / "samples" / fmt::format("step-{:08d}.jsonl", step + 1));
      // Spread over prompts: sample 0 of the first prompts, then the rest.
      int written = 0;
      for (int g = 0; g < o.group_size && written < o.samples_to_write; ++g)
        for (size_t p = 0; p < mine.size() && written < o.samples_to_write; ++p, ++written) {
          const Trajectory& t = traj[p * o.group_size + g];
          f << dump_json(trajectory_json(t, mine[p], tasks[mine[p].task])) << "\n";
        }
    }
    result.steps = step + 1;
    bar.advance(1, fmt::format("reward {:.3f} pass@t1 {:.2f} gen {:.1f}s verify {:.1f}s train {:.1f}s", rmean,
                               row["pass_rate_turn1"].get<double>(), rstats.generate_s, rstats.verify_wait_s, train_s));
    if (o.kill_after_step == step + 1) std::raise(SIGKILL);
    if ((o.save_every > 0 && (step + 1) % o.save_every == 0) || step + 1 == sched.total_steps) save(step + 1);
  }
  if (result.last_checkpoint.empty() && ckpt) result.last_checkpoint = ckpt->dir;
  return result;
}

}  // namespace mc::rl
