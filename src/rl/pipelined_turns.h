// RolloutRunner::finish with RolloutOptions::pipeline (--pipeline-turns): one loop that steps the
// engine, takes each verdict as it comes and asks for that trajectory's next answer at once, so a
// failed answer's repair decodes beside the answers still running. The judges are held while the
// engine has work and released while the loop waits for verdicts with nothing to decode.
//
// Besides the step's own batch the loop may carry `beside` (--async: the next step's batch, its
// first turn decoded here; with beside_repairs its verdicts are taken too) and earlier steps'
// batches (--carry-repairs), each due through some turn. Each is a Flow: the answers of one batch
// in this loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rl/rollout.h"

namespace mc::rl {

class PipelinedTurns {
 public:
  PipelinedTurns(RolloutRunner& runner, RolloutBatch& b, const std::vector<synth::Task>& tasks, RolloutStats* stats,
                 const std::function<void()>& at_first_wait, RolloutBatch* beside, bool beside_repairs,
                 const std::vector<CarriedBatch>& carried);
  void run();

 private:
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

  int64_t generating() const;
  const std::string& problem_key(const Flow& f, size_t i) const;
  void landed(Flow& f, size_t i, const std::vector<int32_t>& context, const gen::Completion& c);
  bool pending(const Flow& f, std::pair<size_t, int> answer) const;
  void answered(Flow& f, size_t i);
  void verdict(Flow& f, size_t i);
  void arrived(Flow& f, size_t id, eval::EvalResult r);
  void add_first_turn(Flow& f);
  void pick_up(Flow& f);
  void hold(bool h);
  const std::vector<size_t>& judging_ids();
  Flow& flow_of(size_t id);
  bool due(const Flow& f);
  bool done();
  bool step_engine();  // false: nothing to decode
  void wait_for_verdicts();
  void end();

  RolloutRunner& r_;
  RolloutBatch& b_;
  const std::vector<synth::Task>& tasks_;
  RolloutStats* stats_;
  const std::function<void()>& at_first_wait_;
  RolloutBatch* beside_;
  Flow own_, next_;
  std::deque<Flow> carry_;        // (a deque: the engine's callbacks hold on to a Flow's address)
  std::vector<Flow*> settling_;   // the flows whose verdicts may be due
  std::vector<Flow*> all_;        // every flow, beside's too: planted answers may land in any
  bool held_ = false, waited_ = false;
  std::vector<size_t> ids_;
  std::vector<char> waiting_;
};

}  // namespace mc::rl
