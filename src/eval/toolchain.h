// The compilers and libraries candidates are built with, discovered once per process.
// Part of every compile cache key: a different nvcc, torch or GPU arch is a different build.
#pragma once

#include <string>
#include <vector>

#include "common/home.h"

namespace mc::eval {

struct Toolchain {
  std::string nvcc = "nvcc";      // path of nvcc
  std::string nvcc_version;       // "13.0.88" (from `nvcc --version`)
  std::string cxx = "c++";        // host compiler, as load_inline uses it
  std::string cuda_arch = "90";   // compute capability without the dot
  std::string python = "python3"; // the interpreter that runs the harness
  std::string harness_dir;        // folder that holds the musacoder_harness package
  std::string include_dir;        // MusaCoder's include/ (native_abi.h)
  std::string lite_header_dir;    // shadow torch/extension.h for the fast tier (see compile_pool.cc)
  std::string shim_dir;           // torch_shim/: headers and bridge of the shim tier
  // torch extension facts (filled by load_torch_info(); empty until then)
  bool torch_loaded = false;
  std::string torch_facts_cache;  // JSON file the facts are reused from (empty: probe each time)
  std::string torch_version, torch_cuda, python_include, cuda_home;
  std::vector<std::string> torch_include_paths, torch_library_paths, nvcc_flags;

  std::string id() const;  // digest for cache keys
  // Runs `python -m musacoder_harness.toolchain` (once; thread-safe). Throws mc::Error with
  // the interpreter's message if torch cannot be imported. With torch_facts_cache set, facts
  // read earlier from the same interpreter and torch installation are reused (milliseconds
  // instead of an `import torch`).
  void load_torch_info();
};

// Discovers nvcc, the GPU arch (MUSACODER_CUDA_ARCH, else nvidia-smi, else 90), the python
// interpreter (MUSACODER_PYTHON, else python3) and MusaCoder's own data folders
// (MUSACODER_HOME, else the source tree this binary was built from).
Toolchain discover_toolchain(const std::string& cuda_arch_override = "");

// MusaCoder's installation root (common/home.h), as this namespace has always named it.
using mc::musacoder_home;

// What a MUSA backend would need and this machine lacks, one line each (empty: nothing):
// mcc under $MUSA_HOME, $MUSA_PATH or /usr/local/musa (as torch_musa's musa_extension.py looks
// for it) or on PATH, and torch_musa importable by `python`.
std::vector<std::string> missing_musa_toolchain(const std::string& python);

// Throws mc::Error unless `backend` is "cuda": "musa" is refused with what is missing (or, where
// the toolchain is there, because MooreEval's MUSA judge is not built yet); never a silent
// fallback to CUDA.
// Python: MUSACODER_PYTHON, else python3, as discover_toolchain() picks it.
void require_backend(const std::string& backend);

}  // namespace mc::eval
