"""The judge: one persistent, trusted process per GPU, driven by the C++ executor.

It owns the reference model, the reference outputs, the comparison and the clock. Each
candidate runs in its own sandboxed process (candidate.py), kept warm one ahead, and is killed
after its verdict. Requests and replies are JSON lines on stdin/stdout.
"""
import argparse
import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
import traceback

from .candidate_proc import (CandidateCrashed, CandidateProc, CandidateTimeout, ForkedCandidateProc,
                             Zygote, ZygoteFailed, kill_group)
from .files import write_json_atomic
from .lanes import GpuLock
from .ledger import Ledger, alone, others_bytes
from .trial_cache import TrialCache

PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
FORKED_SPARES = 3
LEAK_RESTART_BYTES = 1 << 30  # see Judge.check_leak
# How timing keeps this judge's spare processes, still creating their CUDA contexts, from
# stalling its syncs (MUSACODER_TIMING_QUIESCE):
#   stop  the ones still starting are paused (SIGSTOP) while the GPU is ours, and resumed after:
#         nobody waits. The default: on the H100 it judged the small set's 18
#         candidates in 7.2 s against 10.9 s for wait, kb-level1's 30 in 62.5 s against 66.2 s,
#         with kernel medians within 0.6% (kb-level1) and no timing repeat;
#   wait  they finish starting first (outside the GPU's gate);
#   none  neither: a diagnostic.
# bench/kernelbench_compare.py --quiesce-ab measures all three on the same candidates.
TIMING_QUIESCE_MODES = ("wait", "stop", "none")


def timing_quiesce_mode():
    v = os.environ.get("MUSACODER_TIMING_QUIESCE", "stop").strip().lower()
    v = {"1": "stop", "0": "none", "": "stop"}.get(v, v)
    if v not in TIMING_QUIESCE_MODES:
        raise SystemExit(f"judge: MUSACODER_TIMING_QUIESCE={v!r}: expected one of "
                         f"{', '.join(TIMING_QUIESCE_MODES)} (or 1 / 0)")
    return v


TIMING_QUIESCE = timing_quiesce_mode()
PREEMPT_LOAD_S = 5.0  # a candidate's load (import, module, construction) before it may be preempted


def device_processes():
    """nvidia-smi's view of who holds device memory ("pid MiB, ..."), for an infra error's
    message; "unknown" where it cannot tell (no nvidia-smi, a container without the pids)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    rows = [r.replace(" ", "").split(",") for r in out.splitlines() if r.strip()]
    return ", ".join(f"{r[0]} {r[1]} MiB" for r in rows if len(r) == 2) or "unknown"


class Infra(Exception):
    """The verifier failed (not the candidate): never a score. out_of_memory: judged again
    with the GPU to the candidate alone; not_alone: it was alone by the gate, but the verifier's
    other processes still held memory (ledger.py), so it is judged alone once more."""

    def __init__(self, message, out_of_memory=False, not_alone=False):
        super().__init__(message)
        self.out_of_memory = out_of_memory
        self.not_alone = not_alone


class Preempted(Exception):
    """Another judge of this GPU waited to time while this candidate's trial ran long: the
    candidate is judged again later with the GPU to itself (lanes.py). Never a verdict."""


class TimingDeferred(Exception):
    """The candidate passed its trials while the trainer held the timing gate, and its request
    said `defer_timing`: instead of waiting for the gate with this lane taken (the lane's other
    candidates, failing ones among them, waiting behind it), the judge gives the candidate
    back with what its trials established (`passed`: TRIAL_RECORD's fields); the caller sends
    that back as `passed_trials` once the gate is open, and the candidate is loaded afresh and
    timed without repeating its trials. Never a verdict."""

    def __init__(self, message, passed):
        super().__init__(message)
        self.passed = passed


# What a judging's correctness trials established, kept by the caller (the C++ evaluator, never
# the candidate) across a TimingDeferred and handed back as `passed_trials`: the timing compares
# with `extra_atol`, and the result reports the rest as if the trials had just run.
TRIAL_RECORD = ("trials_passed", "trials_total", "tolerance", "extra_atol", "mismatch",
                "degenerate_reference", "param_redraw")


def trial_record(res):
    """res's TRIAL_RECORD fields (those it has)."""
    return {k: res[k] for k in TRIAL_RECORD if k in res}


def passed_trials_record(req, trials):
    """The request's `passed_trials`, checked: None when absent; Infra when it does not say that
    every one of this request's trials passed (the caller's mistake, never a verdict)."""
    rec = req.get("passed_trials")
    if rec is None:
        return None
    ok = isinstance(rec, dict) and all(isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool)
                                       for k in ("trials_passed", "trials_total"))
    if not ok or rec["trials_passed"] != trials or rec["trials_total"] != trials:
        raise Infra(f"passed_trials does not record {trials} passed trials: {json.dumps(rec)[:200]}")
    xa = rec.get("extra_atol")
    if xa is not None and not (isinstance(xa, list) and all(isinstance(x, (int, float)) for x in xa)):
        raise Infra("passed_trials has a malformed extra_atol")
    return rec


class Verdict(Exception):
    def __init__(self, verdict, reason, rule="", **extra):
        super().__init__(reason)
        self.verdict, self.reason, self.rule, self.extra = verdict, reason, rule, extra


def fingerprint(x, salt, on_host=False):
    """A salted, position-weighted sum of x's bits (int64, wrapping), chunk by chunk: equal for
    unchanged contents; a change that keeps it equal would have to know the salt, which the
    judge draws anew for every trial and never shares. Replaces a full copy of every input
    (6 GB and more at KernelBench's published sizes). Where the device has no room even for a
    chunk's temporaries (an honest float64 candidate's allocator held the rest of an H100 on
    L1/34_InstanceNorm), the same sum over chunks copied to the host: integer sums that wrap
    are equal in any order and on any device, so the two places agree exactly."""
    import torch
    from .compare import CHUNK
    if not isinstance(x, torch.Tensor):
        return x
    views = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    flat = x.detach().contiguous().reshape(-1)
    bits = flat.view(views[flat.element_size()]) if flat.numel() else flat
    mult = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64

    def total(dev):
        acc = torch.zeros((), dtype=torch.int64, device=dev)
        for s in range(0, bits.numel(), CHUNK):
            idx = torch.arange(s, min(s + CHUNK, bits.numel()), device=dev, dtype=torch.int64)
            w = (idx + salt) * mult
            w = w ^ (w >> 29)
            acc += (bits[s:s + CHUNK].to(dev, torch.int64) * w).sum()
        return int(acc)
    if on_host or not x.is_cuda:
        value = total(torch.device("cpu"))
    else:
        try:
            value = total(x.device)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            value = total(torch.device("cpu"))
    return (tuple(x.shape), x.dtype, value)


def start_zygote(args):
    """The zygote starts importing while the judge imports torch (MUSACODER_ZYGOTE=0: every
    candidate process starts from scratch instead)."""
    if os.environ.get("MUSACODER_ZYGOTE", "1") == "0":
        return None
    os.makedirs(args.scratch, exist_ok=True)
    prefix = [args.sandbox_exe, "sandbox-exec", "--scratch", args.scratch, "--fork-server", "--"] \
        if args.sandbox_exe else []
    return Zygote(prefix, sys.executable, args.harness_dir, args.device, args.scratch)


class Judge:
    def __init__(self, args, zygote=None):
        t0 = time.monotonic()
        self.zygote = zygote
        self.startup_s = {}
        import torch
        self.torch = torch
        self.startup_s["import_torch"] = time.monotonic() - t0
        self.args = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.scratch_root = args.scratch
        os.makedirs(self.scratch_root, exist_ok=True)
        self.cache_dir = args.cache_dir
        self.prefix = [args.sandbox_exe, "sandbox-exec", "--scratch", "{scratch}", "--"] \
            if args.sandbox_exe else []
        self.counter = 0
        self.spares = []  # warm candidate processes, oldest first
        self.dying = []   # killed candidate processes not yet reaped (see reap())
        self.problems = {}
        # The GPU's gate, shared with the other lanes' judges (lanes.py).
        self.lock = GpuLock(getattr(args, "gpu_lock", ""), getattr(args, "lanes", 1))
        # The GPU's memory ledger, shared with the same judges (ledger.py).
        self.ledger = Ledger(getattr(args, "gpu_lock", ""))
        self.trial_cache = TrialCache()  # the current problem's trial references (trial_cache.py)
        self.judging = None  # the candidate process being judged (counted in the ledger)
        self.calib_us = None  # the latest calibration, measured with the GPU to ourselves
        # Spares first: their CUDA contexts are created while the judge creates its own. A
        # standby judge (a lane that judges only while the GPU's others are held up) starts
        # them at its first candidate instead: contexts created meanwhile would slow the other
        # lanes' work.
        for _ in range(0 if getattr(args, "standby", False) else self.spare_count()):
            self.spawn_spare()
        self.startup_s["spares_requested"] = time.monotonic() - t0
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if self.cuda:
            torch.cuda.set_device(self.device)
            self.gpu = torch.cuda.get_device_name(self.device)
        else:
            self.gpu = "cpu"
        from .timing import L2Flusher
        self.flusher = L2Flusher(self.device)
        self.idle_allocated = torch.cuda.memory_allocated(self.device) if self.cuda else 0
        self.restart_reason = ""
        self.startup_s["device_ready"] = time.monotonic() - t0

    def spare_count(self):
        """Forked candidate processes are ready in under a second, and CUDA contexts created by
        many processes at once slow each other down (twelve at once took 13 s on the H100):
        a few in flight are enough. Started from scratch, they need `--spares`."""
        n = max(1, self.args.spares)
        return min(n, FORKED_SPARES) if self.zygote is not None else n

    # ---- candidate processes ------------------------------------------------------------
    def spawn_spare(self):
        self.counter += 1
        scratch = os.path.join(self.scratch_root, f"cand-{os.getpid()}-{self.counter}")
        if self.zygote is not None:
            try:
                self.spares.append(ForkedCandidateProc(self.zygote, scratch, self.args.startup_timeout))
                return
            except (ZygoteFailed, OSError) as e:  # slower from here on, not wrong
                self.stop_forking(f"zygote unusable ({e})")
        prefix = [p.replace("{scratch}", scratch) for p in self.prefix]
        self.spares.append(CandidateProc(prefix, sys.executable, self.args.harness_dir,
                                         str(self.device), scratch))

    def take_candidate(self):
        cand = self.spares.pop(0)
        try:
            cand.wait_ready(self.args.startup_timeout)
            if "calib" not in cand.__dict__ and self.lock.lanes == 1:
                self.calibrate(cand)  # with lanes, at timing, on a sibling (calibration_us)
        except (CandidateCrashed, CandidateTimeout) as e:
            cand.kill()
            shutil.rmtree(cand.scratch, ignore_errors=True)
            if isinstance(cand, ForkedCandidateProc) and self.zygote is not None:
                # Forked processes do not start on this machine: from scratch from now on.
                self.stop_forking(f"a forked candidate process failed to start ({e}: "
                                  f"{getattr(e, 'log_tail', '')[-1500:]})")
                self.discard_spares()
                for _ in range(self.spare_count()):
                    self.spawn_spare()
                return self.take_candidate()
            self.spawn_spare()
            raise Infra(f"candidate process failed to start: {e} {getattr(e, 'log_tail', '')[-500:]}")
        self.spawn_spare()  # the next one warms up while this one is judged
        return cand

    def calibrate(self, cand):
        """Before any candidate code is loaded: the judge's wall clock per iteration of the
        timing loop around a no-op (flush, events, loop), after a warm-up. Other judges' work on
        the GPU would inflate it (and loosen the forgery bound), so with lanes it runs only
        while this judge has the GPU to itself."""
        cand.request({"op": "calibrate", "iters": 20}, 60)
        t0 = time.perf_counter()
        cand.request({"op": "calibrate", "iters": 200}, 60)
        cand.calib = (time.perf_counter() - t0) * 1e6 / 200
        self.calib_us = cand.calib

    def calibration_us(self, cand):
        """The per-iteration overhead for cand's timed run: its own calibration where it has
        one; else (lanes: processes are taken while other judges use the GPU) a fresh one of a
        spare sibling from the same zygote, measured now under the exclusive gate, with no
        candidate code in it."""
        if "calib" in cand.__dict__:
            return cand.calib
        for spare in self.spares:
            if getattr(spare, "paused", False):
                continue  # still starting, paused for this timing
            try:
                spare.wait_ready(self.args.startup_timeout)
                if "calib" not in spare.__dict__:
                    self.calibrate(spare)
                return spare.calib
            except (CandidateCrashed, CandidateTimeout):
                continue  # dealt with when it is taken
        if self.calib_us is None:  # every spare paused and none ever calibrated: one resumed
            for spare in self.spares:
                if getattr(spare, "paused", False):
                    spare.resume()
                    try:
                        spare.wait_ready(self.args.startup_timeout)
                        self.calibrate(spare)
                        return spare.calib
                    except (CandidateCrashed, CandidateTimeout):
                        continue
        return self.calib_us or 0.0

    def stop_forking(self, why):
        """Slower from here on, not wrong: candidate processes start from scratch."""
        print(f"judge: {why}; starting candidate processes from scratch", file=sys.stderr, flush=True)
        self.zygote.close()
        self.zygote = None

    def quiesce(self, timeout_s=30):
        """Waits until every spare has finished starting (a failed one is dealt with when taken)."""
        for spare in self.spares:
            try:
                spare.wait_ready(timeout_s)
            except (CandidateCrashed, CandidateTimeout):
                pass

    def pause_starting_spares(self, res):
        """The spares still starting, paused (MUSACODER_TIMING_QUIESCE=stop); resume_spares()
        after the timing."""
        paused = [s for s in self.spares if s.starting() and s.pause()]
        res["timing_spares_paused"] = len(paused)
        return paused

    @staticmethod
    def resume_spares(paused):
        for spare in paused:
            spare.resume()

    def quiesce_into(self, res, key):
        """quiesce(), its seconds recorded as res[key]."""
        t0 = time.monotonic()
        self.quiesce()
        res[key] = round(time.monotonic() - t0, 4)

    # ---- problems -----------------------------------------------------------------------
    def problem(self, path):
        st = os.stat(path)
        key = (path, st.st_mtime_ns)
        if key not in self.problems:
            spec = importlib.util.spec_from_file_location(
                "mc_problem_" + hashlib.sha1(path.encode()).hexdigest()[:12], path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            for name in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(mod, name):
                    raise Infra(f"problem {path} defines no {name}")
            with open(path, "rb") as f:
                mod.__mc_sha__ = hashlib.sha256(f.read()).hexdigest()
            self.problems[key] = mod
        return self.problems[key]

    def reference_model(self, prob, seed, dtype):
        from .inputs import seed_all
        torch = self.torch
        seed_all(seed)
        init_inputs = prob.get_init_inputs()
        with torch.device(self.device):
            model = prob.Model(*init_inputs)
        model = model.to(self.device)
        if dtype != torch.float32:
            model = model.to(dtype)
        return model, init_inputs

    def reference_run(self, model, prob, tseed, variant, dtype):
        """One trial's inputs and reference outputs. Where the variant makes the reference
        non-finite (log of negatives...), the problem's domain excludes it: native inputs
        instead. Returns (inputs, outputs, variant used)."""
        from .compare import all_finite, flatten_outputs
        from .inputs import make_inputs
        torch = self.torch
        inputs = make_inputs(prob, tseed, variant, self.device, dtype)
        with torch.no_grad():
            ref = model(*inputs)
        if variant != "native" and not all(all_finite(r) for r in flatten_outputs(ref)
                                           if r.is_floating_point()):
            variant = "native"
            inputs = make_inputs(prob, tseed, variant, self.device, dtype)
            with torch.no_grad():
                ref = model(*inputs)
        return inputs, ref, variant

    # ---- one candidate --------------------------------------------------------------------
    def evaluate(self, req):
        """One candidate's verdict. The judge running out of memory is the verifier's failure:
        the candidate gets an infrastructure error (never a score), the memory is given back
        and the judge goes on serving the next candidate. Whatever the outcome, with lanes
        nothing this candidate needed stays cached on the device (ledger.py)."""
        torch = self.torch
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        failure = None
        try:
            res = self._evaluate_in_lane(req)
        except (torch.OutOfMemoryError, MemoryError) as e:
            self.mark_exclusive(req.get("problem_path", ""))  # next time with the GPU to itself
            where = " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                               for f in reversed(traceback.extract_tb(e.__traceback__)[-4:]))
            why = f"{type(e).__name__} at {where}: {str(e)[:240]}"
            if self.cuda:
                free, total = torch.cuda.mem_get_info(self.device)
                why += (f" [judge allocated {torch.cuda.memory_allocated(self.device) / 2**30:.1f} GiB,"
                        f" device free {free / 2**30:.1f} of {total / 2**30:.1f} GiB]")
            failure = Infra(f"the judge ran out of memory on {os.path.basename(req.get('problem_path', ''))}"
                            f" ({why}); nothing was scored, the judge goes on", out_of_memory=True)
        except Infra as e:
            failure = Infra(str(e), e.out_of_memory, e.not_alone)  # without the frames' tensors
        else:
            if self.cuda:
                res["judge_peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(self.device))
            return res
        finally:
            self.declare("idle")  # whatever left: verdict, infra error, preemption
        self.recover_memory()  # outside the except blocks: their tracebacks held the tensors
        self.declare("idle")  # what it holds once recovered
        raise failure

    def declare(self, state):
        """This judge's line in the GPU's ledger: what it holds now and how many processes it
        keeps (itself, its spares, its dying candidates and the one it judges)."""
        if self.ledger.enabled:
            held = self.torch.cuda.memory_reserved(self.device) if self.cuda else 0
            self.ledger.declare(state, held, self.own_processes())

    def own_processes(self):
        return 1 + len(self.spares) + len(self.dying) + (1 if self.judging is not None else 0)

    def give_back_memory(self):
        """Everything this judge keeps cached goes back to the device. Tensors it shared with a
        candidate through CUDA IPC stay allocated after their last use, in PyTorch's limbo, until
        collected (H200, published sizes: a judge idle between candidates still held 52 GiB so,
        and the next problem judged alone ran out of memory beside it)."""
        if self.cuda:
            self.torch.cuda.ipc_collect()
            self.torch.cuda.empty_cache()

    def check_leak(self):
        """Memory this judge shared with a candidate that died holding it (a crash, a hang) stays
        allocated in PyTorch's IPC limbo for the judge's lifetime. Above LEAK_RESTART_BYTES the
        judge asks to be replaced after this reply (the executor starts a fresh one)."""
        if not self.cuda:
            return
        leaked = self.torch.cuda.memory_allocated(self.device) - self.idle_allocated
        if leaked > LEAK_RESTART_BYTES:
            self.restart_reason = f"{leaked / 2**30:.1f} GiB shared with dead candidates"

    def shrink(self, cand=None):
        """Before waiting for the gate: the judge's cached blocks, and its candidate's cache and
        poisoned reserve, go back to the device, so that a judge holding the GPU alone has it
        truly alone; then the ledger says so."""
        if self.cuda:
            self.give_back_memory()
            if cand is not None:
                try:
                    cand.request({"op": "trim", "keep_reserve": False}, 30)
                except (CandidateCrashed, CandidateTimeout):
                    pass  # its verdict comes from the next request
        self.declare("waiting")

    def memory_alone(self):
        """(whether the rest of the verifier holds no more than its contexts, detail)."""
        held, detail = others_bytes(self.ledger, self.torch, self.device, self.own_processes())
        return alone(held), detail

    def await_alone(self, res, timeout_s=5.0):
        """With the gate held exclusive: waits until the other judges have given their memory
        back (they do before they wait for the gate). Records the promise in the row: how much
        the others held when the candidate began, and whether that is alone."""
        t0 = time.monotonic()
        while True:
            ok, detail = self.memory_alone()
            if ok or time.monotonic() - t0 > timeout_s:
                break
            time.sleep(0.05)
        detail.update(alone=ok, waited_s=round(time.monotonic() - t0, 3))
        res["memory_promise"] = detail
        return ok

    def _evaluate_in_lane(self, req):
        """_evaluate under the GPU's gate: shared while the candidate is loaded and checked
        (other lanes' candidates run beside it), exclusive for timing, and exclusive
        throughout for a candidate that was preempted before or a problem too large to share
        the device. With lanes, every process this candidate used is gone before the gate is
        released: a killed process's kernels may still be running until it has exited."""
        why = "request" if req.get("exclusive") else \
            "problem size" if self.is_exclusive(req.get("problem_path", "")) else ""
        # The candidate's process is taken before the gate: one still starting (Python, then its
        # CUDA context, beside every other lane's) held the gate shared for up to 2 s on the
        # H100 with nothing on the GPU, and a lane waiting to time waited for it.
        t0 = time.monotonic()
        if not self.spares:  # a standby judge's first candidate
            for _ in range(self.spare_count()):
                self.spawn_spare()
        if len(self.dying) > 2 or self.memory_held_by_dying():
            self.reap()  # untimed candidates (timing off, failures), or memory the next one needs
        cand = self.take_candidate()
        self.judging = cand
        take_s = time.monotonic() - t0
        res = None
        try:
            self.shrink()
            imported = None
            if why == "problem size" and req.get("format") != "native" and self.lock.lanes > 1:
                res, imported = self._import_beside_others(req, cand, take_s)
                if res is not None:
                    return res  # it cannot be imported: no wait for the GPU to itself
            waited = self.lock.acquire("exclusive" if why else "shared")
            self.declare(self.lock.mode)
            lane = {"lanes": self.lock.lanes, "mode": self.lock.mode, "waited_s": round(waited, 3)}
            if why:
                lane["exclusive_why"] = why
            if imported is not None:
                lane["imported_beside_others_s"] = imported
            res = self._evaluate(req, lane, cand, take_s)
            return res
        finally:
            self.judging = None
            if cand not in self.dying:  # _evaluate did not get as far as its own kill
                cand.signal_kill()
                self.dying.append(cand)
            if self.lock.lanes > 1:
                t_reap = time.monotonic()
                self.reap()
                self.give_back_memory()  # an idle lane keeps nothing a large problem could need
                self.check_leak()
                if res is not None and isinstance(res.get("stage_s"), dict):
                    # With the gate still held (exclusive after timing): on every candidate's path.
                    res["stage_s"]["reap"] = time.monotonic() - t_reap
            self.lock.release()

    def _new_result(self, lane):
        """A judging's row before anything of the candidate has been checked."""
        return {"trials_passed": 0, "trials_total": 0, "gpu": self.gpu,
                "torch_version": self.torch.__version__, "compile_path": "pool", "lane": lane,
                "cpu_threads": self.torch.get_num_threads()}

    def _import_beside_others(self, req, cand, take_s):
        """For a problem judged with the GPU to itself: the solution's module is imported first
        with the gate shared, beside other lanes' candidates. (result, None) when that fails: the
        load_error, with the gate still held (the caller releases it). (None, seconds) when it
        imports: the gate is released, and `load` builds ModelNew from the imported module. On
        an H200 at published sizes, 105 answers that failed at import waited 823 s in all for
        the GPU alone before failing so."""
        t0 = time.monotonic()
        waited = self.lock.acquire("shared")
        self.declare("shared")
        msg = {"op": "import", "solution_path": req.get("solution_path", ""),
               "artifacts": req.get("artifacts", {})}
        try:
            self._ask(cand, msg, self.args.load_timeout, "load", preempt_after=PREEMPT_LOAD_S)
        except Verdict as v:
            lane = {"lanes": self.lock.lanes, "mode": "shared", "waited_s": round(waited, 3),
                    "exclusive_why": "problem size", "imported_beside_others_s": round(time.monotonic() - t0, 3)}
            res = self._new_result(lane)
            res["stage_s"] = {"take": take_s, "load": time.monotonic() - t0}
            res.update(verdict=v.verdict, reason=v.reason, rule=v.rule, **v.extra)
            return res, None
        self.lock.release()
        self.declare("waiting")
        return None, round(time.monotonic() - t0, 3)

    def exclusive_marker(self, path):
        if not self.lock.enabled or not path:
            return ""
        return os.path.join(self.lock.path + ".exclusive", hashlib.sha1(path.encode()).hexdigest())

    def is_exclusive(self, path):
        m = self.exclusive_marker(path)
        return bool(m) and self.lock.lanes > 1 and os.path.exists(m)

    def mark_exclusive(self, path):
        """A problem whose footprint does not fit beside other lanes' (seen by any judge of
        this GPU): its later candidates are judged with the GPU to themselves."""
        m = self.exclusive_marker(path)
        if m and self.lock.lanes > 1:
            os.makedirs(os.path.dirname(m), exist_ok=True)
            open(m, "w").close()

    def release_cached_memory(self, above=1 << 30):
        """Blocks the judge's allocator keeps cached are free to the judge alone: above `above`
        bytes they go back to the device, where the memory plan and the candidate see them."""
        torch = self.torch
        if self.cuda:
            torch.cuda.ipc_collect()  # inputs shared with earlier candidates (give_back_memory)
            if torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device) > above:
                torch.cuda.empty_cache()

    def recover_memory(self):
        import gc
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.give_back_memory()
        self.health_check()

    # ---- memory, numerics, limits -------------------------------------------------------------
    def memory_plan(self, inputs, outputs, model, share=1):
        """Where the large per-trial tensors live, from the problem's footprint and the free
        device memory: the judge's copies of the candidate's outputs ("snapshots") and the
        float64 reference go to host memory when the device cannot hold them; the candidate's
        poisoned reserve is sized; timing keeps as many input sets (each with its reference
        output) as fit."""
        from .compare import flatten_outputs
        torch = self.torch

        def nbytes(xs):
            return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
        in_b, out_b = nbytes(inputs), nbytes(flatten_outputs(outputs))
        par_b = nbytes(list(model.state_dict().values()))
        plan = {"input_bytes": in_b, "output_bytes": out_b, "param_bytes": par_b}
        if not self.cuda:
            plan.update(free_bytes=None, snapshots="device", truth="device", timing_sets=8,
                        candidate_reserve_bytes=2 * out_b + (64 << 20))
            return plan
        free, _ = torch.cuda.mem_get_info(self.device)
        free //= share  # lanes: the other judges' candidates need their part of it
        plan["free_bytes"] = int(free)
        plan["share"] = share
        margin = (2 << 30) + free // 20  # library workspaces, fragmentation
        held = in_b + out_b  # the judge's inputs and reference output of a trial
        # The float64 reference, while it is computed (before the candidate runs): float64
        # inputs, parameters and outputs, and its forward's intermediates.
        truth_peak = 2 * (in_b + par_b) + 3 * out_b
        plan["truth"] = "device" if free > held + truth_peak + margin else "host"
        # Poisoned memory the candidate reserves so its fresh allocations read NaN: twice its
        # outputs, but at most a tenth of the device (published sizes: the candidate needs the
        # room for its own work).
        reserve = min(2 * out_b, free // 10)
        plan["candidate_reserve_bytes"] = int(reserve + (64 << 20))
        # While the candidate runs: its outputs and reserve, then the judge's copy of those
        # outputs and the rounded float64 reference.
        during = held + out_b + reserve + 2 * out_b
        plan["snapshots"] = "device" if free > during + margin else "host"
        # The promise: what is left to the candidate's own allocations while it runs (beside
        # other lanes, its share); an out-of-memory within it is its own (ledger.py).
        judge_during = held + (2 * out_b if plan["snapshots"] == "device" else 0)
        plan["candidate_bytes"] = int(max(0, free - margin - judge_during))
        # A timing set: its inputs, the reference output, the candidate's and the judge's copy
        # of it; beside them the reference's own timing keeps two outputs.
        per_set = in_b + 3 * out_b
        plan["timing_sets"] = int(max(1, min(8, (free - margin - 2 * out_b) // max(1, per_set))))
        return plan

    def snapshot(self, x, plan, trim=None):
        """A private copy of a candidate's output, which it cannot reach: on the device, or in
        host memory when the plan says the device cannot hold it. The plan counts what the
        judge holds, not what the candidate's own allocator keeps after its forward: an honest
        candidate that computes in float64 held about 20 GiB more than planned on L1/19_ReLU
        (H100), and the device copy ran out of memory. Then this copy and the trial's later
        ones go to host memory (recorded in the plan), which is slower, not wrong."""
        torch = self.torch
        if not isinstance(x, torch.Tensor):
            return x
        if plan.get("snapshots") == "host" and x.is_cuda:
            return x.to("cpu")
        try:
            return x.clone()
        except torch.OutOfMemoryError:
            if not x.is_cuda:
                raise
        torch.cuda.empty_cache()
        if trim is not None:  # the candidate's cache (its float64 intermediates), not its outputs
            trim()
            try:
                return x.clone()
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
        plan["snapshots"] = "host"
        plan["snapshots_why"] = "device out of memory at a snapshot"
        return x.to("cpu")

    def truth_run(self, ref_model, inputs, ref, plan, res, trim=None):
        """The trial's reference in float64 (same parameters, same inputs): the yardstick of
        compare_outputs. On the host where the plan says so or the device runs out of memory;
        None (recorded) where neither can: the comparison is then against PyTorch's result
        with the plain tolerance. trim(): asks the candidate process to return its allocator's
        cache; on the device's first out-of-memory, before the host is tried (H100, published
        sizes: after a trial the candidate's cache held the room the float64 reference needs,
        and trials 2-5 of every 6 GB problem ran it on the host, 10-20 s each)."""
        import copy
        from .compare import reference_truth
        torch = self.torch

        def to64(x, dev):
            if not isinstance(x, torch.Tensor):
                return x
            return x.to(dev, torch.float64) if x.is_floating_point() else x.to(dev)

        def on(dev):  # its float64 temporaries die with this frame
            with torch.no_grad():
                x64 = [to64(x, dev) for x in inputs]
                try:
                    # The model's own modules with float64 tensors swapped in by name: also reaches
                    # submodules a forward calls through closures (level 3's MiniGPTBlock keeps its
                    # MLP in a lambda, which a deep copy still points at the float32 original).
                    state = {n: to64(t, dev) for n, t in ref_model.state_dict(keep_vars=True).items()}
                    # A forward that keeps state in a plain tensor attribute (level 3's VanillaRNN:
                    # self.hidden = tanh(...)) would keep the float64 one, and the next float32
                    # reference run would mix dtypes: those attributes are put back after.
                    kept = [(m, k, v) for m in ref_model.modules() for k, v in vars(m).items()
                            if isinstance(v, torch.Tensor)]
                    try:
                        out = torch.func.functional_call(ref_model, state, tuple(x64))
                    finally:
                        for m, k, v in kept:
                            m.__dict__[k] = v
                except (torch.OutOfMemoryError, MemoryError):
                    raise
                except Exception:
                    out = copy.deepcopy(ref_model).to(dev, torch.float64)(*x64)
                del x64  # the float64 inputs are done with: their room is the rounded copy's
                return reference_truth(ref, out)
        places = ["device", "host"] if plan.get("truth") == "device" else ["host"]
        if trim is not None and self.cuda and places[0] == "device":
            places.insert(1, "device")  # once more, after the trim
        for i, place in enumerate(places):
            if i and place == "device":  # a candidate that fails to answer gets its verdict here
                res["trims"] = res.get("trims", 0) + 1
                trim()
            try:
                summary = on(self.device if place == "device" else torch.device("cpu"))
            except (torch.OutOfMemoryError, MemoryError):
                summary = "oom"
            except Exception as e:  # an op without a float64 kernel: compare as before
                res.setdefault("truth_on", []).append(f"none ({type(e).__name__}: {str(e)[:120]})")
                return None
            if summary != "oom":
                res.setdefault("truth_on", []).append(place)
                return summary
            if self.cuda:
                torch.cuda.empty_cache()
        res.setdefault("truth_on", []).append("none (out of memory)")
        return None

    def trial_limit(self, req, ref_s, first):
        """A correctness trial's limit follows the reference's own time: a generous multiple
        with a floor, capped by trial_timeout_s. The first trial also runs the legality
        monitor and the profiler (forward twice), so it gets twice as long."""
        cap = float(req.get("trial_timeout_s", self.args.trial_timeout))
        floor = float(req.get("trial_timeout_floor_s", 5.0))
        multiple = float(req.get("trial_timeout_ref_multiple", 200.0))
        limit = floor + multiple * ref_s
        if first:
            limit *= 2
        return min(cap, limit)

    @staticmethod
    def preempt_after(ref_s, first):
        """How long a correctness trial runs before a waiting timer may preempt it: far longer
        than an honest trial takes (the first one also loads the module and runs the monitor).
        Preempting costs the candidate a later re-run alone, never its verdict."""
        return (2.0 if first else 1.0) + 20 * ref_s

    def _redraw_mapping(self, ref_model, load_reply, native, res):
        """{reference name: candidate name} for parameter re-draws, or None where the mapping is
        incomplete (the trials then run on the initial parameters; recorded in the row)."""
        from .params import match_parameters, tensor_specs
        ref_specs = tensor_specs(ref_model)
        if native or not ref_specs:
            return {n: n for n, _, _ in ref_specs}
        cand_specs = load_reply.get("param_specs")
        if not isinstance(cand_specs, list):
            cand_specs = []
        try:
            cand_specs = [(str(n), tuple(int(x) for x in s), str(d)) for n, s, d in cand_specs]
        except (TypeError, ValueError):
            raise Verdict("runtime_error", "malformed parameter report from the candidate process")
        mapping, unmapped = match_parameters(ref_specs, cand_specs)
        renamed = sum(1 for k, v in mapping.items() if k != v)
        res["param_redraw"] = {"mapped": len(mapping), "renamed": renamed, "unmapped": unmapped[:20],
                               "skipped": bool(unmapped)}
        return None if unmapped else mapping

    def _evaluate(self, req, lane, cand, take_s):
        torch = self.torch
        from .compare import compare_outputs, degenerate, flatten_outputs
        from .inputs import REDRAW_TRIALS, make_inputs, redraw_parameters, trial_schedule
        from .transport import describe, describe_value, open_tensor, share_value
        res = self._new_result(lane)
        dtype = getattr(torch, PRECISIONS[req.get("precision", "fp32")])
        seed = int(req.get("seed", 42))
        trials = int(req.get("trials", 5))
        atol, rtol = float(req["atol"]), float(req["rtol"])
        allow = list(req.get("allow", []))
        try:
            prob = self.problem(req["problem_path"])
        except Infra:
            raise
        except Exception as e:
            raise Infra(f"cannot load problem {req['problem_path']}: {type(e).__name__}: {e}")
        ref_model, init_inputs = self.reference_model(prob, seed, dtype)
        native = req["format"] == "native"
        # Deferred before (TimingDeferred): its trials passed in an earlier judging; this one
        # loads it afresh and times it (the timed runs' outputs are compared all the same).
        reused = passed_trials_record(req, trials)
        trial_inputs = trial_schedule(seed, trials)
        stage_s = res["stage_s"] = {}  # seconds per stage, for the row's exec breakdown
        t_stage = time.monotonic()

        def lap(name):
            nonlocal t_stage
            now = time.monotonic()
            stage_s[name] = now - t_stage
            t_stage = now
        self.release_cached_memory()  # earlier candidates' blocks: free for the plan and this one
        if lane["mode"] == "exclusive":
            self.await_alone(res)
        share = cand.scratch
        lap("take")
        stage_s["take"] += take_s  # the process was taken before the gate (_evaluate_in_lane)
        res["candidate_process"] = "forked" if isinstance(cand, ForkedCandidateProc) else "started"
        ready = cand.ready or {}
        # How long this candidate's process took to start (imports, its CUDA context, ...): off
        # the path when it started as a spare, but what a crowded host stretches first.
        if isinstance(ready.get("parts_s"), dict):
            res["candidate_start_parts_s"] = dict(ready["parts_s"], total=ready.get("startup_s", 0.0))
        print(f"judge: at {time.time():.3f} took a candidate process requested "
              f"{cand.ready_at - cand.started:.3f} s before "
              f"(its start took {ready.get('startup_s', 0):.3f} s: {json.dumps(ready.get('parts_s', {}))})",
              file=sys.stderr, flush=True)
        try:
            load = {"op": "load", "format": req["format"], "dtype": str(dtype), "seed": seed,
                    "solution_path": req.get("solution_path", ""),
                    "artifacts": req.get("artifacts", {}),
                    "init_inputs": [describe_value(v, share) for v in init_inputs]}

            def first_set():  # the first trial's inputs and reference output: sizes for the plan
                inputs = make_inputs(prob, trial_inputs[0][0], "native", self.device, dtype)
                with torch.no_grad():
                    return inputs, ref_model(*inputs)
            inputs0, out0 = first_set()
            beside = self.lock.beside_others
            plan = self.memory_plan(inputs0, out0, ref_model, self.lock.lanes if beside else 1)
            if beside and (plan.get("truth") == "host" or plan.get("snapshots") == "host"):
                # Too large to share the device: the GPU to itself, for this and later candidates
                # of the problem (nothing of the candidate has run yet). Nothing of it stays on
                # the device while this lane waits: other lanes may wait on the same large problem,
                # and the one that gets the GPU needs the memory their first input sets would hold
                # (on the H100, lanes waiting so held about 20 GiB each, and L1/20_LeakyReLU's
                # candidates, judged alone, ran out of memory).
                self.mark_exclusive(req["problem_path"])
                del out0, inputs0
                self.shrink()
                lane["waited_s"] = round(lane["waited_s"] + self.lock.acquire("exclusive"), 3)
                lane.update(mode="exclusive", exclusive_why="problem size")
                self.declare("exclusive")
                self.await_alone(res)
                inputs0, out0 = first_set()
                plan = self.memory_plan(inputs0, out0, ref_model)
            res["memory_plan"] = plan
            load["reserve_bytes"] = plan["candidate_reserve_bytes"]
            params = list(ref_model.state_dict().values())
            if native:
                load["so_path"] = req["so_path"]
                load["params"] = [describe(p.detach(), share) for p in params]
                load["output_specs"] = [{"shape": list(o.shape), "dtype": str(o.dtype)}
                                        for o in flatten_outputs(out0)]
            del out0, inputs0
            rep = self._ask(cand, load, self.args.load_timeout, "load", preempt_after=PREEMPT_LOAD_S)
            res["compile_path"] = rep.get("compile_path", "pool")
            lap("load")
            redraw_to = self._redraw_mapping(ref_model, rep, native, res) if reused is None else None

            passed, first_mismatch = 0, None
            if reused is not None:
                res.update(trial_record(reused))
                res["trials_reused"] = True
                passed = trials

            def trim():  # the candidate's allocator cache back to the driver (truth_run, snapshot)
                rep = self._ask(cand, {"op": "trim"}, 60, "correctness")
                freed = rep.get("freed_bytes")  # the candidate's word: a diagnostic, never trusted
                if isinstance(freed, int) and not isinstance(freed, bool):
                    res["trimmed_bytes"] = res.get("trimmed_bytes", 0) + freed
            parts = res["trial_parts_s"] = {}  # where trial time goes (judge side + candidate's)
            limits = res["trial_limits_s"] = []
            # per output: the numerics allowance of native-input trials
            extra_atol = reused.get("extra_atol") if reused is not None else None

            def part(name, since):
                now = time.monotonic()
                parts[name] = parts.get(name, 0.0) + now - since
                return now
            redraws = 0
            for t, (tseed, variant) in enumerate(trial_inputs if reused is None else []):
                t_part = time.monotonic()
                redraw = None
                if t in REDRAW_TRIALS and params and redraw_to is not None:
                    new = redraw_parameters(ref_model, tseed)
                    redraws += 1
                    redraw = [describe(p.detach(), share) for p in ref_model.state_dict().values()] \
                        if native else {redraw_to[n]: describe(p.detach(), share)
                                        for n, p in new.items() if n in redraw_to}
                # Every answer to this problem meets the same trials: paid by the first (trial_cache.py).
                key = (seed, str(dtype), tseed, variant, redraws)
                hit = self.trial_cache.get(prob.__mc_sha__, key, self.device)
                if hit is not None:
                    inputs, ref, truth, variant, ref_s = hit
                    res["trials_shared"] = res.get("trials_shared", 0) + 1
                    t_part = part("reference", t_part)
                else:
                    t_ref = time.perf_counter()
                    inputs, ref, variant = self.reference_run(ref_model, prob, tseed, variant, dtype)
                    ref_s = time.perf_counter() - t_ref
                    t_part = part("reference", t_part)
                    truth = self.truth_run(ref_model, inputs, ref, plan, res, trim)
                    self.trial_cache.put(prob.__mc_sha__, key, inputs, ref, truth, variant, ref_s)
                if t == 0:
                    res["degenerate_reference"] = degenerate(ref)
                t_part = part("truth", t_part)
                shared = [share_value(x, share) for x in inputs]
                inputs = [v for _, v in shared]  # what the candidate sees (and could write)
                salt = int.from_bytes(os.urandom(7), "little")
                before = [fingerprint(x, salt) for x in inputs]
                msg = {"op": "run", "inputs": [d for d, _ in shared],
                       "monitor": t == 0, "allow": allow, "params": redraw}
                res["trials_total"] = t + 1
                self.release_cached_memory()  # what the float64 reference and the variants left
                limit = self.trial_limit(req, ref_s, first=(t == 0))
                limits.append(round(limit, 2))
                t_part = part("share", t_part)
                rep = self._ask(cand, msg, limit, "correctness", passed=passed,
                                preempt_after=self.preempt_after(ref_s, first=(t == 0)))
                t_part = part("candidate", t_part)
                for k, v in (rep.get("parts_s") or {}).items():
                    if isinstance(v, (int, float)):
                        parts["cand_" + str(k)[:20]] = parts.get("cand_" + str(k)[:20], 0.0) + float(v)
                try:
                    outs = [self.snapshot(open_tensor(d, share), plan, trim) for d in rep.get("outputs", [])]
                except torch.OutOfMemoryError:
                    raise  # the judge's own memory: an infra error (evaluate), never a verdict
                except Exception as e:
                    raise Verdict("runtime_error", f"unreadable outputs: {e}")
                finally:
                    cand.send({"op": "release"})
                if self.cuda:
                    torch.cuda.synchronize()
                t_part = part("outputs", t_part)
                for x, b in zip(inputs, before):
                    if isinstance(x, torch.Tensor) and fingerprint(x, salt) != b:
                        raise Verdict("illegal", "the candidate modified its inputs",
                                      "input_mutation")
                if t == 0 and req.get("legality", True):
                    self._check_legality(rep.get("legality", {}), native, allow)
                ok, detail = compare_outputs(ref, outs, atol, rtol, truth=truth)
                if ok:
                    passed += 1
                    if variant == "native":
                        got = [b["extra_atol"] if b else 0.0 for b in detail["bounds"]]
                        extra_atol = got if extra_atol is None else [max(x, y) for x, y in zip(extra_atol, got)]
                    res["tolerance"] = detail["bounds"]
                elif first_mismatch is None:
                    detail["trial"] = t
                    detail["variant"] = variant
                    first_mismatch = detail
                res["trials_passed"] = passed
                del inputs, ref, truth, before, outs, shared
                part("checks", t_part)
                if passed == 0:
                    break  # the first trial failed: the verdict and reward are settled, at one trial's cost
            res["extra_atol"] = extra_atol
            if reused is None:
                res["mismatch"] = first_mismatch
                lap("trials")
            if passed < trials:
                raise Verdict("incorrect", f"{passed}/{res['trials_total']} trials matched the reference"
                              + ("" if res["trials_total"] == trials else f" (of {trials}: stopped at the first, which failed)"))
            if req.get("timing", True):
                if req.get("defer_timing") and self._gate_closed():
                    raise TimingDeferred(f"{passed}/{trials} trials matched; timing held by the trainer",
                                         trial_record(res))
                self._time(req, prob, ref_model, cand, res, dtype, seed)
                lap("timing")
            res["verdict"], res["stage"] = "ok", "done"
        except Verdict as v:
            res.update(verdict=v.verdict, reason=v.reason, rule=v.rule, **v.extra)
        finally:
            if self.cuda and res.get("verdict") not in (None, "timeout"):  # it answers: not hung
                try:  # it lets go of what it opened from us: our IPC counters drop (give_back_memory)
                    cand.request({"op": "close"}, 2)
                except Exception:
                    pass  # killed all the same; what it held is found by check_leak
            # Killed now, reaped later: the process's teardown (its CUDA context) overlaps the
            # next candidate's load and trials, and is over before anything is timed.
            cand.signal_kill()
            self.dying.append(cand)
        return res

    def memory_held_by_dying(self):
        """Whether killed processes may still hold device memory a candidate could need: a
        process frees it only as it exits, and an honest candidate must not run out of memory
        because of the one before it."""
        if not (self.dying and self.cuda):
            return False
        free, total = self.torch.cuda.mem_get_info(self.device)
        return free < total // 2

    def discard_spares(self):
        """Kills every spare (all signalled first, then waited for together)."""
        for cand in self.spares:
            cand.signal_kill()
        self.dying += self.spares
        self.spares = []
        self.reap()

    def shutdown(self):
        """At the end of input: the spares, the killed processes not yet reaped and the zygote
        are signalled, and their scratch removed, without waiting for any of them to be gone.
        Each exit tears down a CUDA context (tenths of a second, more beside others), which
        only delays the caller: SIGKILL cannot be refused, and what the judge leaves behind is
        reaped by init once the judge exits."""
        self.ledger.close()
        procs = self.spares + self.dying
        for cand in procs:
            cand.signal_kill()
        if self.zygote is not None:
            kill_group(self.zygote.proc.pid)  # its forked children die with it (zygote.py)
        for cand in procs:
            shutil.rmtree(cand.scratch, ignore_errors=True)
        self.spares, self.dying = [], []

    def reap(self):
        """Waits for killed candidate processes to be gone and removes their scratch."""
        while self.dying:
            cand = self.dying.pop(0)
            cand.kill()
            shutil.rmtree(cand.scratch, ignore_errors=True)

    def _ask(self, cand, msg, timeout, stage, passed=0, preempt_after=None):
        """Sends msg (None: only receives) and returns the reply; a crash, a hang or an error
        reply becomes the candidate's verdict for this stage. With `preempt_after`, while the
        GPU is shared, a reply still missing after that many seconds while another judge waits
        to time raises Preempted (lanes.py)."""
        try:
            if msg is not None:
                cand.send(msg)
            t0 = time.monotonic()
            if preempt_after is not None and self.lock.beside_others:
                while not cand.readable(0.05):
                    waited = time.monotonic() - t0
                    if waited >= timeout:
                        raise CandidateTimeout()
                    if waited >= preempt_after and self.lock.timer_waiting():
                        raise Preempted(f"{stage} ran {waited:.1f} s while another lane waited to time")
            # A reply that has begun gets at least a second to arrive in full.
            rep = cand.recv(max(1.0, timeout - (time.monotonic() - t0)))
        except CandidateTimeout:
            if preempt_after is not None and self.lock.beside_others:
                # Beside other lanes the candidate shares the GPU and the host: a timeout there
                # is no verdict (an honest slow one failed that way on the H100). Judged again
                # alone, where the limit decides.
                raise Preempted(f"{stage} ran past its {timeout:.0f} s limit beside other lanes")
            raise Verdict("timeout", f"{stage} exceeded its {timeout:.0f} s limit", "",
                          runtime_error=cand.log_tail(1500))
        except CandidateCrashed as e:
            self.health_check()
            verdict = "load_error" if stage == "load" else "runtime_error"
            raise Verdict(verdict, f"the candidate process {e.how} during {stage}",
                          runtime_error=e.log_tail[-3000:])
        if rep.get("op") == "error":
            verdict = "load_error" if stage == "load" else "runtime_error"
            err = str(rep.get("error", ""))
            if "out of memory" in err or "can't allocate memory" in err:
                if self.lock.beside_others:
                    # Other lanes' candidates may hold the memory it needed: judged again alone.
                    raise Infra(f"the candidate ran out of device memory during {stage} beside "
                                f"other lanes: {err[:200]}", out_of_memory=True)
                # A verdict only if the candidate had the GPU to itself: with it gone, the rest of
                # the verifier (other judges, their processes) holds no more than its contexts.
                cand.stop()
                self.reap()
                ok, detail = self.memory_alone()
                if not ok:
                    raise Infra(f"the candidate ran out of memory during {stage} while the rest of "
                                f"the verifier held {detail['others_bytes'] / 2**30:.1f} GiB "
                                f"({json.dumps(detail['others'])[:300]}; by process: "
                                f"{device_processes() if self.cuda else 'cpu'}): {err[:200]}",
                                out_of_memory=True, not_alone=True)
            raise Verdict(verdict, f"{stage} raised {rep.get('error', '')[:300]}",
                          runtime_error=(rep.get("traceback") or rep.get("error", ""))[-3000:])
        return rep

    def _check_legality(self, rep, native, allow):
        if not isinstance(rep, dict):
            raise Verdict("illegal", "malformed legality report", "protocol")
        bad = rep.get("forbidden_ops", [])
        if bad and "torch_compute" not in allow:
            raise Verdict("illegal", "forward computed with PyTorch ops: " + ", ".join(bad[:8]),
                          "torch_compute")
        if rep.get("new_threads", 0) > 0:
            raise Verdict("illegal", "forward started threads", "thread")
        if self.cuda:
            if rep.get("library_kernels"):
                raise Verdict("illegal", "vendor-library kernels ran: " +
                              ", ".join(rep["library_kernels"][:3])[:300], "library_call")
            if not rep.get("own_kernels"):
                raise Verdict("illegal", "none of the candidate's own kernels ran in forward",
                              "no_own_kernel")
            if len(rep.get("streams", [])) > 1:
                raise Verdict("illegal", f"kernels ran on {len(rep['streams'])} streams",
                              "side_stream")

    # ---- timing -----------------------------------------------------------------------------
    def _await_gate_open(self, t0):
        """A trainer that shares this GPU closes the timing gate (creates the file) while its own
        kernels run: correctness trials go on, timing waits. Lines sent while waiting keep the
        caller's read timeout from running out."""
        gate = getattr(self.args, "timing_gate", "")
        last = time.monotonic()
        while gate and os.path.exists(gate):
            if time.monotonic() - last > 5 and getattr(self, "out", None):
                self.out.write(json.dumps({"op": "gate_wait", "waited_s": time.monotonic() - t0}) + "\n")
                last = time.monotonic()
            time.sleep(0.002)

    def _gate_closed(self):
        gate = getattr(self.args, "timing_gate", "")
        return bool(gate) and os.path.exists(gate)

    def _enter_gate(self):
        """While timing, this judge holds a marker beside the trainer's gate, so a trainer
        closing it waits for the timing to finish. False: it closed in between."""
        gate = getattr(self.args, "timing_gate", "")
        if not gate:
            return True
        marker = f"{gate}.timing.{os.getpid()}"
        open(marker, "w").close()
        if os.path.exists(gate):
            os.remove(marker)
            return False
        self._gate_marker = marker
        return True

    def _await_quiet_gpu(self, res):
        """Timing needs the GPU quiet: no trainer kernels (the timing gate) and no other lane's
        work (the GPU's gate, exclusive). The trainer's gate is awaited without holding the
        GPU's, so other lanes' correctness trials go on meanwhile."""
        t0 = time.monotonic()
        if self.lock.mode != "exclusive" and self.lock.lanes > 1:
            self.shrink(self.judging)  # nothing of ours beside whoever times first
        while True:
            self._await_gate_open(t0)
            waited = self.lock.acquire("exclusive")
            if "lane" in res:
                res["lane"]["timing_waited_s"] = round(res["lane"].get("timing_waited_s", 0) + waited, 3)
            if self._enter_gate():
                break
            self.lock.release()  # the trainer closed it meanwhile: wait again, the GPU free to others
        if getattr(self.args, "timing_gate", ""):
            res["timing_gate_wait_s"] = time.monotonic() - t0
        self.declare("exclusive")
        if "memory_promise" not in res or not res["memory_promise"].get("alone"):
            self.await_alone(res)

    def _release_gate(self):
        marker = getattr(self, "_gate_marker", None)
        if marker:
            try:
                os.remove(marker)
            except OSError:
                pass
            self._gate_marker = None

    def _time(self, req, prob, ref_model, cand, res, dtype, seed):
        # A spare still creating its CUDA context stalls this process's syncs. By default
        # (MUSACODER_TIMING_QUIESCE=stop) the ones still starting are paused once the GPU is
        # ours and resumed after the timing. With =wait, they finish starting before the judge
        # asks for the GPU (0.7-1.8 s a candidate on the H100, each taken just before timing).
        if TIMING_QUIESCE == "wait":
            self.quiesce_into(res, "timing_spares_wait_s")
        self._await_quiet_gpu(res)
        paused = []
        try:
            if TIMING_QUIESCE == "stop":
                paused = self.pause_starting_spares(res)
            self._time_quiet(req, prob, ref_model, cand, res, dtype, seed)
        finally:
            self.resume_spares(paused)
            self._release_gate()

    def _time_quiet(self, req, prob, ref_model, cand, res, dtype, seed):
        torch = self.torch
        from .inputs import timing_sets
        from .timing import iterations_for
        from .transport import describe_value
        # As many input sets as the memory plan holds at once (each with its reference output).
        k = max(1, min(int(req.get("timing_input_sets", 3)), res["memory_plan"]["timing_sets"]))
        res["timing_sets_used"] = k
        budget = float(req.get("timing_budget_s", 2.0))
        self.reap()  # nothing of an earlier candidate is still running while we time
        sets = timing_sets(prob, seed, k, self.device, dtype)
        with torch.no_grad():
            ref_outs = [ref_model(*s) for s in sets]
        res["reference_time"] = self.reference_time(req, prob, ref_model, sets)
        share = cand.scratch
        descs = [[describe_value(x, share) for x in s] for s in sets]
        deadline = time.monotonic() + float(req.get("timing_timeout_s", 120))

        def left():
            return max(1.0, deadline - time.monotonic())
        # The candidate opens the sets here, once; the pilot and the timed runs reuse them, so
        # the wall clocks below hold no opening of IPC handles (its time is a diagnostic).
        warm = self._ask(cand, {"op": "warmup", "input_sets": descs}, left(), "timing")
        if isinstance(warm.get("open_s"), (int, float)):
            res["timing_open_s"] = round(float(warm["open_s"]), 4)
        cand.send({"op": "release"})
        # Spare processes still creating their CUDA contexts stall this process's syncs: paid
        # inside the pilot, they shrank the run to 22-58 iterations, and 4 of 24 honest tiny
        # kernels needed the repeat below (H100, 2026-11-25). The GPU is ours meanwhile.
        if TIMING_QUIESCE == "wait":
            self.quiesce_into(res, "timing_quiesce_s")
        # Pilot, then the judge fixes the iteration count from its own clock.
        t0 = time.perf_counter()
        self._ask(cand, {"op": "time", "input_sets": descs, "iters": 5}, left(), "timing")
        pilot_us = (time.perf_counter() - t0) * 1e6 / 5
        self._ask(cand, None, left(), "timing")  # its outputs
        cand.send({"op": "release"})
        iters = iterations_for(pilot_us, budget)
        # A busy host (spares starting, compilers) can stretch the judge's wall clock past the
        # consistency bound for an honest kernel; the measurement is repeated once before a
        # mismatch counts. A forged clock fails both times.
        for attempt in (0, 1):
            if attempt and TIMING_QUIESCE == "wait":
                # Spares started since (two honest native kernels failed both runs that way on
                # the H100): the repeat waits until they are ready too. (Paused ones stay so.)
                self.quiesce()
            inconsistent = self._timed_run(cand, descs, iters, k, ref_outs, req, share, left, res)
            if not inconsistent:
                return
            res["timing_retries"] = attempt + 1
        raise Verdict("timing_error", inconsistent, "timing_inconsistent")

    def _timed_run(self, cand, descs, iters, k, ref_outs, req, share, left, res):
        """One timed run: checks its outputs, fills the timing into res. Returns "" or, when
        the candidate's clock disagrees with the judge's, why."""
        from .compare import compare_outputs
        from .timing import center_us, clock_forged, stats
        from .transport import open_tensor
        t0 = time.perf_counter()
        rep = self._ask(cand, {"op": "time", "input_sets": descs, "iters": iters}, left(), "timing")
        wall_us = (time.perf_counter() - t0) * 1e6
        outs_rep = self._ask(cand, None, left(), "timing")
        times = rep.get("times_us")
        if not isinstance(times, list) or len(times) != iters or \
                not all(isinstance(x, (int, float)) and x > 0 and math.isfinite(x) for x in times):
            cand.send({"op": "release"})
            raise Verdict("timing_error", f"the timing run reported {len(times or [])} valid "
                          f"iterations, {iters} were asked for", "timing_inconsistent")
        try:
            for i, d in enumerate(outs_rep.get("outputs", [])):
                outs = [open_tensor(x, share).clone() for x in d]
                ok, detail = compare_outputs(ref_outs[i], outs, float(req["atol"]), float(req["rtol"]),
                                             extra_atol=res.get("extra_atol"))
                if not ok:
                    raise Verdict("timing_error", "outputs of timed runs do not match the "
                                  "reference (stale or cached results, or a kernel that writes outside "
                                  "its output)", "stale_result",
                                  mismatch=dict(detail, timing_set=i))
            if len(outs_rep.get("outputs", [])) != k:
                raise Verdict("timing_error", "timed runs returned no outputs", "stale_result")
        finally:
            cand.send({"op": "release"})
        claimed = sum(times)
        overhead = iters * self.calibration_us(cand)
        res["timing_overhead_us"] = overhead
        if clock_forged(claimed, wall_us, overhead):
            return (f"the candidate's clock says {claimed / 1e3:.1f} ms, the judge's "
                    f"{wall_us / 1e3:.1f} ms over {iters} iterations (overhead {overhead / 1e3:.1f} ms)")
        res["candidate_time"] = stats(times)
        res["timing_wall_us_per_iter"] = wall_us / iters
        res["speedup"] = center_us(res["reference_time"]) / center_us(res["candidate_time"])
        return ""

    def reference_time(self, req, prob, ref_model, sets, compile_mode=None):
        from .timing import time_adaptive
        key = hashlib.sha256(json.dumps(["timing-v2", prob.__mc_sha__, self.gpu, req.get("precision", "fp32"),
                                         self.torch.__version__, req.get("seed", 42),
                                         len(sets), compile_mode or "eager"]).encode()).hexdigest()
        path = os.path.join(self.cache_dir, "reference", key + ".json") if self.cache_dir else None
        if path and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        fn = ref_model
        if compile_mode:
            fn = self.torch.compile(ref_model, mode=None if compile_mode == "default" else compile_mode)
        with self.torch.no_grad():
            st, _ = time_adaptive(fn, sets, self.device, self.flusher,
                                  float(req.get("timing_budget_s", 2.0)),
                                  float(req.get("timing_target_rel_err", 0.01)))
        if path:
            write_json_atomic(path, st)
        return st

    def alone(self, fn, req):
        """fn(req) with the GPU to this judge (reference timings: probe, baseline)."""
        self.lock.acquire("exclusive")
        try:
            return fn(req)
        finally:
            self.lock.release()

    def baseline(self, req):
        from .inputs import timing_sets
        torch = self.torch
        dtype = getattr(torch, PRECISIONS[req.get("precision", "fp32")])
        seed = int(req.get("seed", 42))
        prob = self.problem(req["problem_path"])
        model, _ = self.reference_model(prob, seed, dtype)
        sets = timing_sets(prob, seed, int(req.get("timing_input_sets", 3)), self.device, dtype)
        out = {"gpu": self.gpu, "torch_version": torch.__version__,
               "eager": self.reference_time(req, prob, model, sets)}
        if req.get("compile"):
            try:
                out["compile"] = self.reference_time(req, prob, model, sets, "default")
            except Exception as e:
                out["compile_error"] = f"{type(e).__name__}: {e}"[:500]
        return out

    def probe(self, req):
        """Validity of a synthesized problem (musacoder synth): it runs, is deterministic, its
        output is finite, not degenerate, varies with the seed and along every axis; and its
        eager time on this device."""
        from .compare import degenerate, flatten_outputs
        from .inputs import make_inputs, timing_sets
        torch = self.torch
        f32 = torch.float32
        seed = int(req.get("seed", 42))
        out = {"runs": False}
        try:
            prob = self.problem(req["problem_path"])
            with torch.no_grad():
                model, _ = self.reference_model(prob, seed, f32)
                x = make_inputs(prob, seed, "native", self.device, f32)
                # The same model on the same inputs twice, without re-seeding in between:
                # randomness in forward (dropout, rand) shows here; seeded re-runs would hide it.
                a = flatten_outputs(model(*x))
                b = flatten_outputs(model(*x))
                other, _ = self.reference_model(prob, seed + 1, f32)
                c = flatten_outputs(other(*make_inputs(prob, seed + 1, "native", self.device, f32)))
        except Exception as e:  # the problem itself fails: a verdict on the problem, not infra
            out["error"] = f"{type(e).__name__}: {e}"[:1000]
            return out
        out["runs"] = True
        out["outputs"] = [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in a]

        def same(x, y, rtol, atol):
            if x.is_floating_point():
                return bool(torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
            return bool(torch.equal(x, y))
        out["finite"] = all(bool(torch.isfinite(t).all()) for t in a if t.is_floating_point())
        # Far below any comparison tolerance: catches randomness in forward (dropout, rand), not
        # the last-bit differences of atomics in some cuDNN algorithms.
        out["deterministic"] = all(same(x, y, 1e-5, 1e-6) for x, y in zip(a, b))
        out["varies_with_seed"] = any(not same(x, y, 1e-3, 1e-5) for x, y in zip(a, c))
        out["degenerate"] = bool(degenerate(a))
        constant_axes = []
        for i, t in enumerate(a):
            t64 = t.double()
            scale = float(t64.abs().max()) if t64.numel() else 0.0
            for ax in range(t.dim()):
                if t.shape[ax] < 2:
                    continue
                spread = (t64.amax(dim=ax) - t64.amin(dim=ax)).abs().max()
                if float(spread) <= 1e-6 * max(scale, 1e-30):
                    constant_axes.append([i, ax])
        out["constant_axes"] = constant_axes
        out["ill_conditioned"] = self._conditioning(prob, int(req.get("eval_seed", seed)),
                                                    int(req.get("trials", 5)),
                                                    float(req.get("atol", 1e-4)), float(req.get("rtol", 1e-4)))
        if req.get("timing", True) and out["finite"]:
            sets = timing_sets(prob, seed, int(req.get("timing_input_sets", 2)), self.device, f32)
            out["eager"] = self.reference_time(req, prob, model, sets)
        return out

    def _conditioning(self, prob, seed, trials, atol, rtol):
        """Whether fp32 can meet the tolerance at all: the judge's own trials (same seeds,
        input variants and parameter re-draws as evaluate()) are run in fp32 and in fp64.
        Where they disagree, an honest fp32 kernel that merely sums in another order fails too
        (long reductions over signed or scaled inputs, peaked softmaxes), so such a problem
        would reward luck, not kernels."""
        import copy
        from .compare import compare_outputs, flatten_outputs
        from .inputs import REDRAW_TRIALS, make_inputs, redraw_parameters, trial_schedule
        torch = self.torch
        bad = []
        try:
            m32, _ = self.reference_model(prob, seed, torch.float32)
        except Exception as e:
            return [{"variant": "native", "error": f"{type(e).__name__}: {e}"[:300]}]
        with torch.no_grad():
            for t, (tseed, variant) in enumerate(trial_schedule(seed, trials)):
                try:
                    if t in REDRAW_TRIALS:
                        redraw_parameters(m32, tseed)
                    m64 = copy.deepcopy(m32).to(torch.float64)
                    _, o32, variant = self.reference_run(m32, prob, tseed, variant, torch.float32)
                    o32 = flatten_outputs(o32)
                    o64 = flatten_outputs(m64(*make_inputs(prob, tseed, variant, self.device, torch.float64)))
                except Exception as e:
                    bad.append({"trial": t, "variant": variant, "error": f"{type(e).__name__}: {e}"[:300]})
                    continue
                ref = [r.to(torch.float32) if r.dtype == torch.float64 else r for r in o64]
                ok, detail = compare_outputs(ref, o32, atol, rtol)
                if not ok:
                    bad.append({"trial": t, "variant": variant, **{k: detail.get(k) for k in
                                ("kind", "max_abs_error", "max_rel_error", "mismatched", "total")}})
        return bad

    def health_check(self):
        """After a candidate crash: is the GPU still usable by a fresh context (ours)?"""
        torch = self.torch
        try:
            x = torch.ones(1 << 20, device=self.device)
            ok = float(x.sum()) == float(1 << 20)
            if self.cuda:
                torch.cuda.synchronize()
        except Exception:
            ok = False
        if not ok:
            raise Infra("GPU health check failed after a candidate crash")


def main():
    started = time.time()
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--harness-dir", required=True)
    ap.add_argument("--sandbox-exe", default="")
    ap.add_argument("--startup-timeout", type=float, default=180)
    ap.add_argument("--spares", type=int, default=3, help="warm candidate processes kept ready")
    ap.add_argument("--load-timeout", type=float, default=120)
    ap.add_argument("--trial-timeout", type=float, default=60)
    ap.add_argument("--gpu-lock", default="", help="the GPU's gate file, shared by its lanes' judges")
    ap.add_argument("--lanes", type=int, default=1, help="judges sharing this GPU")
    ap.add_argument("--standby", action="store_true",
                    help="no candidate process before the first candidate (a lane judging only while the others are held up)")
    ap.add_argument("--timing-gate", default="", help="timing waits while this file exists (a trainer's own work runs)")
    args = ap.parse_args()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints from problem code go to stderr, never into the reply stream
    try:
        judge = Judge(args, start_zygote(args))
        judge.out = out
    except Exception as e:
        out.write(json.dumps({"op": "hello", "ok": False, "error": f"{type(e).__name__}: {e}"}) + "\n")
        return 3
    out.write(json.dumps({"op": "hello", "ok": True, "gpu": judge.gpu,
                          "torch_version": judge.torch.__version__,
                          "startup_s": judge.startup_s}) + "\n")
    print(f"judge: at {time.time():.3f} ready (started {started:.3f}) {json.dumps(judge.startup_s)}",
          file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            args.load_timeout = float(req.get("load_timeout_s", args.load_timeout))
            args.trial_timeout = float(req.get("trial_timeout_s", args.trial_timeout))
            op = req.get("op")
            if op == "eval":
                t0 = time.monotonic()
                res = judge.evaluate(req)
                res["judge_s"] = time.monotonic() - t0
                # A timeline in judge.log (wall clock, to line up with the caller's).
                print(f"judge: at {time.time():.3f} eval {os.path.basename(req.get('problem_path', ''))} "
                      f"{res.get('verdict')} in {res['judge_s']:.3f} s", file=sys.stderr, flush=True)
                reply = {"id": rid, "ok": True, "result": res}
            elif op == "baseline":
                reply = {"id": rid, "ok": True, "result": judge.alone(judge.baseline, req)}
            elif op == "probe":
                reply = {"id": rid, "ok": True, "result": judge.alone(judge.probe, req)}
            elif op == "health":
                judge.health_check()
                reply = {"id": rid, "ok": True}
            else:
                reply = {"id": rid, "ok": False, "infra_error": f"unknown op {op!r}"}
        except Preempted as e:
            print(f"judge: at {time.time():.3f} preempted: {e}", file=sys.stderr, flush=True)
            reply = {"id": rid, "ok": False, "preempted": True, "infra_error": f"preempted: {e}"}
        except TimingDeferred as e:
            print(f"judge: at {time.time():.3f} timing deferred: {e}", file=sys.stderr, flush=True)
            reply = {"id": rid, "ok": False, "deferred": True, "passed_trials": e.passed,
                     "infra_error": f"timing deferred: {e}"}
        except Infra as e:
            reply = {"id": rid, "ok": False, "infra_error": str(e), "out_of_memory": e.out_of_memory,
                     "not_alone": e.not_alone}
            if judge.restart_reason:
                reply["restart"] = judge.restart_reason
            out.write(json.dumps(reply) + "\n")
            if "health check" in str(e):
                return 4  # the executor restarts us
            continue
        except Exception as e:
            reply = {"id": rid, "ok": False,
                     "infra_error": f"judge error: {type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()[-3000:]}
        if judge.restart_reason:  # the executor replaces this judge after this reply
            reply["restart"] = judge.restart_reason
        out.write(json.dumps(reply) + "\n")
    print(f"judge: at {time.time():.3f} input closed", file=sys.stderr, flush=True)
    judge.shutdown()
    print(f"judge: at {time.time():.3f} stopped", file=sys.stderr, flush=True)
    out.write(json.dumps({"op": "stopped"}) + "\n")  # the executor need not wait for our exit
    out.flush()
    return 0


if __name__ == "__main__":
    rc = main()
    # Nothing is left to write (replies and cached timings are on disk); skipping the
    # interpreter's teardown of torch saves ~0.5 s per `musacoder eval`.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
