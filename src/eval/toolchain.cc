#include "eval/toolchain.h"

#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/subprocess.h"
#include "eval/backend.h"

namespace mc::eval {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::string Toolchain::id() const {
  KeyBuilder k;
  k.add("toolchain-v1").add(nvcc_version).add(cuda_arch).add(torch_version).add(torch_cuda);
  return k.hex().substr(0, 16);
}

void Toolchain::load_torch_info() {
  static std::mutex mu;
  std::lock_guard lk(mu);
  if (torch_loaded) return;
  SubprocessOptions o;
  o.argv = {python, "-m", "musacoder_harness.toolchain"};
  if (!torch_facts_cache.empty()) {
    o.argv.push_back("--cache");
    o.argv.push_back(torch_facts_cache);
  }
  o.env_set["PYTHONPATH"] = harness_dir;
  RunResult r = run_command(o, 120000);
  MC_CHECK(r.status.ok(), "cannot query torch through ", python, " (", r.status.describe(),
           "): ", r.err.substr(r.err.size() > 800 ? r.err.size() - 800 : 0),
           "\n  fix: install torch==2.11.0 (scripts/setup.sh) or set MUSACODER_PYTHON");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(first_line(r.out.substr(r.out.find('{'))));
  } catch (const std::exception& e) {
    throw Error(str_cat("unexpected toolchain probe output: ", r.out.substr(0, 300)));
  }
  torch_version = j.at("torch_version");
  torch_cuda = j.value("torch_cuda", "");
  python_include = j.at("python_include");
  cuda_home = j.value("cuda_home", "");
  if (cuda_home.empty() && nvcc.find('/') != std::string::npos)
    cuda_home = fs::path(nvcc).parent_path().parent_path().string();  // <home>/bin/nvcc
  torch_include_paths = j.at("include_paths").get<std::vector<std::string>>();
  torch_library_paths = j.at("library_paths").get<std::vector<std::string>>();
  nvcc_flags = j.at("nvcc_flags").get<std::vector<std::string>>();
  torch_loaded = true;
}

Toolchain discover_toolchain(const std::string& cuda_arch_override) {
  Toolchain t;
  std::string home = musacoder_home();
  t.harness_dir = env_or("MUSACODER_HARNESS_DIR", home + "/python");
  t.include_dir = home + "/include";
  t.lite_header_dir = home + "/src/eval/lite_headers";
  t.shim_dir = home + "/src/eval/torch_shim";
  t.python = env_or("MUSACODER_PYTHON", "python3");
  std::string cuda_home = env_or("CUDA_HOME", "/usr/local/cuda");
  t.nvcc = fs::exists(cuda_home + "/bin/nvcc") ? cuda_home + "/bin/nvcc" : "nvcc";
  t.cxx = env_or("CXX", "c++");
  SubprocessOptions o;
  o.argv = {t.nvcc, "--version"};
  RunResult r = run_command(o, 30000);
  std::smatch m;
  static const std::regex ver(R"(V(\d+\.\d+\.\d+))");
  if (r.status.ok() && std::regex_search(r.out, m, ver)) t.nvcc_version = m[1];
  std::string arch = cuda_arch_override.empty() ? env_or("MUSACODER_CUDA_ARCH", "") : cuda_arch_override;
  if (arch.empty()) {
    SubprocessOptions q;
    q.argv = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"};
    try {
      RunResult s = run_command(q, 15000);
      std::string cap = first_line(s.out);
      cap.erase(std::remove(cap.begin(), cap.end(), '.'), cap.end());
      cap.erase(std::remove_if(cap.begin(), cap.end(), ::isspace), cap.end());
      if (s.status.ok() && !cap.empty()) arch = cap;
    } catch (const Error&) {
    }
  }
  t.cuda_arch = arch.empty() ? "90" : arch;
  return t;
}

std::vector<std::string> missing_musa_toolchain(const std::string& python) {
  std::vector<std::string> missing;
  std::string home = env_or("MUSA_HOME", env_or("MUSA_PATH", "/usr/local/musa"));
  bool mcc = fs::exists(fs::path(home) / "bin" / "mcc");
  if (!mcc) {
    std::string path = env_or("PATH", "");
    for (size_t a = 0; !mcc && a <= path.size();) {
      size_t b = path.find(':', a);
      if (b == std::string::npos) b = path.size();
      if (b > a) mcc = fs::exists(fs::path(path.substr(a, b - a)) / "mcc");
      a = b + 1;
    }
  }
  if (!mcc) missing.push_back("the MUSA compiler mcc (not in " + home + "/bin, set MUSA_HOME, nor on PATH)");
  SubprocessOptions o;
  o.argv = {python, "-c", "import torch_musa"};
  auto r = run_command(o, 120000);
  if (!r.status.ok()) {
    std::string why = r.err;  // its last line: the exception
    while (!why.empty() && why.back() == '\n') why.pop_back();
    why = why.empty() ? r.status.describe() : why.substr(why.rfind('\n') + 1);
    missing.push_back("torch_musa (`" + python + " -c 'import torch_musa'` failed: " + why + ")");
  }
  return missing;
}

void require_backend(const std::string& name) {
  const std::string python = env_or("MUSACODER_PYTHON", "python3");
  const Backend& b = backend(name);  // an unknown name is refused here
  if (name == "cuda") return;
  // What the judge for this backend would use, from src/eval/backends.toml.
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  auto list = [&](const char* k) { return b.lists.count(k) ? join(b.lists.at(k)) : std::string("-"); };
  const std::string uses = str_cat("\nit would use (src/eval/backends.toml, from ", b.at("source"), "): compiler ",
                                   b.at("compiler"), " (", list("compiler_search"), "), ", b.at("arch_flag"), ", device '",
                                   b.at("device"), "' through ", b.at("torch_module"), " (import ", b.at("torch_import"),
                                   "), runtime ", b.at("runtime_library"), ", vendor libraries ", list("vendor_libraries"),
                                   " (allowed only with --allow)");
  auto missing = missing_musa_toolchain(python);
  std::string why;
  for (const auto& m : missing) why += "\n  - " + m;
  MC_CHECK(missing.empty(), "--backend musa needs a MUSA toolchain, and this machine lacks:", why, uses,
           "\n(nothing falls back to CUDA; docs/musa.md)");
  throw Error("--backend musa: the MUSA toolchain is here, but MooreEval's MUSA judge (mcc builds, "
              "torch_musa timing, muBLAS/muDNN legality) is not built yet; docs/musa.md says what is" + uses);
}

}  // namespace mc::eval
