#include "train/batching.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/check.h"

namespace mc::train {

std::vector<int64_t> DataOrder::permutation(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_.resize(n_);
    std::iota(cached_.begin(), cached_.end(), 0);
    // mt19937_64 and a hand-rolled Fisher-Yates: std::shuffle's algorithm is unspecified, and
    // the order must not change with the standard library.
    std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    for (int64_t i = n_ - 1; i > 0; --i) std::swap(cached_[i], cached_[rng() % static_cast<uint64_t>(i + 1)]);
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::vector<int64_t> DataOrder::next_step(const std::vector<Example>& data, int64_t tokens_per_step, DataPosition& pos) const {
  std::vector<int64_t> out;
  int64_t tokens = 0;
  for (;;) {
    if (pos.index >= n_) {
      ++pos.epoch;
      pos.index = 0;
    }
    int64_t e = permutation(pos.epoch)[pos.index];
    int64_t len = static_cast<int64_t>(data[e].tokens.size());
    if (!out.empty() && tokens + len > tokens_per_step) break;
    out.push_back(e);
    tokens += len;
    ++pos.index;
    if (tokens >= tokens_per_step || pos.index >= n_) break;  // a step never crosses an epoch
  }
  return out;
}

MicroBatch make_micro_batch(const std::vector<Example>& data, const std::vector<int64_t>& examples) {
  MicroBatch mb;
  int64_t n = 0;
  for (int64_t e : examples) n += data[e].tokens.size();
  auto ids = at::empty({n}, at::kLong), pos = at::empty({n}, at::kLong), tgt = at::full({n}, -100, at::kLong);
  auto cu = at::empty({static_cast<int64_t>(examples.size()) + 1}, at::kInt);
  auto* pi = ids.data_ptr<int64_t>();
  auto* pp = pos.data_ptr<int64_t>();
  auto* pt = tgt.data_ptr<int64_t>();
  auto* pc = cu.data_ptr<int32_t>();
  int64_t at_tok = 0, max_len = 0;
  pc[0] = 0;
  for (size_t s = 0; s < examples.size(); ++s) {
    const Example& ex = data[examples[s]];
    int64_t L = ex.tokens.size();
    for (int64_t i = 0; i < L; ++i) {
      pi[at_tok + i] = ex.tokens[i];
      pp[at_tok + i] = i;
      if (i + 1 < L && ex.loss_mask[i + 1]) {
        pt[at_tok + i] = ex.tokens[i + 1];
        ++mb.loss_tokens;
      }
    }
    at_tok += L;
    pc[s + 1] = static_cast<int32_t>(at_tok);
    max_len = std::max(max_len, L);
    mb.attention_pairs += 0.5 * static_cast<double>(L) * static_cast<double>(L + 1);
  }
  mb.tokens = {ids, pos, cu, max_len};
  mb.targets = tgt;
  mb.num_tokens = n;
  mb.examples = examples;
  return mb;
}

std::vector<MicroBatch> pack(const std::vector<Example>& data, const std::vector<int64_t>& examples, int64_t micro_batch_tokens) {
  MC_CHECK(micro_batch_tokens > 0, "--micro-batch-tokens must be positive");
  std::vector<int64_t> order = examples;
  // Longest first (ties by position in the step, so the packing is deterministic).
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return data[a].tokens.size() > data[b].tokens.size(); });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> fill;
  for (int64_t e : order) {
    int64_t len = data[e].tokens.size();
    MC_CHECK(len <= micro_batch_tokens, data[e].origin, ": example of ", len, " tokens exceeds --micro-batch-tokens ",
             micro_batch_tokens, " (lower --max-len or raise --micro-batch-tokens)");
    size_t b = 0;
    while (b < bins.size() && fill[b] + len > micro_batch_tokens) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      fill.push_back(0);
    }
    bins[b].push_back(e);
    fill[b] += len;
  }
  std::vector<MicroBatch> out;
  for (auto& bin : bins) out.push_back(make_micro_batch(data, bin));
  return out;
}

}  // namespace mc::train
