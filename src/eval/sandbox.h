// The candidate sandbox, applied by `musacoder sandbox-exec` just before exec'ing the
// candidate runner: untrusted code gets no network, can write only under its scratch folder
// (and the GPU device nodes / shared memory it needs), cannot trace or signal other processes,
// and dumps no core. Each layer that the kernel refuses is reported, not silently assumed.
#pragma once

#include <string>
#include <vector>

namespace mc::eval {

struct SandboxOptions {
  std::string scratch;                    // the only ordinary folder the candidate may write
  // /proc/self: the CUDA driver names its threads (/proc/self/task/*/comm); resolved when the
  // sandbox is applied, so it is the candidate's own entry (exec keeps the pid).
  std::vector<std::string> extra_writable = {"/dev", "/dev/shm", "/proc/self"};
  // For the zygote (python/musacoder_harness/zygote.py): its children inherit this layer and
  // then narrow it with their own, where /proc/self is their own entry. With /proc/self here
  // they could not write their /proc entries at all (the CUDA driver then fails to start:
  // error 304 on the H100 machines), so this layer allows /proc and each child's its own.
  bool fork_server = false;
  bool require_all = false;               // fail instead of degrading when a layer is missing
  long max_file_bytes = 4L << 30;         // RLIMIT_FSIZE
};

// Applies every layer to the calling process. Returns the layers in force, e.g.
// "netns+caps+landlock+seccomp". Throws mc::Error when require_all and a layer is unavailable.
std::string apply_sandbox(const SandboxOptions& opts);

// apply_sandbox, then execvp(argv). Only returns by throwing.
[[noreturn]] void sandbox_exec(const SandboxOptions& opts, const std::vector<std::string>& argv);

}  // namespace mc::eval
