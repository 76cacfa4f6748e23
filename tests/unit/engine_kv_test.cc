// The generation engine's kept caches (GenerationRequest::keep_kv / continues): a conversation's
// next turn prefilled from where the prefix it shares with the kept tokens ends gives the same
// tokens and log-probs as the whole prompt prefilled afresh, alone or several continuations in one
// prefill call, after a partial match, and when the entry was given up for room. On CUDA (where
// there is one) the same, with the decode step's CUDA graphs. Tiny random Qwen3 model, fp32.
#include <algorithm>
#include <array>
#include <set>

#include <gtest/gtest.h>

#include <ATen/Context.h>

#include "common/check.h"
#include "generate/engine.h"
#include "model/qwen_model.h"
#include "engine_test_util.h"

namespace {

using mc::gen::Completion;
using mc::gen::EngineOptions;
using mc::gen::GenerationEngine;
using mc::gen::GenerationRequest;

using mc::test::expect_same;
using mc::test::greedy;

mc::model::QwenModel tiny(c10::Device device) { return mc::test::tiny_qwen3(device); }

// tiny() in the dtype generation runs in: bf16 on CUDA (flash attention), fp32 on the CPU.
mc::model::QwenModel generation_model(c10::Device device) {
  return mc::test::tiny_qwen3(device, device.is_cuda() ? at::kBFloat16 : at::kFloat);
}

// Within bf16's rounding (3e-2) or fp32's (1e-4), relative to the largest magnitude compared.
void expect_close(const at::Tensor& got, const at::Tensor& want, bool bf16, const std::string& what) {
  auto g = got.to(at::kCPU, at::kFloat), w = want.to(at::kCPU, at::kFloat);
  const double err = (g - w).abs().max().item<double>(), scale = w.abs().max().item<double>() + 1e-6;
  EXPECT_LE(err, (bf16 ? 3e-2 : 1e-4) * scale) << what << ": max |diff| " << err << " of " << scale;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class EngineKv : public ::testing::TestWithParam<std::string> {
 protected:
  c10::Device device() const { return c10::Device(GetParam()); }
  EngineOptions options() const {
    EngineOptions o;
    o.max_batch = 8;
    o.max_seq_len = 128;
    return o;
  }
};

TEST_P(EngineKv, ContinuationEqualsAFreshPrefill) {
  auto model = tiny(device());
  GenerationEngine kv(model, nullptr, options()), plain(model, nullptr, options());
  const std::vector<int32_t> p1{3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
  auto first = kv.generate({greedy(p1, 9, /*keep=*/true)})[0][0];
  ASSERT_GE(first.kept, 0);
  EXPECT_EQ(kv.kept_entries(), 1);
  expect_same(first, plain.generate({greedy(p1, 9)})[0][0], "the kept turn itself");

  // The next turn: the whole conversation so far and a new user turn.
  const auto p2 = concat(concat(p1, first.tokens), {46, 26, 43, 38, 32});
  auto before = kv.stats();
  auto second = kv.generate({greedy(p2, 12, /*keep=*/true, first.kept)})[0][0];
  auto d = mc::gen::stats_between(before, kv.stats());
  EXPECT_EQ(d.continued, 1);
  // Kept: the prompt and every answer token but the last, which was never fed back.
  EXPECT_EQ(d.reused_tokens, static_cast<int64_t>(p1.size() + first.tokens.size() - 1));
  expect_same(second, plain.generate({greedy(p2, 12)})[0][0], "second turn");

  // A third turn that shares only part of the kept tokens (a re-tokenized answer differs from
  // the sampled tokens somewhere): the shared prefix is reused, the rest prefilled.
  auto p3 = concat(concat(p2, second.tokens), {11, 12, 13});
  p3[p1.size() + 4] = (p3[p1.size() + 4] + 1) % 90;
  before = kv.stats();
  auto third = kv.generate({greedy(p3, 10, /*keep=*/false, second.kept)})[0][0];
  d = mc::gen::stats_between(before, kv.stats());
  EXPECT_EQ(d.continued, 1);
  EXPECT_EQ(d.reused_tokens, static_cast<int64_t>(p1.size() + 4));
  EXPECT_EQ(third.kept, -1);
  EXPECT_EQ(kv.kept_entries(), 0);  // continued without keep_kv: the slot is free again
  expect_same(third, plain.generate({greedy(p3, 10)})[0][0], "third turn, partial prefix");
}

TEST_P(EngineKv, ContinuationsPrefilledTogetherBesideAFreshPrompt) {
  auto model = tiny(device());
  GenerationEngine kv(model, nullptr, options()), plain(model, nullptr, options());
  const std::vector<std::vector<int32_t>> firsts{{5, 6, 7, 8, 9, 10, 11}, {20, 21, 22}, {40, 41, 42, 43, 44, 45, 46, 47, 48}};
  std::vector<GenerationRequest> reqs;
  for (const auto& p : firsts) reqs.push_back(greedy(p, 6 + static_cast<int>(p.size()) % 5, true));
  auto out = kv.generate(reqs);
  // Each continues with a user turn of a different length; a fresh prompt comes with them.
  std::vector<GenerationRequest> next, fresh;
  for (size_t i = 0; i < firsts.size(); ++i) {
    auto p = concat(concat(firsts[i], out[i][0].tokens), std::vector<int32_t>(2 + 3 * i, static_cast<int32_t>(60 + i)));
    next.push_back(greedy(p, 8, false, out[i][0].kept));
    fresh.push_back(greedy(p, 8));
  }
  next.push_back(greedy({70, 71, 72, 73}, 8));
  fresh.push_back(greedy({70, 71, 72, 73}, 8));
  auto before = kv.stats();
  auto got = kv.generate(next);
  auto d = mc::gen::stats_between(before, kv.stats());
  EXPECT_EQ(d.continued, 3);
  EXPECT_EQ(d.prefill_calls, 2);  // the continuations in one call, the fresh prompt in another
  // Each continuation prefills its answer's last token (never fed back) and its user turn:
  // 3, 6 and 9 tokens, packed in their call (no padding); the fresh prompt its 4 in the other.
  EXPECT_EQ(d.prompt_tokens - d.reused_tokens, 3 + 6 + 9 + 4);
  if (device().is_cuda())
    EXPECT_GT(d.prefill_gpu_ms, 0.0);
  else
    EXPECT_EQ(d.prefill_gpu_ms, 0.0);
  auto want = plain.generate(fresh);
  for (size_t i = 0; i < got.size(); ++i) expect_same(got[i][0], want[i][0], "request " + std::to_string(i));
}

TEST_P(EngineKv, KeptEntriesGiveWayAndStaleIdsPrefillEverything) {
  auto model = tiny(device());
  GenerationEngine kv(model, nullptr, options()), plain(model, nullptr, options());
  // Eight kept samples fill every slot.
  auto r = greedy({1, 2, 3, 4, 5}, 4, true);
  r.params.n = 8;
  auto eight = kv.generate({r})[0];
  EXPECT_EQ(kv.kept_entries(), 8);
  // A new prompt needs a slot: the oldest entry is given up for it.
  auto before = kv.stats();
  auto other = kv.generate({greedy({9, 8, 7}, 4)})[0][0];
  EXPECT_EQ(mc::gen::stats_between(before, kv.stats()).kept_evicted, 1);
  EXPECT_EQ(kv.kept_entries(), 7);
  expect_same(other, plain.generate({greedy({9, 8, 7}, 4)})[0][0], "the prompt that needed room");
  // The evicted entry's continuation is a plain request; a kept one's continues.
  auto p = concat(concat({1, 2, 3, 4, 5}, eight[0].tokens), {30, 31});
  before = kv.stats();
  auto a = kv.generate({greedy(p, 5, false, eight[0].kept)})[0][0];
  EXPECT_EQ(mc::gen::stats_between(before, kv.stats()).continued, 0);
  expect_same(a, plain.generate({greedy(p, 5)})[0][0], "evicted entry's turn");
  auto q = concat(concat({1, 2, 3, 4, 5}, eight[1].tokens), {30, 31});
  before = kv.stats();
  auto b = kv.generate({greedy(q, 5, false, eight[1].kept)})[0][0];
  EXPECT_EQ(mc::gen::stats_between(before, kv.stats()).continued, 1);
  expect_same(b, plain.generate({greedy(q, 5)})[0][0], "kept entry's turn");
  // Released entries free their slots; an unknown id is ignored.
  kv.release(eight[2].kept);
  kv.release(12345);
  EXPECT_EQ(kv.kept_entries(), 5);
  kv.release_kept();
  EXPECT_EQ(kv.kept_entries(), 0);
  // Eight fresh sequences fit again.
  r.keep_kv = false;
  EXPECT_EQ(kv.generate({r})[0].size(), 8u);
  // A continuation samples once.
  auto bad = greedy(p, 5, false, 3);
  bad.params.n = 2;
  EXPECT_THROW(kv.validate(bad), mc::Error);
}

// A prefill call is bounded by the tokens it computes (EngineOptions::prefill_tokens), not by
// its rows padded to the longest: a long and a short prompt share a call, and continuations
// count only what they prefill past their kept prefix.
TEST_P(EngineKv, PrefillCallsAreBoundedByTheTokensTheyCompute) {
  auto model = tiny(device());
  auto o = options();
  o.prefill_tokens = 30;
  GenerationEngine kv(model, nullptr, o), plain(model, nullptr, options());
  std::vector<int32_t> long_p(25), short_p{7, 8, 9};
  for (int i = 0; i < 25; ++i) long_p[i] = 3 + (i * 7) % 80;
  auto before = kv.stats();
  auto two = kv.generate({greedy(long_p, 4), greedy(short_p, 4)});
  EXPECT_EQ(mc::gen::stats_between(before, kv.stats()).prefill_calls, 1);  // 28 tokens (2 x 25 padded: 50)
  auto want = plain.generate({greedy(long_p, 4), greedy(short_p, 4)});
  expect_same(two[0][0], want[0][0], "long prompt");
  expect_same(two[1][0], want[1][0], "short prompt");
  // Two conversations of ~36 tokens each continue: 5 tokens each to prefill, one call.
  std::vector<int32_t> a(28), b(28);
  for (int i = 0; i < 28; ++i) a[i] = 3 + (i * 5) % 80, b[i] = 3 + (i * 11) % 80;
  auto firsts = kv.generate({greedy(a, 4, true), greedy(b, 4, true)});
  std::vector<GenerationRequest> next, fresh;
  for (int i = 0; i < 2; ++i) {
    auto p = concat(concat(i ? b : a, firsts[i][0].tokens), {40, 41, 42, 43});
    next.push_back(greedy(p, 4, false, firsts[i][0].kept));
    fresh.push_back(greedy(p, 4));
  }
  before = kv.stats();
  auto got = kv.generate(next);
  auto d = mc::gen::stats_between(before, kv.stats());
  EXPECT_EQ(d.continued, 2);
  EXPECT_EQ(d.prefill_calls, 1);
  EXPECT_EQ(d.prompt_tokens - d.reused_tokens, 2 * 5);
  auto ref = plain.generate(fresh);
  for (int i = 0; i < 2; ++i) expect_same(got[i][0], ref[i][0], "continuation " + std::to_string(i));
}

// Prefill packs its rows' real tokens end to end (no padding): on CUDA in bf16 through
// variable-length flash attention, elsewhere each sequence's attention alone. Each row's logits
// and the K/V written to each of its slots equal those of the prompt prefilled by itself, and
// its logits those of a plain forward pass.
TEST_P(EngineKv, PackedPrefillEqualsEachPromptAlone) {
  auto model = generation_model(device());
  auto close = [&](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    expect_close(got, want, device().is_cuda(), what);
  };
  const std::vector<int64_t> lens{5, 17, 40, 1};
  const int64_t B = lens.size(), T = 40;
  auto ids = at::zeros({B, T}, at::kLong);
  for (int64_t b = 0; b < B; ++b) ids[b].narrow(0, 0, lens[b]).copy_(at::randint(3, 90, {lens[b]}, at::kLong));
  // Row 1 is sampled twice (two slots); slots out of order.
  const std::vector<int64_t> rows{0, 1, 1, 2, 3}, slots{3, 0, 5, 1, 7};
  auto cache = model.make_cache(8, 64);
  auto logits = model.prefill(ids, at::tensor(lens), at::tensor(rows), at::tensor(slots), cache);
  ASSERT_EQ(logits.size(0), B);
  for (size_t j = 0; j < rows.size(); ++j) {
    const int64_t b = rows[j], n = lens[b];
    auto one = model.make_cache(8, 64);
    auto alone = model.prefill(ids[b].narrow(0, 0, n).unsqueeze(0), at::tensor(std::vector<int64_t>{n}),
                               at::tensor(std::vector<int64_t>{0}), at::tensor(std::vector<int64_t>{2}), one);
    const auto what = "row " + std::to_string(b) + " in slot " + std::to_string(slots[j]);
    close(logits[b], alone[0], what + ", logits against the prompt alone");
    close(logits[b], model.forward(ids[b].narrow(0, 0, n).unsqueeze(0))[0][n - 1], what + ", logits against forward");
    for (size_t l = 0; l < cache.k.size(); ++l) {
      close(cache.k[l][slots[j]].narrow(1, 0, n), one.k[l][2].narrow(1, 0, n), what + ", K of layer " + std::to_string(l));
      close(cache.v[l][slots[j]].narrow(1, 0, n), one.v[l][2].narrow(1, 0, n), what + ", V of layer " + std::to_string(l));
    }
  }
}

// Continuations packed into one call (prefill_from): rows of different prefix and new lengths,
// each in its own slot, give the logits and K/V of the whole conversation prefilled at once. On
// CUDA in bf16 the keys are read back from the slots for variable-length flash attention.
TEST_P(EngineKv, PackedContinuationsEqualTheWholePrompt) {
  auto model = generation_model(device());
  auto close = [&](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    expect_close(got, want, device().is_cuda(), what);
  };
  // (prefix, new tokens, slot) per row.
  const std::vector<std::array<int64_t, 3>> rows{{12, 5, 6}, {3, 20, 1}, {33, 1, 4}};
  const int64_t B = rows.size(), T = 20;
  auto cache = model.make_cache(8, 64);
  std::vector<at::Tensor> whole;
  auto ids = at::zeros({B, T}, at::kLong);
  std::vector<int64_t> starts, lens, slots;
  for (int64_t b = 0; b < B; ++b) {
    auto [prefix, n, slot] = rows[b];
    whole.push_back(at::randint(3, 90, {prefix + n}, at::kLong));
    model.prefill(whole[b].narrow(0, 0, prefix).unsqueeze(0), at::tensor(std::vector<int64_t>{prefix}),
                  at::tensor(std::vector<int64_t>{0}), at::tensor(std::vector<int64_t>{slot}), cache);
    ids[b].narrow(0, 0, n).copy_(whole[b].narrow(0, prefix, n));
    starts.push_back(prefix), lens.push_back(n), slots.push_back(slot);
  }
  auto logits = model.prefill_from(ids, at::tensor(starts), at::tensor(lens), at::tensor(slots), cache);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t S = whole[b].numel();
    auto one = model.make_cache(8, 64);
    auto alone = model.prefill(whole[b].unsqueeze(0), at::tensor(std::vector<int64_t>{S}), at::tensor(std::vector<int64_t>{0}),
                               at::tensor(std::vector<int64_t>{0}), one);
    const auto what = "row " + std::to_string(b);
    close(logits[b], alone[0], what + ", logits against the whole prompt");
    for (size_t l = 0; l < cache.k.size(); ++l) {
      close(cache.k[l][slots[b]].narrow(1, 0, S), one.k[l][0].narrow(1, 0, S), what + ", K of layer " + std::to_string(l));
      close(cache.v[l][slots[b]].narrow(1, 0, S), one.v[l][0].narrow(1, 0, S), what + ", V of layer " + std::to_string(l));
    }
  }
}

TEST(PrefillBucket, RoundsUpToFewShapes) {
  using mc::model::prefill_bucket;
  EXPECT_EQ(prefill_bucket(1), 64);
  EXPECT_EQ(prefill_bucket(64), 64);
  EXPECT_EQ(prefill_bucket(65), 128);
  EXPECT_EQ(prefill_bucket(1023), 1024);
  EXPECT_EQ(prefill_bucket(1025), 1152);   // multiples of 128 from 1,024
  EXPECT_EQ(prefill_bucket(2500), 2560);   // of 256 from 2,048
  EXPECT_EQ(prefill_bucket(12801), 13312); // of 1,024 from 8,192
  for (int64_t n = 1; n < 20000; n += 7) {
    const int64_t p = prefill_bucket(n);
    EXPECT_GE(p, n);
    EXPECT_LE(p - n, std::max<int64_t>(63, n / 8)) << n;
  }
  std::set<int64_t> shapes;
  for (int64_t n = 800; n < 13000; ++n) shapes.insert(prefill_bucket(n));
  EXPECT_LE(shapes.size(), 60u);  // against 12,200 token counts
}

// Prefill padded to prefill_bucket's count (what the engine does on CUDA) gives the logits and
// K/V of the exact call, fresh rows and continuations, and the padding writes nothing: every
// cache position the rows do not own stays as it was (zero).
TEST_P(EngineKv, BucketedPrefillEqualsExact) {
  auto model = generation_model(device());
  auto close = [&](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    expect_close(got, want, device().is_cuda(), what);
  };
  const std::vector<int64_t> lens{5, 17, 40, 3};  // 65 tokens: padded to 128
  ASSERT_EQ(mc::model::prefill_bucket(65), 128);
  const int64_t B = lens.size(), T = 40;
  auto ids = at::zeros({B, T}, at::kLong);
  for (int64_t b = 0; b < B; ++b) ids[b].narrow(0, 0, lens[b]).copy_(at::randint(3, 90, {lens[b]}, at::kLong));
  const std::vector<int64_t> rows{0, 1, 1, 2, 3}, slots{3, 0, 5, 1, 7};
  auto exact = model.make_cache(8, 64), padded = model.make_cache(8, 64);
  auto want = model.prefill(ids, at::tensor(lens), at::tensor(rows), at::tensor(slots), exact);
  auto got = model.prefill(ids, at::tensor(lens), at::tensor(rows), at::tensor(slots), padded, /*bucket=*/true);
  close(got, want, "fresh rows' logits");
  // Continuations of rows 0 and 2 (slots 3 and 1) by 6 and 2 tokens.
  auto more = at::randint(3, 90, {2, 6}, at::kLong);
  const std::vector<int64_t> starts{5, 40}, more_lens{6, 2}, more_slots{3, 1};
  want = model.prefill_from(more, at::tensor(starts), at::tensor(more_lens), at::tensor(more_slots), exact);
  got = model.prefill_from(more, at::tensor(starts), at::tensor(more_lens), at::tensor(more_slots), padded, true);
  close(got, want, "continuations' logits");
  for (size_t l = 0; l < exact.k.size(); ++l) {
    close(padded.k[l], exact.k[l], "K of layer " + std::to_string(l));
    close(padded.v[l], exact.v[l], "V of layer " + std::to_string(l));
    // Slot 1 holds 42 positions, slot 3 11, slot 0 and 5 17, slot 7 3; the rest, and slots 2, 4 and 6, are zero.
    const std::vector<std::pair<int64_t, int64_t>> owned{{0, 17}, {1, 42}, {2, 0}, {3, 11}, {4, 0}, {5, 17}, {6, 0}, {7, 3}};
    for (auto [slot, n] : owned) {
      EXPECT_EQ(padded.k[l][slot].narrow(1, n, 64 - n).abs().max().item<double>(), 0.0) << "slot " << slot;
      EXPECT_EQ(padded.v[l][slot].narrow(1, n, 64 - n).abs().max().item<double>(), 0.0) << "slot " << slot;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineKv, ::testing::ValuesIn(mc::test::test_devices()));

}  // namespace
