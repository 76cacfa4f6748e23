"""Lanes: several judges share one GPU for correctness; timing has the GPU to itself.

Every judge of a GPU opens the same two lock files (one pair per GPU, named by the executor):
the gate, held shared while a candidate is loaded and checked and exclusive while anything is
timed, and a turnstile that gives a waiting timer priority over judges that want to start new
correctness work (flock is not fair by itself). Locks held by a process die with it, so a judge
that crashes never blocks the others.

A correctness trial that runs long while a timer waits is preempted by its judge (see
Judge._ask): the candidate is killed and judged again later with the GPU to itself, so a
hanging candidate never holds up the others and an honest slow one is never failed for it.
"""
import fcntl
import os
import time


class GpuLock:
    """The gate of one GPU, shared by its judges. Without a path it is a no-op (one judge)."""

    def __init__(self, path, lanes=1):
        self.path = path or ""
        self.lanes = max(1, int(lanes))
        self.mode = None  # None | "shared" | "exclusive"
        self.waited_s = 0.0
        self._gate = self._turnstile = None
        if self.path:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._gate = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._turnstile = os.open(self.path + ".turnstile", os.O_RDWR | os.O_CREAT, 0o600)
        self._busy_since = None

    @property
    def enabled(self):
        return self._gate is not None

    @property
    def beside_others(self):
        """Held shared while other lanes may run beside this one: the state in which a judge
        neither times nor gives a timeout or out-of-memory verdict."""
        return self.mode == "shared" and self.lanes > 1

    def acquire(self, mode):
        """Takes the gate in `mode` ("shared" or "exclusive"), releasing what is held first.
        Returns the seconds waited."""
        assert mode in ("shared", "exclusive")
        if self.mode == mode:
            return 0.0
        self.release()
        if not self.enabled:
            self.mode = mode
            return 0.0
        t0 = time.monotonic()
        # Through the turnstile: a timer waiting inside it keeps new shared holders out.
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._gate, fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self.mode = mode
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited

    def release(self):
        if self.mode is not None and self.enabled:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.mode = None
        self._busy_since = None

    def timer_waiting(self, settle_s=0.1):
        """Whether another judge waits for the GPU to itself. A shared holder sees the turnstile
        taken either by a waiting timer or, for an instant, by a judge passing through it; only
        a turnstile found taken for `settle_s` counts."""
        if not self.enabled or not self.beside_others:
            return False
        try:
            fcntl.flock(self._turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            now = time.monotonic()
            if self._busy_since is None:
                self._busy_since = now
            return now - self._busy_since >= settle_s
        fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._busy_since = None
        return False

    def close(self):
        self.release()
        for fd in (self._gate, self._turnstile):
            if fd is not None:
                os.close(fd)
        self._gate = self._turnstile = None
