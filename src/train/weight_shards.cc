#include "train/weight_shards.h"

#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>

#include "common/check.h"

namespace mc::train {

namespace {

// Each parameter starts kAlign elements into the buffer (512 bytes in bf16): as aligned as an
// allocation of its own, so cuBLAS picks the kernels it picks for unsharded weights (it chooses
// by the operands' alignment), and the arithmetic is the same.
constexpr int64_t kAlign = 256;

// The storage object stays (the leaves and autograd's saved tensors hold it); its memory goes.
void release_memory(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(size_t{0});
}

void allocate_memory(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  MC_INTERNAL_ASSERT(s->allocator() != nullptr, "a sharded layer's buffer has no allocator");
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

}  // namespace

model::PackedTokens idle_tokens() {
  return {at::zeros({1}, at::kLong), at::zeros({1}, at::kLong), at::tensor({0, 1}, at::kInt), 1};
}

WeightShards::WeightShards(model::QwenModel& model, Distributed& dist) : model_(model), dist_(dist) {
  c10::AutoGradMode no_grad(false);
  const int64_t W = dist_.shard_size();
  units_.resize(static_cast<size_t>(model.config().num_layers));
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    u.params = model.layer_parameters(i);
    for (const auto& p : u.params) {
      u.offset.push_back(u.size);
      u.size += (p.numel() + kAlign - 1) / kAlign * kAlign;
    }
    u.size = (u.size + W - 1) / W * W;
    u.full = at::zeros({u.size}, u.params[0].options().requires_grad(false));
    for (size_t k = 0; k < u.params.size(); ++k) {
      at::Tensor& p = u.params[k];
      auto view = u.full.narrow(0, u.offset[k], p.numel()).view(p.sizes());
      view.copy_(p);
      p.set_data(view);  // the leaf (and its hooks) stays; its values now live in the buffer
    }
    const int64_t piece = u.size / W;
    u.piece = u.full.narrow(0, dist_.shard_rank() * piece, piece).clone();
    u.state = State::kWhole;
    release(i);
  }
  model_.set_layer_hooks(this);
}

WeightShards::~WeightShards() { model_.set_layer_hooks(nullptr); }

void WeightShards::start_gather(size_t i) {
  Unit& u = units_[i];
  if (u.state != State::kFree) return;
  allocate_memory(u.full, static_cast<size_t>(u.size) * u.full.element_size());
  u.work = dist_.shard_all_gather(u.full, u.piece);
  u.state = State::kGathering;
}

void WeightShards::wait_gather(size_t i) {
  Unit& u = units_[i];
  if (u.state != State::kGathering) return;
  if (u.work) u.work->wait();
  u.work.reset();
  u.state = State::kWhole;
}

void WeightShards::acquire(size_t i) {
  start_gather(i);
  wait_gather(i);
}

void WeightShards::release(size_t i) {
  Unit& u = units_[i];
  if (all_ || u.state == State::kFree) return;
  wait_gather(i);  // never free memory a collective still writes
  release_memory(u.full);
  u.state = State::kFree;
}

void WeightShards::pieces_changed() {
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    if (u.state == State::kFree) continue;
    wait_gather(i);
    if (auto w = dist_.shard_all_gather(u.full, u.piece)) w->wait();
  }
}

void WeightShards::gather_all() {
  for (size_t i = 0; i < units_.size(); ++i) start_gather(i);
  for (size_t i = 0; i < units_.size(); ++i) wait_gather(i);
  all_ = true;
}

void WeightShards::release_all() {
  all_ = false;
  for (size_t i = 0; i < units_.size(); ++i) release(i);
}

void WeightShards::end_backward() {
  for (size_t i = 0; i < units_.size(); ++i) release(i);
}

void WeightShards::before_layer(size_t i) {
  acquire(i);
  if (i + 1 < units_.size()) start_gather(i + 1);  // the next layer's gather runs while this one computes
}

void WeightShards::after_layer(size_t i, const at::Tensor& out) {
  if (out.requires_grad()) {
    at::Tensor o = out;
    o.register_hook([this, i](const at::Tensor&) {
      acquire(i);
      if (i > 0) start_gather(i - 1);  // backward goes down the layers
    });
  }
  release(i);
}

}  // namespace mc::train
