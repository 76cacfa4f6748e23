#include "rl/rollout.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/clock.h"
#include "common/jsonl.h"
#include "generate/counter_rng.h"
#include "rl/pipelined_turns.h"
#include "rl/rollout_steps.h"
#include "synth/prompt.h"

namespace mc::rl {
namespace detail {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Adds the seconds from its making to its end to *into (when set): a function's time, on every return.
struct AddTime {
  double* into;
  Clock::time_point t0 = Clock::now();
  ~AddTime() {
    if (into) *into += since(t0);
  }
};

std::string sample_id(const std::string& tag, const Trajectory& t, int turn) {
  return fmt::format("{}-p{}-g{}-t{}", tag, t.prompt, t.sample, turn);
}

// A sampled answer, as the engine gave it, continuing `context`.
TurnRecord sampled(const std::vector<int32_t>& context, const gen::Completion& c) {
  TurnRecord rec;
  rec.context = context;
  rec.tokens = c.tokens;
  rec.logprobs = c.logprobs;
  rec.text = c.text;
  rec.finish_reason = c.finish_reason;
  return rec;
}

// Trajectory i's last answer is a twin of one judged earlier in the batch: that one's verdict,
// under its own sample id.
void share_twin_verdict(std::vector<Trajectory>& traj, size_t i, const std::string& tag) {
  TurnRecord& rec = traj[i].turns.back();
  rec.result = traj[rec.twin_of->first].turns[static_cast<size_t>(rec.twin_of->second - 1)].result;
  rec.result.sample_id = sample_id(tag, traj[i], static_cast<int>(traj[i].turns.size()));
}

// A verdict that came while the rollout waited: what MooreEval's work on it was made of.
void count_wait(RolloutStats* stats, const eval::EvalResult& r, double wait_began) {
  if (!stats || r.finished_at <= wait_began) return;
  ++stats->wait_answers;
  stats->wait_work_s["compile"] += r.compile_s;
  // From submission to verdict, and the part of it spent neither compiling nor in the judge:
  // extraction and static checks, the compile pool's and the judges' queues, timing held back.
  // Against compile + the judge's stages, whether the answers waited for queued or were worked on.
  stats->wait_work_s["wall"] += r.wall_s;
  stats->wait_work_s["queued"] += std::max(0.0, r.wall_s - r.compile_s - r.exec_s);
  // Counts, not seconds: answers a judge gave back because timing was held (overlapped; each
  // judged again once timing was released), and how many times. Timing waits for our GPU to be
  // idle, so such answers pile up while the engine decodes and are judged in the waits.
  if (r.judge_details.is_object() && r.judge_details.contains("timing_deferred") &&
      r.judge_details["timing_deferred"].is_number()) {
    stats->wait_work_s["deferred.answers"] += 1;
    stats->wait_work_s["deferred.times"] += r.judge_details["timing_deferred"].get<double>();
  }
  if (r.exec_stages.is_object())
    for (const auto& [stage, sec] : r.exec_stages.items()) {
      if (sec.is_number()) stats->wait_work_s[stage] += sec.get<double>();
      // The parts of two stages: where the trials' time went (the judge's reference and float64
      // truth runs, sharing the inputs, the candidate's run and its own cand_* parts, reading
      // outputs, the checks), and how the candidate's process started (imports, its CUDA
      // context, ...; ahead of time for a spare).
      const char* prefix = stage == "trial_parts" ? "trials." : stage == "start_parts" ? "start." : nullptr;
      if (prefix && sec.is_object())
        for (const auto& [part, s] : sec.items())
          if (s.is_number()) stats->wait_work_s[prefix + part] += s.get<double>();
      // A count, not seconds: candidates forked by the zygote (imports done) or started afresh
      // (Python and torch imported anew, ~4 s alone), since start.imports differs by it.
      if (stage == "process" && sec.is_string()) stats->wait_work_s["process." + sec.get<std::string>()] += 1;
    }
}

// Whether a trajectory stops after its last answer's verdict (and why).
void stop_after_verdict(Trajectory& t, int max_turns) {
  const TurnRecord& last = t.turns.back();
  if (last.infra()) t.stop_reason = "infra_error";
  else if (last.passed()) t.stop_reason = "passed";
  else if (static_cast<int>(t.turns.size()) >= max_turns) t.stop_reason = "max_turns";
}

}  // namespace detail
using namespace detail;

int Trajectory::first_pass() const {
  for (size_t k = 0; k < turns.size(); ++k)
    if (turns[k].passed()) return static_cast<int>(k) + 1;
  return 0;
}

PlantedAnswers PlantedAnswers::load(const std::string& path) {
  PlantedAnswers p;
  auto rows = read_jsonl(path);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    MC_CHECK(r.contains("problem") && r["problem"].is_string() && r.contains("turn") && r["turn"].is_number_integer() &&
                 r.contains("sample") && r["sample"].is_number_integer() && r.contains("answer") && r["answer"].is_string(),
             path, ":", i + 1, ": a planted answer needs \"problem\" (key), \"turn\" (1-based), \"sample\" and \"answer\"");
    int64_t step = r.contains("step") ? r["step"].get<int64_t>() : 0;
    p.answers[{r["problem"].get<std::string>(), step, r["turn"].get<int>(), r["sample"].get<int>()}] =
        r["answer"].get<std::string>();
  }
  return p;
}

const std::string* PlantedAnswers::find(const std::string& problem, int64_t step, int turn, int sample) const {
  auto it = answers.find({problem, step, turn, sample});
  if (it == answers.end()) it = answers.find({problem, 0, turn, sample});
  return it == answers.end() ? nullptr : &it->second;
}

RolloutRunner::RolloutRunner(gen::GenerationEngine& engine, const model::QwenModel& model, const tok::BpeTokenizer& tok,
                             serve::Verifier& verifier, const PlantedAnswers* planted, tok::ChatFormat chat)
    : engine_(engine), model_(model), tok_(tok), verifier_(verifier), planted_(planted), chat_(std::move(chat)) {
  im_end_ = tok_.token_to_id("<|im_end|>");
  MC_CHECK(im_end_ >= 0, "the tokenizer has no <|im_end|> token: RL rollouts are ChatML conversations");
}

std::vector<int32_t> RolloutRunner::encode_conversation(const std::vector<tok::ChatTurn>& messages) const {
  return tok_.encode(tok::render_chat(chat_, messages, /*add_generation_prompt=*/true));
}

std::vector<Trajectory> RolloutRunner::run(const std::vector<RolloutPrompt>& prompts, const std::vector<synth::Task>& tasks,
                                           const RolloutOptions& o, RolloutStats* stats) {
  RolloutBatch b = start(prompts, tasks, o, 0, stats);
  finish(b, tasks, stats);
  return std::move(b.traj);
}

RolloutBatch RolloutRunner::start(const std::vector<RolloutPrompt>& prompts, const std::vector<synth::Task>& tasks,
                                  const RolloutOptions& o, size_t id_base, RolloutStats* stats) {
  MC_CHECK(o.group_size >= 1 && o.max_turns >= 1, "rollouts need a group size and max turns >= 1");
  RolloutBatch b;
  b.prompts = prompts;
  b.opts = o;
  b.id_base = id_base;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int g = 0; g < o.group_size; ++g) {
      Trajectory t;
      t.prompt = p;
      t.sample = g;
      b.traj.push_back(std::move(t));
      b.convo.push_back(prompts[p].messages);
    }
  if (!o.pipeline) generate_turn(b, tasks, stats);
  return b;
}

void RolloutRunner::finish(RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats, RolloutBatch* beside) {
  MC_CHECK(!beside || b.opts.pipeline, "rollouts: a batch decoded beside another needs pipelined turns");
  if (b.opts.pipeline) return PipelinedTurns(*this, b, tasks, stats, beside).run();
  for (;;) {
    if (!b.collected) collect_turn(b, stats);
    if (!generate_turn(b, tasks, stats)) break;
  }
  for (auto& t : b.traj) {
    if (t.stop_reason.empty()) t.stop_reason = "max_turns";
    let_go(t);
  }
}

gen::GenerationRequest RolloutRunner::first_request(const RolloutBatch& b, size_t p, const std::vector<synth::Task>& tasks) const {
  gen::GenerationRequest r;
  r.prompt = encode_conversation(b.prompts[p].messages);
  r.params = b.opts.sampling;
  r.params.n = b.opts.group_size;
  r.params.seed = b.prompts[p].seed;
  r.params.stop_token_ids = {im_end_};
  r.keep_kv = b.opts.reuse_kv && b.opts.max_turns > 1;
  const int64_t max_seq = engine_.options().max_seq_len;
  MC_CHECK(static_cast<int64_t>(r.prompt.size()) + r.params.max_new_tokens <= max_seq, "prompt of ",
           tasks[b.prompts[p].task].problem->key, " (", r.prompt.size(), " tokens) + --max-new-tokens exceeds --max-seq-len ",
           max_seq);
  return r;
}

bool RolloutRunner::next_request(RolloutBatch& b, size_t i, int turn, gen::GenerationRequest* r, RolloutStats* stats) const {
  AddTime timed{stats ? &stats->ask_s : nullptr};
  Trajectory& t = b.traj[i];
  const TurnRecord& last = t.turns.back();
  b.convo[i].push_back({"assistant", last.text});
  b.convo[i].push_back({"user", synth::repair_prompt(last.result.feedback)});
  r->prompt = encode_conversation(b.convo[i]);
  r->params = b.opts.sampling;
  r->params.n = 1;
  r->params.seed = gen::mix64(b.prompts[t.prompt].seed ^ gen::mix64(static_cast<uint64_t>(t.sample) * 1315423911u + turn));
  r->params.stop_token_ids = {im_end_};
  if (static_cast<int64_t>(r->prompt.size()) + r->params.max_new_tokens > engine_.options().max_seq_len) {
    t.stop_reason = "context_full";
    let_go(t);
    return false;
  }
  // The engine takes the kept cache over (or, if it gave the entry up, prefills everything).
  r->keep_kv = b.opts.reuse_kv && turn < b.opts.max_turns;
  r->continues = std::exchange(t.kv, -1);
  return true;
}

void RolloutRunner::let_go(Trajectory& t) const {
  if (t.kv >= 0) engine_.release(t.kv);
  t.kv = -1;
}

// An answer identical to one already judged in the batch (same problem, same text) is not
// judged again: it gets that verdict. Verification costs less, and identical answers get the
// same score, where timing noise would otherwise give them different rewards and so advantages
// with no cause in the policy (a memorizing model samples many twins).
RolloutRunner::Judged RolloutRunner::submit_answer(RolloutBatch& b, size_t i, int turn, const std::vector<synth::Task>& tasks,
                                                   RolloutStats* stats) {
  AddTime timed{stats ? &stats->submit_s : nullptr};
  const RolloutOptions& o = b.opts;
  Trajectory& t = b.traj[i];
  const synth::Task& task = tasks[b.prompts[t.prompt].task];
  const std::string problem = problem_identity(*task.problem);
  auto [it, fresh] = b.judged.try_emplace({problem, t.turns.back().text}, std::make_pair(i, turn));
  if (!fresh) {
    t.turns.back().twin_of = it->second;
    return Judged::kTwin;
  }
  if (o.memory)
    if (const eval::EvalResult* earlier = o.memory->find(problem, t.turns.back().text)) {
      TurnRecord& rec = t.turns.back();
      rec.result = *earlier;
      rec.result.sample_id = sample_id(o.tag, t, turn);
      rec.reused = true;
      return Judged::kReused;
    }
  eval::Candidate c;
  c.problem = task.problem;
  c.problem_ref = task.problem->key;
  c.sample_id = sample_id(o.tag, t, turn);
  c.answer = t.turns.back().text;
  c.origin = "rollout";
  c.priority = o.step;  // overlapped, this step's answers before the next step's
  verifier_.submit(b.id_base + i, std::move(c));
  return Judged::kSubmitted;
}

void RolloutRunner::plant(TurnRecord& rec, const std::string& text, float temperature) const {
  rec.text = text;
  rec.tokens = tok_.encode(rec.text);
  rec.tokens.push_back(im_end_);
  rec.finish_reason = "stop";
  rec.planted = true;
  // The policy's own log-probabilities of the planted tokens, as the engine reports them.
  std::vector<int64_t> ids(rec.context.begin(), rec.context.end());
  ids.insert(ids.end(), rec.tokens.begin(), rec.tokens.end());
  auto lp = model_.token_logprobs(at::tensor(ids).unsqueeze(0).to(model_.device()), temperature)
                .squeeze(0)
                .to(at::kFloat)
                .cpu();
  const int64_t n = rec.tokens.size(), T = lp.size(0);
  rec.logprobs.assign(lp.data_ptr<float>() + (T - n), lp.data_ptr<float>() + T);
}


bool RolloutRunner::generate_turn(RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats) {
  MC_INTERNAL_ASSERT(b.collected, "rollouts: a turn generated before the last one's verdicts were collected");
  const RolloutOptions& o = b.opts;
  const int turn = b.turns + 1;
  b.answering.clear();
  b.twins.clear();
  for (const Trajectory& t : b.traj)
    MC_CHECK(!t.stop_reason.empty() || static_cast<int>(t.turns.size()) == b.turns,
             "rollouts: turn by turn, every running trajectory must be at the same turn; this batch's trajectories "
             "reached different turns");
  if (turn > o.max_turns) return false;
  c10::AutoGradMode no_grad(false);
  std::vector<Trajectory>& traj = b.traj;
  const auto& prompts = b.prompts;
  // Who answers this turn: request r -> (trajectories it serves).
  std::vector<gen::GenerationRequest> reqs;
  std::vector<std::vector<size_t>> served;
  if (turn == 1) {
    for (size_t p = 0; p < prompts.size(); ++p) {
      std::vector<size_t> ids;
      for (int g = 0; g < o.group_size; ++g) ids.push_back(p * o.group_size + g);
      reqs.push_back(first_request(b, p, tasks));
      served.push_back(std::move(ids));
    }
  } else {
    for (size_t i = 0; i < traj.size(); ++i) {
      if (!traj[i].stop_reason.empty()) {
        let_go(traj[i]);
        continue;
      }
      gen::GenerationRequest r;
      if (!next_request(b, i, turn, &r, stats)) continue;
      reqs.push_back(std::move(r));
      served.push_back({i});
    }
  }
  if (reqs.empty()) return false;
  b.turns = turn;
  b.collected = false;
  for (auto& ids : served) b.answering.insert(b.answering.end(), ids.begin(), ids.end());

  // Generate; each sampled answer goes to MooreEval at once (planted ones after generation).
  std::vector<size_t> pending_planted;
  auto submit = [&](size_t i) {
    if (submit_answer(b, i, turn, tasks, stats) == Judged::kTwin) b.twins.push_back(i);
  };
  auto record = [&](size_t i, const std::vector<int32_t>& context, const gen::Completion& comp) {
    Trajectory& t = traj[i];
    t.turns.push_back(sampled(context, comp));
    t.kv = comp.kept;
    const std::string& key = tasks[prompts[t.prompt].task].problem->key;
    if (planted_ && planted_->find(key, o.step, turn, t.sample)) pending_planted.push_back(i);
    else submit(i);
  };
  auto t0 = Clock::now();
  if (o.hold_judges) verifier_.hold(true);
  auto outs = engine_.generate(reqs, {}, [&](size_t r, int s, const gen::Completion& c) {
    record(served[r][static_cast<size_t>(s)], reqs[r].prompt, c);
  });
  if (stats) {
    stats->generate_s += since(t0);
    for (auto& o2 : outs)
      for (auto& c : o2) stats->generated_tokens += c.tokens.size();
  }
  for (size_t i : pending_planted) {
    Trajectory& t = traj[i];
    TurnRecord& rec = t.turns.back();
    const std::string& key = tasks[prompts[t.prompt].task].problem->key;
    plant(rec, *planted_->find(key, o.step, turn, t.sample), o.sampling.temperature);
    submit(i);
  }
  if (o.hold_judges) verifier_.hold(false);
  return true;
}

void RolloutRunner::collect_turn(RolloutBatch& b, RolloutStats* stats) {
  if (b.collected) return;
  std::vector<Trajectory>& traj = b.traj;
  std::vector<size_t> ids;
  for (size_t i : b.answering)
    if (!traj[i].turns.back().twin_of && !traj[i].turns.back().reused) ids.push_back(b.id_base + i);
  auto t1 = Clock::now();
  const double wait_began = unix_now();
  std::set<size_t> judged_now;
  for (auto& [id, r] : verifier_.collect(ids)) {
    count_wait(stats, r, wait_began);
    traj[id - b.id_base].turns.back().result = std::move(r);
    judged_now.insert(id - b.id_base);
  }
  if (stats) stats->verify_wait_s += since(t1);
  // The answers judged now: the (problem, text) entries of `judged` that point at the last
  // answer of a trajectory collected here.
  if (b.opts.memory)
    for (const auto& [answer, where] : b.judged)
      if (judged_now.count(where.first) && where.second == static_cast<int>(traj[where.first].turns.size()))
        b.opts.memory->remember(answer.first, answer.second, traj[where.first].turns.back().result);
  for (size_t i : b.twins) share_twin_verdict(traj, i, b.opts.tag);
  for (size_t i : b.answering) stop_after_verdict(traj[i], b.opts.max_turns);
  b.collected = true;
}

// --- checkpoints ---------------------------------------------------------------------------

nlohmann::json RolloutBatch::to_json(const std::vector<synth::Task>& tasks) const {
  using json = nlohmann::json;
  MC_INTERNAL_ASSERT(collected, "rollouts: a batch is saved only once its last turn's verdicts are in");
  auto turns_json = [](const std::vector<tok::ChatTurn>& m) {
    json a = json::array();
    for (const auto& t : m) a.push_back({t.role, t.content});
    return a;
  };
  json ps = json::array();
  for (const auto& p : prompts)
    ps.push_back({{"problem", tasks[p.task].problem->key}, {"repair", p.repair}, {"messages", turns_json(p.messages)},
                  {"seed", p.seed}});
  json ts = json::array();
  for (size_t i = 0; i < traj.size(); ++i) {
    const Trajectory& t = traj[i];
    json turns = json::array();
    for (const auto& r : t.turns)
      turns.push_back({{"context", r.context}, {"tokens", r.tokens}, {"logprobs", r.logprobs}, {"text", r.text},
                       {"finish_reason", r.finish_reason}, {"result", eval::to_json(r.result)}, {"planted", r.planted},
                       {"twin_of", r.twin_of ? json{r.twin_of->first, r.twin_of->second} : json()},
                       {"reused", r.reused}});
    ts.push_back({{"prompt", t.prompt}, {"sample", t.sample}, {"stop", t.stop_reason}, {"turns", turns},
                  {"convo", turns_json(convo[i])}});
  }
  json jd = json::array();
  for (const auto& [k, v] : judged) jd.push_back({k.first, k.second, v.first, v.second});
  // `answering` and `twins` matter only until a turn is collected: not saved.
  return {{"prompts", ps}, {"trajectories", ts}, {"judged", jd}, {"turns", turns}, {"id_base", id_base}};
}

RolloutBatch RolloutBatch::from_json(const nlohmann::json& j, const std::map<std::string, size_t>& task_by_key) {
  auto turns_from = [](const nlohmann::json& a) {
    std::vector<tok::ChatTurn> m;
    for (const auto& t : a) m.push_back({t.at(0).get<std::string>(), t.at(1).get<std::string>()});
    return m;
  };
  RolloutBatch b;
  for (const auto& p : j.at("prompts")) {
    auto it = task_by_key.find(p.at("problem").get<std::string>());
    MC_CHECK(it != task_by_key.end(), "--resume: the checkpoint's next rollouts ask for problem ", p.at("problem").dump(),
             ", which is no longer in --problems");
    b.prompts.push_back({it->second, p.at("repair").get<bool>(), turns_from(p.at("messages")), p.at("seed").get<uint64_t>()});
  }
  for (const auto& tj : j.at("trajectories")) {
    Trajectory t;
    t.prompt = tj.at("prompt").get<size_t>();
    t.sample = tj.at("sample").get<int>();
    t.stop_reason = tj.at("stop").get<std::string>();
    for (const auto& r : tj.at("turns")) {
      TurnRecord rec;
      rec.context = r.at("context").get<std::vector<int32_t>>();
      rec.tokens = r.at("tokens").get<std::vector<int32_t>>();
      rec.logprobs = r.at("logprobs").get<std::vector<float>>();
      rec.text = r.at("text").get<std::string>();
      rec.finish_reason = r.at("finish_reason").get<std::string>();
      rec.result = eval::result_from_json(r.at("result"));
      rec.planted = r.at("planted").get<bool>();
      if (!r.at("twin_of").is_null()) rec.twin_of = std::make_pair(r["twin_of"][0].get<size_t>(), r["twin_of"][1].get<int>());
      rec.reused = r.value("reused", false);
      t.turns.push_back(std::move(rec));
    }
    b.traj.push_back(std::move(t));
    b.convo.push_back(turns_from(tj.at("convo")));
  }
  for (const auto& e : j.at("judged"))
    b.judged[{e[0].get<std::string>(), e[1].get<std::string>()}] = {e[2].get<size_t>(), e[3].get<int>()};
  b.turns = j.at("turns").get<int>();
  b.id_base = j.at("id_base").get<size_t>();
  b.collected = true;
  return b;
}

}  // namespace mc::rl
