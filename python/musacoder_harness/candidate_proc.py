"""The judge's handle on one candidate process (spawned through the sandbox launcher)."""
import os
import signal
import subprocess
import time

from . import protocol


class CandidateCrashed(Exception):
    def __init__(self, how, log_tail):
        super().__init__(how)
        self.how = how
        self.log_tail = log_tail


class CandidateTimeout(Exception):
    pass


class CandidateProc:
    def __init__(self, cmd_prefix, python, harness_dir, device, scratch, env_extra=None):
        os.makedirs(scratch, exist_ok=True)
        self.scratch = scratch
        self.log_path = os.path.join(scratch, "candidate.log")
        j2c_r, self.j2c_w = os.pipe()
        self.c2j_r, c2j_w = os.pipe()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MUSACODER_JUDGE")}
        env.update({"PYTHONPATH": harness_dir, "HOME": scratch, "TMPDIR": scratch,
                    "TORCH_EXTENSIONS_DIR": os.path.join(scratch, "ext"),
                    "CUDA_CACHE_PATH": os.path.join(scratch, ".nv"),
                    "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"})
        env.update(env_extra or {})
        cmd = list(cmd_prefix) + [python, "-m", "musacoder_harness.candidate",
                                  "--in-fd", str(j2c_r), "--out-fd", str(c2j_w),
                                  "--device", device, "--share-dir", scratch, "--scratch", scratch]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, pass_fds=(j2c_r, c2j_w), env=env,
                                     cwd=scratch, start_new_session=True)
        os.close(j2c_r)
        os.close(c2j_w)
        self.ready = None
        self.started = time.monotonic()

    def wait_ready(self, timeout_s):
        if self.ready is None:
            self.ready = self.recv(timeout_s)
            if self.ready.get("op") != "ready":
                raise CandidateCrashed("did not start: " + str(self.ready)[:200], self.log_tail())
        return self.ready

    def send(self, msg):
        try:
            protocol.send(self.j2c_w, msg)
        except (BrokenPipeError, OSError):
            raise CandidateCrashed(self._exit_description(), self.log_tail())

    def recv(self, timeout_s):
        try:
            return protocol.recv(self.c2j_r, timeout_s)
        except protocol.ChannelTimeout:
            raise CandidateTimeout()
        except (protocol.ChannelClosed, ValueError, UnicodeDecodeError):
            raise CandidateCrashed(self._exit_description(), self.log_tail())

    def request(self, msg, timeout_s):
        self.send(msg)
        return self.recv(timeout_s)

    def _exit_description(self):
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "closed its channel"
        if rc < 0:
            return f"killed by {signal.Signals(-rc).name}"
        return f"exited with status {rc}"

    def log_tail(self, n=3000):
        try:
            self.log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.j2c_w, self.c2j_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
