// Reading a TOML file (toml++, header-only) with a parse error named the way every config error
// here is: "PATH: not <what> (DESCRIPTION, line N)".
#pragma once

#include <filesystem>
#include <string>

// Parse errors are exceptions (the same in every file that reads TOML).
#ifndef TOML_EXCEPTIONS
#define TOML_EXCEPTIONS 1
#endif
#include <toml++/toml.h>

#include "common/check.h"

namespace mc {

inline toml::table read_toml(const std::string& path, const std::string& what = "valid TOML") {
  MC_CHECK(std::filesystem::is_regular_file(path), path, ": no such file");
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(str_cat(path, ": not ", what, " (", e.description(), ", line ", e.source().begin.line, ")"));
  }
}

}  // namespace mc
