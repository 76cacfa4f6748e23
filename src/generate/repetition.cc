#include "generate/repetition.h"

namespace mc::gen {

int trailing_loop_period(const std::vector<int32_t>& tokens, int window, int max_period) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (window <= 0 || n < window) return 0;
  const int64_t begin = n - window;
  for (int p = 1; p <= max_period && p < window; ++p) {
    // Walk back from the end: a period that does not hold usually fails within a few tokens.
    int64_t i = n - 1;
    while (i >= begin + p && tokens[i] == tokens[i - p]) --i;
    if (i < begin + p) return p;
  }
  return 0;
}

bool caught_in_loop(const std::vector<int32_t>& tokens, int window) {
  if (window <= 0 || tokens.size() % 16 != 0) return false;
  return trailing_loop_period(tokens, window, window / 4) > 0;
}

}  // namespace mc::gen
