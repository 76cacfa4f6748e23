#include "common/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace mc {

ProgressBar::ProgressBar(std::string label, size_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(isatty(2)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  if (enabled_) draw_locked(false);
}

ProgressBar::~ProgressBar() {
  std::lock_guard lk(mu_);
  if (enabled_) draw_locked(true);
}

void ProgressBar::advance(size_t n, const std::string& note) {
  std::lock_guard lk(mu_);
  done_ += n;
  if (!note.empty()) note_ = note;
  auto now = std::chrono::steady_clock::now();
  // Non-terminals (CI logs) get a line every 10%, terminals a redraw at most 10 times a second.
  bool due = tty_ ? now - last_draw_ > std::chrono::milliseconds(100)
                  : (total_ >= 10 ? done_ % (total_ / 10) == 0 : true);
  if (enabled_ && (due || done_ == total_)) {
    last_draw_ = now;
    draw_locked(false);
  }
}

void ProgressBar::draw_locked(bool final) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = secs > 0 ? done_ / secs : 0;
  double eta = rate > 0 ? (total_ - done_) / rate : 0;
  const int width = 30;
  int filled = total_ ? static_cast<int>(width * done_ / total_) : width;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::string line = fmt::format("{} [{}] {}/{} {:.2f}/s elapsed {:.0f}s eta {:.0f}s {}", label_,
                                 bar, done_, total_, rate, secs, eta, note_.substr(0, 40));
  if (tty_) fmt::print(stderr, "\r\033[K{}{}", line, final ? "\n" : "");
  else if (!final || done_ != total_) fmt::print(stderr, "{}\n", line);
  fflush(stderr);
}

}  // namespace mc
