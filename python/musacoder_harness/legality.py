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
LIBRARY_KERNEL = re.compile(
    r"\b(cublas\w*|cutlass::|cudnn::|cudnn_\w+|nvjet_\w+|sm\d+_xmma\w*|xmma_\w+|"
    r"(ampere|volta|turing|hopper|maxwell|sm\d+)_\w*(gemm|conv)\w*|gemv2[NT]_kernel|gemvNSP\w*|"
    r"gemmSN_\w+|gemmk1_kernel|splitKreduce_kernel|implicit_convolve_\w+|magma_\w+|"
    r"cusparse\w*|cusolver\w*|vector_fft|regular_fft|fft_\w+_kernel)")
# Kernels from PyTorch itself (plumbing such as fills and copies is fine; compute is caught by
# the dispatch monitor).
TORCH_KERNEL = re.compile(r"\bat::|at_cuda_detail|\bc10::|\bcub::|\bthrust::|\btriton_")


class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    @classmethod
    def _should_skip_dynamo(cls):
        # Not wrapped in torch._disable_dynamo: its first call would import torch._dynamo
        # (~6 s on the GPU machines) in every candidate process, for a mode never compiled.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def op_name(func):
    """("add", "aten") for aten::add.Tensor."""
    qualified = func._schema.name  # "aten::add"
    ns, _, name = qualified.partition("::")
    return name, ns


def forbidden_ops(ops):
    bad = []
    for f in ops:
        name, ns = op_name(f)
        if ns == "aten" and name not in ALLOWED_OPS:
            bad.append(f"aten::{name}")
    return sorted(set(bad))


def profile_kernels(run):
    """Runs `run` under the CUDA profiler; returns [(kernel name, stream id)].

    Through torch.autograd.profiler directly: torch.profiler.profile's start checks
    hasattr(torch, "_inductor"), which imports inductor, dynamo, sympy and triton (~6 s on the
    GPU machines) in every candidate process."""
    with torch.autograd.profiler.profile(use_cpu=True, use_device="cuda", use_kineto=True) as prof:
        run()
        torch.cuda.synchronize()
    kernels = []
    try:
        for e in prof.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CUDA and "emcpy" not in e.name() \
                    and "emset" not in e.name():
                kernels.append((e.name(), int(e.device_resource_id())))
    except Exception:  # older/newer kineto API: fall back to names only
        for e in prof.function_events:
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


class ThreadStarts:
    """Counts Python threads started while installed (a background thread may already have
    finished by the time forward returns, so a live count is not enough)."""

    def __init__(self):
        self.count = 0
        self._orig = threading.Thread.start
        starts = self

        def start(thread, *a, **k):
            starts.count += 1
            return starts._orig(thread, *a, **k)
        threading.Thread.start = start
