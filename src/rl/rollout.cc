#include "rl/rollout.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <set>
#include <utility>

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/clock.h"
#include "common/jsonl.h"
#include "generate/counter_rng.h"
#include "synth/prompt.h"

namespace mc::rl {
namespace {

using Clock = std::chrono::steady_clock;
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
  // Counts, not seconds: answers a judge gave back because timing was held (--defer-timing; each
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

}  // namespace

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
                                  const RolloutOptions& o, size_t id_base, RolloutStats* stats, bool first_turn_now) {
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
  if (first_turn_now || !o.pipeline) generate_turn(b, tasks, stats);
  return b;
}

void RolloutRunner::finish(RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats,
                           const std::function<void()>& at_first_wait, RolloutBatch* beside, bool beside_repairs,
                           const std::vector<CarriedBatch>& carried) {
  MC_CHECK(!beside || b.opts.pipeline, "rollouts: a batch decoded beside another needs pipelined turns");
  MC_CHECK(beside || !beside_repairs, "rollouts: repairs ahead need a batch beside");
  MC_CHECK((carried.empty() && !b.opts.carry_repairs) || b.opts.pipeline, "rollouts: carried repairs need pipelined turns");
  MC_CHECK(!beside_repairs || (carried.empty() && !b.opts.carry_repairs),
           "rollouts: repairs ahead and carried repairs exclude each other");
  if (b.opts.pipeline) return finish_pipelined(b, tasks, stats, at_first_wait, beside, beside_repairs, carried);
  bool waited = false;
  for (;;) {
    if (!b.collected) {
      if (!waited && at_first_wait) at_first_wait();
      waited = true;
      collect_turn(b, stats);
    }
    if (!generate_turn(b, tasks, stats)) break;
  }
  if (!waited && at_first_wait) at_first_wait();
  for (auto& t : b.traj) {
    if (t.stop_reason.empty()) t.stop_reason = "max_turns";
    let_go(t);
  }
}

int RolloutRunner::group_turns(const RolloutBatch& b, size_t p) {
  const size_t g = static_cast<size_t>(b.opts.group_size);
  size_t most = 0;
  for (size_t i = p * g; i < (p + 1) * g; ++i) most = std::max(most, b.traj[i].turns.size());
  return static_cast<int>(most);
}

void RolloutRunner::finish_pipelined(RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats,
                                     const std::function<void()>& at_first_wait, RolloutBatch* beside,
                                     bool beside_repairs, const std::vector<CarriedBatch>& carried) {
  c10::AutoGradMode no_grad(false);
  // A batch's answers in this loop: b's own, `beside`'s, and each carried batch's.
  struct Flow {
    Flow(RolloutBatch* x, bool s, int d = 0) : b(x), settle(s), due(d) {}
    RolloutBatch* b;
    std::set<size_t> judging;  // trajectories whose last answer MooreEval is judging
    std::map<std::pair<size_t, int>, std::vector<size_t>> twins_of;  // a judged answer -> its twins, waiting
    int64_t generating = 0;        // answers asked of the engine and not yet sampled
    std::vector<size_t> to_plant;  // answers to replace by planted ones (tests) once the engine step is over
    // Verdicts are taken here and a failed answer's next turn asked for at once. Off for
    // `beside` (but with beside_repairs until b has stopped): its answers are only submitted.
    bool settle;
    int due;  // the loop ends once every answer up to this turn has its verdict (b's and carried batches')
  };
  Flow own(&b, true, b.opts.carry_repairs ? 1 : b.opts.max_turns), next(beside, beside_repairs);
  std::deque<Flow> carry;  // (a deque: the engine's callbacks hold on to a Flow's address)
  for (const CarriedBatch& c : carried) {
    MC_INTERNAL_ASSERT(c.batch && c.due >= 1 && c.due <= c.batch->opts.max_turns, "rollouts: a carried batch's due turn");
    carry.emplace_back(c.batch, true, c.due);
  }
  std::vector<Flow*> settling = {&own};  // the flows whose verdicts may be due
  for (Flow& f : carry) settling.push_back(&f);
  auto generating = [&] {
    int64_t n = next.generating;
    for (const Flow* f : settling) n += f->generating;
    return n;
  };
  auto problem_key = [&](const Flow& f, size_t i) -> const std::string& {
    return tasks[f.b->prompts[f.b->traj[i].prompt].task].problem->key;
  };
  std::function<void(Flow&, size_t)> verdict, answered;
  // Trajectory i's answer, sampled: to MooreEval, or kept for a planted one.
  auto landed = [&](Flow& f, size_t i, const std::vector<int32_t>& context, const gen::Completion& c) {
    Trajectory& t = f.b->traj[i];
    t.turns.push_back(sampled(context, c));
    t.kv = c.kept;
    if (stats) stats->generated_tokens += static_cast<int64_t>(c.tokens.size());
    --f.generating;
    if (planted_ && planted_->find(problem_key(f, i), f.b->opts.step, static_cast<int>(t.turns.size()), t.sample))
      f.to_plant.push_back(i);
    else
      answered(f, i);
  };
  auto pending = [&](const Flow& f, std::pair<size_t, int> answer) {
    return f.judging.count(answer.first) && static_cast<int>(f.b->traj[answer.first].turns.size()) == answer.second;
  };
  auto take_twin = [&](Flow& f, size_t i) { share_twin_verdict(f.b->traj, i, f.b->opts.tag); };
  // Trajectory i has a new answer: to MooreEval, or the verdict of its twin or of the memory
  // (unsettled: left for the next finish()).
  answered = [&](Flow& f, size_t i) {
    RolloutBatch& x = *f.b;
    const int turn = static_cast<int>(x.traj[i].turns.size());
    x.turns = std::max(x.turns, turn);
    switch (submit_answer(x, i, turn, tasks, stats)) {
      case Judged::kSubmitted: f.judging.insert(i); break;
      case Judged::kReused:
        if (f.settle) verdict(f, i);
        break;
      case Judged::kTwin:
        if (!f.settle) break;
        if (pending(f, *x.traj[i].turns.back().twin_of)) {
          f.twins_of[*x.traj[i].turns.back().twin_of].push_back(i);
        } else {
          take_twin(f, i);
          verdict(f, i);
        }
        break;
    }
  };
  // Trajectory i's last answer has its verdict: it stops, or its next answer is asked for now.
  verdict = [&](Flow& f, size_t i) {
    Trajectory& t = f.b->traj[i];
    stop_after_verdict(t, f.b->opts.max_turns);
    if (!t.stop_reason.empty()) return let_go(t);
    const int turn = static_cast<int>(t.turns.size()) + 1;
    gen::GenerationRequest r;
    if (!next_request(*f.b, i, turn, &r, stats)) return;
    if (stats && generating() > 0) ++stats->asked_while_decoding;
    if (stats && &f == &next) ++stats->asked_ahead;
    ++f.generating;
    std::vector<int32_t> context = r.prompt;
    engine_.add(std::move(r), [&landed, fp = &f, i, context = std::move(context)](int, const gen::Completion& c) {
      landed(*fp, i, context, c);
    });
  };
  auto arrived = [&](Flow& f, size_t id, eval::EvalResult r) {
    RolloutBatch& x = *f.b;
    const size_t i = id - x.id_base;
    f.judging.erase(i);
    TurnRecord& rec = x.traj[i].turns.back();
    rec.result = std::move(r);
    if (x.opts.memory) x.opts.memory->remember(problem_identity(*tasks[x.prompts[x.traj[i].prompt].task].problem), rec.text, rec.result);
    std::vector<size_t> twins;
    if (auto it = f.twins_of.find({i, static_cast<int>(x.traj[i].turns.size())}); it != f.twins_of.end()) {
      twins = std::move(it->second);
      f.twins_of.erase(it);
    }
    verdict(f, i);
    for (size_t j : twins) {
      take_twin(f, j);
      verdict(f, j);
    }
  };
  // Batch f's first turn to the engine, every prompt checked before any is decoded.
  auto add_first_turn = [&](Flow& f) {
    RolloutBatch& x = *f.b;
    const size_t g = static_cast<size_t>(x.opts.group_size);
    std::vector<gen::GenerationRequest> first;
    for (size_t p = 0; p < x.prompts.size(); ++p) first.push_back(first_request(x, p, tasks));
    for (size_t p = 0; p < first.size(); ++p) {
      std::vector<int32_t> context = first[p].prompt;
      f.generating += static_cast<int64_t>(g);
      engine_.add(std::move(first[p]), [&landed, fp = &f, p, g, context = std::move(context)](int sample, const gen::Completion& c) {
        landed(*fp, p * g + static_cast<size_t>(sample), context, c);
      });
    }
  };

  // Where start() (or a checkpoint, or the last finish() beside or carrying) left a batch: no
  // turn yet (the first is decoded here), its running trajectories' last answers being judged,
  // or judged.
  auto pick_up = [&](Flow& f) {
    RolloutBatch& x = *f.b;
    std::vector<Trajectory>& traj = x.traj;
    std::vector<size_t> ready;
    if (x.turns == 0) {
      add_first_turn(f);
    } else if (!x.collected) {
      for (size_t i : x.answering)
        if (!traj[i].turns.back().twin_of && !traj[i].turns.back().reused) f.judging.insert(i);
      for (size_t i : x.answering) {
        const TurnRecord& rec = traj[i].turns.back();
        if (rec.twin_of && pending(f, *rec.twin_of)) f.twins_of[*rec.twin_of].push_back(i);
        else if (rec.twin_of || rec.reused) ready.push_back(i);
      }
    } else {
      for (size_t i = 0; i < traj.size(); ++i)
        if (traj[i].stop_reason.empty() && !traj[i].turns.empty()) ready.push_back(i);
    }
    x.answering.clear();
    x.twins.clear();
    for (size_t i : ready) {
      if (traj[i].turns.back().twin_of) take_twin(f, i);
      verdict(f, i);
    }
  };
  for (Flow& f : carry) pick_up(f);
  pick_up(own);
  // `beside`'s first turn (--async: the next step's), decoded in this loop. Its answers go to
  // MooreEval as they land, as generate_turn's would.
  if (beside) {
    MC_INTERNAL_ASSERT(beside->turns == 0 && beside->collected, "rollouts: the batch decoded beside has begun already");
    add_first_turn(next);
  }

  bool held = false, waited = false;
  auto hold = [&](bool h) {
    if (b.opts.hold_judges && h != held) verifier_.hold(h);
    held = h;
  };
  std::vector<size_t> ids;
  auto judging_ids = [&] {  // the verdicts this loop takes: each settled flow's (b's, carried, beside's)
    ids.clear();
    for (const Flow* f : settling)
      if (f->settle)
        for (size_t i : f->judging) ids.push_back(f->b->id_base + i);
    if (next.settle)
      for (size_t i : next.judging) ids.push_back(beside->id_base + i);
    return ids;
  };
  // Verifier ids are id_base + trajectory: each batch's range tells whose an answer is.
  auto in = [](const RolloutBatch* x, size_t id) { return x && id >= x->id_base && id - x->id_base < x->traj.size(); };
  auto flow_of = [&](size_t id) -> Flow& {
    if (in(beside, id)) return next;
    for (Flow& f : carry)
      if (in(f.b, id)) return f;
    return own;
  };
  // Flow f is through its due turn: no running trajectory has an answer up to that turn still to
  // come or awaiting its verdict (MooreEval's, or a twin's). A failed answer at the due turn whose
  // next turn is asked for is through it.
  std::vector<char> waiting;
  auto due = [&](const Flow& f) {
    const std::vector<Trajectory>& tr = f.b->traj;
    waiting.assign(tr.size(), 0);
    for (size_t i : f.judging) waiting[i] = 1;
    for (const auto& [answer, twins] : f.twins_of)
      for (size_t j : twins) waiting[j] = 1;
    const size_t d = static_cast<size_t>(f.due);
    for (size_t i = 0; i < tr.size(); ++i) {
      if (!tr[i].stop_reason.empty() || tr[i].turns.size() > d) continue;
      if (tr[i].turns.size() < d || waiting[i]) return false;
    }
    return true;
  };
  auto done = [&] { return std::all_of(settling.begin(), settling.end(), [&](const Flow* f) { return due(*f); }); };
  std::vector<Flow*> all = settling;  // every flow, beside's too: planted answers may land in any
  all.push_back(&next);
  for (;;) {
    // b has stopped: `beside`'s answers still being decoded are finished, and no more asked for.
    if (own.judging.empty() && own.generating == 0) next.settle = false;
    // Once `beside`'s first turn is decoded, a batch through its due turn (b's first answers
    // judged, a carried batch's due turn) leaves its later verdicts to the next step: its repairs
    // then decode there, beside that step's work, rather than here in thin batches while the
    // update waits.
    if (beside && next.generating == 0)
      for (Flow* f : settling)
        if (f->settle && f->due < f->b->opts.max_turns && due(*f)) f->settle = false;
    if (!judging_ids().empty())
      for (auto& [id, r] : verifier_.collect_ready(ids)) arrived(flow_of(id), id, std::move(r));
    if (generating() > 0) {  // the judges may not time while our kernels run
      if (!held) {  // hold() waits for a timing under way: MooreEval's time, not the engine's
        auto th = Clock::now();
        hold(true);
        if (stats) stats->verify_wait_s += since(th);
      }
      const bool draining = std::all_of(settling.begin(), settling.end(),
                                        [](const Flow* f) { return f->judging.empty() && f->generating == 0; });
      auto t0 = Clock::now();
      engine_.step();
      if (stats) {
        stats->generate_s += since(t0);
        if (draining) stats->drain_s += since(t0);
      }
      for (Flow* f : all)
        for (size_t i : std::exchange(f->to_plant, {})) {
          Trajectory& t = f->b->traj[i];
          plant(t.turns.back(), *planted_->find(problem_key(*f, i), f->b->opts.step, static_cast<int>(t.turns.size()), t.sample),
                f->b->opts.sampling.temperature);
          answered(*f, i);
        }
      continue;
    }
    if (done()) break;
    hold(false);
    if (!waited && at_first_wait) {
      waited = true;
      at_first_wait();
      continue;
    }
    waited = true;
    auto t1 = Clock::now();
    const double wait_began = unix_now();
    for (auto& [id, r] : verifier_.collect_any(judging_ids())) {
      count_wait(stats, r, wait_began);
      arrived(flow_of(id), id, std::move(r));
    }
    if (stats) stats->verify_wait_s += since(t1);
  }
  hold(false);
  // Every running trajectory's last answer awaits its verdict (MooreEval's, a twin's or the
  // memory's): the next finish() takes them.
  auto leave = [](RolloutBatch& x) {
    x.answering.clear();
    x.twins.clear();
    for (size_t i = 0; i < x.traj.size(); ++i) {
      if (!x.traj[i].stop_reason.empty()) continue;
      x.answering.push_back(i);
      if (x.traj[i].turns.back().twin_of) x.twins.push_back(i);
    }
    x.collected = x.answering.empty();
  };
  if (beside) leave(*beside);
  if (!waited && at_first_wait) at_first_wait();
  for (Flow* f : settling) {
    RolloutBatch& x = *f->b;
    if (f->due < x.opts.max_turns) {
      // Stopped trajectories give their kept caches back; running ones keep theirs (an update in
      // between gives every kept cache up anyway).
      for (auto& t : x.traj)
        if (!t.stop_reason.empty()) let_go(t);
      leave(x);
      continue;
    }
    MC_INTERNAL_ASSERT(f->twins_of.empty(), "rollouts: an answer's twin waits for a verdict that never came");
    for (auto& t : x.traj) {
      if (t.stop_reason.empty()) t.stop_reason = "max_turns";
      let_go(t);
    }
    x.collected = true;
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
  c.priority = o.step;  // with --async, this step's answers before the next step's
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
             "reached different turns (pipelined, --repairs-ahead): go on with --pipeline-turns");
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
