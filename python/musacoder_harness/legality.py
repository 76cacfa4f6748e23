"""Run-time legality checks inside the candidate process (backing up the static rules):
which ATen ops forward dispatches, which GPU kernels it launches and on which streams."""
import re
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Plumbing that forward may use: allocation, views, layout changes and copies.
ALLOWED_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias", "permute", "transpose",
    "t", "expand", "expand_as", "squeeze", "unsqueeze", "contiguous", "clone", "copy_", "_to_copy",
    "to", "detach", "alias", "as_strided", "select", "slice", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "flatten", "unflatten", "view_as", "resize_", "set_", "lift_fresh",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "size", "stride",
    "numel", "dim", "item", "_local_scalar_dense", "is_same_size", "empty_permuted", "record_stream",
    "_has_compatible_shallow_copy_type", "movedim", "swapaxes", "squeeze_", "unsqueeze_", "t_",
    "transpose_", "as_strided_", "detach_",
}

# Kernels from vendor libraries (not the candidate's own code).
LIBRARY_KERNEL = re.compile(r"gemm|xmma|cublas|cutlass|cudnn|conv|winograd|implicit_|fft|"
                            r"nvjet|splitKreduce|magma|cusparse|cusolver", re.I)
# Kernels from PyTorch itself (plumbing such as fills and copies is fine; compute is caught by
# the dispatch monitor).
TORCH_KERNEL = re.compile(r"at::native|at_cuda_detail|c10::|\bcub::|triton_|CatArray|"
                          r"elementwise_kernel|vectorized_|unrolled_|reduce_kernel", re.I)


class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def op_name(func):
    packet = func.overloadpacket
    ns = getattr(packet, "__module__", "") or ""
    name = packet.__name__
    return name, ("aten" if "aten" in ns or ns.endswith("ops.aten") else ns)


def forbidden_ops(ops):
    bad = []
    for f in ops:
        name, ns = op_name(f)
        if ns == "aten" and name not in ALLOWED_OPS:
            bad.append(f"aten::{name}")
    return sorted(set(bad))


def profile_kernels(run):
    """Runs `run` under the CUDA profiler; returns [(kernel name, stream id)]."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels = []
    try:
        for e in prof.profiler.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CUDA and "emcpy" not in e.name() \
                    and "emset" not in e.name():
                kernels.append((e.name(), int(e.device_resource_id())))
    except Exception:  # older/newer kineto API: fall back to names only
        for e in prof.events():
            if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
                kernels.append((e.name, -1))
    return kernels


def classify_kernels(kernels, allow):
    own = [k for k, _ in kernels if not TORCH_KERNEL.search(k) and not LIBRARY_KERNEL.search(k)]
    library = [k for k, _ in kernels if LIBRARY_KERNEL.search(k) and not TORCH_KERNEL.search(k)]
    if "cublas" in allow or "cudnn" in allow:
        library = []
    streams = sorted({s for _, s in kernels if s >= 0})
    return own, library, streams


def python_threads():
    return threading.active_count()
