"""Candidate processes forked from a warm parent, instead of each starting Python, torch and the
legality tools itself (~8 CPU-seconds each; a batch on 16 cores waited ~10 s for the first).

Measured on the H100: a forked candidate process is ready 0.6-1.0 s after the request.

The zygote runs inside the same sandbox as a candidate (started through `musacoder
sandbox-exec --fork-server`, scratch = the judge's scratch root): no network, writes only below
that root, /dev and /proc (a child needs its own /proc entry, which its layer narrows to),
seccomp. It imports torch and the harness but never touches CUDA (a CUDA context does not
survive fork). For each candidate the judge sends, over a SOCK_SEQPACKET pair, a request with
four descriptors (channel in, channel out, log, exit-status pipe); the zygote forks, and the
child narrows what it may write to its own scratch folder (a second Landlock layer on top of
the zygote's), starts its own session, and serves the judge exactly as a freshly started
candidate process does (candidate.serve). The zygote reaps children and writes each one's
exit status to its status pipe, so the judge can say "killed by SIGSEGV" as before.
No threads: fork in a multi-threaded process could copy a held lock.
"""
import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import time

# Landlock (linux/landlock.h): write-type rights only, as src/eval/sandbox.cc handles them.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38
_WRITE_RIGHTS_V1 = (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | \
    (1 << 10) | (1 << 11) | (1 << 12)
_REFER, _TRUNCATE = 1 << 13, 1 << 14
# The folders a candidate may write besides its scratch (SandboxOptions::extra_writable).
EXTRA_WRITABLE = ("/dev", "/dev/shm", "/proc/self")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_writes_to(paths):
    """Adds a Landlock layer: below `paths` only. Returns "" or why it could not."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return "landlock unsupported by this kernel"
    rights = _WRITE_RIGHTS_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(rights)
    rs = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                      ctypes.c_uint32(0))
    if rs < 0:
        return "landlock_create_ruleset: " + os.strerror(ctypes.get_errno())
    try:
        for p in paths:
            try:
                fd = os.open(p, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                pb = _PathBeneath(rights, fd)
                libc.syscall(_SYS_ADD_RULE, ctypes.c_int(rs), ctypes.c_int(1), ctypes.byref(pb),
                             ctypes.c_uint32(0))
            finally:
                os.close(fd)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(rs), ctypes.c_uint32(0)) != 0:
            return "landlock_restrict_self: " + os.strerror(ctypes.get_errno())
        return ""
    finally:
        os.close(rs)


def writable_paths(scratch):
    extra = [p for p in os.environ.get("MUSACODER_SANDBOX_WRITABLE", "").split(":") if p]
    return [scratch, *EXTRA_WRITABLE, *extra]


class Zygote:
    def __init__(self, sock):
        self.sock = sock
        self.status_fds = {}   # pid -> write end of its status pipe

    def reap(self, *_):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = self.status_fds.pop(pid, None)
            if fd is not None:
                self._report(fd, os.waitstatus_to_exitcode(status))

    @staticmethod
    def _report(fd, code):
        try:
            os.write(fd, json.dumps({"code": code}).encode())
        except OSError:
            pass
        os.close(fd)

    def fork(self, msg, fds):
        in_fd, out_fd, log_fd, status_fd = fds
        # SIGCHLD waits until the pid is registered: a child that dies at once is still reported.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            die_with_parent(zygote)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            code = 0
            try:
                self.child(msg, in_fd, out_fd, log_fd)
            except BaseException:  # noqa: BLE001  (reported in the log; never back into the loop)
                import traceback
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        for fd in (in_fd, out_fd, log_fd):
            os.close(fd)
        self.status_fds[pid] = status_fd
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        self.reap()
        return pid

    def child(self, msg, in_fd, out_fd, log_fd):
        t0 = time.monotonic()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.sock.close()
        for fd in self.status_fds.values():
            os.close(fd)
        os.setsid()  # its own process group: the judge kills it with killpg
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        scratch = msg["scratch"]
        why = restrict_writes_to(writable_paths(scratch))
        if why and "landlock" in os.environ.get("MUSACODER_SANDBOX", ""):
            raise RuntimeError(f"cannot confine the candidate to its scratch folder: {why}")
        os.environ.update(msg.get("env", {}))
        os.chdir(scratch)
        from .candidate import serve
        serve(in_fd, out_fd, msg["device"], scratch, scratch, t0)

    def loop(self):
        signal.signal(signal.SIGCHLD, self.reap)
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            except InterruptedError:
                continue
            if not data:
                return  # the judge is gone
            msg = json.loads(data)
            if msg.get("op") == "fork" and len(fds) == 4:
                reply = {"op": "forked", "pid": self.fork(msg, fds)}
            else:
                for fd in fds:
                    os.close(fd)
                reply = {"op": "error", "error": f"bad request {str(msg)[:200]}"}
            self.sock.send(json.dumps(reply).encode())


PR_SET_PDEATHSIG = 1


def die_with_parent(parent):
    """SIGKILL to this process when the zygote exits (the zygote exits when its judge is gone):
    a candidate whose judge was killed outright (an executor SIGKILLed, the OOM killer) must not
    run on, a hanging one spinning a core forever. The zygote forks from its only thread, so the
    signal comes at its exit and not before."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the zygote died before the line above
        os._exit(1)


def fork_is_poisoned():
    """Whether torch would refuse CUDA in a child forked now ("Cannot re-initialize CUDA in
    forked subprocess": torch.cuda.device_count() and friends, when they ask the driver, mark
    every later fork as bad). Asked of a throwaway child, which exits at once."""
    import torch
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, b"1" if torch.cuda._is_in_bad_fork() else b"0")
        os._exit(0)
    os.close(w)
    bad = os.read(r, 1) == b"1"
    os.close(r)
    os.waitpid(pid, 0)
    return bad


def warm_imports():
    """What every candidate would import or start itself, short of anything that asks the GPU
    driver. torch.utils.cpp_extension is not among them: importing it calls
    torch.cuda.is_available(), which (unless NVML answers) asks the driver for its device count,
    and torch then refuses CUDA in every child forked later ("Cannot re-initialize CUDA in
    forked subprocess", bench/probes/zygote_fork_probe.py on the H100); the child imports it after
    creating its own context. What it imports in turn is imported here: setuptools (with
    pkg_resources) was nearly all of that import, and it was 0.5-1.4 s of each forked child's
    start on the H100 (the small set's "imports"), on the judge's critical path when
    candidates are judged faster than spares start."""
    import setuptools  # noqa: F401
    import setuptools.command.build_ext  # noqa: F401
    import torch
    import torch._appdirs  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils._cpp_extension_versioner  # noqa: F401
    import torch.utils.file_baton  # noqa: F401
    from . import candidate, compare, inputs, legality, timing, transport  # noqa: F401
    x = torch.ones(4)
    with torch.no_grad(), legality.OpRecorder():  # the dispatch monitor's first use
        x.add(1)
    if torch.cuda.is_initialized() or fork_is_poisoned():
        raise RuntimeError("the zygote asked the GPU driver while importing: its children could not use CUDA")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--control-fd", type=int, required=True)
    args = ap.parse_args()
    sock = socket.socket(fileno=args.control_fd)
    t0 = time.monotonic()
    warm_imports()
    sock.send(json.dumps({"op": "ready", "pid": os.getpid(), "startup_s": time.monotonic() - t0,
                          "sandbox": os.environ.get("MUSACODER_SANDBOX", "none")}).encode())
    Zygote(sock).loop()


if __name__ == "__main__":
    main()
