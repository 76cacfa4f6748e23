// A terminal progress bar with rate and ETA, drawn on stderr. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

namespace mc {

class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total, bool enabled = true);
  ~ProgressBar();  // draws the final state and a newline
  void advance(size_t n = 1, const std::string& note = "");

 private:
  void draw_locked(bool final);
  std::string label_, note_;
  size_t total_, done_ = 0;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mu_;
};

}  // namespace mc
