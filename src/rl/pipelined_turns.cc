#include "rl/pipelined_turns.h"

#include <algorithm>

#include <c10/core/GradMode.h>

#include "common/check.h"
#include "common/clock.h"
#include "rl/rollout_steps.h"

namespace mc::rl {
using namespace detail;

PipelinedTurns::PipelinedTurns(RolloutRunner& runner, RolloutBatch& b, const std::vector<synth::Task>& tasks,
                               RolloutStats* stats, RolloutBatch* beside)
    : r_(runner), b_(b), tasks_(tasks), stats_(stats), beside_(beside), own_(&b, true), next_(beside, false) {}

const std::string& PipelinedTurns::problem_key(const Flow& f, size_t i) const {
  return tasks_[f.b->prompts[f.b->traj[i].prompt].task].problem->key;
}

// Trajectory i's answer, sampled: to MooreEval, or kept for a planted one.
void PipelinedTurns::landed(Flow& f, size_t i, const std::vector<int32_t>& context, const gen::Completion& c) {
  Trajectory& t = f.b->traj[i];
  t.turns.push_back(sampled(context, c));
  t.kv = c.kept;
  if (stats_) stats_->generated_tokens += static_cast<int64_t>(c.tokens.size());
  --f.generating;
  if (r_.planted_ && r_.planted_->find(problem_key(f, i), f.b->opts.step, static_cast<int>(t.turns.size()), t.sample))
    f.to_plant.push_back(i);
  else
    answered(f, i);
}

bool PipelinedTurns::pending(const Flow& f, std::pair<size_t, int> answer) const {
  return f.judging.count(answer.first) && static_cast<int>(f.b->traj[answer.first].turns.size()) == answer.second;
}

// Trajectory i has a new answer: to MooreEval, or the verdict of its twin or of the memory
// (unsettled: left for the next finish()).
void PipelinedTurns::answered(Flow& f, size_t i) {
  RolloutBatch& x = *f.b;
  const int turn = static_cast<int>(x.traj[i].turns.size());
  x.turns = std::max(x.turns, turn);
  switch (r_.submit_answer(x, i, turn, tasks_, stats_)) {
    case RolloutRunner::Judged::kSubmitted: f.judging.insert(i); break;
    case RolloutRunner::Judged::kReused:
      if (f.settle) verdict(f, i);
      break;
    case RolloutRunner::Judged::kTwin:
      if (!f.settle) break;
      if (pending(f, *x.traj[i].turns.back().twin_of)) {
        f.twins_of[*x.traj[i].turns.back().twin_of].push_back(i);
      } else {
        share_twin_verdict(f.b->traj, i, f.b->opts.tag);
        verdict(f, i);
      }
      break;
  }
}

// Trajectory i's last answer has its verdict: it stops, or its next answer is asked for now.
void PipelinedTurns::verdict(Flow& f, size_t i) {
  Trajectory& t = f.b->traj[i];
  stop_after_verdict(t, f.b->opts.max_turns);
  if (!t.stop_reason.empty()) return r_.let_go(t);
  const int turn = static_cast<int>(t.turns.size()) + 1;
  gen::GenerationRequest r;
  if (!r_.next_request(*f.b, i, turn, &r, stats_)) return;
  if (stats_ && own_.generating + next_.generating > 0) ++stats_->asked_while_decoding;
  ++f.generating;
  std::vector<int32_t> context = r.prompt;
  r_.engine_.add(std::move(r), [this, fp = &f, i, context = std::move(context)](int, const gen::Completion& c) {
    landed(*fp, i, context, c);
  });
}

// A verdict of the step's own batch (the only one whose verdicts this loop takes).
void PipelinedTurns::arrived(size_t id, eval::EvalResult r) {
  Flow& f = own_;
  RolloutBatch& x = *f.b;
  const size_t i = id - x.id_base;
  f.judging.erase(i);
  TurnRecord& rec = x.traj[i].turns.back();
  rec.result = std::move(r);
  if (x.opts.memory)
    x.opts.memory->remember(problem_identity(*tasks_[x.prompts[x.traj[i].prompt].task].problem), rec.text, rec.result);
  std::vector<size_t> twins;
  if (auto it = f.twins_of.find({i, static_cast<int>(x.traj[i].turns.size())}); it != f.twins_of.end()) {
    twins = std::move(it->second);
    f.twins_of.erase(it);
  }
  verdict(f, i);
  for (size_t j : twins) {
    share_twin_verdict(f.b->traj, j, f.b->opts.tag);
    verdict(f, j);
  }
}

// Batch f's first turn to the engine, every prompt checked before any is decoded.
void PipelinedTurns::add_first_turn(Flow& f) {
  RolloutBatch& x = *f.b;
  const size_t g = static_cast<size_t>(x.opts.group_size);
  std::vector<gen::GenerationRequest> first;
  for (size_t p = 0; p < x.prompts.size(); ++p) first.push_back(r_.first_request(x, p, tasks_));
  for (size_t p = 0; p < first.size(); ++p) {
    std::vector<int32_t> context = first[p].prompt;
    f.generating += static_cast<int64_t>(g);
    r_.engine_.add(std::move(first[p]), [this, fp = &f, p, g, context = std::move(context)](int sample, const gen::Completion& c) {
      landed(*fp, p * g + static_cast<size_t>(sample), context, c);
    });
  }
}

// Where start() (or a checkpoint, or the last step's finish() beside) left a batch: no turn yet
// (the first is decoded here), its running trajectories' last answers being judged, or judged.
void PipelinedTurns::pick_up(Flow& f) {
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
    if (traj[i].turns.back().twin_of) share_twin_verdict(f.b->traj, i, f.b->opts.tag);
    verdict(f, i);
  }
}

void PipelinedTurns::hold(bool h) {
  if (b_.opts.hold_judges && h != held_) r_.verifier_.hold(h);
  held_ = h;
}

// The verdicts this loop takes: the step's own batch's.
std::vector<size_t> PipelinedTurns::judging_ids() const {
  std::vector<size_t> ids;
  for (size_t i : own_.judging) ids.push_back(b_.id_base + i);
  return ids;
}

// The step's batch has stopped: no running trajectory has an answer still to come or awaiting
// its verdict (MooreEval's, or a twin's), up to its last turn.
bool PipelinedTurns::done() {
  const std::vector<Trajectory>& tr = b_.traj;
  waiting_.assign(tr.size(), 0);
  for (size_t i : own_.judging) waiting_[i] = 1;
  for (const auto& [answer, twins] : own_.twins_of)
    for (size_t j : twins) waiting_[j] = 1;
  const size_t last = static_cast<size_t>(b_.opts.max_turns);
  for (size_t i = 0; i < tr.size(); ++i) {
    if (!tr[i].stop_reason.empty() || tr[i].turns.size() > last) continue;
    if (tr[i].turns.size() < last || waiting_[i]) return false;
  }
  return true;
}

// One engine step while anything is asked of it (the judges may not time while our kernels
// run), then the planted answers (tests) that landed in it. False: nothing to decode.
bool PipelinedTurns::step_engine() {
  if (own_.generating + next_.generating == 0) return false;
  if (!held_) {  // hold() waits for a timing under way: MooreEval's time, not the engine's
    auto th = Clock::now();
    hold(true);
    if (stats_) stats_->verify_wait_s += since(th);
  }
  const bool draining = own_.judging.empty() && own_.generating == 0;
  auto t0 = Clock::now();
  r_.engine_.step();
  if (stats_) {
    stats_->generate_s += since(t0);
    if (draining) stats_->drain_s += since(t0);
  }
  for (Flow* f : {&own_, &next_})
    for (size_t i : std::exchange(f->to_plant, {})) {
      Trajectory& t = f->b->traj[i];
      r_.plant(t.turns.back(), *r_.planted_->find(problem_key(*f, i), f->b->opts.step, static_cast<int>(t.turns.size()), t.sample),
               f->b->opts.sampling.temperature);
      answered(*f, i);
    }
  return true;
}

// Nothing to decode: the judges may time; the loop waits for the next verdicts.
void PipelinedTurns::wait_for_verdicts() {
  auto t1 = Clock::now();
  const double wait_began = unix_now();
  for (auto& [id, r] : r_.verifier_.collect_any(judging_ids())) {
    count_wait(stats_, r, wait_began);
    arrived(id, std::move(r));
  }
  if (stats_) stats_->verify_wait_s += since(t1);
}

void PipelinedTurns::run() {
  c10::AutoGradMode no_grad(false);
  pick_up(own_);
  // `beside`'s first turn (the next step's), decoded in this loop. Its answers go to MooreEval as
  // they land, as generate_turn's would.
  if (beside_) {
    MC_INTERNAL_ASSERT(beside_->turns == 0 && beside_->collected, "rollouts: the batch decoded beside has begun already");
    add_first_turn(next_);
  }
  for (;;) {
    if (!own_.judging.empty())
      for (auto& [id, r] : r_.verifier_.collect_ready(judging_ids())) arrived(id, std::move(r));
    if (step_engine()) continue;
    if (done()) break;
    hold(false);
    wait_for_verdicts();
  }
  hold(false);
  end();
}

// The step's batch is finished; `beside` is left with every answer of its first turn awaiting
// its verdict (MooreEval's, a twin's or the memory's): the next step's finish() takes them.
void PipelinedTurns::end() {
  if (beside_) {
    RolloutBatch& x = *beside_;
    x.answering.clear();
    x.twins.clear();
    for (size_t i = 0; i < x.traj.size(); ++i) {
      if (!x.traj[i].stop_reason.empty()) continue;
      x.answering.push_back(i);
      if (x.traj[i].turns.back().twin_of) x.twins.push_back(i);
    }
    x.collected = x.answering.empty();
  }
  MC_INTERNAL_ASSERT(own_.twins_of.empty(), "rollouts: an answer's twin waits for a verdict that never came");
  for (auto& t : b_.traj) {
    if (t.stop_reason.empty()) t.stop_reason = "max_turns";
    r_.let_go(t);
  }
  b_.collected = true;
}

}  // namespace mc::rl
