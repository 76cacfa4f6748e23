#include "rft/code_similarity.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/hash.h"

namespace mc::rft {
namespace {

// Words that keep their spelling in the renamed view: the languages' keywords and types, CUDA's
// qualifiers, built-in variables and intrinsics, libm, and the PyTorch / load_inline / native-ABI
// names every answer shares. Everything else is a name the answer chose.
const std::unordered_set<std::string>& vocabulary() {
  static const std::unordered_set<std::string> v = {
      // C / C++
      "auto", "bool", "break", "case", "char", "const", "constexpr", "continue", "default", "do", "double", "else",
      "enum", "extern", "false", "float", "for", "goto", "if", "inline", "int", "long", "namespace", "nullptr",
      "return", "short", "signed", "sizeof", "static", "static_cast", "reinterpret_cast", "struct", "switch",
      "template", "true", "typedef", "typename", "union", "unsigned", "using", "void", "volatile", "while", "size_t",
      "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "std", "min", "max",
      "include", "define", "pragma", "unroll", "once", "ifdef", "ifndef", "endif", "undef", "elif",
      // CUDA
      "__global__", "__device__", "__host__", "__shared__", "__constant__", "__restrict__", "__forceinline__",
      "__launch_bounds__", "__syncthreads", "__syncwarp", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
      "dim3", "cudaStream_t", "cudaError_t", "cudaSuccess", "cudaGetLastError",
      "__shfl_down_sync", "__shfl_xor_sync", "__shfl_sync", "__shfl_up_sync", "__ballot_sync", "__activemask",
      "atomicAdd", "atomicMax", "atomicMin", "atomicCAS", "__ldg", "__fdividef", "__expf", "__logf", "__fmaf_rn",
      "float2", "float4", "int2", "int4", "half", "__half", "__nv_bfloat16", "make_float4", "make_float2",
      "rsqrtf", "sqrtf", "expf", "logf", "tanhf", "fmaxf", "fminf", "fabsf", "powf", "erff", "sinf", "cosf",
      "exp", "log", "tanh", "sqrt", "fabs", "pow", "erf", "fmaf", "INFINITY", "FLT_MAX",
      // Python
      // (not the short keywords a C answer may use as names: in, is, as, or, and, not, from, with;
      // renaming them consistently costs nothing)
      "import", "class", "def", "self", "return", "None", "True", "False", "lambda", "super", "__init__", "forward",
      "range", "len",
      // PyTorch, load_inline, the native ABI
      "torch", "nn", "Module", "Tensor", "ModelNew", "Model", "load_inline", "cpp_sources", "cuda_sources",
      "functions", "extra_cuda_cflags", "extra_cflags", "verbose", "name", "utils", "cpp_extension", "extension",
      "data_ptr", "numel", "size", "sizes", "stride", "empty", "empty_like", "zeros", "options", "contiguous",
      "dtype", "device", "kFloat", "kFloat32", "TORCH_CHECK", "at", "cuda", "getCurrentCUDAStream",
      "mc_forward", "mc_tensor", "native_abi", "musacoder", "data", "shape", "strides", "ndim",
  };
  return v;
}

// Members that keep their spelling only after `.` or `->` (threadIdx.x, float4's .w, file
// suffixes): as plain names they are the answer's own (a variable x).
const std::unordered_set<std::string>& member_vocabulary() {
  static const std::unordered_set<std::string> v = {"x", "y", "z", "w", "h", "cuh", "hpp", "cu", "cpp"};
  return v;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

const std::unordered_set<std::string>& directives() {
  static const std::unordered_set<std::string> d = {"include", "define", "pragma", "if", "ifdef", "ifndef",
                                                    "endif", "else", "elif", "undef"};
  return d;
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& t : v) {
    s += t;
    s += '\x1f';
  }
  return s;
}

}  // namespace

std::vector<std::string> code_tokens(std::string_view code) {
  std::vector<std::string> out;
  size_t i = 0, n = code.size();
  while (i < n) {
    char c = code[i];
    if (code.substr(i, 3) == "\"C\"") {  // extern "C": a linkage, not a name
      out.emplace_back("\"C\"");
      i += 3;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == '"' || c == '\'' || c == '`' || c == '\\') {
      ++i;
    } else if (c == '/' && i + 1 < n && code[i + 1] == '/') {
      while (i < n && code[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && code[i + 1] == '*') {
      size_t e = code.find("*/", i + 2);
      i = e == std::string_view::npos ? n : e + 2;
    } else if (c == '#') {
      // A preprocessor directive is code; anything else after '#' is a Python comment.
      size_t j = i + 1;
      while (j < n && (code[j] == ' ' || code[j] == '\t')) ++j;
      size_t k = j;
      while (k < n && ident_char(code[k])) ++k;
      if (k > j && directives().count(std::string(code.substr(j, k - j)))) {
        out.emplace_back("#");
        i = j;
      } else {
        while (i < n && code[i] != '\n') ++i;
      }
    } else if (ident_start(c)) {
      size_t j = i;
      while (j < n && ident_char(code[j])) ++j;
      out.emplace_back(code.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(code[i + 1])))) {
      size_t j = i;
      while (j < n && (ident_char(code[j]) || code[j] == '.' ||
                       ((code[j] == '+' || code[j] == '-') && (code[j - 1] == 'e' || code[j - 1] == 'E'))))
        ++j;
      out.emplace_back(code.substr(i, j - i));
      i = j;
    } else {
      out.emplace_back(1, c);
      ++i;
    }
  }
  return out;
}

CodeFingerprint fingerprint_code(std::string_view code, int shingle_tokens) {
  CodeFingerprint f;
  std::vector<std::string> toks = code_tokens(code);
  f.tokens = toks.size();
  f.exact = sha256_hex(join(toks));
  std::unordered_map<std::string, int> names;
  std::vector<std::string> renamed, structure;
  renamed.reserve(toks.size());
  structure.reserve(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    const std::string& t = toks[i];
    bool member = i > 0 && (toks[i - 1] == "." || (toks[i - 1] == ">" && i > 1 && toks[i - 2] == "-"));
    bool keep = vocabulary().count(t) || (member && member_vocabulary().count(t));
    if (ident_start(t[0]) && !keep) {
      auto [it, fresh] = names.emplace(t, static_cast<int>(names.size()) + 1);
      renamed.push_back("$" + std::to_string(it->second));
      structure.push_back(renamed.back());
    } else {
      renamed.push_back(t);
      bool number = std::isdigit(static_cast<unsigned char>(t[0])) || (t[0] == '.' && t.size() > 1);
      structure.push_back(number ? "#" : t);
    }
  }
  f.renamed = sha256_hex(join(renamed));
  f.structure = sha256_hex(join(structure));
  const size_t k = static_cast<size_t>(std::max(1, shingle_tokens));
  if (renamed.size() < k) {
    if (!renamed.empty()) f.shingles.push_back(fnv1a(join(renamed)));
  } else {
    for (size_t i = 0; i + k <= renamed.size(); ++i) {
      uint64_t h = 1469598103934665603ull;
      for (size_t j = i; j < i + k; ++j) h = fnv1a(renamed[j] + '\x1f', h);
      f.shingles.push_back(h);
    }
  }
  std::sort(f.shingles.begin(), f.shingles.end());
  f.shingles.erase(std::unique(f.shingles.begin(), f.shingles.end()), f.shingles.end());
  return f;
}

double jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++both;
      ++i;
      ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(both) / static_cast<double>(a.size() + b.size() - both);
}

}  // namespace mc::rft
