// Checks that say where, what, and how to fix.
//   MC_CHECK(cond, parts...)       bad input or environment: throws mc::Error with the message.
//   MC_INTERNAL_ASSERT(cond, ...)  a bug in MusaCoder itself: throws with file:line and the values.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mc {

// The one exception type the library throws; boundaries (CLI, worker loops) catch it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace mc

#define MC_CHECK(cond, ...)                                   \
  do {                                                        \
    if (!(cond)) throw ::mc::Error(::mc::str_cat(__VA_ARGS__)); \
  } while (0)

#define MC_INTERNAL_ASSERT(cond, ...)                                                        \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw ::mc::Error(::mc::str_cat("internal error at ", __FILE__, ":", __LINE__, ": ", \
                                      #cond, " failed. ", ##__VA_ARGS__));                   \
  } while (0)
