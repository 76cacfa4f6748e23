// Whole-number settings read from the environment (MUSACODER_COMPILE_WORKERS, ...).
#pragma once

#include <climits>
#include <cstdlib>
#include <optional>

#include "common/check.h"

namespace mc {

// `name`'s value as a whole number in [min, max]; nullopt when unset or empty. Anything else
// throws mc::Error: "NAME=VALUE: want WHAT (MIN or more)".
inline std::optional<long> env_count(const char* name, long min, const char* what, long max = LONG_MAX) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  MC_CHECK(*end == '\0' && n >= min && n <= max, name, "=", v, ": want ", what, " (", min, " or more)");
  return n;
}

}  // namespace mc
