#include "eval/sandbox.h"

#include <algorithm>

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/check.h"

namespace mc::eval {
namespace {

bool apply_landlock(const SandboxOptions& opts, std::string* why) {
#ifdef SYS_landlock_create_ruleset
  int abi = static_cast<int>(syscall(SYS_landlock_create_ruleset, nullptr, 0,
                                     LANDLOCK_CREATE_RULESET_VERSION));
  if (abi < 1) {
    *why = "landlock unsupported by this kernel";
    return false;
  }
  // Only write-type rights are handled: reading stays allowed everywhere (python, torch, CUDA
  // libraries), creating, changing or removing files is allowed only below the rules.
  __u64 write_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                       LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                       LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                       LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                       LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
#ifdef LANDLOCK_ACCESS_FS_REFER
  if (abi >= 2) write_rights |= LANDLOCK_ACCESS_FS_REFER;
#endif
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
  if (abi >= 3) write_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = write_rights;
  int rs = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (rs < 0) {
    *why = std::string("landlock_create_ruleset: ") + strerror(errno);
    return false;
  }
  std::vector<std::string> paths = opts.extra_writable;
  if (opts.fork_server) std::replace(paths.begin(), paths.end(), std::string("/proc/self"), std::string("/proc"));
  paths.push_back(opts.scratch);
  // MUSACODER_SANDBOX_WRITABLE=/a:/b adds writable folders (for drivers that need them).
  if (const char* extra = std::getenv("MUSACODER_SANDBOX_WRITABLE")) {
    std::stringstream ss(extra);
    for (std::string p; std::getline(ss, p, ':');)
      if (!p.empty()) paths.push_back(p);
  }
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) continue;
    landlock_path_beneath_attr pb{};
    pb.allowed_access = write_rights;
    pb.parent_fd = fd;
    syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    ::close(fd);
  }
  if (syscall(SYS_landlock_restrict_self, rs, 0) != 0) {
    *why = std::string("landlock_restrict_self: ") + strerror(errno);
    ::close(rs);
    return false;
  }
  ::close(rs);
  return true;
#else
  *why = "built without landlock";
  return false;
#endif
}

// Drops every capability, now and across exec. The GPU machines run the verifier as root: with
// CAP_SYS_PTRACE a candidate could read a judge's memory through /proc/PID/mem (the timing
// salt among it), with CAP_DAC_OVERRIDE any file. Emptying the bounding set needs
// CAP_SETPCAP; without it (not root) there is nothing to drop there.
bool drop_capabilities(std::string* why) {
  for (int cap = 0; cap < 64; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);  // EINVAL past the last
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capset, &header, data) != 0) {
    *why = std::string("capset: ") + strerror(errno);
    return false;
  }
  if (prctl(PR_CAPBSET_READ, CAP_SYS_PTRACE, 0, 0, 0) > 0) {
    *why = "caps: the bounding set keeps CAP_SYS_PTRACE (no CAP_SETPCAP to drop it)";
    return false;
  }
  return true;
}

bool apply_seccomp(std::string* why) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) {
    *why = "seccomp_init failed";
    return false;
  }
  int rc = 0;
  // No network sockets (AF_UNIX stays: local IPC inside the sandbox).
  for (int fam : {AF_INET, AF_INET6, AF_PACKET, AF_NETLINK})
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                           SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(fam)));
  // No signal to a process group or to every process: as root, kill(-1, SIGKILL) ends every
  // process on the machine. (A signal to one other process by its pid stays possible; a judge
  // that dies so gives an infra error, which is never scored.)
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, 0x80000000u, 0x80000000u));
  // No reaching into other processes or changing the system.
  for (int sc : {SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev),
                 SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(reboot), SCMP_SYS(kexec_load),
                 SCMP_SYS(init_module), SCMP_SYS(finit_module), SCMP_SYS(delete_module),
                 SCMP_SYS(swapon), SCMP_SYS(swapoff), SCMP_SYS(setns), SCMP_SYS(unshare),
                 SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(settimeofday),
                 SCMP_SYS(clock_settime), SCMP_SYS(adjtimex)})
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), sc, 0);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    *why = std::string("seccomp: ") + strerror(-rc);
    return false;
  }
  return true;
}

}  // namespace

std::string apply_sandbox(const SandboxOptions& opts) {
  MC_CHECK(!opts.scratch.empty(), "sandbox needs a scratch folder");
  std::string layers, missing;
  // MUSACODER_SANDBOX_DISABLE=netns,caps,landlock,seccomp,nodump turns layers off, for diagnosing
  // a machine whose GPU driver needs something a layer forbids. Disabled layers are reported.
  const char* disable_env = std::getenv("MUSACODER_SANDBOX_DISABLE");
  std::string disabled = disable_env ? disable_env : "";
  auto off = [&](const char* name) { return disabled.find(name) != std::string::npos; };
  auto add = [&](bool ok, const char* name, const std::string& why) {
    if (off(name)) missing += (missing.empty() ? "" : "; ") + std::string(name) + " disabled";
    else if (ok) layers += (layers.empty() ? "" : "+") + std::string(name);
    else missing += (missing.empty() ? "" : "; ") + why;
  };
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  rlimit fsize{static_cast<rlim_t>(opts.max_file_bytes), static_cast<rlim_t>(opts.max_file_bytes)};
  setrlimit(RLIMIT_FSIZE, &fsize);
  if (!off("nodump")) prctl(PR_SET_DUMPABLE, 0);
  // A private network namespace holds only a downed loopback: no route anywhere.
  bool netns = !off("netns") && unshare(CLONE_NEWNET) == 0;
  add(netns, "netns", std::string("netns: ") + strerror(errno));
  MC_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS failed");
  std::string why;
  add(!off("caps") && drop_capabilities(&why), "caps", why);
  why.clear();
  add(!off("landlock") && apply_landlock(opts, &why), "landlock", why);
  why.clear();
  add(!off("seccomp") && apply_seccomp(&why), "seccomp", why);
  MC_CHECK(!opts.require_all || missing.empty(), "sandbox layers unavailable: ", missing);
  if (!missing.empty()) setenv("MUSACODER_SANDBOX_MISSING", missing.c_str(), 1);
  setenv("MUSACODER_SANDBOX", layers.c_str(), 1);
  return layers;
}

void sandbox_exec(const SandboxOptions& opts, const std::vector<std::string>& argv) {
  MC_CHECK(!argv.empty(), "sandbox-exec: no command given after --");
  apply_sandbox(opts);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  throw Error(str_cat("sandbox-exec: cannot run ", argv[0], ": ", strerror(errno)));
}

}  // namespace mc::eval
