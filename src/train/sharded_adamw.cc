#include "train/sharded_adamw.h"

#include <cmath>
#include <map>

#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "common/check.h"

namespace mc::train {

ShardedAdamW::ShardedAdamW(model::QwenModel& model, Distributed& dist, AdamWOptions opt)
    : dist_(dist), opt_(opt) {
  model.set_requires_grad(true);
  params_ = model.parameters_in_backward_order();
  const int64_t W = dist_.world();
  // Buckets of whole parameters, in backward order.
  int64_t flat = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (buckets_.empty() || buckets_.back().size >= opt_.bucket_elements) {
      if (!buckets_.empty()) {
        auto& b = buckets_.back();
        b.size = (b.size + W - 1) / W * W;
        flat = b.start + b.size;
      }
      buckets_.emplace_back();
      buckets_.back().start = flat;
    }
    Bucket& b = buckets_.back();
    offset_.push_back(b.start + b.size);
    bucket_of_.push_back(buckets_.size() - 1);
    b.size += params_[i].numel();
    ++b.num_params;
    numel_ += params_[i].numel();
  }
  buckets_.back().size = (buckets_.back().size + W - 1) / W * W;
  flat = buckets_.back().start + buckets_.back().size;

  auto f32 = params_[0].options().dtype(at::kFloat).requires_grad(false);
  grads_ = at::zeros({flat}, f32);
  gathered_ = at::zeros({flat}, params_[0].options().requires_grad(false));
  // Masters: every parameter in fp32 in the flat layout, then each rank keeps its pieces.
  {
    c10::AutoGradMode no_grad(false);
    auto all = at::zeros({flat}, f32);
    for (size_t i = 0; i < params_.size(); ++i) all.narrow(0, offset_[i], params_[i].numel()).copy_(params_[i].reshape(-1));
    for (auto& b : buckets_) {
      int64_t piece = b.size / W, lo = b.start + dist_.rank() * piece;
      b.master = all.narrow(0, lo, piece).clone();
      b.exp_avg = at::zeros({piece}, f32);
      b.exp_avg_sq = at::zeros({piece}, f32);
      b.grad_piece = W == 1 ? grads_.narrow(0, b.start, b.size) : at::zeros({piece}, f32);
      b.step = at::zeros({}, f32);
      // Weight decay on matrices only: the parts of this piece that belong to them.
      for (size_t i = 0; i < params_.size(); ++i) {
        if (params_[i].dim() < 2) continue;
        int64_t s = std::max(lo, offset_[i]), e = std::min(lo + piece, offset_[i] + params_[i].numel());
        if (s < e) b.decay_views.push_back(b.master.narrow(0, s - lo, e - s));
      }
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].register_hook([this, i](const at::Tensor& g) { on_grad(i, g); }));
}

ShardedAdamW::~ShardedAdamW() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_hook(hooks_[i]);
}

void ShardedAdamW::zero_grad() {
  grads_.zero_();
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
    b.work.reset();
  }
  last_ = true;
}

void ShardedAdamW::on_grad(size_t i, const at::Tensor& g) {
  c10::AutoGradMode no_grad(false);
  grads_.narrow(0, offset_[i], params_[i].numel()).add_(g.reshape(-1));
  if (!last_) return;
  Bucket& b = buckets_[bucket_of_[i]];
  if (++b.ready == b.num_params) launch(b);
}

void ShardedAdamW::launch(Bucket& b) {
  if (b.launched) return;
  b.launched = true;
  if (dist_.world() > 1) b.work = dist_.reduce_scatter_sum(b.grad_piece, grads_.narrow(0, b.start, b.size));
}

void ShardedAdamW::after_backward() {
  for (auto& p : params_) p.mutable_grad().reset();
  if (last_)
    for (auto& b : buckets_) launch(b);
}

double ShardedAdamW::finish_gradients(double max_norm, double scale) {
  std::vector<at::Tensor> pieces;
  for (auto& b : buckets_) {
    MC_INTERNAL_ASSERT(b.launched, "finish_gradients before the last micro-batch's after_backward");
    if (b.work) b.work->wait();
    b.work.reset();
    pieces.push_back(b.grad_piece);
  }
  if (scale != 1.0) at::_foreach_mul_(pieces, at::Scalar(scale));
  auto norms = at::_foreach_norm(pieces, 2);
  auto sq = at::stack(norms).to(at::kDouble).pow(2).sum().reshape({1});
  dist_.all_reduce_sum(sq);
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
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].mutable_grad() = grads_.narrow(0, offset_[i], params_[i].numel()).view(params_[i].sizes()).clone();
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
  std::vector<at::Tensor> lowp;  // kept alive until the gathers finish
  for (auto& b : buckets_) {
    lowp.push_back(b.master.to(gathered_.scalar_type()));
    works.push_back(dist_.all_gather(gathered_.narrow(0, b.start, b.size), lowp.back()));
  }
  for (auto& w : works)
    if (w) w->wait();
  std::vector<at::Tensor> dst, src;
  for (size_t i = 0; i < params_.size(); ++i) {
    dst.push_back(params_[i]);
    src.push_back(gathered_.narrow(0, offset_[i], params_[i].numel()).view(params_[i].sizes()));
  }
  at::_foreach_copy_(dst, src);
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
  std::string sig = fmt::format("world={} params={} buckets=", dist_.world(), numel_);
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
