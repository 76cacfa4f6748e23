"""The judge's handle on one candidate process (spawned through the sandbox launcher)."""
import json
import os
import select
import signal
import socket
import subprocess
import time

from . import protocol


# How long pause() waits for its SIGSTOP to take effect before it returns anyway.
PAUSE_CONFIRM_S = 0.5


def _stopped(pid):
    """Whether the process is stopped (or gone), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t", "Z", "X")
    except (OSError, IndexError):
        return True


class CandidateCrashed(Exception):
    def __init__(self, how, log_tail):
        super().__init__(how)
        self.how = how
        self.log_tail = log_tail


class CandidateTimeout(Exception):
    pass


def kill_group(pid):
    """SIGKILL to the process group a session leader `pid` started (no waiting)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_session(proc):
    """Kills a process started with start_new_session, and everything in its group."""
    kill_group(proc.pid)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def describe_exit(rc):
    """A process's exit as the verdict reads it; rc as Popen.returncode (None: still running)."""
    if rc is None:
        return "closed its channel"
    if rc < 0:
        return f"killed by {signal.Signals(-rc).name}"
    return f"exited with status {rc}"


def close_fds(*fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def scratch_env(scratch):
    """What points into a candidate's own scratch folder."""
    return {"HOME": scratch, "TMPDIR": scratch, "TORCH_EXTENSIONS_DIR": os.path.join(scratch, "ext"),
            "CUDA_CACHE_PATH": os.path.join(scratch, ".nv")}


def candidate_env(harness_dir, scratch):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSACODER_JUDGE")}
    env.update({"PYTHONPATH": harness_dir, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"})
    env.update(scratch_env(scratch))
    return env


class CandidateProc:
    def __init__(self, cmd_prefix, python, harness_dir, device, scratch, env_extra=None):
        os.makedirs(scratch, exist_ok=True)
        self.scratch = scratch
        self.log_path = os.path.join(scratch, "candidate.log")
        j2c_r, self.j2c_w = os.pipe()
        self.c2j_r, c2j_w = os.pipe()
        env = candidate_env(harness_dir, scratch)
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
            self.ready_at = time.monotonic()
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

    def readable(self, timeout_s):
        """Whether a reply has begun to arrive (or the channel closed) within timeout_s."""
        ready, _, _ = select.select([self.c2j_r], [], [], timeout_s)
        return bool(ready)

    def request(self, msg, timeout_s):
        self.send(msg)
        return self.recv(timeout_s)

    def _exit_description(self):
        try:
            return describe_exit(self.proc.wait(timeout=5))
        except subprocess.TimeoutExpired:
            return describe_exit(None)

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

    def leader(self):
        """The pid of the session it leads (its sandbox wrapper and itself)."""
        return self.proc.pid

    def starting(self):
        """Still starting: it has not said it is ready, and nothing waits on its channel."""
        return self.ready is None and not self.readable(0)

    def pause(self):
        """SIGSTOP to its process group: a process creating its CUDA context stops creating it
        (see Judge._time). Returns whether it was paused."""
        try:
            os.killpg(self.leader(), signal.SIGSTOP)
        except OSError:
            return False  # gone: dealt with when taken
        self.paused = True
        # The signal is delivered asynchronously: until the processes we know of show as stopped,
        # they may still run (on a loaded host, for milliseconds; a test read "R" right after).
        pids = {self.leader()}
        pid = self.ready.get("pid") if isinstance(self.ready, dict) else None
        try:
            if isinstance(pid, int) and os.getpgid(pid) == self.leader():  # the candidate itself, in this group
                pids.add(pid)
        except OSError:
            pass
        deadline = time.monotonic() + PAUSE_CONFIRM_S
        while not all(_stopped(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.001)
        return True

    def resume(self):
        if getattr(self, "paused", False):
            self.paused = False
            try:
                os.killpg(self.leader(), signal.SIGCONT)
            except OSError:
                pass

    def signal_kill(self):
        """SIGKILL without waiting; kill() then waits and releases."""
        kill_group(self.proc.pid)

    def stop(self, timeout_s=10):
        """SIGKILL and wait until the process is gone (its device memory with it); the channel
        stays open until kill()."""
        self.signal_kill()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass

    def kill(self):
        kill_session(self.proc)
        close_fds(self.j2c_w, self.c2j_r)
        self.log.close()


class ZygoteFailed(Exception):
    pass


class Zygote:
    """The judge's handle on the zygote (zygote.py): a warm, sandboxed parent that forks
    candidate processes."""

    def __init__(self, cmd_prefix, python, harness_dir, device, scratch_root):
        self.device = device
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = open(os.path.join(scratch_root, "zygote.log"), "wb")
        cmd = list(cmd_prefix) + [python, "-m", "musacoder_harness.zygote",
                                  "--control-fd", str(child.fileno())]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, pass_fds=(child.fileno(),),
                                     env=candidate_env(harness_dir, scratch_root),
                                     cwd=scratch_root, start_new_session=True)
        child.close()
        self.ready = None

    def _recv(self, timeout_s):
        r, _, _ = select.select([self.sock], [], [], timeout_s)
        if not r:
            raise ZygoteFailed(f"no answer within {timeout_s:.0f} s")
        data = self.sock.recv(1 << 16)
        if not data:
            raise ZygoteFailed(f"the zygote exited ({self.proc.poll()})")
        return json.loads(data)

    def wait_ready(self, timeout_s):
        if self.ready is None:
            msg = self._recv(timeout_s)
            if msg.get("op") != "ready":
                raise ZygoteFailed(f"did not start: {str(msg)[:200]}")
            self.ready = msg
        return self.ready

    def fork(self, scratch, fds, timeout_s):
        self.wait_ready(timeout_s)
        req = {"op": "fork", "scratch": scratch, "device": self.device, "env": scratch_env(scratch)}
        try:
            socket.send_fds(self.sock, [json.dumps(req).encode()], fds)
        except OSError as e:
            raise ZygoteFailed(f"cannot reach the zygote: {e}")
        rep = self._recv(30)
        if rep.get("op") != "forked":
            raise ZygoteFailed(str(rep)[:200])
        return int(rep["pid"])

    def close(self):
        self.sock.close()
        kill_session(self.proc)
        self.log.close()


class ForkedCandidateProc(CandidateProc):
    """A candidate process forked by the zygote; same channel and handling as CandidateProc.
    Its exit status comes from the zygote (its parent) through a status pipe."""

    def __init__(self, zygote, scratch, timeout_s):  # pylint: disable=super-init-not-called
        os.makedirs(scratch, exist_ok=True)
        self.scratch = scratch
        self.log_path = os.path.join(scratch, "candidate.log")
        self.log = open(self.log_path, "wb")
        j2c_r, self.j2c_w = os.pipe()
        self.c2j_r, c2j_w = os.pipe()
        self.status_r, status_w = os.pipe()
        try:
            self.pid = zygote.fork(scratch, [j2c_r, c2j_w, self.log.fileno(), status_w], timeout_s)
        except BaseException:
            close_fds(self.j2c_w, self.c2j_r, self.status_r)
            self.log.close()
            raise
        finally:
            close_fds(j2c_r, c2j_w, status_w)
        self.ready = None
        self.started = time.monotonic()
        self.code = None

    def leader(self):
        return self.pid

    def _exit_code(self, timeout_s):
        if self.code is None:
            r, _, _ = select.select([self.status_r], [], [], timeout_s)
            if r:
                data = os.read(self.status_r, 4096)
                self.code = json.loads(data)["code"] if data else None
        return self.code

    def _exit_description(self):
        return describe_exit(self._exit_code(5))

    def signal_kill(self):
        if self._exit_code(0) is None:  # still running (a reaped pid may be reused)
            kill_group(self.pid)

    def stop(self, timeout_s=10):
        self.signal_kill()
        self._exit_code(timeout_s)

    def kill(self):
        self.signal_kill()
        self._exit_code(10)
        close_fds(self.j2c_w, self.c2j_r, self.status_r)
        self.log.close()
