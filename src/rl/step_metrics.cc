#include "rl/step_metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/low_prob.h"

namespace mc::rl {
using json = nlohmann::json;

namespace {

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

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

void StepSums::add(const std::string& k, double v) { merge_into(acc_[k], json(v)); }
void StepSums::count(const char* table, const std::string& name) { merge_into(acc_[table][name], json(1)); }
double StepSums::num(const std::string& k) const {
  return acc_.contains(k) && acc_[k].is_number() ? acc_[k].get<double>() : 0.0;
}
void StepSums::merge(const json& other) { merge_into(acc_, other); }

void StepSums::shared_verdicts(const std::vector<Trajectory>& traj) {
  for (const auto& t : traj)  // answers that shared another's verdict, in this step or an earlier one
    for (const auto& r : t.turns) {
      if (r.twin_of) add("twin_answers", 1);
      if (r.reused) add("reused_answers", 1);
    }
}

void StepSums::group(const GroupSums& g) {
  add("groups", 1);
  if (g.repair) add("repair_groups", 1);
  if (!g.scored) return;
  if (!g.signal) add("zero_signal_groups", 1);
  // Every answer passed at turn 1: what signal there is comes from the speed term alone.
  if (g.speed_only) add("speed_only_groups", 1);
  if (!g.any_pass) add("all_failed_groups", 1);
  else if (g.repair) add("repair_recovered", 1);
}

void StepSums::trajectories(const std::vector<Trajectory>& traj) {
  for (const auto& t : traj) {
    add("trajectories", 1);
    if (t.infra()) {
      add("infra_trajectories", 1);
      for (const auto& r : t.turns) {
        add("infra_answers", 1);
        count("verdicts", eval::to_string(r.result.verdict));
      }
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
      count("verdicts", eval::to_string(r.result.verdict));
      // First answers alone: whether a step's failures are the model's first tries or repairs.
      if (k == 0) count("verdicts_turn1", eval::to_string(r.result.verdict));
      if (!r.result.rule.empty()) count("rules", r.result.rule);
      for (const auto& v : r.result.violations) count("rules_all", v.rule);
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
}

void StepSums::micro_batch(const MicroBatchSums& m) {
  add("seqs", m.seqs);
  add("seqs_kept", m.seqs_kept);
  add("abs_log_ratio_sum", m.abs_log_ratio_sum);
  add("tokens_trained", m.tokens);
  add("clip_sum", m.clip_fraction * m.tokens);
  add("kl_sum", m.kl * m.tokens);
  add("ratio_sum", m.ratio_mean * m.tokens);
  add("push_pos", m.push_pos);
  add("push_neg", m.push_neg);
  add("entropy_sum", m.entropy_sum);
}

json StepSums::row(const StepFacts& f) const {
  const double scored = num("scored"), answers = num("answers"), n_tokens = num("tokens_trained");
  const double rmean = ratio(num("reward_sum"), scored);
  const RolloutStats& rs = f.rollout;
  const gen::EngineStats& gd = f.engine;
  const double steps = static_cast<double>(gd.decode_steps);
  json row = {{"reward_mean", rmean},
              {"reward_std", std::sqrt(std::max(0.0, ratio(num("reward_sq"), scored) - rmean * rmean))},
              {"trajectories", num("trajectories")},
              {"infra_trajectories", num("infra_trajectories")},
              {"prompts", static_cast<double>(f.prompts)},
              {"trained_groups", num("groups")},
              {"repair_prompts", num("repair_groups")},
              {"all_failed_share", ratio(num("all_failed_groups"), num("groups"))},
              {"zero_signal_share", ratio(num("zero_signal_groups"), num("groups"))},
              {"speed_only_share", ratio(num("speed_only_groups"), num("groups"))},
              {"bdr_size", static_cast<double>(f.bdr_size)},
              {"bdr_added", static_cast<double>(f.bdr_after.added - f.bdr_before.added)},
              {"bdr_reissued", static_cast<double>(f.repairs_drawn)},
              {"bdr_skipped_too_long", static_cast<double>(f.repairs_skipped)},
              {"bdr_recovered", num("repair_recovered")},
              {"bdr_repaired_removed", static_cast<double>(f.bdr_after.repaired - f.bdr_before.repaired)},
              {"bdr_evicted", static_cast<double>(f.bdr_after.evicted - f.bdr_before.evicted)},
              {"bdr_expired", static_cast<double>(f.bdr_after.expired - f.bdr_before.expired)},
              {"fast1_share", ratio(num("fast1_turn1"), num("answered_1"))},
              {"speedup_geomean_correct", num("correct_answers") > 0 ? std::exp(num("speedup_log_sum") / num("correct_answers")) : 0.0},
              {"mirrorpop_filtered_share", ratio(num("seqs") - num("seqs_kept"), num("seqs"))},
              {"mirrorpop_mean_abs_log_ratio", ratio(num("abs_log_ratio_sum"), num("seqs"))},
              {"trained_sequences", num("seqs_kept")},
              {"trained_tokens", n_tokens},
              {"clip_fraction", ratio(num("clip_sum"), n_tokens)},
              {"ratio_mean", ratio(num("ratio_sum"), n_tokens)},
              {"kl", ratio(num("kl_sum"), n_tokens)},
              {"neg_push_share", ratio(num("push_neg"), num("push_pos") + num("push_neg"))},
              {"entropy", ratio(num("entropy_sum"), n_tokens)},
              {"grad_norm", f.grad_norm},
              {"lr", f.lr},
              {"updated", n_tokens > 0},
              {"turn1_tokens_mean", ratio(num("turn1_tokens"), scored)},
              {"turn1_truncated_share", ratio(num("turn1_truncated"), scored)},
              {"turn1_loop_share", ratio(num("turn1_loop"), scored)},
              {"later_truncated_share", ratio(num("later_truncated"), answers - scored)},
              {"turn1_low_prob_per_1000", ratio(1000 * num("turn1_low_prob"), num("turn1_tokens"))},
              {"answer_tokens_mean", ratio(num("answer_tokens"), answers)},
              {"answers", answers},
              {"twin_answers_share", ratio(num("twin_answers"), num("answers") + num("infra_answers"))},
              {"reused_verdicts_share", ratio(num("reused_answers"), num("answers") + num("infra_answers"))},
              {"context_full", num("context_full")},
              {"generate_s", rs.generate_s},
              {"verify_wait_s", rs.verify_wait_s},
              {"wait_answers", rs.wait_answers},
              {"wait_work_s", rs.wait_work_s},
              {"asked_while_decoding", rs.asked_while_decoding},
              {"drain_s", rs.drain_s},
              // Host work of the rollout loop (RolloutStats): answers handed to MooreEval
              // (inside generation: they land in the engine's callbacks) and later turns' prompts.
              {"submit_s", rs.submit_s},
              {"ask_s", rs.ask_s},
              // What waiting for MooreEval adds to generation and training (target: <= 0.25).
              {"verify_overhead", ratio(rs.verify_wait_s, rs.generate_s + f.train_s)},
              {"train_s", f.train_s},
              {"step_s", f.step_s},
              {"gen_tokens_per_s", ratio(static_cast<double>(rs.generated_tokens), rs.generate_s)},
              // Inside generation (this step's, the next step's first turn included when overlapped).
              {"gen_decode_steps", steps},
              {"gen_rows_per_decode_step", ratio(static_cast<double>(gd.decode_rows), steps)},
              {"gen_span_mean", ratio(static_cast<double>(gd.decode_span), steps)},
              {"gen_decode_step_ms", ratio(gd.step_wall_ms, steps)},
              {"gen_model_gpu_ms", ratio(gd.decode_gpu_ms, steps)},
              {"gen_sample_gpu_ms", ratio(gd.sample_gpu_ms, steps)},
              {"gen_prefill_s", gd.prefill_wall_ms / 1e3},
              {"gen_prefill_calls", static_cast<double>(gd.prefill_calls)},
              // Prefill's model calls on the GPU (what they computed: gen_prompt_tokens -
              // gen_reused_tokens, packed).
              {"gen_prefill_gpu_s", gd.prefill_gpu_ms / 1e3},
              {"gen_padded_tokens", static_cast<double>(gd.padded_tokens)},
              {"gen_admissions_held", static_cast<double>(gd.admissions_held)},
              {"gen_graphs_captured", static_cast<double>(gd.graphs_captured)},
              {"gen_slot_moves", static_cast<double>(gd.slot_moves)},
              // Overlapped: prompts that continued a kept cache, the prompt tokens that spared
              // prefilling, of all prompt tokens, and kept caches given up for room.
              {"gen_continued", static_cast<double>(gd.continued)},
              {"gen_reused_tokens", static_cast<double>(gd.reused_tokens)},
              {"gen_prompt_tokens", static_cast<double>(gd.prompt_tokens)},
              {"gen_kept_evicted", static_cast<double>(gd.kept_evicted)},
              {"epoch", f.epoch}};
  for (int k = 1; k <= f.max_turns; ++k) {
    row[fmt::format("pass_rate_turn{}", k)] = ratio(num(fmt::format("passed_{}", k)), num(fmt::format("answered_{}", k)));
    double cum = 0;
    for (int q = 1; q <= k; ++q) cum += num(fmt::format("first_pass_{}", q));
    row[fmt::format("solved_by_turn{}", k)] = ratio(cum, scored);
    if (k >= 2) row[fmt::format("rescued_turn{}", k)] = ratio(num(fmt::format("first_pass_{}", k)), scored);
  }
  if (f.anchor) {
    row["anchor_loss"] = f.anchor_loss;
    row["anchor_loss_change"] = f.anchor_loss_change;
    row["anchor_s"] = f.anchor_s;
  }
  for (const char* t : {"verdicts", "verdicts_turn1", "rules"})
    if (acc_.contains(t)) row[t] = acc_[t];
  return row;
}

}  // namespace mc::rl
