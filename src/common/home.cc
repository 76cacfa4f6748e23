#include "common/home.h"

#include <unistd.h>

#include <cstdlib>

#ifndef MUSACODER_SOURCE_DIR
#define MUSACODER_SOURCE_DIR "."
#endif

namespace mc {

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "musacoder";
}

std::string musacoder_home() {
  const char* home = std::getenv("MUSACODER_HOME");
  return home && *home ? home : MUSACODER_SOURCE_DIR;
}

}  // namespace mc
