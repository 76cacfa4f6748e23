#include "rl/score_groups.h"

#include <algorithm>

#include "common/jsonl.h"
#include "rl/advantages.h"

namespace mc::rl {
using json = nlohmann::json;

json score_groups(std::vector<Trajectory>& traj, const std::vector<RolloutPrompt>& mine,
                  const std::vector<size_t>& global_index, const std::vector<synth::Task>& tasks,
                  const ScoreOptions& o, StepSums& sums) {
  json events = json::array();
  const size_t G = static_cast<size_t>(o.group_size);
  for (size_t p = 0; p < mine.size(); ++p) {
    std::vector<size_t> scored;
    GroupSums g;
    g.repair = mine[p].repair;
    for (size_t k = 0; k < G; ++k) {
      Trajectory& t = traj[p * G + k];
      if (t.infra()) continue;
      std::vector<Turn> turns;
      for (const auto& r : t.turns) turns.push_back({r.score(), r.passed()});
      t.reward = prime_echo_reward(turns, o.prime_echo);
      scored.push_back(p * G + k);
      g.any_pass |= t.first_pass() > 0;
    }
    std::vector<double> rewards;
    for (size_t i : scored) rewards.push_back(traj[i].reward);
    if (scored.size() >= 2) {
      auto adv = group_advantages(rewards, static_cast<int>(rewards.size()), 1e-6, o.adv_std_floor);
      for (size_t k = 0; k < scored.size(); ++k) traj[scored[k]].advantage = adv[k];
    }
    g.scored = !scored.empty();
    if (g.scored) {
      g.signal = std::any_of(scored.begin(), scored.end(), [&](size_t i) { return traj[i].advantage != 0; });
      g.speed_only = g.signal && std::all_of(scored.begin(), scored.end(), [&](size_t i) { return traj[i].first_pass() == 1; });
      const std::string& key = tasks[mine[p].task].problem->key;
      if (!g.any_pass) {
        const Trajectory& t = traj[scored[0]];
        events.push_back({{"prompt", global_index[p]}, {"kind", "add"}, {"problem", key}, {"answer", t.turns.back().text},
                          {"feedback", t.turns.back().result.feedback}});
      } else {
        events.push_back({{"prompt", global_index[p]}, {"kind", "repaired"}, {"problem", key}});
      }
    }
    sums.group(g);
  }
  sums.trajectories(traj);
  return events;
}

void log_infra_errors(const std::vector<Trajectory>& traj, const std::vector<RolloutPrompt>& mine,
                      const std::vector<synth::Task>& tasks, int64_t step, std::ostream& log) {
  for (const auto& t : traj)
    for (const auto& r : t.turns)
      if (t.infra() && r.infra()) {
        log << dump_json({{"step", step}, {"problem", tasks[mine[t.prompt].task].problem->key},
                          {"sample_id", r.result.sample_id}, {"verdict", eval::to_string(r.result.verdict)},
                          {"infra_error", r.result.infra_error}, {"reason", r.result.reason}})
            << "\n";
        log.flush();
      }
}

}  // namespace mc::rl
