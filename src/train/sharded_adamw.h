// AdamW with fp32 master weights and fp32 moments, sharded across data-parallel ranks
// (ZeRO stages 1 and 2), with gradients reduced in buckets while backward still runs.
//
// Why fp32 masters: at --lr 1e-5 (and 1e-6 in RL) an update is often below bf16's resolution
// of a weight (2^-8 relative), so bf16 weights updated in place would mostly not change. The
// model computes in its dtype (bf16 on GPUs); the optimizer keeps fp32 copies, updates those,
// and writes them back rounded. Gradients are accumulated over micro-batches in fp32.
//
// Layout: the model's parameters, in the order backward finishes them, are laid end to end in
// one flat fp32 gradient buffer cut into buckets (--bucket-mb). Each bucket is padded to a
// multiple of the world size; rank r owns the r-th piece of every bucket. During the last
// micro-batch's backward, a parameter's gradient hook adds it into the buffer and, once its
// bucket is complete, starts the bucket's reduce-scatter (c10d), so communication overlaps the
// rest of backward. After backward: wait, global grad-norm (all-reduce of the pieces' squared
// norms), clip, AdamW on the owned pieces (torch's fused AdamW kernel), then all-gather the
// updated pieces in the model dtype and copy them into the parameters. With one rank the same
// code runs with copies in place of collectives.
//
// Memory per GPU for P parameters, W ranks, model in bf16: 2P (weights) + 2P (bf16 grads
// until the hook has taken them) + 4P (fp32 gradient buffer) + 12P/W (master, m, v).
//
// Shard::kWeights (ZeRO-3, `--shard weights`) shards the weights too (train/weight_shards.h):
// each decoder layer is a bucket of its own, laid out as the layer's flat buffer, so rank r's
// piece of the bucket is the piece of the weights it stores. The layout differs in three ways:
// every micro-batch's backward reduce-scatters each bucket as soon as it is complete, in bucket
// order (the same order on every rank), and adds the result into the owned piece, so no rank
// keeps a whole gradient; a bucket's fp32 gradient exists only from its first gradient to its
// reduction; and step() writes the updated pieces into the layers' pieces, gathering only the
// embedding, final norm and LM head. Every rank must then make the same number of passes:
// passes() says how many, idle_backward() is a pass without data. Memory per GPU: 16P/W for the
// layers (2 weights + 2 gradient + 12 optimizer), plus the unsharded embedding and head, plus
// two or three layers whole and one layer's fp32 gradient at a time, plus activations.
//
// With shard_group N < W (hybrid sharding) the pieces are 1/N of each bucket, split over this
// rank's shard group; reduce-scatters and gathers stay inside it, and the reduced pieces are
// summed over the replica groups once per step, before the norm.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "model/qwen_model.h"
#include "train/distributed.h"

namespace mc::train {

// What the ranks split among them (--shard): optimizer state (ZeRO-1/2), or the weights too (ZeRO-3).
enum class Shard { kOptimizer, kWeights };

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t bucket_elements = int64_t{1} << 25;  // 128 MB of fp32 gradients
  Shard shard = Shard::kOptimizer;
  int shard_group = 0;  // ranks a shard group spans (hybrid sharding, Distributed::split_shard_groups); 0: all
};

class WeightShards;

class ShardedAdamW {
 public:
  // Takes the model's parameters (requires_grad is turned on) and registers the hooks.
  ShardedAdamW(model::QwenModel& model, Distributed& dist, AdamWOptions opt);
  ~ShardedAdamW();

  // Before the first micro-batch of a step.
  void zero_grad();
  // Before each micro-batch's backward: whether it is this rank's last of the step (its
  // backward starts the reductions).
  void set_last_micro_batch(bool last) { last_ = last; }
  // After each backward: frees the parameters' .grad; after the last, starts the reduction
  // of buckets whose parameters got no gradient. A rank with no micro-batch calls only this.
  void after_backward();
  // Waits for the reductions; multiplies the gradients by `scale` (a loss whose normalizer is
  // known only after backward: RL's global count of trained tokens); returns the global
  // gradient norm before clipping; clips to max_norm when max_norm > 0
  // (torch.nn.utils.clip_grad_norm_'s arithmetic).
  double finish_gradients(double max_norm, double scale = 1.0);
  // One rank, after finish_gradients: the reduced (scaled, clipped) gradient of each parameter
  // set as its .grad, so model.named_gradients() shows what the update will use (tests compare
  // it with a PyTorch reference). after_backward() clears them again.
  void expose_gradients();
  // Decoupled weight decay (matrices only, not norms and biases) and the AdamW update of the
  // owned pieces, then the parameters are gathered and written back.
  void step(double lr);

  // Passes (forward and backward) this rank makes for `mine` micro-batches of its own: `mine`,
  // or with sharded weights the most any rank has (collective).
  int64_t passes(int64_t mine);
  // A pass without data (one token, loss 0): gathers and reduces what a real pass does.
  void idle_backward(const model::QwenModel& model);
  // With sharded weights: every layer whole until release_weights() (collective; saving), and
  // the current weights copied into `dst`, a whole model of the same architecture (the
  // engine's), one layer gathered at a time. Without: no-ops, and a copy.
  void gather_weights();
  void release_weights();
  void copy_weights_to(model::QwenModel& dst);
  bool shards_weights() const { return opt_.shard == Shard::kWeights; }

  // This rank's optimizer state (master, exp_avg, exp_avg_sq per bucket piece, step), on the
  // CPU, and the layout it belongs to (a resume must match it).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  std::string layout_signature() const;
  // Loads state() of the same layout and writes the masters back into the parameters.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);

 private:
  struct Bucket {
    int64_t start = 0, size = 0;  // in the flat layout; size % world == 0
    int num_params = 0, ready = 0;
    int layer = -1;               // sharded weights: the decoder layer it is
    bool launched = false;
    at::Tensor grad;              // the bucket's fp32 gradient (sharded weights: only while reduced)
    at::Tensor master, exp_avg, exp_avg_sq, grad_piece, step;  // the owned piece
    std::vector<at::Tensor> decay_views;                       // of master: matrices only
    c10::intrusive_ptr<c10d::Work> work;
  };
  // A reduce-scatter in flight (sharded weights), added into the owned piece when done.
  struct Pending {
    size_t bucket;
    at::Tensor piece;
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct TakeGrad;
  void on_grad(size_t param, const at::Tensor& grad);
  void launch(Bucket& b);
  void launch_ready();  // sharded weights: the complete buckets next in order
  void retire_one();
  void write_back();

  Distributed& dist_;
  AdamWOptions opt_;
  std::vector<at::Tensor> params_;
  std::vector<int64_t> offset_;   // per parameter, in the flat buffer
  std::vector<size_t> bucket_of_;
  std::vector<unsigned> hooks_;   // per parameter, removed by the destructor
  std::vector<Bucket> buckets_;
  std::vector<at::Tensor> grad_views_;  // of the grad pieces, per parameter, in parameter order
  at::Tensor grads_;              // flat fp32 (not with sharded weights)
  at::Tensor gathered_;           // flat, model dtype: all-gather target (not with sharded weights)
  int64_t numel_ = 0;
  bool last_ = true;
  c10::ScalarType dtype_;
  std::unique_ptr<WeightShards> shards_;
  std::vector<Pending> pending_;
  size_t next_launch_ = 0;
};

}  // namespace mc::train
