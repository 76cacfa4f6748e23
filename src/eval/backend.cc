#include "eval/backend.h"

#include <mutex>

#include "common/check.h"
#include "common/fs.h"
#include "common/toml.h"
#include "eval/toolchain.h"

namespace mc::eval {

const std::string& Backend::at(const std::string& key) const {
  auto it = fields.find(key);
  MC_CHECK(it != fields.end(), "backend ", name, ": no '", key, "' in src/eval/backends.toml");
  return it->second;
}

std::map<std::string, Backend> load_backends(const std::string& path_in) {
  const std::string path = path_in.empty() ? musacoder_home() + "/src/eval/backends.toml" : path_in;
  MC_CHECK(fs::exists(path), "backend table ", path, " does not exist");
  toml::table t = read_toml(path, "a TOML backend table");
  std::map<std::string, Backend> out;
  for (const auto& [k, v] : t) {
    const std::string name(k.str());
    if (name == "version") continue;
    auto* tab = v.as_table();
    MC_CHECK(tab, path, ": [", name, "] must be a table");
    Backend b;
    b.name = name;
    for (const auto& [fk, fv] : *tab) {
      const std::string field(fk.str());
      if (auto s = fv.value<std::string>()) {
        b.fields[field] = *s;
      } else if (auto* arr = fv.as_array()) {
        for (const auto& e : *arr) {
          auto s2 = e.value<std::string>();
          MC_CHECK(s2, path, ": [", name, "] ", field, " must hold strings");
          b.lists[field].push_back(*s2);
        }
      } else {
        throw Error(str_cat(path, ": [", name, "] ", field, " must be a string or an array of strings"));
      }
    }
    for (const char* need : {"compiler", "device", "torch_module", "source_ext", "runtime_library", "stream_type"})
      MC_CHECK(b.fields.count(need), path, ": [", name, "] has no '", need, "'");
    out[name] = std::move(b);
  }
  MC_CHECK(out.count("cuda"), path, ": no [cuda] backend");
  return out;
}

const Backend& backend(const std::string& name) {
  static std::once_flag once;
  static std::map<std::string, Backend> table;
  std::call_once(once, [] { table = load_backends(); });
  auto it = table.find(name);
  std::string known;
  for (const auto& [k, _] : table) known += (known.empty() ? "" : ", ") + k;
  MC_CHECK(it != table.end(), "--backend must be one of ", known, ", got '", name, "'");
  return it->second;
}

}  // namespace mc::eval
