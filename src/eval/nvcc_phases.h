// One `nvcc -c` in less wall time. nvcc runs its phases one after another: the host front end
// (gcc -E, cudafe++), the device compiler (gcc -E, cicc, ptxas, fatbinary), then the host
// compile that embeds the fat binary. Each front end parses every header again, so for
// candidates that include ATen the first two take seconds each; they only share the module id
// file that cudafe++ writes. Writing that file first lets both run at once.
//
// The plan comes from `nvcc --dryrun` (the exact commands nvcc would run, with its own
// environment); if it does not have the expected shape, or any phase fails, the caller runs
// plain nvcc, so results and error messages never depend on this path.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mc::eval {

struct NvccPhases {
  std::string host_script, device_script, final_script;  // bash scripts, run in the build dir
};

// `argv`: an `nvcc ... -c SRC.cu -o OBJ` invocation to be run in `dir`. `module_id_seed`
// makes the module id unique to the source (it names the registration symbols).
std::optional<NvccPhases> plan_nvcc_phases(const std::vector<std::string>& argv,
                                           const std::string& dir,
                                           const std::string& module_id_seed, std::string* why);

}  // namespace mc::eval
