// Just enough of Python's lexical structure to read candidate sources without running them:
// views of the code and string literals (for legality rules), and the arguments of
// `load_inline(...)` calls when they are built from string literals (for the compile pool).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mc::eval {

// Two same-length views of a source, line numbers preserved:
//   code:    string literal contents and comments replaced by spaces
//   strings: everything but string literal contents replaced by spaces
struct SourceViews {
  std::string code, strings;
};
SourceViews python_views(const std::string& src);

// The same for C/C++/CUDA: `code` has comments blanked (no string view needed).
std::string cpp_strip_comments(const std::string& src);

// Arguments of one load_inline call, as load_inline would receive them.
struct LoadInlineCall {
  std::string name;
  std::vector<std::string> cpp_sources, cuda_sources, functions;
  std::vector<std::string> extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths;
  bool with_cuda = true;

  // Identifies the build; the Python harness computes the same key from the real call.
  std::string source_key() const;
};

// Finds load_inline calls whose arguments are string expressions (literals, `+`, implicit
// concatenation, names bound at module level to such expressions, lists of them).
// Returns nullopt with `why` set when a call uses anything else (f-strings, calls...): the
// harness then builds that candidate at load time instead.
std::optional<std::vector<LoadInlineCall>> find_load_inline_calls(const std::string& src,
                                                                   std::string* why);

}  // namespace mc::eval
