// The generation engine's overlapped decode (EngineOptions::overlap): each decode step is
// launched before the previous step's tokens are read, its input tokens gathered on the device.
// Against the synchronous engine on the same requests, every sample's tokens, log-probs and
// finish reason are the same: greedy and sampled rows, top-p (in the step's graph on CUDA) and
// top-k (outside it), stop tokens, EOS, max_new_tokens, more samples than cache slots (slots
// freed and taken again, sequences moved down with a step in flight), requests arriving one by
// one between steps, and a kept cache continued in a next turn. The overlapped runs decode rows
// of sequences that had just finished, and throw them away. On CUDA too where there is one.
// Tiny random Qwen3 model, fp32.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/Context.h>

#include "generate/engine.h"
#include "model/qwen_model.h"
#include "engine_test_util.h"

namespace {

using mc::gen::Completion;
using mc::gen::EngineOptions;
using mc::gen::GenerationEngine;
using mc::gen::GenerationRequest;

mc::model::QwenModel tiny(c10::Device device) { return mc::test::tiny_qwen3(device); }

using mc::test::greedy;
using Results = std::vector<std::vector<Completion>>;

void expect_same(const Results& got, const Results& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size()) << what << " request " << r;
    for (size_t s = 0; s < got[r].size(); ++s) {
      const std::string at = what + ": request " + std::to_string(r) + " sample " + std::to_string(s);
      mc::test::expect_same(got[r][s], want[r][s], at);
      EXPECT_EQ(got[r][s].finish_reason, want[r][s].finish_reason) << at;
    }
  }
}

class EngineOverlap : public ::testing::TestWithParam<std::string> {
 protected:
  c10::Device device() const { return c10::Device(GetParam()); }
  // Fewer slots than the samples below (18): some wait for others to finish.
  static EngineOptions options(bool overlap, int64_t slots = 8) {
    EngineOptions o;
    o.max_batch = slots;
    o.max_seq_len = 128;
    o.overlap = overlap;
    return o;
  }

  // Requests of every kind; greedy ones stop at a token their unstopped answer holds early on,
  // so that sequences finish mid-batch at known steps.
  std::vector<GenerationRequest> requests(const mc::model::QwenModel& model) const {
    std::vector<GenerationRequest> rs{greedy({3, 14, 15, 92, 65}, 24), greedy({35, 89, 79, 32, 38, 46, 26}, 20),
                                      greedy({43, 38, 32, 79, 50}, 5), greedy({28, 84, 19, 71}, 30)};
    GenerationEngine probe(model, nullptr, options(false));
    auto plain = probe.generate(rs);
    rs[0].params.stop_token_ids = {plain[0][0].tokens[6]};
    rs[1].params.stop_token_ids = {plain[1][0].tokens[3]};
    rs[3].params.stop_token_ids = {plain[3][0].tokens[11]};
    GenerationRequest many{{5, 9, 2, 6, 5, 3}, {}};
    many.params.n = 6;
    many.params.temperature = 0.8f;
    many.params.max_new_tokens = 40;
    many.params.seed = 3;
    rs.insert(rs.begin(), many);
    GenerationRequest top_p{{7, 1, 8, 2, 8, 1, 8}, {}};
    top_p.params.n = 4;
    top_p.params.temperature = 0.9f;
    top_p.params.top_p = 0.9f;
    top_p.params.max_new_tokens = 18;
    top_p.params.seed = 11;  // EOS (96) ends some samples early
    rs.push_back(top_p);
    GenerationRequest top_k{{2, 7, 1, 8, 2}, {}};
    top_k.params.n = 3;
    top_k.params.temperature = 1.0f;
    top_k.params.top_k = 5;
    top_k.params.max_new_tokens = 14;
    top_k.params.seed = 5;
    rs.push_back(top_k);
    rs.push_back(greedy({60, 61, 62}, 9));
    return rs;
  }
};

TEST_P(EngineOverlap, GivesTheSynchronousTokens) {
  auto model = tiny(device());
  const auto rs = requests(model);
  GenerationEngine sync(model, nullptr, options(false)), over(model, nullptr, options(true));
  const auto want = sync.generate(rs);
  const auto got = over.generate(rs);
  expect_same(got, want, "all at once");
  // The stops above did end sequences early, and the overlapped engine decoded their next step.
  EXPECT_EQ(want[1][0].finish_reason, "stop");
  EXPECT_LE(want[1][0].tokens.size(), 7u);
  EXPECT_EQ(sync.stats().discarded_rows, 0);
  EXPECT_GT(over.stats().discarded_rows, 0);
  EXPECT_EQ(over.stats().generated_tokens, sync.stats().generated_tokens);
  // Every row read but the discarded ones gave a token (the first of each sample came from prefill).
  int64_t samples = 0;
  for (const auto& r : rs) samples += r.params.n;
  EXPECT_EQ(over.stats().decode_rows - over.stats().discarded_rows, over.stats().generated_tokens - samples);
}

TEST_P(EngineOverlap, RequestsArrivingBetweenStepsAndMovedSlots) {
  auto model = tiny(device());
  const auto rs = requests(model);
  // One request every other engine step, as RL's pipelined turns and a server add them.
  auto arriving = [&](GenerationEngine& e) {
    Results out(rs.size());
    for (size_t i = 0; i < rs.size(); ++i) out[i].resize(rs[i].params.n);
    size_t next = 0;
    for (int64_t steps = 0;; ++steps) {
      if (next < rs.size() && steps % 2 == 0) {
        e.add(rs[next], [&out, i = next](int s, const Completion& c) { out[i][s] = c; });
        ++next;
      }
      if (!e.step() && next == rs.size()) break;
    }
    return out;
  };
  // 16 slots: sequences beyond the first 8 move down once fewer than 9 run (batch bucket 8).
  GenerationEngine sync(model, nullptr, options(false, 16)), over(model, nullptr, options(true, 16));
  const auto want = arriving(sync);
  const auto got = arriving(over);
  expect_same(got, want, "arriving one by one");
  EXPECT_GT(over.stats().discarded_rows, 0);
  EXPECT_GT(over.stats().slot_moves, 0);  // sequences moved down while their next step was in flight
  // 8 slots: some requests wait for slots that finished sequences free.
  GenerationEngine small(model, nullptr, options(true));
  expect_same(arriving(small), want, "arriving, 8 slots");
  // Without compaction, too (every sequence stays in its slot; finished slots are taken again).
  auto o = options(true, 16);
  o.compact_slots = false;
  GenerationEngine fixed(model, nullptr, o);
  expect_same(arriving(fixed), want, "arriving, slots not compacted");
}

TEST_P(EngineOverlap, KeptCachesContinueTheSame) {
  auto model = tiny(device());
  GenerationEngine sync(model, nullptr, options(false)), over(model, nullptr, options(true));
  auto turn = [](std::vector<int32_t> prompt, int max_new, int64_t continues) {
    return mc::test::greedy(std::move(prompt), max_new, /*keep=*/true, continues);
  };
  const std::vector<int32_t> p1{3, 14, 15, 92, 65, 35, 89};
  std::vector<GenerationRequest> first{turn(p1, 11, -1), turn({9, 9, 8, 7}, 4, -1)};
  // A stop token ends the first conversation early: its cache is kept with the next step's
  // write (the overlapped engine's discarded row) beyond what the entry holds.
  first[0].params.stop_token_ids = {GenerationEngine(model, nullptr, options(false)).generate({first[0]})[0][0].tokens[5]};
  const auto a = sync.generate(first), b = over.generate(first);
  expect_same(b, a, "first turns");
  ASSERT_GE(b[0][0].kept, 0);
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), b[0][0].tokens.begin(), b[0][0].tokens.end());
  for (int32_t t : {46, 26, 43, 38}) p2.push_back(t);
  const auto a2 = sync.generate({turn(p2, 13, a[0][0].kept)}), b2 = over.generate({turn(p2, 13, b[0][0].kept)});
  expect_same(b2, a2, "the continued turn");
  EXPECT_EQ(over.stats().continued, 1);
  EXPECT_EQ(over.stats().reused_tokens, sync.stats().reused_tokens);
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineOverlap, ::testing::ValuesIn(mc::test::test_devices()));

}  // namespace
