#include "train/sharded_adamw.h"

#include <cmath>
#include <map>

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <fmt/format.h>

#include "common/check.h"
#include "train/weight_shards.h"

namespace mc::train {

// The post-accumulate hook of a parameter under sharded weights.
struct ShardedAdamW::TakeGrad : torch::autograd::PostAccumulateGradHook {
  TakeGrad(ShardedAdamW* o, size_t i) : opt(o), index(i) {}
  void operator()(const torch::autograd::Variable& p) override {
    at::Tensor g = p.grad();
    const_cast<torch::autograd::Variable&>(p).mutable_grad().reset();
    if (g.defined()) opt->on_grad(index, g);
  }
  ShardedAdamW* opt;
  size_t index;
};

ShardedAdamW::ShardedAdamW(model::QwenModel& model, Distributed& dist, AdamWOptions opt)
    : dist_(dist), opt_(opt), dtype_(model.dtype()) {
  model.set_requires_grad(true);
  if (opt_.shard_group > 0) dist_.split_shard_groups(opt_.shard_group);
  const int64_t W = dist_.shard_size();  // the state is split over the shard group
  const bool weights = shards_weights();
  if (weights) shards_ = std::make_unique<WeightShards>(model, dist);
  // Buckets of whole parameters, in backward order (the LM head and final norm, the layers from
  // the last, the embedding). With sharded weights each layer is a bucket, and the embedding
  // starts one.
  params_ = model.parameters_in_backward_order();
  std::vector<int> layer_of(params_.size(), -1);  // sharded weights: each parameter's layer, or -1
  if (weights) {
    std::map<const c10::TensorImpl*, int> of;
    for (size_t L = 0; L < shards_->layers(); ++L)
      for (const auto& p : shards_->params(L)) of[p.unsafeGetTensorImpl()] = static_cast<int>(L);
    for (size_t i = 0; i < params_.size(); ++i)
      if (auto it = of.find(params_[i].unsafeGetTensorImpl()); it != of.end()) layer_of[i] = it->second;
  }
  int64_t flat = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    bool fresh = buckets_.empty() || buckets_.back().size >= opt_.bucket_elements;
    if (weights && !buckets_.empty())  // a layer is one bucket, whatever its size
      fresh = layer_of[i] != buckets_.back().layer || (layer_of[i] < 0 && fresh);
    if (fresh) {
      if (!buckets_.empty()) {
        auto& b = buckets_.back();
        b.size = (b.size + W - 1) / W * W;
        flat = b.start + b.size;
      }
      buckets_.emplace_back();
      buckets_.back().start = flat;
      buckets_.back().layer = weights ? layer_of[i] : -1;
    }
    Bucket& b = buckets_.back();
    if (b.layer >= 0) {  // laid out as the layer's buffer, with its alignment
      const auto L = static_cast<size_t>(b.layer);
      offset_.push_back(b.start + shards_->offsets(L)[static_cast<size_t>(b.num_params)]);
      b.size = shards_->padded_size(L);
    } else {
      offset_.push_back(b.start + b.size);
      b.size += params_[i].numel();
    }
    bucket_of_.push_back(buckets_.size() - 1);
    ++b.num_params;
    numel_ += params_[i].numel();
  }
  buckets_.back().size = (buckets_.back().size + W - 1) / W * W;
  flat = buckets_.back().start + buckets_.back().size;

  auto f32 = params_[0].options().dtype(at::kFloat).requires_grad(false);
  if (!weights) {
    grads_ = at::zeros({flat}, f32);
    gathered_ = at::zeros({flat}, params_[0].options().requires_grad(false));
  }
  // Masters: each rank keeps its pieces of every bucket in fp32 (a sharded layer's piece is the
  // piece of the weights this rank stores).
  {
    c10::AutoGradMode no_grad(false);
    for (auto& b : buckets_) {
      int64_t piece = b.size / W, lo = b.start + dist_.shard_rank() * piece;
      if (b.layer >= 0) {
        b.master = shards_->piece(static_cast<size_t>(b.layer)).to(at::kFloat);
      } else {
        auto all = at::zeros({b.size}, f32);
        for (size_t i = 0; i < params_.size(); ++i)
          if (&buckets_[bucket_of_[i]] == &b) all.narrow(0, offset_[i] - b.start, params_[i].numel()).copy_(params_[i].reshape(-1));
        b.master = all.narrow(0, lo - b.start, piece).clone();
      }
      b.exp_avg = at::zeros({piece}, f32);
      b.exp_avg_sq = at::zeros({piece}, f32);
      if (!weights) b.grad = grads_.narrow(0, b.start, b.size);
      b.grad_piece = !weights && W == 1 ? b.grad : at::zeros({piece}, f32);
      b.step = at::zeros({}, f32);
      // Per parameter, the part of this piece that belongs to it: weight decay on the matrices'
      // parts; the gradient norm summed over all parts, so that it does not depend on how the
      // parameters are grouped into buckets (--shard weights and optimizer give the same norm).
      for (size_t i = 0; i < params_.size(); ++i) {
        int64_t s = std::max(lo, offset_[i]), e = std::min(lo + piece, offset_[i] + params_[i].numel());
        if (s >= e) continue;
        grad_views_.push_back(b.grad_piece.narrow(0, s - lo, e - s));
        if (params_[i].dim() >= 2) b.decay_views.push_back(b.master.narrow(0, s - lo, e - s));
      }
    }
  }
  if (!weights) {
    for (size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(params_[i].register_hook([this, i](const at::Tensor& g) { on_grad(i, g); }));
    return;
  }
  // Sharded weights: the gradient is taken after autograd accumulated it into .grad, and .grad
  // is dropped at once, so no whole bf16 gradient outlives its layer's backward.
  for (size_t i = 0; i < params_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<TakeGrad>(this, i));
}

ShardedAdamW::~ShardedAdamW() {
  if (shards_weights()) {
    for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_hook(hooks_[i]);
}

void ShardedAdamW::zero_grad() {
  if (grads_.defined()) grads_.zero_();
  for (auto& b : buckets_) {
    if (shards_weights()) b.grad_piece.zero_();
    b.ready = 0;
    b.launched = false;
    b.work.reset();
  }
  next_launch_ = 0;
  last_ = true;
}

void ShardedAdamW::on_grad(size_t i, const at::Tensor& g) {
  c10::AutoGradMode no_grad(false);
  Bucket& b = buckets_[bucket_of_[i]];
  if (!b.grad.defined()) b.grad = at::zeros({b.size}, g.options().dtype(at::kFloat));
  b.grad.narrow(0, offset_[i] - b.start, params_[i].numel()).add_(g.reshape(-1));
  if (!last_ && !shards_weights()) return;
  if (++b.ready < b.num_params) return;
  if (!shards_weights()) return launch(b);
  if (b.layer >= 0) shards_->release(static_cast<size_t>(b.layer));  // backward is done with the layer
  launch_ready();
}

void ShardedAdamW::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].num_params)
    launch(buckets_[next_launch_++]);
}

void ShardedAdamW::launch(Bucket& b) {
  if (b.launched) return;
  b.launched = true;
  if (!shards_weights()) {
    if (dist_.shard_size() > 1) b.work = dist_.shard_reduce_scatter_sum(b.grad_piece, grads_.narrow(0, b.start, b.size));
    return;
  }
  if (!b.grad.defined()) b.grad = at::zeros({b.size}, b.grad_piece.options());  // no gradient in this pass
  Pending p{static_cast<size_t>(&b - buckets_.data()), at::empty_like(b.grad_piece), {}};
  p.work = dist_.shard_reduce_scatter_sum(p.piece, b.grad);
  pending_.push_back(std::move(p));
  while (pending_.size() > 2) retire_one();  // at most two buckets' gradients in flight
}

void ShardedAdamW::retire_one() {
  Pending p = std::move(pending_.front());
  pending_.erase(pending_.begin());
  if (p.work) p.work->wait();
  Bucket& b = buckets_[p.bucket];
  b.grad_piece.add_(p.piece);
  b.grad.reset();
}

void ShardedAdamW::after_backward() {
  for (auto& p : params_) p.mutable_grad().reset();
  if (shards_weights()) {
    c10::AutoGradMode no_grad(false);
    for (size_t k = next_launch_; k < buckets_.size(); ++k) launch(buckets_[k]);  // in order, as on every rank
    while (!pending_.empty()) retire_one();
    for (auto& b : buckets_) {
      b.ready = 0;
      b.launched = false;
    }
    next_launch_ = 0;
    shards_->end_backward();
    return;
  }
  if (last_)
    for (auto& b : buckets_) launch(b);
}

int64_t ShardedAdamW::passes(int64_t mine) {
  if (!shards_weights()) return mine;
  auto t = at::tensor({static_cast<double>(mine)}, at::kDouble).to(params_[0].device());
  dist_.all_reduce_max(t);
  return static_cast<int64_t>(t.item<double>());
}

void ShardedAdamW::idle_backward(const model::QwenModel& model) {
  auto h = model.hidden_states_packed(idle_tokens());
  // Every parameter gets a gradient (of zero), as in a real pass.
  (at::linear(h, model.lm_head_weight()).sum() * 0).backward();
}

void ShardedAdamW::gather_weights() {
  if (shards_) shards_->gather_all();
}

void ShardedAdamW::release_weights() {
  if (shards_) shards_->release_all();
}

void ShardedAdamW::copy_weights_to(model::QwenModel& dst) {
  c10::AutoGradMode no_grad(false);
  auto to = dst.parameters_in_backward_order();
  MC_CHECK(to.size() == params_.size(), "copy_weights_to: another architecture (", to.size(), " tensors, not ", params_.size(), ")");
  for (size_t i = 0; i < params_.size();) {
    const Bucket& b = buckets_[bucket_of_[i]];
    if (b.layer >= 0) shards_->acquire(static_cast<size_t>(b.layer));
    for (; i < params_.size() && &buckets_[bucket_of_[i]] == &b; ++i) to[i].copy_(params_[i]);
    if (b.layer >= 0) shards_->release(static_cast<size_t>(b.layer));
  }
}

double ShardedAdamW::finish_gradients(double max_norm, double scale) {
  std::vector<at::Tensor> pieces;
  for (auto& b : buckets_) {
    MC_INTERNAL_ASSERT(b.launched || shards_weights(), "finish_gradients before the last micro-batch's after_backward");
    if (b.work) b.work->wait();
    b.work.reset();
    // Hybrid sharding: the shard groups' pieces summed over the replicas (each has the data of
    // its own ranks).
    dist_.replica_all_reduce_sum(b.grad_piece);
    pieces.push_back(b.grad_piece);
  }
  if (scale != 1.0) at::_foreach_mul_(pieces, at::Scalar(scale));
  auto norms = at::_foreach_norm(grad_views_, 2);
  auto sq = at::stack(norms).to(at::kDouble).pow(2).sum().reshape({1});
  dist_.shard_all_reduce_sum(sq);  // the shard group's pieces make the whole gradient
  double norm = std::sqrt(sq.item<double>());
  if (max_norm > 0) {
    // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1.
    double coef = std::min(1.0, max_norm / (norm + 1e-6));
    at::_foreach_mul_(pieces, at::Scalar(static_cast<float>(coef)));
  }
  return norm;
}

void ShardedAdamW::expose_gradients() {
  MC_CHECK(dist_.world() == 1, "expose_gradients: one rank only (other ranks hold only their pieces)");
  c10::AutoGradMode no_grad(false);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Bucket& b = buckets_[bucket_of_[i]];
    params_[i].mutable_grad() = b.grad_piece.narrow(0, offset_[i] - b.start, params_[i].numel()).view(params_[i].sizes()).clone();
  }
}

void ShardedAdamW::step(double lr) {
  c10::AutoGradMode no_grad(false);
  std::vector<at::Tensor> master, grad, m, v, steps, decay;
  for (auto& b : buckets_) {
    master.push_back(b.master);
    grad.push_back(b.grad_piece);
    m.push_back(b.exp_avg);
    v.push_back(b.exp_avg_sq);
    steps.push_back(b.step);
    decay.insert(decay.end(), b.decay_views.begin(), b.decay_views.end());
  }
  // torch.optim.AdamW: param *= 1 - lr * weight_decay, then the Adam update.
  if (opt_.weight_decay != 0 && !decay.empty()) at::_foreach_mul_(decay, at::Scalar(1.0 - lr * opt_.weight_decay));
  at::_foreach_add_(steps, at::Scalar(1.0));
  at::_fused_adamw_(master, grad, m, v, {}, steps, lr, opt_.beta1, opt_.beta2, /*weight_decay=*/0.0, opt_.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
  write_back();
}

void ShardedAdamW::write_back() {
  c10::AutoGradMode no_grad(false);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> lowp, whole(buckets_.size());  // kept alive until the gathers finish
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    lowp.push_back(b.master.to(dtype_));
    if (b.layer >= 0) {
      shards_->piece(static_cast<size_t>(b.layer)).copy_(lowp.back());  // the stored piece is the weights
      continue;
    }
    whole[k] = grads_.defined() ? gathered_.narrow(0, b.start, b.size) : at::empty({b.size}, lowp.back().options());
    works.push_back(dist_.shard_all_gather(whole[k], lowp.back()));
  }
  for (auto& w : works)
    if (w) w->wait();
  std::vector<at::Tensor> dst, src;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Bucket& b = buckets_[bucket_of_[i]];
    if (b.layer >= 0) continue;
    dst.push_back(params_[i]);
    src.push_back(whole[bucket_of_[i]].narrow(0, offset_[i] - b.start, params_[i].numel()).view(params_[i].sizes()));
  }
  if (!dst.empty()) at::_foreach_copy_(dst, src);
  if (shards_) shards_->pieces_changed();
}

std::vector<std::pair<std::string, at::Tensor>> ShardedAdamW::state() const {
  std::vector<std::pair<std::string, at::Tensor>> s;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    s.emplace_back(fmt::format("bucket{}.master", i), b.master.cpu());
    s.emplace_back(fmt::format("bucket{}.exp_avg", i), b.exp_avg.cpu());
    s.emplace_back(fmt::format("bucket{}.exp_avg_sq", i), b.exp_avg_sq.cpu());
    s.emplace_back(fmt::format("bucket{}.step", i), b.step.cpu().reshape({1}));
  }
  return s;
}

std::string ShardedAdamW::layout_signature() const {
  std::string sig = fmt::format("world={} params={} {}{}buckets=", dist_.world(), numel_, shards_weights() ? "shard=weights " : "",
                                dist_.replicas() > 1 ? fmt::format("shard_group={} ", dist_.shard_size()) : "");
  for (const auto& b : buckets_) sig += fmt::format("{}+{},", b.start, b.size);
  return sig;
}

void ShardedAdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  c10::AutoGradMode no_grad(false);
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    for (auto [name, dst] : {std::pair<const char*, at::Tensor*>{"master", &b.master}, {"exp_avg", &b.exp_avg},
                             {"exp_avg_sq", &b.exp_avg_sq}}) {
      auto it = by_name.find(fmt::format("bucket{}.{}", i, name));
      MC_CHECK(it != by_name.end(), "optimizer state has no bucket", i, ".", name);
      MC_CHECK(it->second.numel() == dst->numel(), "optimizer state bucket", i, ".", name, " has ", it->second.numel(),
               " elements, this layout needs ", dst->numel());
      dst->copy_(it->second.reshape(-1));
    }
    auto st = by_name.find(fmt::format("bucket{}.step", i));
    MC_CHECK(st != by_name.end(), "optimizer state has no bucket", i, ".step");
    b.step.copy_(st->second.reshape({}));
  }
  write_back();
}

}  // namespace mc::train
