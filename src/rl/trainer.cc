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

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/jsonl.h"
#include "common/progress.h"
#include "generate/counter_rng.h"
#include "generate/engine.h"
#include "model/device.h"
#include "model/qwen_model.h"
#include "rl/policy_update.h"
#include "rl/rollout.h"
#include "rl/score_groups.h"
#include "rl/step_metrics.h"
#include "serve/verifier.h"
#include "synth/prompt.h"
#include "synth/task_set.h"
#include "tokenizer/bpe_tokenizer.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/distributed.h"
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

// One step's prompts over all ranks, this rank's share, and its rollouts.
struct StepRollouts {
  size_t prompts = 0;                // over all ranks
  std::vector<size_t> global_index;  // this rank's prompts' indices among them
  size_t repairs_drawn = 0, repairs_skipped = 0;
  RolloutBatch batch;                // this rank's prompts (batch.prompts) and trajectories
};

// The next step's rollouts, the answers made so far with their verdicts, saved with a checkpoint
// (Rollout::kOverlapped).
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

// One RL run: what the step loop reads (tasks, model, engine, verifier) and what it carries from
// step to step (the data position, the retry buffer, rollouts made ahead), which a checkpoint
// saves. run() is the step loop; each phase of a step is one method below.
class RlRun {
 public:
  explicit RlRun(const RlOptions& o);
  RlResult run();

 private:
  // --- setup
  void load_tasks();
  void start_verifier();
  void load_model();
  void restore();
  // --- one step
  StepRollouts draw(int64_t step);
  RolloutOptions rollout_options(int64_t step) const;
  StepRollouts roll_out(int64_t step, RolloutStats* rstats);
  double update(int64_t step, const std::vector<TrainSeq>& batch, StepSums& sums, json events, json* all_events,
                double* n_tokens);
  void apply_retry_events(int64_t step, json events);
  json report(int64_t step, const StepRollouts& done, const StepSums& sums, StepFacts f,
              std::optional<train::RegionProfiler>& profiler);
  void save(int64_t step);
  // Verifier ids of a step's answers, apart from the next step's (both outstanding, overlapped).
  static size_t id_base(int64_t step) { return static_cast<size_t>(step) << 32; }
  fs::path rank_file(const std::string& dir, const char* what) const {
    return fs::path(dir) / fmt::format("rl-{}-rank{:05d}.json", what, dist_->rank());
  }

  const RlOptions& o_;
  train::DistEnv env_;
  c10::Device device_;
  bool main_;
  std::optional<train::CheckpointInfo> ckpt_;
  std::unique_ptr<tok::BpeTokenizer> tok_;
  tok::ChatFormat chat_;
  std::vector<synth::Task> tasks_;
  size_t too_long_ = 0;
  std::map<std::string, size_t> task_by_key_;
  std::unique_ptr<serve::Verifier> verifier_;
  PlantedAnswers planted_;
  std::unique_ptr<train::Distributed> dist_;
  std::unique_ptr<model::QwenModel> model_;
  std::optional<model::QwenModel> ref_;
  std::vector<train::Example> anchor_;
  std::unique_ptr<train::ShardedAdamW> opt_;
  std::unique_ptr<model::QwenModel> engine_model_;  // sharded weights: the engine's whole copy
  std::unique_ptr<gen::GenerationEngine> engine_;
  std::unique_ptr<RolloutRunner> runner_;
  RetryBufferOptions retry_opts_;
  std::unique_ptr<RetryBuffer> buffer_;
  std::unique_ptr<VerdictMemory> memory_;
  train::LrSchedule sched_;
  json fingerprint_;
  // Carried from step to step, and saved with a checkpoint.
  int64_t start_ = 0, epoch_ = 0, index_ = 0;
  double elapsed_ = 0;
  std::optional<double> anchor_start_;  // the anchor set's loss before the first step
  std::optional<StepRollouts> next_;    // overlapped: the next step's rollouts, first turn decoded
  std::vector<size_t> order_;
  std::unique_ptr<train::MetricsLog> log_;
  std::ofstream infra_log_;
  RlResult result_;
};

// The checkpoint's own version. 1 (none written): before it said so. 2: the same state. 3: the
// rollout schedule by name ("rollout"), where 1-2 said "async"; versions 1-2 load (a run of the
// removed --off-policy or --carry-repairs is refused, naming why).
constexpr int kRlStateVersion = 3;

RlRun::RlRun(const RlOptions& o) : o_(o), env_(train::dist_env_from_environment()),
                                   device_(model::parse_device(o.device, env_.local_rank)), main_(env_.rank == 0) {
  check_options(o);
  {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    MC_CHECK(!ec, "cannot create the output folder ", o.out_dir, ": ", ec.message());
  }
  if (o.resume) {
    ckpt_ = train::latest_checkpoint(o.out_dir);
    MC_CHECK(ckpt_, "--resume: no checkpoint under ", (fs::path(o.out_dir) / "checkpoints").string(),
             " (a run saves with --save-every N and at its end)");
  }
  // The tasks, and the verifier, before anything heavy: their errors are the likely ones.
  load_tasks();
  start_verifier();
  load_model();
  retry_opts_ = o.retry;
  retry_opts_.seed = o.seed ^ 0xB0F5ull;
  buffer_ = std::make_unique<RetryBuffer>(retry_opts_);
  memory_ = std::make_unique<VerdictMemory>(static_cast<size_t>(o.verdict_memory), verifier_->config_hash());
  sched_ = o.schedule;
  sched_.total_steps = o.max_steps > 0
                           ? o.max_steps
                           : (o.epochs * static_cast<int64_t>(tasks_.size()) + o.prompts_per_step - 1) / o.prompts_per_step;
  fingerprint_ = {{"problems", fs::absolute(o.problems).string()}, {"tasks", tasks_.size()}, {"seed", o.seed},
                  {"group_size", o.group_size}, {"prompts_per_step", o.prompts_per_step}, {"format", o.format},
                  {"order", o.order}};
  if (ckpt_) restore();
  if (main_) {
    fmt::print(stderr,
               "rl: {} tasks ({} skipped: prompt too long), {} prompts x {} samples per step, {} turns, {} rank(s) on {}; "
               "verifier: {}\n",
               tasks_.size(), too_long_, o.prompts_per_step, o.group_size, o.max_turns, dist_->world(),
               model::device_name(device_), verifier_->describe());
    // What this run trains on, one key a line: `bench-model --subset` evaluates the same problems.
    std::string keys;
    for (const auto& t : tasks_) keys += t.problem->key + "\n";
    write_file_atomic(fs::path(o.out_dir) / "problems.txt", keys);
  }
  if (!anchor_.empty() && !anchor_start_)
    anchor_start_ = train::mean_token_loss(*model_, anchor_, o.micro_batch_tokens, *dist_);
  log_ = std::make_unique<train::MetricsLog>(o.out_dir, start_, main_);
  order_ = epoch_order(tasks_, o.order, o.seed, epoch_);
  // Verifier failures, each with what the verifier said (OUT/infra_errors[-rankN].jsonl).
  infra_log_.open(fs::path(o.out_dir) / (dist_->world() > 1 ? fmt::format("infra_errors-rank{:05d}.jsonl", dist_->rank())
                                                            : std::string("infra_errors.jsonl")),
                  std::ios::app);
  result_.steps = start_;
  result_.main_rank = main_;
}

void RlRun::load_tasks() {
  tok_ = std::make_unique<tok::BpeTokenizer>(tok::BpeTokenizer::from_file((fs::path(o_.model_dir) / "tokenizer.json").string()));
  chat_ = tok::read_chat_format(o_.model_dir);
  auto all_tasks = synth::load_tasks(o_.problems, o_.format, o_.level, o_.backend);
  for (auto& t : all_tasks) {
    auto n = tok_->encode(tok::render_chat(chat_, {{"user", t.prompt}}, true)).size();
    if (static_cast<int64_t>(n) + o_.max_new_tokens > o_.max_seq_len) ++too_long_;
    else tasks_.push_back(std::move(t));
  }
  MC_CHECK(!tasks_.empty(), o_.problems, ": nothing to train on: ", all_tasks.size(),
           " problem(s), and every prompt with --max-new-tokens ", o_.max_new_tokens, " exceeds --max-seq-len ",
           o_.max_seq_len);
  if (!o_.keep_solved.empty()) tasks_ = keep_probed(std::move(tasks_), o_.keep_solved, false, main_);
  if (!o_.keep_varied.empty()) tasks_ = keep_probed(std::move(tasks_), o_.keep_varied, true, main_);
  if (o_.max_problems > 0 && static_cast<int64_t>(tasks_.size()) > o_.max_problems) {
    std::stable_sort(tasks_.begin(), tasks_.end(), curriculum_before);
    tasks_.resize(static_cast<size_t>(o_.max_problems));
  }
  for (size_t i = 0; i < tasks_.size(); ++i) task_by_key_[tasks_[i].problem->key] = i;
}

void RlRun::start_verifier() {
  eval::EvaluatorOptions eopts = o_.evaluator;
  eopts.timing_gate = o_.hold_judges;  // they time on our GPU: not while we generate or train
  // Overlapped, a judge gives back an answer that passed while we generate, to be timed once we
  // stop, rather than hold its lane (EvaluatorOptions::defer_timing).
  eopts.defer_timing = o_.rollout == Rollout::kOverlapped;
  verifier_ = o_.verifier_url.empty() ? serve::make_in_process_verifier(o_.eval_config, eopts)
                                      : serve::make_service_verifier(o_.verifier_url, o_.verifier_token, o_.eval_config);
  if (!o_.planted.empty()) planted_ = PlantedAnswers::load(o_.planted);
}

void RlRun::load_model() {
  dist_ = std::make_unique<train::Distributed>(env_, device_);
  at::manual_seed(o_.seed);
  model_ = std::make_unique<model::QwenModel>(
      model::QwenModel::load(ckpt_ ? ckpt_->dir : o_.model_dir, device_, model::parse_dtype(o_.dtype)));
  train::check_tokenizer_fits(*tok_, model_->config().vocab_size, o_.model_dir);
  MC_CHECK(o_.max_seq_len <= model_->config().max_position_embeddings, "--max-seq-len ", o_.max_seq_len,
           " exceeds the model's max_position_embeddings ", model_->config().max_position_embeddings);
  if (!o_.anchor_data.empty()) anchor_ = train::load_examples(o_.anchor_data, *tok_, o_.max_seq_len, nullptr, chat_);
  if (o_.loss.kl_coef > 0) ref_.emplace(model::QwenModel::load(o_.model_dir, device_, model_->dtype()));
  opt_ = std::make_unique<train::ShardedAdamW>(*model_, *dist_, o_.adamw);
  // Sharded weights leave the trainer's layers whole only while they compute: the engine samples
  // from a whole copy of its own (2P more memory per GPU), which every update refreshes.
  if (opt_->shards_weights()) {
    // The trainer's own folder: the same weights (a resume copies them again after load_state).
    engine_model_ = std::make_unique<model::QwenModel>(
        model::QwenModel::load(ckpt_ ? ckpt_->dir : o_.model_dir, device_, model_->dtype()));
  }
  const model::QwenModel& sampler = engine_model_ ? *engine_model_ : *model_;
  gen::EngineOptions eo;
  // Cache slots for the sequences a step can decode at once (this rank's prompts x the group;
  // later turns have fewer), not --max-batch's 256: at 16k positions that is 17 GB of cache
  // where 4 would do. A power of two, so the engine's batch buckets stay the same.
  // Overlapped, the next step's first turn is decoded beside this step's: twice.
  const bool overlapped = o_.rollout == Rollout::kOverlapped;
  const int64_t per_rank =
      (o_.prompts_per_step + dist_->world() - 1) / dist_->world() * o_.group_size * (overlapped ? 2 : 1);
  eo.max_batch = std::min<int64_t>(o_.max_batch, gen::slots_for(per_rank));
  eo.max_seq_len = o_.max_seq_len;
  if (overlapped) {
    // Answers are asked for one by one as verdicts come: the engine holds them until 8 can be
    // prefilled in one call, for at most 16 decode steps. Each prefill call otherwise stalls every
    // running sequence (on the H100: prefill 1.5-3.3 s of a 7-9 s step, against 0.3 s turn by turn).
    eo.admit_together = 8;
    eo.admit_wait_steps = 16;
  }
  engine_ = std::make_unique<gen::GenerationEngine>(sampler, tok_.get(), eo);
  runner_ = std::make_unique<RolloutRunner>(*engine_, sampler, *tok_, *verifier_, o_.planted.empty() ? nullptr : &planted_,
                                            chat_);
}

void RlRun::restore() {
  json st = train::load_checkpoint(*ckpt_, *opt_, *dist_);
  if (engine_model_) opt_->copy_weights_to(*engine_model_);
  MC_CHECK(st.value("kind", "") == "rl", ckpt_->dir, " is not an RL checkpoint");
  MC_CHECK(st.value("format_version", 1) <= kRlStateVersion, ckpt_->dir, " was written by a newer musacoder (RL state version ",
           st.value("format_version", 1), ", this one reads up to ", kRlStateVersion, ")");
  for (auto& [k, v] : fingerprint_.items())
    MC_CHECK(st["fingerprint"][k] == v, "--resume: ", k, " differs from the run in ", ckpt_->dir, " (was ",
             st["fingerprint"][k].dump(), ", now ", v.dump(), ")");
  start_ = st.at("step").get<int64_t>();
  epoch_ = st.at("data_position").at("epoch").get<int64_t>();
  index_ = st.at("data_position").at("index").get<int64_t>();
  elapsed_ = st.value("elapsed_s", 0.0);
  if (st.contains("anchor_loss_start") && !anchor_.empty()) anchor_start_ = st["anchor_loss_start"].get<double>();
  *buffer_ = RetryBuffer::from_json(st.at("retry_buffer"), retry_opts_);
  if (fs::exists(rank_file(ckpt_->dir, "verdicts"))) {
    *memory_ = VerdictMemory::from_json(json::parse(std::ifstream(rank_file(ckpt_->dir, "verdicts"))),
                                        static_cast<size_t>(o_.verdict_memory), verifier_->config_hash());
    if (memory_->dropped_on_load() > 0)
      fmt::print(stderr, "rl: {} remembered verdicts were judged under other evaluation settings; judging those answers again\n",
                 memory_->dropped_on_load());
  }
  MC_CHECK(!st.value("pending", false) && !st.value("carry_repairs", false), "--resume: the run in ", ckpt_->dir,
           " ran with --off-policy or --carry-repairs, which this version no longer has (resume it with the version "
           "that made it)");
  const std::string made = st.contains("rollout") ? st["rollout"].get<std::string>()
                                                  : (st.value("async", false) ? "overlapped" : "turns");
  MC_CHECK(made == rollout_name(o_.rollout), "--resume: the run in ", ckpt_->dir, " ran with --rollout ", made,
           " (give the same)");
  if (fs::exists(rank_file(ckpt_->dir, "next")))
    next_ = step_rollouts_from_json(json::parse(std::ifstream(rank_file(ckpt_->dir, "next"))), task_by_key_);
  if (main_) fmt::print(stderr, "rl: resumed from {} (step {})\n", ckpt_->dir, start_);
}

void RlRun::save(int64_t step) {
  json st = {{"kind", "rl"}, {"format_version", kRlStateVersion}, {"step", step},
             {"data_position", {{"epoch", epoch_}, {"index", index_}}}, {"retry_buffer", buffer_->to_json()},
             {"elapsed_s", elapsed_}, {"world_size", dist_->world()}, {"fingerprint", fingerprint_},
             {"total_steps", sched_.total_steps}, {"rollout", rollout_name(o_.rollout)}};
  if (anchor_start_) st["anchor_loss_start"] = *anchor_start_;
  // The next step's answers so far are saved with their verdicts: wait for them.
  if (next_) runner_->collect_turn(next_->batch, nullptr);
  train::save_checkpoint(o_.out_dir, step, *model_, o_.model_dir, *opt_, st, *dist_, static_cast<int>(o_.keep_last),
                         [&](const std::string& dir) {
                           if (next_) std::ofstream(rank_file(dir, "next")) << dump_json(to_json(*next_, tasks_)) << "\n";
                           if (memory_->enabled())
                             std::ofstream(rank_file(dir, "verdicts")) << dump_json(memory_->to_json()) << "\n";
                         });
  result_.last_checkpoint = (fs::path(o_.out_dir) / "checkpoints" / fmt::format("step-{:08d}", step)).string();
}

// A step's prompts: repair tasks first, then the next tasks in order (identical on every rank),
// and this rank's share. Moves the data position and the retry buffer's draws.
StepRollouts RlRun::draw(int64_t step) {
  StepRollouts r;
  std::vector<RolloutPrompt> prompts;
  if (o_.bdr) {
    for (auto& e : buffer_->draw(static_cast<size_t>(o_.prompts_per_step))) {
      ++r.repairs_drawn;
      auto it = task_by_key_.find(e.problem);
      if (it == task_by_key_.end()) continue;
      RolloutPrompt p;
      p.task = it->second;
      p.repair = true;
      p.messages = {{"user", tasks_[p.task].prompt}, {"assistant", e.failed_answer}, {"user", synth::repair_prompt(e.feedback)}};
      if (static_cast<int64_t>(runner_->encode_conversation(p.messages).size()) + o_.max_new_tokens > o_.max_seq_len) {
        ++r.repairs_skipped;
        continue;
      }
      prompts.push_back(std::move(p));
    }
  }
  while (static_cast<int>(prompts.size()) < o_.prompts_per_step) {
    if (index_ >= static_cast<int64_t>(order_.size())) {
      ++epoch_;
      index_ = 0;
      order_ = epoch_order(tasks_, o_.order, o_.seed, epoch_);
    }
    RolloutPrompt p;
    p.task = order_[static_cast<size_t>(index_++)];
    p.messages = {{"user", tasks_[p.task].prompt}};
    prompts.push_back(std::move(p));
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    prompts[i].seed = gen::mix64(gen::step_key(o_.seed, static_cast<uint64_t>(step)) + i);
  r.prompts = prompts.size();
  for (size_t i = 0; i < prompts.size(); ++i)
    if (static_cast<int>(i % dist_->world()) == dist_->rank()) {
      r.batch.prompts.push_back(prompts[i]);
      r.global_index.push_back(i);
    }
  return r;
}

RolloutOptions RlRun::rollout_options(int64_t step) const {
  RolloutOptions ropt;
  ropt.group_size = o_.group_size;
  ropt.max_turns = o_.max_turns;
  ropt.sampling.temperature = static_cast<float>(o_.temperature);
  ropt.sampling.top_p = static_cast<float>(o_.top_p);
  ropt.sampling.max_new_tokens = o_.max_new_tokens;
  ropt.sampling.loop_window = o_.loop_window;
  ropt.hold_judges = o_.hold_judges;
  ropt.pipeline = ropt.reuse_kv = o_.rollout == Rollout::kOverlapped;
  ropt.tag = fmt::format("s{}r{}", step, dist_->rank());
  ropt.step = step + 1;
  ropt.memory = memory_->enabled() ? memory_.get() : nullptr;
  return ropt;
}

// Steps 1-2: this step's prompts and their trajectories, to their last turn. Overlapped, they
// were drawn during the last step and their first turn decoded beside its turns, and the next
// step's are drawn now and decoded beside this step's.
StepRollouts RlRun::roll_out(int64_t step, RolloutStats* rstats) {
  StepRollouts cur;
  if (next_) {
    cur = std::move(*next_);
    next_.reset();
  } else {
    cur = draw(step);
    // Overlapped, its first turn is decoded in finish()'s loop, beside the second turns.
    cur.batch = runner_->start(cur.batch.prompts, tasks_, rollout_options(step), id_base(step), rstats);
  }
  cur.batch.opts = rollout_options(step);  // a batch loaded from a checkpoint has none saved
  if (o_.rollout == Rollout::kOverlapped && step + 1 < sched_.total_steps) {
    next_ = draw(step + 1);
    next_->batch =
        runner_->start(next_->batch.prompts, tasks_, rollout_options(step + 1), id_base(step + 1), rstats);
  }
  runner_->finish(cur.batch, tasks_, rstats, next_ ? &next_->batch : nullptr);
  return cur;
}

// Steps 4-5, and the merge of every rank's sums: returns the gradient norm; n_tokens is the
// global count of trained tokens.
double RlRun::update(int64_t step, const std::vector<TrainSeq>& batch, StepSums& sums, json events, json* all_events,
                     double* n_tokens) {
  UpdateOptions uo;
  uo.temperature = o_.temperature;
  uo.micro_batch_tokens = o_.micro_batch_tokens;
  uo.grad_checkpoint = o_.grad_checkpoint;
  uo.mirror_pop = o_.mirror_pop;
  uo.mirror_delta = o_.mirror_delta;
  uo.loss = o_.loss;
  json seqs = backward_policy_loss(*model_, ref_, *opt_, batch, uo, step + 1, sums, !o_.dump_dir.empty());
  // Every rank's sums and retry-buffer events, merged the same way everywhere.
  StepSums merged;
  for (const auto& s : all_gather_strings(*dist_, dump_json(json{{"acc", sums.sums()}, {"events", events}}), device_)) {
    json j = json::parse(s);
    merged.merge(j["acc"]);
    for (auto& e : j["events"]) all_events->push_back(e);
  }
  sums = std::move(merged);
  *n_tokens = sums.tokens_trained();
  double grad_norm = opt_->finish_gradients(o_.grad_clip, *n_tokens > 0 ? 1.0 / *n_tokens : 1.0);
  if (!o_.dump_dir.empty()) dump_gradients(*model_, *opt_, o_.dump_dir, step + 1, uo, *n_tokens, seqs);
  if (*n_tokens > 0) {
    opt_->step(sched_.at(step));
    if (engine_model_) opt_->copy_weights_to(*engine_model_);  // the engine samples what was just stepped
    engine_->release_kept();  // kept K/V are the old weights': a later turn prefills anew
  }
  return grad_norm;
}

// Every rank's retry-buffer events, in prompt order: all-failed groups enter the buffer, a pass
// removes its problem.
void RlRun::apply_retry_events(int64_t step, json events) {
  std::stable_sort(events.begin(), events.end(),
                   [](const json& a, const json& b) { return a["prompt"].get<size_t>() < b["prompt"].get<size_t>(); });
  for (const auto& e : events) {
    if (e["kind"] == "add") {
      if (o_.bdr) buffer_->add({e["problem"], e["answer"], e["feedback"], 0, step});
    } else {
      buffer_->repaired(e["problem"].get<std::string>());
    }
  }
}

// Step 6: the row of metrics.jsonl (returned), the profile and the samples.
json RlRun::report(int64_t step, const StepRollouts& done, const StepSums& sums, StepFacts f,
                   std::optional<train::RegionProfiler>& profiler) {
  f.prompts = done.prompts;
  f.repairs_drawn = done.repairs_drawn;
  f.repairs_skipped = done.repairs_skipped;
  f.max_turns = o_.max_turns;
  f.epoch = epoch_ + static_cast<double>(index_) / static_cast<double>(tasks_.size());
  json row = sums.row(f);
  if (auto mem = model::peak_memory_gib(device_)) {
    auto t = at::tensor({mem->first, mem->second}, at::kDouble).to(device_);
    dist_->all_reduce_max(t);
    row["peak_alloc_gib"] = t[0].item<double>();
    row["peak_reserved_gib"] = t[1].item<double>();
  }
  log_->log("rl", step + 1, row);
  const RolloutStats& rs = f.rollout;
  if (profiler) {
    // Phases the step measured itself; generation's parts from the engine's own clocks.
    const gen::EngineStats& gd = f.engine;
    json phases = json::array({{{"name", "generate"}, {"s", rs.generate_s}}});
    for (const auto& p : train::engine_phases(gd)) phases.push_back(p);
    phases.push_back({{"name", "between decode steps (taking tokens, answers to MooreEval)"},
                      {"s", std::max(0.0, rs.generate_s - gd.step_wall_ms / 1e3 - gd.prefill_wall_ms / 1e3)}, {"of", "generate"}});
    phases.push_back({{"name", "answers handed to MooreEval (extraction, static checks, compile submitted)"},
                      {"s", rs.submit_s}, {"of", "generate"}});
    phases.push_back({{"name", "waiting for MooreEval"}, {"s", rs.verify_wait_s}});
    phases.push_back({{"name", "train"}, {"s", f.train_s}});
    phases.push_back({{"name", "rest of the step (rewards, advantages, bookkeeping)"},
                      {"s", std::max(0.0, f.step_s - rs.generate_s - rs.verify_wait_s - f.train_s)}});
    const std::string base = (fs::path(o_.out_dir) / "profile" / fmt::format("step-{}", step + 1)).string();
    json p = profiler->stop(base,
                            fmt::format("RL step {} ({} decode steps, {:.0f} rows each, span {:.0f}; profiler on, so "
                                        "slower than the other steps)",
                                        step + 1, gd.decode_steps, row["gen_rows_per_decode_step"].get<double>(),
                                        row["gen_span_mean"].get<double>()),
                            phases, o_.profile_trace);
    fmt::print(stderr, "rl: profile of step {} in {}.md (GPU busy {:.0f}% of it)\n", step + 1, base,
               100 * p.value("gpu_busy_share", 0.0));
    profiler.reset();
  }
  const std::vector<RolloutPrompt>& mine = done.batch.prompts;
  if (main_ && o_.samples_every > 0 && (step + 1) % o_.samples_every == 0) {
    fs::create_directories(fs::path(o_.out_dir) / "samples");
    std::ofstream out(fs::path(o_.out_dir) / "samples" / fmt::format("step-{:08d}.jsonl", step + 1));
    // Spread over prompts: sample 0 of the first prompts, then the rest.
    int written = 0;
    for (int g = 0; g < o_.group_size && written < o_.samples_to_write; ++g)
      for (size_t p = 0; p < mine.size() && written < o_.samples_to_write; ++p, ++written) {
        const Trajectory& t = done.batch.traj[p * o_.group_size + g];
        out << dump_json(trajectory_json(t, mine[p], tasks_[mine[p].task])) << "\n";
      }
  }
  return row;
}

// The step loop. Each step: draw prompts and roll out (1-2), score the groups (3), update the
// policy (4-5), apply the retry buffer's events, report (6), save.
RlResult RlRun::run() {
  ProgressBar bar("rl", static_cast<size_t>(std::max<int64_t>(0, sched_.total_steps - start_)), main_ && o_.progress);
  for (int64_t step = start_; step < sched_.total_steps; ++step) {
    auto t_step = Clock::now();
    model::reset_peak_memory(device_);
    std::optional<train::RegionProfiler> profiler;
    if (main_ && o_.profile_step == step + 1) profiler.emplace(device_.is_cuda());
    const gen::EngineStats gen0 = engine_->stats();
    StepFacts f;
    StepSums sums;
    StepRollouts done = roll_out(step, &f.rollout);
    std::vector<Trajectory>& traj = done.batch.traj;
    sums.shared_verdicts(traj);
    json events = score_groups(traj, done.batch.prompts, done.global_index, tasks_,
                               {o_.group_size, o_.prime_echo, o_.adv_std_floor}, sums);
    log_infra_errors(traj, done.batch.prompts, tasks_, step + 1, infra_log_);

    auto t_train = Clock::now();
    // No judge times on our GPU while we train (overlapped, the next step's answers are being
    // judged now); compiles and correctness trials go on.
    if (o_.hold_judges) verifier_->hold(true);
    json all_events = json::array();
    double n_tokens = 0;
    f.grad_norm = update(step, train_sequences(traj, o_.loss.kl_coef != 0), sums, std::move(events), &all_events, &n_tokens);
    f.lr = sched_.at(step);
    f.train_s = since(t_train);
    if (!anchor_.empty() && (step + 1) % o_.anchor_every == 0) {
      auto t_anchor = Clock::now();
      f.anchor = true;
      f.anchor_loss = train::mean_token_loss(*model_, anchor_, o_.micro_batch_tokens, *dist_);
      f.anchor_loss_change = f.anchor_loss - *anchor_start_;
      f.anchor_s = since(t_anchor);
    }
    if (o_.hold_judges) verifier_->hold(false);
    f.bdr_before = buffer_->counters();
    apply_retry_events(step, std::move(all_events));
    f.bdr_after = buffer_->counters();
    f.bdr_size = buffer_->size();
    f.step_s = since(t_step);
    elapsed_ += f.step_s;
    f.engine = gen::stats_between(gen0, engine_->stats());
    const json row = report(step, done, sums, f, profiler);
    result_.steps = step + 1;
    bar.advance(1, fmt::format("reward {:.3f} pass@t1 {:.2f} gen {:.1f}s verify {:.1f}s train {:.1f}s",
                               row["reward_mean"].get<double>(), row["pass_rate_turn1"].get<double>(),
                               f.rollout.generate_s, f.rollout.verify_wait_s, f.train_s));
    if (o_.kill_after_step == step + 1) std::raise(SIGKILL);
    if ((o_.save_every > 0 && (step + 1) % o_.save_every == 0) || step + 1 == sched_.total_steps) save(step + 1);
  }
  if (result_.last_checkpoint.empty() && ckpt_) result_.last_checkpoint = ckpt_->dir;
  return result_;
}

}  // namespace

RlResult run_rl(const RlOptions& o) { return RlRun(o).run(); }

}  // namespace mc::rl
