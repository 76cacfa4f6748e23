// How alike two kernels are, for keeping RFT's answers diverse. All views come from one lexer
// over the extracted solution (CUDA/C++ and Python alike; comments and whitespace dropped,
// string quotes ignored so that a load_inline source inside a Python string is read as code):
//
//   exact     the token sequence: equal means the same code up to comments and layout;
//   renamed   identifiers the code declares (anything outside the language and CUDA
//             vocabulary) renamed to $1, $2, ... in order of first use: equal means a renamed copy;
//   structure renamed, and every number replaced by #: equal means the same kernel with other
//             constants (block size, unroll factor, tile): a twin, of which RFT keeps the faster;
//   shingles  the set of hashed k-token windows of the renamed stream; their Jaccard index is the
//             similarity that near-duplicate removal and the report use. Answers are compared
//             within one problem only (K of them), so the exact index is computed; no MinHash
//             estimate is needed at that size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mc::rft {

struct CodeFingerprint {
  std::string exact, renamed, structure;  // SHA-256 hex of each view
  std::vector<uint64_t> shingles;         // sorted, unique
  size_t tokens = 0;
};

// The lexer's tokens (exposed for tests and for the report's examples).
std::vector<std::string> code_tokens(std::string_view code);

CodeFingerprint fingerprint_code(std::string_view code, int shingle_tokens = 4);

// |a ∩ b| / |a ∪ b| of two sorted, unique shingle sets; 1 when both are empty.
double jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

}  // namespace mc::rft
