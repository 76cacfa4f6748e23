// From examples to the micro-batches of one optimizer step.
//
// The order: each epoch is a permutation of the examples drawn from (seed, epoch), so a run is
// reproducible and a resumed run continues the same order from its saved DataPosition.
// A step takes the next examples until --tokens-per-step would be exceeded (at least one), the
// same for any number of ranks; an epoch's last step may be smaller (steps never cross epochs). Its examples are packed first-fit-decreasing into micro-batches
// of at most --micro-batch-tokens, each one row of back-to-back sequences (positions restart,
// attention stays inside each sequence: no padding), and micro-batch i goes to rank i % world.
// The loss is the sum over the step's target tokens divided by their global count, so any
// split into micro-batches and ranks gives the same gradient.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "model/qwen_model.h"
#include "train/dataset.h"

namespace mc::train {

struct DataPosition {
  int64_t epoch = 0, index = 0;  // next example: permutation(epoch)[index]
};

class DataOrder {
 public:
  DataOrder(int64_t num_examples, uint64_t seed) : n_(num_examples), seed_(seed) {}
  // The next step's examples (indices into the dataset); advances pos.
  std::vector<int64_t> next_step(const std::vector<Example>& data, int64_t tokens_per_step, DataPosition& pos) const;
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  int64_t n_;
  uint64_t seed_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

struct MicroBatch {
  model::PackedTokens tokens;  // ids, positions, cu_seqlens on the CPU
  at::Tensor targets;          // [N] int64: the next token where it is a loss target, else -100
  int64_t num_tokens = 0, loss_tokens = 0;
  std::vector<int64_t> examples;
  // Sum over the sequences of length^2 / 2: the causal attention pairs, for FLOP counts.
  double attention_pairs = 0;
};

// Packs the given examples into micro-batches of at most micro_batch_tokens tokens each.
std::vector<MicroBatch> pack(const std::vector<Example>& data, const std::vector<int64_t>& examples, int64_t micro_batch_tokens);

// One micro-batch holding exactly these examples, in this order (tests, evaluation).
MicroBatch make_micro_batch(const std::vector<Example>& data, const std::vector<int64_t>& examples);

}  // namespace mc::train
