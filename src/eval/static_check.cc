#include "eval/static_check.h"

#include <regex>

#include "eval/python_source.h"

namespace mc::eval {
namespace {

// Where a rule looks.
enum class View {
  kPython,         // Python code, strings and comments blanked
  kForward,        // the body of ModelNew.forward only
  kCpp,            // C++/CUDA: strings embedded in the Python file, or the native .cu
};

struct Rule {
  const char* id;
  View view;
  const char* pattern;
  const char* message;
  const char* relaxed_by;  // an `allow` entry that turns the rule off, or nullptr
  bool fp32_only;          // only a violation when the run's precision is fp32
};

#define MC_COMPUTE_OPS                                                                          \
  "matmul|mm|bmm|addmm|addbmm|baddbmm|einsum|mv|dot|outer|addmv|linear|bilinear|"               \
  "conv[123]d|conv_transpose[123]d|convolution|relu|relu6|gelu|silu|sigmoid|tanh|softmax|"     \
  "log_softmax|softplus|softsign|elu|selu|celu|leaky_relu|hardtanh|hardswish|hardsigmoid|mish|" \
  "sum|mean|prod|amax|amin|argmax|argmin|cumsum|cumprod|logsumexp|std|var|norm|"                \
  "layer_norm|batch_norm|group_norm|instance_norm|rms_norm|exp|expm1|log|log1p|sqrt|rsqrt|"     \
  "pow|abs|clamp|clip|where|add|sub|mul|div|maximum|minimum|dropout|"                           \
  "avg_pool[123]d|max_pool[123]d|adaptive_avg_pool[123]d|adaptive_max_pool[123]d|"             \
  "scaled_dot_product_attention|cross_entropy|mse_loss|nll_loss|kl_div|smooth_l1_loss|"          \
  "huber_loss|binary_cross_entropy|triplet_margin_loss|hinge_embedding_loss|cosine_similarity|" \
  "cdist|pairwise_distance|triu|tril|diag|topk|sort|gather|scatter|index_select|masked_fill|"  \
  "erf|sin|cos|floor|ceil|round|sign|square|neg|reciprocal|normalize|max|min"

const Rule kRules[] = {
    // --- PyTorch compute where a kernel should be -------------------------------------
    {"torch_compute", View::kForward,
     R"(\b(torch|F|functional|nn\.functional|torch\.special|torch\.linalg|torch\.fft)\.()" MC_COMPUTE_OPS R"()\s*\()",
     "ModelNew.forward calls a PyTorch compute op; compute with your own CUDA kernels "
     "(allocation, views, reshape, permute, contiguous and copies are allowed)",
     nullptr, false},
    {"torch_compute", View::kForward, R"(@)",
     "ModelNew.forward uses the `@` operator (torch.matmul); call your own kernel instead", nullptr,
     false},
    {"torch_compute", View::kForward, R"(\btorch\.compile\s*\(|\.compile\s*\()",
     "torch.compile generates kernels for you; write your own", nullptr, false},
    {"torch_compute", View::kCpp,
     R"(\b(torch|at)::(native::|ops::|nn::functional::|linalg::|special::)?()" MC_COMPUTE_OPS R"()\s*\()",
     "C++ host code calls an ATen/libtorch compute op; launch your own kernel instead", nullptr,
     false},
    {"torch_compute", View::kCpp, R"([\w\)\]]\s*\.\s*()" MC_COMPUTE_OPS R"()\s*\()",
     "C++ host code calls a tensor compute method; launch your own kernel instead", nullptr,
     false},
    {"try_except_fallback", View::kPython, R"(\btry\s*:)",
     "try/except around the kernel hides failures behind a PyTorch fallback; remove it", nullptr,
     false},
    {"library_call", View::kCpp, R"(\bcublas\w*|\bcublasLt\w*)",
     "calls cuBLAS; this run requires your own kernels (allow with --allow cublas)", "cublas",
     false},
    {"library_call", View::kCpp, R"(\bcudnn\w*)",
     "calls cuDNN; this run requires your own kernels (allow with --allow cudnn)", "cudnn", false},
    // --- hiding work from the timer ------------------------------------------------------
    {"side_stream", View::kPython, R"(\btorch\.cuda\.(Stream|stream|ExternalStream|set_stream)\b|\bStream\s*\()",
     "creates or switches CUDA streams; launch on the current stream so all work is timed", nullptr,
     false},
    {"side_stream", View::kCpp,
     R"(\bcudaStreamCreate\w*|\bgetStreamFromPool\b|\bcudaStreamNonBlocking\b|\bcuStreamCreate\w*|\bsetCurrentCUDAStream\b)",
     "creates CUDA streams; launch on the current stream so all work is timed", nullptr, false},
    {"thread", View::kPython, R"((^|\n)\s*(import|from)\s+(threading|_thread|multiprocessing|concurrent|asyncio)\b)",
     "starts threads or processes; do all work synchronously in forward", nullptr, false},
    {"thread", View::kCpp, R"(\bstd::(thread|jthread|async)\b|\bpthread_create\b|#\s*include\s*<(thread|future)>)",
     "starts host threads; do all work synchronously in forward", nullptr, false},
    // --- tampering with the verifier ---------------------------------------------------------
    {"monkeypatch", View::kPython,
     R"((^|\n)\s*(torch|time|F|nn|math|np|numpy|builtins|sys|os|functools|self\.__class__)(\.\w+)+\s*=[^=])",
     "assigns to an attribute of a library module (monkeypatching); leave libraries as they are",
     nullptr, false},
    {"monkeypatch", View::kPython, R"(\bsetattr\s*\(|\b__builtins__\b|\bglobals\s*\(\s*\)|\bsys\.modules\b|\bimportlib\b|\b__import__\b|\b__class__\s*=|\b__dict__\b)",
     "rewrites objects or modules at run time (setattr, globals, sys.modules, importlib)", nullptr,
     false},
    {"stack_inspection", View::kPython,
     R"(\binspect\b|\bsys\._getframe\b|\bf_back\b|\bf_locals\b|\bf_globals\b|\bgc\.\w+|(^|\n)\s*import\s+gc\b|\btraceback\b|\b__code__\b|\bsettrace\b|\bsetprofile\b)",
     "inspects the call stack or the garbage collector; a kernel needs neither", nullptr, false},
    {"dynamic_code", View::kPython, R"(\beval\s*\(|\bexec\s*\(|\bcompile\s*\(\s*[^)]|\bctypes\b|\bcffi\b|\bpickle\b|\bmarshal\b)",
     "runs dynamically built code or raw memory access (eval, exec, ctypes, pickle)", nullptr,
     false},
    {"forbidden_import", View::kPython,
     R"((^|\n)\s*(import|from)\s+(triton|numba|cupy|jax|tensorflow|tvm|tilelang|thunderkittens|pycuda)\b)",
     "uses another kernel framework; this benchmark takes CUDA C++ kernels", nullptr, false},
    {"tensor_subclass", View::kPython,
     R"(__torch_function__|__torch_dispatch__|_make_subclass|\bas_subclass\b|class\s+\w+\s*\(\s*torch\.Tensor\s*\)|\btorch\._C\b|\btorch\._dynamo\b|\btorch\.library\b|\bTorchDispatchMode\b|\bTorchFunctionMode\b)",
     "defines tensor subclasses or dispatch hooks (lazy or fake results); return real tensors",
     nullptr, false},
    // --- file, process and network access ----------------------------------------------------
    {"file_access", View::kPython, R"(\bopen\s*\(|\bos\.(?!environ\b|path\b)\w+|\bpathlib\b|\bshutil\b|\btempfile\b|\bio\.open\b)",
     "reads or writes files; a kernel needs no file access", nullptr, false},
    {"file_access", View::kCpp, R"(\bf?open\s*\(|\bfreopen\b|\bstd::(i|o)?fstream\b|\bunlink\s*\(|\bmmap\s*\(|\bdlopen\s*\()",
     "reads or writes files from C++; a kernel needs no file access", nullptr, false},
    {"process_access", View::kPython, R"(\bsubprocess\b|\bos\.(system|popen|fork|exec\w*|spawn\w*|kill)\b|\bsignal\b)",
     "starts or signals processes", nullptr, false},
    {"process_access", View::kCpp, R"(\bsystem\s*\(|\bpopen\s*\(|\bfork\s*\(|\bexec[lv]p?e?\s*\(|\bkill\s*\(|\bptrace\s*\(|\bsyscall\s*\()",
     "starts or signals processes, or makes raw system calls, from C++", nullptr, false},
    {"network_access", View::kPython, R"(\bsocket\b|\burllib\b|\brequests\b|\bhttp\.client\b|\bhttpx\b|\baiohttp\b)",
     "uses the network", nullptr, false},
    {"network_access", View::kCpp, R"(\bsocket\s*\(|\bconnect\s*\(|<sys/socket\.h>|<netinet/|\bcurl_)",
     "uses the network from C++", nullptr, false},
    // --- results that do not come from this call's inputs -----------------------------------
    {"output_cache", View::kPython,
     R"(\blru_cache\b|\bfunctools\.cache\b|@cache\b|\bdata_ptr\s*\(\s*\)|\b_?cache\w*\s*(=\s*\{|\[)|\bid\s*\(\s*\w+\s*\)|\.item\s*\(\s*\))",
     "caches results by tensor identity, address or checksum; compute from the inputs on every call",
     nullptr, false},
    {"output_cache", View::kCpp, R"(\bstatic\s+(torch::Tensor|at::Tensor|std::(unordered_)?map|std::vector\s*<\s*(torch|at)::Tensor))",
     "keeps tensors across calls in static storage (cached results); compute on every call",
     nullptr, false},
    {"stale_result", View::kPython, R"(\bself\.\w*(count|calls|iter|step|runs|warm|n_)\w*\s*(\+|-)=)",
     "counts calls in forward, as a kernel that behaves differently after warm-up would",
     nullptr, false},
    // A static *variable* of a scalar or atomic type: `static int calls = 0;`, `static bool
    // warm;`, `static std::atomic<int> n{0};`. Not static functions (`static unsigned grid_for(`),
    // not `static const` / `static constexpr` tables: neither holds state that changes.
    {"stale_result", View::kCpp,
     R"(\bstatic\s+(?!const\b|constexpr\b)(?:(?:thread_local|volatile|signed|unsigned|long|short)\s+)*(?:int|long|unsigned|short|char|size_t|u?int(?:8|16|32|64)_t|bool|float|double|std::atomic\s*<[^>]*>|std::atomic_\w+)\s*\*?\s*\w+\s*(?:=|;|\[|\{|,))",
     "keeps mutable static state across calls (call counters, warm-up switches)", nullptr, false},
    {"input_mutation", View::kForward, R"(\b\w+\s*\.\s*(?!requires_grad_)\w+_\s*\()",
     "calls an in-place tensor method in forward; never modify inputs or parameters", nullptr,
     false},
    {"input_mutation", View::kForward, R"((^|\n)\s*\w+\s*\[[^\]]*\]\s*=[^=]|\b\w+\s*(\+|-|\*|/)=)",
     "assigns into a tensor in place in forward; never modify inputs or parameters", nullptr,
     false},
    // --- precision ---------------------------------------------------------------------------
    {"precision_drop", View::kPython,
     R"(\.half\s*\(|\.bfloat16\s*\(|\btorch\.(float16|bfloat16|half)\b|\ballow_tf32\b|\bset_float32_matmul_precision\b|\bautocast\b)",
     "lowers precision below fp32 (half, bfloat16, TF32); this run is fp32", "half_precision", true},
    {"precision_drop", View::kCpp,
     R"(\b__half2?\b|\bhalf2\b|\b__nv_bfloat162?\b|\b__float2half\w*|\b__float2bfloat16\w*|<cuda_fp16\.h>|<cuda_bf16\.h>|\bkHalf\b|\bkBFloat16\b|\btf32\b|\b__float_to_tf32\b|\bat::Half\b|\bc10::Half\b)",
     "uses half, bfloat16 or TF32 arithmetic; this run is fp32", "half_precision", true},
};

std::string forward_view(const std::string& code) {
  std::string out(code.size(), ' ');
  for (size_t i = 0; i < code.size(); ++i)
    if (code[i] == '\n') out[i] = '\n';
  static const std::regex cls(R"((^|\n)class\s+ModelNew\b)");
  std::smatch m;
  if (!std::regex_search(code, m, cls)) return out;
  size_t start = static_cast<size_t>(m.position(0) + m.length(0));
  static const std::regex fwd(R"(\n([ \t]+)def\s+forward\s*\()");
  std::smatch f;
  std::string rest = code.substr(start);
  if (!std::regex_search(rest, f, fwd)) return out;
  size_t indent = static_cast<size_t>(f.length(1));
  size_t pos = start + static_cast<size_t>(f.position(0)) + 1;
  size_t body_end = code.size();
  size_t line = code.find('\n', pos);
  // The signature may span lines; the body ends at the first non-blank line indented no deeper
  // than `def`.
  while (line != std::string::npos && line + 1 < code.size()) {
    size_t next = line + 1;
    size_t ws = code.find_first_not_of(" \t", next);
    if (ws == std::string::npos) break;
    if (code[ws] != '\n' && ws - next <= indent) {
      body_end = next;
      break;
    }
    line = code.find('\n', next);
  }
  for (size_t i = pos; i < body_end; ++i) out[i] = code[i];
  return out;
}

// Names bound to load_inline results (module level or self.x): method calls on them are the
// candidate's own kernels, not tensor methods.
std::set<std::string> extension_names(const std::string& code) {
  std::set<std::string> names;
  static const std::regex bind(R"((\w+)\s*=\s*(\w+\.)*load_inline\s*\()");
  for (auto it = std::sregex_iterator(code.begin(), code.end(), bind); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  static const std::regex alias(R"(self\.(\w+)\s*=\s*(\w+))");
  for (auto it = std::sregex_iterator(code.begin(), code.end(), alias); it != std::sregex_iterator(); ++it)
    if (names.count((*it)[2])) names.insert((*it)[1]);
  return names;
}

int line_of(const std::string& s, size_t pos) {
  return 1 + static_cast<int>(std::count(s.begin(), s.begin() + static_cast<long>(pos), '\n'));
}

std::string line_text(const std::string& src, int line) {
  size_t start = 0;
  for (int l = 1; l < line && start != std::string::npos; ++l) {
    start = src.find('\n', start);
    if (start != std::string::npos) ++start;
  }
  if (start == std::string::npos) return "";
  std::string text = src.substr(start, src.find('\n', start) - start);
  size_t a = text.find_first_not_of(" \t");
  return a == std::string::npos ? "" : text.substr(a, 160);
}

}  // namespace

std::vector<Violation> static_check(const std::string& code, SolutionFormat format,
                                    const StaticCheckOptions& opts) {
  std::string py, fwd, cpp;
  std::set<std::string> ext_names;
  if (format == SolutionFormat::kKernelBench) {
    SourceViews v = python_views(code);
    py = v.code;
    fwd = forward_view(v.code);
    cpp = cpp_strip_comments(v.strings);
    ext_names = extension_names(v.code);
  } else {
    cpp = cpp_strip_comments(code);
  }
  std::vector<Violation> out;
  std::set<std::pair<std::string, int>> seen;
  for (const Rule& r : kRules) {
    if (r.relaxed_by && opts.allow.count(r.relaxed_by)) continue;
    if (opts.allow.count(r.id)) continue;
    if (r.fp32_only && opts.precision != "fp32") continue;
    const std::string& text = r.view == View::kPython ? py : r.view == View::kForward ? fwd : cpp;
    if (text.empty()) continue;
    static thread_local std::map<const char*, std::regex> compiled;
    auto it = compiled.find(r.pattern);
    if (it == compiled.end()) it = compiled.emplace(r.pattern, std::regex(r.pattern)).first;
    for (auto m = std::sregex_iterator(text.begin(), text.end(), it->second);
         m != std::sregex_iterator(); ++m) {
      size_t pos = static_cast<size_t>(m->position(0));
      // A method call on one of the candidate's own extension modules is its kernel.
      if (r.view == View::kForward && std::string(r.id) == "torch_compute" && m->size() > 1) {
        std::string before = text.substr(0, pos);
        static const std::regex recv(R"((\w+)\s*\.\s*$)");
        std::smatch rm;
        if (std::regex_search(before, rm, recv) && ext_names.count(rm[1])) continue;
      }
      if (!m->str(0).empty() && std::isspace(static_cast<unsigned char>(m->str(0)[0]))) {
        size_t skip = m->str(0).find_first_not_of(" \t\r\n");
        if (skip != std::string::npos) pos += skip;
      }
      int line = line_of(text, pos);
      if (!seen.insert({r.id, line}).second) continue;
      out.push_back({r.id, r.message, line, line_text(code, line)});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Violation& a, const Violation& b) { return a.line < b.line; });
  return out;
}

std::vector<std::pair<std::string, std::string>> static_rule_catalog() {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  for (const Rule& r : kRules)
    if (seen.insert(r.id).second) out.emplace_back(r.id, r.message);
  return out;
}

}  // namespace mc::eval
