#include "common/gpus.h"

#include <cctype>
#include <cstdlib>

namespace mc {

std::optional<std::vector<std::string>> cuda_visible_devices() {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!env) return std::nullopt;
  std::vector<std::string> ids;
  std::string id;
  for (const char* c = env;; ++c) {
    if (*c == ',' || *c == '\0') {
      while (!id.empty() && isspace(static_cast<unsigned char>(id.back()))) id.pop_back();
      if (!id.empty()) ids.push_back(id);
      id.clear();
      if (*c == '\0') break;
    } else if (!(id.empty() && isspace(static_cast<unsigned char>(*c)))) {
      id += *c;
    }
  }
  return ids;
}

}  // namespace mc
