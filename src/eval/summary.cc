#include "eval/summary.h"

#include <fmt/format.h>

#include <cmath>

namespace mc::eval {

Summary summarize(const std::vector<EvalResult>& rows) {
  Summary s;
  double log_sum = 0, reward_sum = 0;
  int n_speed = 0, n_reward = 0;
  int compiled = 0, correct = 0, legal = 0, f0 = 0, f1 = 0, f11 = 0, f2 = 0;
  for (const auto& r : rows) {
    s.verdicts[to_string(r.verdict)]++;
    if (r.exec_stages.is_object() && r.exec_stages.contains("process") && r.exec_stages["process"].is_string())
      s.processes[r.exec_stages["process"].get<std::string>()]++;
    if (r.is_infra()) {
      ++s.infra_errors;
      continue;
    }
    ++s.rows;
    compiled += r.compiled;
    bool ok = r.verdict == Verdict::kOk;
    correct += r.correct();
    legal += r.compiled && r.legal() && r.verdict != Verdict::kCompileError;
    if (ok) {
      double sp = r.speedup.value_or(0);
      f0 += 1;
      f1 += sp > 1.0;
      f11 += sp > 1.1;
      f2 += sp > 2.0;
      if (r.speedup && *r.speedup > 0) {
        log_sum += std::log(*r.speedup);
        ++n_speed;
      }
    }
    if (r.reward) {
      reward_sum += *r.reward;
      ++n_reward;
    }
  }
  auto share = [&](int k) { return s.rows ? static_cast<double>(k) / s.rows : 0.0; };
  s.compiled = share(compiled);
  s.correct = share(correct);
  s.legal = share(legal);
  s.fast_0 = share(f0);
  s.fast_1 = share(f1);
  s.fast_1_1 = share(f11);
  s.fast_2 = share(f2);
  s.geomean_speedup = n_speed ? std::exp(log_sum / n_speed) : 0.0;
  s.mean_reward = n_reward ? reward_sum / n_reward : 0.0;
  return s;
}

std::string format_summary(const Summary& s) {
  std::string out;
  out += fmt::format("{:<22}{:>10}\n", "metric", "value");
  out += fmt::format("{:-<32}\n", "");
  out += fmt::format("{:<22}{:>10}\n", "candidates scored", s.rows);
  out += fmt::format("{:<22}{:>10}\n", "infra errors", s.infra_errors);
  auto pct = [&](const char* name, double v) { out += fmt::format("{:<22}{:>9.1f}%\n", name, 100 * v); };
  pct("compiled", s.compiled);
  pct("correct", s.correct);
  pct("legal (of compiled)", s.legal);
  pct("fast_0", s.fast_0);
  pct("fast_1", s.fast_1);
  pct("fast_1.1", s.fast_1_1);
  pct("fast_2", s.fast_2);
  out += fmt::format("{:<22}{:>9.3f}x\n", "geomean speedup", s.geomean_speedup);
  out += fmt::format("{:<22}{:>10.3f}\n", "mean reward", s.mean_reward);
  out += fmt::format("{:-<32}\n", "");
  for (const auto& [v, n] : s.verdicts) out += fmt::format("{:<22}{:>10}\n", v, n);
  if (!s.processes.empty()) {
    out += fmt::format("{:-<32}\n", "");
    for (const auto& [p, n] : s.processes) out += fmt::format("{:<22}{:>10}\n", "process " + p, n);
    if (s.processes.count("started"))
      out += "(processes started from scratch are slower: the zygote was off or could not fork;\n"
             " the judge's log under the scratch folder says why)\n";
  }
  return out;
}

nlohmann::json summary_json(const Summary& s) {
  return {{"rows", s.rows},         {"infra_errors", s.infra_errors}, {"compiled", s.compiled},
          {"correct", s.correct},   {"legal", s.legal},               {"fast_0", s.fast_0},
          {"fast_1", s.fast_1},     {"fast_1.1", s.fast_1_1},         {"fast_2", s.fast_2},
          {"geomean_speedup", s.geomean_speedup}, {"mean_reward", s.mean_reward},
          {"verdicts", s.verdicts}, {"processes", s.processes}};
}

}  // namespace mc::eval
