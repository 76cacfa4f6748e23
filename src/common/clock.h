#pragma once
// Wall-clock time as Unix seconds: job submission and result timestamps, event files.

#include <chrono>

namespace mc {

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace mc
