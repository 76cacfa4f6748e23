#include "rl/policy_update.h"

#include <filesystem>
#include <fstream>
#include <numeric>

#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "common/check.h"
#include "model/safetensors.h"
#include "rl/mirror_pop.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/loss.h"

namespace mc::rl {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<TrainSeq> train_sequences(const std::vector<Trajectory>& traj, bool with_kl) {
  std::vector<TrainSeq> out;
  for (const Trajectory& t : traj) {
    if (t.infra() || (t.advantage == 0 && !with_kl)) continue;
    const TurnRecord& r = t.turns[0];
    TrainSeq q;
    q.tokens = r.context;
    q.tokens.insert(q.tokens.end(), r.tokens.begin(), r.tokens.end());
    q.n_context = r.context.size();
    q.old_logp = r.logprobs;
    q.advantage = t.advantage;
    out.push_back(std::move(q));
  }
  return out;
}

json backward_policy_loss(model::QwenModel& model, const std::optional<model::QwenModel>& ref,
                          train::ShardedAdamW& opt, const std::vector<TrainSeq>& batch, const UpdateOptions& o,
                          int64_t step, StepSums& sums, bool dump) {
  std::vector<train::Example> seqs;
  for (const TrainSeq& q : batch) {
    train::Example ex;
    ex.tokens = q.tokens;
    ex.loss_mask.assign(q.n_context, 0);
    ex.loss_mask.resize(ex.tokens.size(), 1);
    ex.origin = fmt::format("step {}", step);
    seqs.push_back(std::move(ex));
  }
  std::vector<int64_t> all_seqs(seqs.size());
  std::iota(all_seqs.begin(), all_seqs.end(), 0);
  auto mbs = train::pack(seqs, all_seqs, o.micro_batch_tokens);
  opt.zero_grad();
  const double T = o.temperature;
  json dumped = json::array();
  // With sharded weights a rank short of micro-batches makes idle passes (ShardedAdamW::passes).
  const auto passes = static_cast<size_t>(opt.passes(static_cast<int64_t>(mbs.size())));
  for (size_t j = 0; j < passes; ++j) {
    opt.set_last_micro_batch(j + 1 == passes);
    if (j >= mbs.size()) {
      opt.idle_backward(model);
      opt.after_backward();
      continue;
    }
    const train::MicroBatch& mb = mbs[j];
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
    if (dump) {
      auto keep = mp.keep.to(at::kCPU);
      for (size_t k = 0; k < mb.examples.size(); ++k) {
        const TrainSeq& q = batch[static_cast<size_t>(mb.examples[k])];
        dumped.push_back({{"tokens", q.tokens}, {"n_context", q.n_context}, {"old_logp", q.old_logp},
                          {"advantage", q.advantage}, {"kept", keep[static_cast<int64_t>(k)].item<bool>()}});
      }
    }
    pl.loss.backward();
    opt.after_backward();
    MicroBatchSums m;
    m.seqs = static_cast<double>(mp.keep.size(0));
    m.seqs_kept = mp.keep.to(at::kDouble).sum().item<double>();
    m.abs_log_ratio_sum = mp.mean_abs_log_ratio.sum().item<double>();
    m.tokens = pl.tokens;
    m.clip_fraction = pl.clip_fraction;
    m.kl = pl.kl;
    m.ratio_mean = pl.ratio_mean;
    m.push_pos = pl.push_pos;
    m.push_neg = pl.push_neg;
    m.entropy_sum = (lp.entropy * mask.to(at::kFloat)).sum().item<double>();
    sums.micro_batch(m);
  }
  if (passes == 0) {
    opt.set_last_micro_batch(true);
    opt.after_backward();
  }
  return dumped;
}

void dump_gradients(model::QwenModel& model, train::ShardedAdamW& opt, const std::string& dump_dir, int64_t step,
                    const UpdateOptions& o, double normalizer, const json& seqs) {
  opt.expose_gradients();
  fs::create_directories(dump_dir);
  std::vector<at::Tensor> keep_alive;
  std::vector<model::TensorView> views;
  for (auto& [name, g] : model.named_gradients()) {
    if (!g.defined()) continue;
    keep_alive.push_back(g.to(at::kCPU, at::kFloat).contiguous());
    const at::Tensor& t = keep_alive.back();
    views.push_back({name, model::DType::kF32, t.sizes().vec(), static_cast<const uint8_t*>(t.data_ptr()), t.nbytes()});
  }
  const std::string base = (fs::path(dump_dir) / fmt::format("step-{:08d}", step)).string();
  model::write_safetensors(base + ".safetensors", views);
  std::ofstream(base + ".json") << json{{"temperature", o.temperature}, {"clip_low", o.loss.clip_low},
                                        {"clip_high", o.loss.clip_high}, {"normalizer", normalizer},
                                        {"sequences", seqs}}.dump()
                                << "\n";
}

}  // namespace mc::rl
