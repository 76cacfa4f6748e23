// RolloutRunner::finish with RolloutOptions::pipeline (Rollout::kOverlapped): one loop that steps
// the engine, takes each verdict as it comes and asks for that trajectory's next answer at once,
// so a failed answer's repair decodes beside the answers still running. The judges are held while
// the engine has work and released while the loop waits for verdicts with nothing to decode.
//
// Beside the step's own batch the loop may decode `beside`'s first turn (the next step's batch):
// its answers go to MooreEval as they land, and their verdicts are left for the next step's loop.
// Each batch in the loop is a Flow: its answers being decoded, judged, or waiting for a twin.
#pragma once

#include <cstdint>
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
                 RolloutBatch* beside);
  void run();

 private:
  struct Flow {
    Flow(RolloutBatch* x, bool s) : b(x), settle(s) {}
    RolloutBatch* b;
    std::set<size_t> judging;  // trajectories whose last answer MooreEval is judging
    std::map<std::pair<size_t, int>, std::vector<size_t>> twins_of;  // a judged answer -> its twins, waiting
    int64_t generating = 0;        // answers asked of the engine and not yet sampled
    std::vector<size_t> to_plant;  // answers to replace by planted ones (tests) once the engine step is over
    // Verdicts are taken here and a failed answer's next turn asked for at once: the step's own
    // batch. `beside`'s answers are only submitted.
    bool settle;
  };

  const std::string& problem_key(const Flow& f, size_t i) const;
  void landed(Flow& f, size_t i, const std::vector<int32_t>& context, const gen::Completion& c);
  bool pending(const Flow& f, std::pair<size_t, int> answer) const;
  void answered(Flow& f, size_t i);
  void verdict(Flow& f, size_t i);
  void arrived(size_t id, eval::EvalResult r);
  void add_first_turn(Flow& f);
  void pick_up(Flow& f);
  void hold(bool h);
  std::vector<size_t> judging_ids() const;
  bool done();
  bool step_engine();  // false: nothing to decode
  void wait_for_verdicts();
  void end();

  RolloutRunner& r_;
  RolloutBatch& b_;
  const std::vector<synth::Task>& tasks_;
  RolloutStats* stats_;
  RolloutBatch* beside_;
  Flow own_, next_;
  bool held_ = false;
  std::vector<char> waiting_;
};

}  // namespace mc::rl
