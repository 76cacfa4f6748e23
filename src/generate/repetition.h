// Degenerate loops: a sampled answer that has fallen into repeating one block of tokens
// forever. Small models do this often (the recipe's RL step on the H100: 15-36% of first
// answers ran to --max-new-tokens), and every turn of an RL step lasts as long as
// its longest answer, so one loop costs the whole batch thousands of decode steps. Stopping a
// sequence once it is caught in a loop keeps its text up to there (finish_reason "loop"):
// code that never closed stays unclosed, so the verdict is the one the full-length answer
// would get.
#pragma once

#include <cstdint>
#include <vector>

namespace mc::gen {

// The smallest period p <= max_period with which the last `window` tokens repeat
// (tokens[i] == tokens[i - p] for every i of the window after its first p), or 0 when there is
// none or fewer than `window` tokens. With max_period <= window / 4 a hit is one block repeated
// at least four times back to back, `window` tokens in all.
int trailing_loop_period(const std::vector<int32_t>& tokens, int window, int max_period);

// What SamplingParams::loop_window asks for: true when the last `window` tokens are one block of
// at most window / 4 tokens repeated. Checked every 16 tokens, so a loop is caught at most 15
// tokens after it fills the window (window 0: never).
bool caught_in_loop(const std::vector<int32_t>& tokens, int window);

}  // namespace mc::gen
