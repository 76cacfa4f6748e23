// Loop detection of the generation engine (generate/repetition.h): what it stops, and the
// near-repeats of ordinary code it must leave alone.
#include <gtest/gtest.h>

#include <vector>

#include "generate/repetition.h"

namespace mc::gen {
namespace {

std::vector<int32_t> repeat(std::vector<int32_t> prefix, const std::vector<int32_t>& block, int times) {
  for (int i = 0; i < times; ++i) prefix.insert(prefix.end(), block.begin(), block.end());
  return prefix;
}

TEST(Repetition, FindsTheSmallestPeriodOfTheWindow) {
  std::vector<int32_t> block = {5, 6, 7, 8, 9, 10, 11};  // 7 tokens
  auto t = repeat({1, 2, 3}, block, 10);                 // 73 tokens, the last 70 periodic
  EXPECT_EQ(trailing_loop_period(t, 64, 16), 7);
  EXPECT_EQ(trailing_loop_period(t, 70, 17), 7);
  // The window reaches back into the prefix: not periodic there.
  EXPECT_EQ(trailing_loop_period(t, 72, 18), 0);
  // The period is longer than allowed.
  EXPECT_EQ(trailing_loop_period(t, 64, 6), 0);
  // A single token repeated.
  EXPECT_EQ(trailing_loop_period(std::vector<int32_t>(40, 3), 32, 8), 1);
  // Too few tokens for the window.
  EXPECT_EQ(trailing_loop_period(block, 16, 4), 0);
}

TEST(Repetition, OrdinaryCodeIsNotALoop) {
  // Unrolled lines differ in an index: a near-repeat, not a loop.
  std::vector<int32_t> t;
  for (int i = 0; i < 64; ++i) {
    std::vector<int32_t> line = {100, 101, 1000 + i, 102, 103, 104};
    t.insert(t.end(), line.begin(), line.end());
  }
  EXPECT_EQ(trailing_loop_period(t, 256, 64), 0);
  // Three copies of a block are not enough for a window of four copies.
  std::vector<int32_t> block(50);
  for (int i = 0; i < 50; ++i) block[i] = 200 + i;
  auto three = repeat({}, block, 3);
  three.resize(160, 7);  // padded to a multiple of 16 with other tokens
  EXPECT_FALSE(caught_in_loop(three, 160));
}

TEST(Repetition, CaughtInLoopIsCheckedEverySixteenTokens) {
  std::vector<int32_t> block = {1, 2, 3, 4, 5};
  auto t = repeat({}, block, 40);  // 200 tokens
  t.resize(192);
  EXPECT_TRUE(caught_in_loop(t, 128));   // period 5 <= 128 / 4
  EXPECT_FALSE(caught_in_loop(t, 0));    // off
  t.push_back(1);                        // 193: not a checkpoint
  EXPECT_FALSE(caught_in_loop(t, 128));
  // A block longer than window / 4 repeats fewer than four times in the window: not caught.
  std::vector<int32_t> long_block(40);
  for (int i = 0; i < 40; ++i) long_block[i] = 300 + i;
  auto u = repeat({}, long_block, 8);    // 320 tokens
  EXPECT_FALSE(caught_in_loop(u, 128));  // 40 > 32
  EXPECT_TRUE(caught_in_loop(u, 160));   // 40 <= 40
}

}  // namespace
}  // namespace mc::gen
