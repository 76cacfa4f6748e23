// ZeRO-3's weights (`--shard weights`): each decoder layer's parameters live in one flat buffer
// of the model dtype, padded to a multiple of the shard group's size W (the world, unless hybrid
// sharding splits it: Distributed::split_shard_groups), and each rank keeps only its 1/W piece. The whole buffer exists only while its layer computes:
//   forward:  gathered (c10d all-gather of the pieces) just before the layer, freed after it;
//   backward: gathered again when backward reaches the layer's output (a hook on it), freed
//             once all the layer's parameters have their gradient (the optimizer says so).
// While one layer computes, the next one's gather runs (in backward, the previous one's).
// The embedding, the final norm and the LM head are not sharded: they are needed at both ends
// of every pass, and at 9B-27B they are a few percent of the weights.
//
// Each parameter starts at a multiple of 256 elements of the buffer, so it is as aligned as an
// allocation of its own and the kernels (and so the numbers) are those of unsharded weights.
//
// How a buffer is freed without autograd noticing: the layer's leaves are views into it, and
// autograd's saved tensors are views of the same storage, so the storage object stays and only
// its memory is released (set to no bytes) and later allocated again and refilled by the
// gather, as PyTorch's FSDP does with storage resize. Outside a pass the leaves have no memory;
// whole_weights() gathers every layer for what needs them all (saving, copying to the engine).
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "model/qwen_model.h"
#include "train/distributed.h"

namespace mc::train {

// One token at position 0: the pass a rank without data makes so that its gathers and
// reductions match the other ranks' (ShardedAdamW::idle_backward, train::mean_token_loss).
model::PackedTokens idle_tokens();

class WeightShards : public model::LayerHooks {
 public:
  // Binds every layer's leaves to its flat buffer (their values kept), cuts this rank's pieces,
  // frees the buffers and hooks into the model.
  WeightShards(model::QwenModel& model, Distributed& dist);
  ~WeightShards() override;

  size_t layers() const { return units_.size(); }
  // Layer i's leaves in the buffer's order, their offsets in it, and its padded size.
  const std::vector<at::Tensor>& params(size_t i) const { return units_[i].params; }
  const std::vector<int64_t>& offsets(size_t i) const { return units_[i].offset; }
  int64_t padded_size(size_t i) const { return units_[i].size; }
  // This rank's piece of layer i (padded_size / W elements, model dtype): what it stores.
  at::Tensor& piece(size_t i) { return units_[i].piece; }
  // After the pieces were rewritten (an optimizer step): a layer held whole is gathered anew.
  void pieces_changed();

  // Every layer whole, until release_all(). Collective: every rank calls both.
  void gather_all();
  void release_all();

  // Layer i whole (blocking), and freed again. The optimizer's gradient hooks release a layer
  // once its parameters all have their gradient for this backward.
  void acquire(size_t i);
  void release(size_t i);
  // After each backward: every buffer freed (a layer whose parameters got no gradient too).
  void end_backward();

  void before_layer(size_t i) override;
  void after_layer(size_t i, const at::Tensor& out) override;

 private:
  enum class State { kFree, kGathering, kWhole };
  struct Unit {
    std::vector<at::Tensor> params;
    std::vector<int64_t> offset;
    int64_t size = 0;
    at::Tensor full, piece;
    State state = State::kFree;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void start_gather(size_t i);
  void wait_gather(size_t i);
  void free_unit(size_t i);

  model::QwenModel& model_;
  Distributed& dist_;
  std::vector<Unit> units_;
  bool all_ = false;  // gather_all() holds every layer
};

}  // namespace mc::train
