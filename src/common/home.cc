#include "common/home.h"

#include <cstdlib>

#ifndef MUSACODER_SOURCE_DIR
#define MUSACODER_SOURCE_DIR "."
#endif

namespace mc {

std::string musacoder_home() {
  const char* home = std::getenv("MUSACODER_HOME");
  return home && *home ? home : MUSACODER_SOURCE_DIR;
}

}  // namespace mc
