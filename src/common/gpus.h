// Which GPUs a process may use, as CUDA names them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mc {

// CUDA_VISIBLE_DEVICES as a list (an index, a UUID or a MIG name each; blanks around commas
// dropped); nullopt where it is not set.
std::optional<std::vector<std::string>> cuda_visible_devices();

}  // namespace mc
