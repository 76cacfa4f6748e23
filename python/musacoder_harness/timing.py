"""Times one callable the same way for the reference (in the judge) and for a candidate (in its
own process): L2 flushed before every iteration, device-wide completion (work on any stream of
the process is waited for), rotation over several input sets, adaptive repetition."""
import math
import statistics
import time

import torch

# Timing primitives captured when the harness is imported, before any candidate code runs:
# methods of immutable builtin types cannot be monkeypatched from Python, and rebinding
# torch.cuda.Event or torch.cuda.synchronize later does not reach these references.
if torch.cuda.is_available() or hasattr(torch._C, "_CudaEventBase"):
    _EventBase = torch._C._CudaEventBase
    _event_record = _EventBase.record
    _event_elapsed = _EventBase.elapsed_time
    _Event = torch.cuda.Event
    _current_stream = torch.cuda.current_stream
    _device_sync = torch._C._cuda_synchronize
_tensor_zero = torch._C.TensorBase.zero_


class L2Flusher:
    def __init__(self, device):
        self.device = torch.device(device)
        if self.device.type == "cuda":
            l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
            # At least 256 MB (as do_bench): the flush also gives the host time to enqueue the
            # timed call before the GPU reaches the start event.
            self.buf = torch.empty(max(2 * l2, 256 << 20), dtype=torch.uint8, device=self.device)
        else:
            self.buf = None

    def flush(self):
        if self.buf is not None:
            _tensor_zero(self.buf)


def stats(times_us):
    s = sorted(times_us)
    n = len(s)

    def pct(p):
        return s[min(n - 1, max(0, int(round(p * (n - 1)))))]

    mean = statistics.fmean(s)
    return {"median_us": statistics.median(s), "mean_us": mean, "min_us": s[0], "max_us": s[-1],
            "std_us": statistics.pstdev(s) if n > 1 else 0.0,
            "p10_us": pct(0.10), "p90_us": pct(0.90), "n": n}


def time_iterations(fn, input_sets, device, flusher, iters, prepare=None):
    """Runs exactly `iters` timed calls, rotating over input_sets. Returns (times_us, last):
    last[k] is the output of the last call on input set k, so timed runs are checked too.

    GPU time per call is taken between events on the current stream, with the L2 flush
    enqueued before each start event: while the GPU flushes, the host enqueues the call, so
    launch latency and host jitter stay out of the number (as in triton's do_bench). Work on
    other streams is not between the events; side streams are rejected by the legality check
    and any hidden work shows in the judge's wall clock. `prepare(inputs)`, when given, runs
    before the start event and returns the callable to time (output allocation stays out)."""
    cuda = torch.device(device).type == "cuda"
    k = len(input_sets)
    times, last = [], [None] * k
    if cuda:
        starts = [_Event(enable_timing=True) for _ in range(iters)]
        ends = [_Event(enable_timing=True) for _ in range(iters)]
        stream = _current_stream()
        for i in range(iters):
            call = prepare(input_sets[i % k]) if prepare else (lambda s=input_sets[i % k]: fn(*s))
            flusher.flush()
            _event_record(starts[i], stream)
            last[i % k] = call()
            _event_record(ends[i], stream)
        _device_sync()  # device-wide: every stream of this process has finished
        times = [_event_elapsed(s, e) * 1000.0 for s, e in zip(starts, ends)]
    else:
        for i in range(iters):
            t0 = time.perf_counter()
            last[i % k] = fn(*input_sets[i % k])
            times.append((time.perf_counter() - t0) * 1e6)
    return times, last


def warm_up(fn, input_sets, device, iters=3):
    for i in range(max(iters, len(input_sets))):
        fn(*input_sets[i % len(input_sets)])
    _sync(torch.device(device).type == "cuda")


def time_adaptive(fn, input_sets, device, flusher, budget_s=2.0, target_rel_err=0.01,
                  min_iters=10, max_iters=1000):
    """For trusted callables (the reference): repeats in chunks until the mean's relative
    standard error is below target_rel_err or the budget is spent. Returns (stats, last)."""
    warm_up(fn, input_sets, device)
    times, last = [], None
    t_begin = time.perf_counter()
    chunk = max(min_iters, len(input_sets))
    while True:
        t, last = time_iterations(fn, input_sets, device, flusher, chunk)
        times += t
        n = len(times)
        mean = statistics.fmean(times)
        sem = statistics.pstdev(times) / math.sqrt(n) if n > 1 else math.inf
        if n >= max_iters or time.perf_counter() - t_begin > budget_s or \
                (mean > 0 and sem / mean < target_rel_err):
            break
    return stats(times), last


def _sync(cuda):
    if cuda:
        torch.cuda.synchronize()
