"""The sandboxed candidate process: loads ONE candidate and runs it on inputs the judge shares.

It never sees reference outputs, does no comparison and owns no clock the judge trusts: its
timings are cross-checked against the judge's wall clock. Started by the judge through
`musacoder sandbox-exec` (no network, writes only under its scratch folder).
Channel: length-prefixed JSON on two inherited file descriptors (protocol.py).
"""
import argparse
import ctypes
import hashlib
import importlib.machinery
import importlib.util
import math
import os
import sys
import time
import traceback

from . import protocol


def source_key(name, cpp_sources, cuda_sources, functions, extra_cflags, extra_cuda_cflags,
               extra_ldflags, extra_include_paths, with_cuda):
    """Same digest as LoadInlineCall::source_key() in src/eval/python_source.cc."""
    def as_list(v):
        if v is None:
            return []
        if isinstance(v, str):
            return [v]
        if isinstance(v, dict):
            return list(v.keys())
        return [str(x) for x in v]
    cpp, cuda = as_list(cpp_sources), as_list(cuda_sources)
    wc = bool(cuda) if with_cuda is None else bool(with_cuda)
    parts = ["v1", name, "\x1f".join(cpp), "\x1f".join(cuda), "\x1f".join(as_list(functions)),
             "\x1f".join(as_list(extra_cflags)), "\x1f".join(as_list(extra_cuda_cflags)),
             "\x1f".join(as_list(extra_ldflags)), "\x1f".join(as_list(extra_include_paths)),
             "1" if wc else "0"]
    return hashlib.sha256("\x1e".join(parts).encode()).hexdigest()


class MCTensor(ctypes.Structure):  # include/musacoder/native_abi.h: mc_tensor
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8),
                ("on_host", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class Candidate:
    def __init__(self, device, share_dir, scratch):
        import torch
        from . import timing
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.share_dir = share_dir
        self.scratch = scratch
        self.flusher = timing.L2Flusher(self.device)
        self.model = None
        self.format = None
        self.compile_path = "pool"
        self.held = None
        self.timing_sets = None  # (descriptors, opened input sets): the timing phase's inputs
        self.prepare = None  # native format: per-call setup kept out of the timed region
        self.module = None  # the solution's module once imported (import_solution, load)
        from .legality import ThreadStarts
        self.thread_starts = ThreadStarts()  # installed before any candidate code runs

    # ---- loading ----------------------------------------------------------------------
    def load(self, msg):
        torch = self.torch
        from .inputs import seed_all
        from .transport import dtype_from_name, open_value
        dtype = dtype_from_name(msg["dtype"])
        self.format = msg["format"]
        self.dtype = dtype
        if self.format == "native":
            self._load_native(msg)
        else:
            module = self.module if self.module is not None else self._import(msg)
            init_inputs = [open_value(v, self.share_dir) for v in msg.get("init_inputs", [])]
            seed_all(int(msg["seed"]))  # same seed as the reference: same initial weights
            with torch.device(self.device):
                model = module.ModelNew(*init_inputs)
            model = model.to(self.device)
            if dtype != torch.float32:
                model = model.to(dtype)
            self.model = model
        self.reserve_bytes = int(msg.get("reserve_bytes", 0))
        self._reserve_poisoned_memory(self.reserve_bytes)
        reply = {"op": "loaded", "compile_path": self.compile_path}
        if self.format != "native":  # what parameter re-draws can reach (params.py)
            from .params import tensor_specs
            reply["param_specs"] = [[n, list(s), d] for n, s, d in tensor_specs(self.model)]
        return reply

    def import_solution(self, msg):
        """The solution's module alone (its load_inline calls, ModelNew defined), nothing built
        on the device: what the judge asks first, sharing the GPU, of a problem it judges alone
        (an answer that cannot even be imported never waits for the GPU to itself). `load`
        then builds ModelNew from this module."""
        self._import(msg)
        return {"op": "imported", "compile_path": self.compile_path}

    def _import(self, msg):
        self._install_fast_load_inline(msg.get("artifacts", {}))
        spec = importlib.util.spec_from_file_location("candidate_solution", msg["solution_path"])
        module = importlib.util.module_from_spec(spec)
        sys.modules["candidate_solution"] = module
        spec.loader.exec_module(module)
        if not hasattr(module, "ModelNew"):
            raise RuntimeError("the solution defines no ModelNew")
        self.module = module
        return module

    def _install_fast_load_inline(self, artifacts):
        import torch.utils.cpp_extension as ce
        original = ce.load_inline
        cand = self

        def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                        extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                        build_directory=None, verbose=False, with_cuda=None, **kwargs):
            key = source_key(name, cpp_sources, cuda_sources, functions, extra_cflags,
                             extra_cuda_cflags, extra_ldflags, extra_include_paths, with_cuda)
            path = artifacts.get(key)
            if path and path.endswith(".shim.so"):
                return cand._load_shim_module(name, path, functions, artifacts)
            if path:
                loader = importlib.machinery.ExtensionFileLoader(name, path)
                spec = importlib.util.spec_from_file_location(name, path, loader=loader)
                mod = importlib.util.module_from_spec(spec)
                loader.exec_module(mod)
                return mod
            # Not prebuilt (arguments the compile pool could not read statically): build here.
            cand.compile_path = "runtime"
            build = os.path.join(cand.scratch, "ext", key[:16])
            os.makedirs(build, exist_ok=True)
            return original(name, cpp_sources, cuda_sources=cuda_sources, functions=functions,
                            extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                            extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
                            build_directory=build, verbose=False, with_cuda=with_cuda, **kwargs)

        ce.load_inline = load_inline

    def _load_shim_module(self, name, path, functions, artifacts):
        """A module built against the torch shim: its functions are called through the bridge
        (src/eval/torch_shim/bridge.cc), which the compile pool ships as an artifact too."""
        import types
        bridge_path = artifacts.get("mc_shim_bridge")
        if not bridge_path:
            raise RuntimeError("a shim-built module arrived without its bridge")
        bridge = sys.modules.get("mc_shim_bridge")
        if bridge is None:
            loader = importlib.machinery.ExtensionFileLoader("mc_shim_bridge", bridge_path)
            spec = importlib.util.spec_from_file_location("mc_shim_bridge", bridge_path, loader=loader)
            bridge = importlib.util.module_from_spec(spec)
            loader.exec_module(bridge)
            sys.modules["mc_shim_bridge"] = bridge
        if isinstance(functions, str):
            names = [functions]
        elif isinstance(functions, dict):
            names = list(functions.keys())
        else:
            names = [str(f) for f in (functions or [])]
        mod = types.ModuleType(name)
        mod.__file__ = path
        for fn_name, fn in bridge.load(path, names).items():
            setattr(mod, fn_name, fn)
        return mod

    def _load_native(self, msg):
        from .transport import open_tensor
        torch = self.torch
        lib = ctypes.CDLL(msg["so_path"])
        fn = lib.mc_forward
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(MCTensor), ctypes.c_int, ctypes.POINTER(MCTensor),
                       ctypes.c_int, ctypes.c_void_p]
        self.native_fn = fn
        self.native_params = [open_tensor(d, self.share_dir) for d in msg.get("params", [])]
        self.output_specs = msg["output_specs"]
        codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3,
                 torch.int32: 4, torch.int64: 5, torch.int8: 6, torch.uint8: 7, torch.bool: 8,
                 torch.int16: 9}
        from .transport import dtype_from_name

        def to_mc(t, keep):
            m = MCTensor()
            if isinstance(t, torch.Tensor):
                m.data = t.data_ptr()
                m.dtype = codes[t.dtype]
                m.ndim = t.dim()
                for i, (s, st) in enumerate(zip(t.shape, t.stride())):
                    m.shape[i], m.strides[i] = s, st
                m.on_host = 0 if t.is_cuda else 1
            else:  # scalar inputs travel as 0-d host values
                h = torch.tensor(t, dtype=torch.float64 if isinstance(t, float) else torch.int64)
                keep.append(h)
                m.data, m.dtype, m.ndim, m.on_host = h.data_ptr(), codes[h.dtype], 0, 1
            return m

        def prepare(inputs, guard=False):
            """Argument structs and fresh NaN-filled outputs; returns the call to time. With
            `guard` (correctness runs), each output is followed by a poisoned guard zone that
            the call checks afterwards: a kernel that writes past the end of its output (sizes
            hard-coded larger than the inputs', a grid without a bounds check) fails with a
            runtime error that says so. Unguarded, such a write lands in whatever memory comes
            next: harmless in one run, it corrupted an earlier timed run's held output on the
            H100 and read as a stale-result hack."""
            keep = []
            args = list(inputs) + self.native_params
            arr_in = (MCTensor * max(1, len(args)))(*[to_mc(a, keep) for a in args])
            outs, guards = [], []
            for spec in self.output_specs:
                dt = dtype_from_name(spec["dtype"])
                if guard:
                    n = math.prod(spec["shape"])
                    g = guard_elements(n, dt.itemsize)
                    buf = torch.empty(n + g, dtype=dt, device=self.device)
                    self._poison_tensor(buf)
                    o = buf[:n].view(spec["shape"])
                    guards.append(buf[n:])
                else:
                    o = torch.empty(spec["shape"], dtype=dt, device=self.device)
                    self._poison_tensor(o)
                outs.append(o)
            arr_out = (MCTensor * max(1, len(outs)))(*[to_mc(o, keep) for o in outs])
            stream = torch.cuda.current_stream(self.device).cuda_stream if self.cuda else None
            n_args, n_outs, fn = len(args), len(outs), self.native_fn

            def call():
                rc = fn(arr_in, n_args, arr_out, n_outs, stream)
                if rc != 0:
                    raise RuntimeError(f"mc_forward returned {rc}")
                keep.clear()
                for k, g in enumerate(guards):
                    if bool((g.view(torch.uint8) != 0xFF).any()):
                        spec = self.output_specs[k]
                        raise RuntimeError(
                            f"out-of-bounds write: the kernel wrote past the end of output {k} "
                            f"(shape {spec['shape']}, {spec['dtype']}). Check the sizes it computes "
                            f"with against the inputs' shapes, and the bounds check of its grid")
                return outs[0] if len(outs) == 1 else tuple(outs)
            return call

        self.prepare = prepare
        self.model = lambda *inputs: prepare(inputs, guard=True)()

    # ---- poisoning: fresh output memory holds NaN, so unwritten elements fail ---------------
    def _poison_tensor(self, t):
        if t.numel():
            t.view(-1).view(self.torch.uint8).fill_(0xFF)

    def _reserve_poisoned_memory(self, nbytes):
        if not self.cuda or nbytes <= 0:
            return
        torch = self.torch
        free, _ = torch.cuda.mem_get_info(self.device)
        nbytes = min(nbytes, int(free * 0.4))
        if nbytes > 0:
            block = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            block.fill_(0xFF)
            del block  # stays in the caching allocator: later allocations carve from it

    def close(self, msg):
        """Before this process is killed: every tensor it opened from the judge is let go, so the
        judge's CUDA IPC counters drop and it can free them (Judge.give_back_memory)."""
        import gc
        self.held = self.timing_sets = None
        gc.collect()
        return {"op": "closed"}

    def trim(self, msg):
        """The judge needs device memory this process's allocator keeps cached (its float64 reference or
        its copy of our outputs, at published sizes): the cache goes back to the driver, then
        the poisoned reserve is made again, as at load, so that fresh output memory still
        reads NaN, unless `keep_reserve` is false (the trials are over and this process waits
        for the GPU to itself: another lane may need the room meanwhile). Live tensors
        (outputs not yet released) stay."""
        freed = 0
        if self.cuda:
            torch = self.torch
            before = torch.cuda.memory_reserved(self.device)
            torch.cuda.empty_cache()
            freed = before - torch.cuda.memory_reserved(self.device)
            if msg.get("keep_reserve", True):
                self._reserve_poisoned_memory(getattr(self, "reserve_bytes", 0))
        return {"op": "trimmed", "freed_bytes": int(freed)}

    def _poison_cached_blocks(self):
        if not self.cuda:
            return
        torch = self.torch
        sizes = []
        for seg in torch.cuda.memory_snapshot():
            if seg.get("device") != self.device.index:
                continue
            for b in seg.get("blocks", []):
                if b.get("state") == "inactive":
                    sizes.append(int(b["size"]))
        held = []
        for s in sorted(sizes, reverse=True):
            t = torch.empty(s, dtype=torch.uint8, device=self.device)
            t.fill_(0xFF)
            held.append(t)
        del held

    def _describe_output(self, o):
        from .transport import describe
        try:
            return describe(o.detach(), self.share_dir)
        except RuntimeError:  # an output that aliases a tensor received from the judge
            return describe(o.detach().clone(), self.share_dir)

    # ---- running --------------------------------------------------------------------------
    def _load_params(self, params):
        from .transport import open_tensor
        torch = self.torch
        if self.format == "native":
            self.native_params = [open_tensor(d, self.share_dir) for d in params]
            return 0
        state = dict(self.model.named_parameters())
        state.update(dict(self.model.named_buffers()))
        loaded = 0
        with torch.no_grad():
            for name, d in params.items():
                if name in state and list(state[name].shape) == list(d["shape"]):
                    state[name].copy_(open_tensor(d, self.share_dir))
                    loaded += 1
        return loaded

    def run(self, msg):
        from . import legality
        from .compare import flatten_outputs
        from .transport import open_value
        torch = self.torch
        parts, t0 = {}, time.monotonic()  # reported, so a slow trial can be traced

        def part(name):
            nonlocal t0
            now = time.monotonic()
            parts[name] = now - t0
            t0 = now
        inputs = [open_value(d, self.share_dir) for d in msg["inputs"]]
        params_loaded = None
        if msg.get("params") is not None:
            params_loaded = self._load_params(msg["params"])
        part("open")
        self._poison_cached_blocks()
        part("poison")
        report = {}
        threads_before = self.thread_starts.count
        if msg.get("monitor") and self.format != "native":
            rec = legality.OpRecorder()
            with torch.no_grad(), rec:
                out = self.model(*inputs)
            report["forbidden_ops"] = legality.forbidden_ops(rec.ops)
        else:
            with torch.no_grad():
                out = self.model(*inputs)
        if self.cuda:
            torch.cuda.synchronize(self.device)
        part("forward")
        if msg.get("monitor") and self.cuda:
            def again():
                with torch.no_grad():
                    self.model(*inputs)
            own, library, streams = legality.classify_kernels(
                legality.profile_kernels(again), set(msg.get("allow", [])))
            report.update(own_kernels=own[:20], library_kernels=library[:20], streams=streams)
            part("profile")
        report["new_threads"] = self.thread_starts.count - threads_before
        outs = flatten_outputs(out)
        descs = [self._describe_output(o) for o in outs]
        self.held = (out, inputs)
        part("describe")
        return {"op": "ran", "outputs": descs, "legality": report, "params_loaded": params_loaded,
                "tuple": isinstance(out, (tuple, list)), "parts_s": parts}

    def _open_timing_sets(self, descs):
        """(input sets, seconds spent opening them). The timing phase's sets are opened once,
        at warm-up, and the pilot and timed runs that name the same descriptors reuse them:
        the judge's wall clock of a timed run bounds the candidate's claimed times, and opening
        CUDA IPC handles is a fixed cost outside any iteration (a median 6.5 ms and up to 49 ms
        per trial's inputs on the H100). Paid inside a run of 10 tiny-kernel iterations, it
        made 10 of 400 honest teacher kernels read as forged clocks."""
        from .transport import open_value
        if self.timing_sets is not None and self.timing_sets[0] == descs:
            return self.timing_sets[1], 0.0
        t0 = time.monotonic()
        sets = [[open_value(d, self.share_dir) for d in s] for s in descs]
        self.timing_sets = (descs, sets)
        return sets, time.monotonic() - t0

    def warmup(self, msg):
        from .timing import warm_up
        sets, opened_s = self._open_timing_sets(msg["input_sets"])
        with self.torch.no_grad():
            warm_up(self.model, sets, self.device, int(msg.get("iters", 3)))
        return {"op": "warm", "open_s": opened_s}

    def time(self, msg, out_fd):
        from .compare import flatten_outputs
        from .timing import time_iterations
        sets, opened_s = self._open_timing_sets(msg["input_sets"])
        with self.torch.no_grad():
            times, last = time_iterations(self.model, sets, self.device, self.flusher,
                                          int(msg["iters"]), prepare=self.prepare)
        protocol.send(out_fd, {"op": "timed", "times_us": times, "open_s": opened_s})
        descs = [[self._describe_output(o) for o in flatten_outputs(l)] for l in last]
        self.held = last
        return {"op": "timed_outputs", "outputs": descs}

    def calibrate(self, msg):
        from .timing import time_iterations
        times, _ = time_iterations(lambda: None, [[]], self.device, self.flusher,
                                   int(msg.get("iters", 30)))
        return {"op": "calibrated", "times_us": times}


# Guard zone after each native output in correctness runs: as many bytes as the output, at
# least 4 KiB, at most 64 MiB (a write further out is not seen).
GUARD_MIN_BYTES = 4 << 10
GUARD_MAX_BYTES = 64 << 20


def guard_elements(n, itemsize):
    """Elements of the guard zone after an output of n elements of itemsize bytes."""
    nbytes = min(max(n * itemsize, GUARD_MIN_BYTES), GUARD_MAX_BYTES)
    return max(1, nbytes // itemsize)


def warm_legality_tools(torch, device):
    """The run-time legality checks start CUPTI (the profiler) and set up the dispatch monitor on
    first use. Paid here, while this process waits as a spare and before any candidate code
    exists in it, instead of inside the candidate's first trial. (Neither imports torch._dynamo
    any more: legality.py avoids both paths that did, ~6 s per process on the GPU machines.)"""
    from . import legality
    x = torch.ones(4, device=device)
    with torch.no_grad(), legality.OpRecorder():
        x.add(1)
    if str(device).startswith("cuda"):
        legality.profile_kernels(lambda: x.add(1))


def serve(in_fd, out_fd, device, share_dir, scratch, t0):
    """Prepares this process for a candidate and answers the judge until it says exit. Runs in
    a freshly started process (main) or in a child forked by the zygote (zygote.py), where
    torch and the legality tools are already imported."""
    parts = {}  # where this process's start went (the judge logs it)
    mark = time.monotonic()

    def part(name):
        nonlocal mark
        now = time.monotonic()
        parts[name] = round(now - mark, 4)
        mark = now
    import torch
    import torch.utils.cpp_extension  # noqa: F401  (load_inline's module: imported while spare)
    part("imports")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.zeros(1, device=device)  # create the context now, not inside a trial
    part("context")
    cand = Candidate(device, share_dir, scratch)
    part("flusher")
    warm_legality_tools(torch, device)
    part("legality_tools")
    protocol.send(out_fd, {"op": "ready", "pid": os.getpid(),
                           "startup_s": time.monotonic() - t0, "parts_s": parts,
                           "sandbox": os.environ.get("MUSACODER_SANDBOX", "none")})
    handlers = {"import": cand.import_solution, "load": cand.load, "run": cand.run, "warmup": cand.warmup,
                "calibrate": cand.calibrate, "trim": cand.trim, "close": cand.close}
    while True:
        try:
            msg = protocol.recv(in_fd)
        except protocol.ChannelClosed:
            return
        op = msg.get("op")
        if op == "exit":
            return
        if op == "release":
            cand.held = None
            continue
        try:
            if op == "time":
                reply = cand.time(msg, out_fd)
            elif op in handlers:
                reply = handlers[op](msg)
            else:
                reply = {"op": "error", "error": f"unknown op {op!r}"}
        except BaseException as e:  # report, never die silently: the judge decides
            tb = traceback.format_exc()
            reply = {"op": "error", "error": f"{type(e).__name__}: {e}", "traceback": tb[-4000:]}
        protocol.send(out_fd, reply)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in-fd", type=int, required=True)
    ap.add_argument("--out-fd", type=int, required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--share-dir", required=True)
    ap.add_argument("--scratch", required=True)
    args = ap.parse_args()
    os.dup2(2, 1)  # whatever the candidate prints goes to the log, never into the channel
    serve(args.in_fd, args.out_fd, args.device, args.share_dir, args.scratch, time.monotonic())


if __name__ == "__main__":
    main()
