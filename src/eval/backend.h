// MooreEval's backends as data (src/eval/backends.toml): for cuda and musa, the compiler and
// where it is looked for, the architecture flag, the file endings, the device and torch module,
// the runtime and vendor libraries, the stream type, the inline-extension path and how the
// profiler names kernels, each musa row citing torch_musa. The cuda judge is built; the musa
// judge is not, and `--backend musa` refuses with this table's account of what it would need.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mc::eval {

struct Backend {
  std::string name;
  std::map<std::string, std::string> fields;               // compiler, device, arch_flag, ...
  std::map<std::string, std::vector<std::string>> lists;   // compiler_search, vendor_libraries, ...
  // A field, or throws mc::Error naming the backend and the field.
  const std::string& at(const std::string& key) const;
};

// Reads the table (MUSACODER_HOME/src/eval/backends.toml, or `path`). Throws mc::Error naming the
// file and the row that is wrong.
std::map<std::string, Backend> load_backends(const std::string& path = "");

// One backend of the table; throws mc::Error for a name it does not have.
const Backend& backend(const std::string& name);

}  // namespace mc::eval
