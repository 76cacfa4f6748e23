"""Op graphs of KernelBench-format problems, for decontamination (musacoder synth).

Runs Model.forward on the meta device (no memory, no GPU) under a dispatch mode that records
every ATen op, so `F.relu`, `torch.relu` and `nn.ReLU` all read as `relu`, renamed variables
vanish, and the graph's wiring is kept. Views and copies are plumbing: they are skipped and
their outputs stand for their inputs.

    python -m musacoder_harness.opgraph FILE.py ...   -> one JSON line per file
"""
import hashlib
import importlib.util
import json
import math
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

PLUMBING = {
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "contiguous",
    "clone", "alias", "unsqueeze", "squeeze", "slice", "select", "detach", "_to_copy", "copy_",
    "empty", "empty_like", "zeros_like", "as_strided", "flatten", "unflatten", "lift_fresh",
    "_reshape_alias", "new_empty", "empty_strided", "zeros", "ones", "fill_", "lift_fresh_copy",
}
ALIASES = {
    "addmm": "matmul", "mm": "matmul", "bmm": "matmul", "matmul": "matmul", "baddbmm": "matmul",
    "linear": "matmul", "mv": "matmul", "convolution": "conv", "_convolution": "conv",
    "cudnn_convolution": "conv", "native_batch_norm": "batch_norm",
    "_native_batch_norm_legit": "batch_norm", "_native_batch_norm_legit_functional": "batch_norm",
    "native_layer_norm": "layer_norm", "native_group_norm": "group_norm", "_softmax": "softmax",
    "_log_softmax": "log_softmax", "amax": "max", "max": "max", "amin": "min", "min": "min",
    "_scaled_dot_product_flash_attention_for_cpu": "attention",
    "_scaled_dot_product_efficient_attention": "attention",
    "_scaled_dot_product_flash_attention": "attention", "scaled_dot_product_attention": "attention",
    "_scaled_dot_product_cudnn_attention": "attention", "div": "div", "true_divide": "div",
    "rsub": "sub", "max_pool2d_with_indices": "max_pool2d", "max_pool3d_with_indices": "max_pool3d",
    "linalg_vector_norm": "norm", "_fused_rms_norm": "rms_norm",
}


def canonical(name):
    name = name.rstrip("_") if name.endswith("_") and name not in ("copy_", "fill_") else name
    return ALIASES.get(name, name)


def _attr(a):
    if isinstance(a, float) and not math.isfinite(a):
        return str(a)  # JSON has no inf / nan
    if isinstance(a, (bool, int, float, str)) or a is None:
        return a
    if isinstance(a, (list, tuple)) and all(isinstance(x, (bool, int, float)) for x in a):
        return [_attr(x) for x in a]
    if isinstance(a, torch.dtype):
        return str(a)
    return None


class Tracer(TorchDispatchMode):
    def __init__(self, named):
        super().__init__()
        self.names = dict(named)  # id(tensor) -> "in0" / "p3"
        self.ops = []

    def _ref(self, t):
        return self.names.get(id(t), "const")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = canonical(func.overloadpacket.__name__)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        for a in args:
            if isinstance(a, (list, tuple)):
                tensors += [x for x in a if isinstance(x, torch.Tensor)]
        outs = out if isinstance(out, (list, tuple)) else [out]
        outs = [o for o in outs if isinstance(o, torch.Tensor)]
        if name in PLUMBING:
            src = self._ref(tensors[0]) if tensors else "const"
            for o in outs:
                self.names[id(o)] = src
            return out
        refs = [self._ref(t) for t in tensors]
        if refs and all(r.startswith("p") for r in refs) and func.overloadpacket.__name__.endswith("_"):
            return out  # a buffer's in-place update (batch norm's counter), not computation
        attrs = [_attr(a) for a in args if not isinstance(a, torch.Tensor)]
        attrs = [a for a in attrs if a is not None]
        if name == "conv" and len(args) >= 9:
            # convolution(input, weight, bias, stride, padding, dilation, transposed, ...): the
            # variant (rank, transposed) is part of what the op is.
            name = f"conv{'_transpose' if args[6] else ''}{len(args[3])}d"
        ref = f"v{len(self.ops)}"
        self.ops.append({"op": name, "args": refs, "attrs": attrs})
        for o in outs:
            self.names[id(o)] = ref
        return out


def trace(path):
    spec = importlib.util.spec_from_file_location("mc_trace_" + hashlib.sha1(path.encode()).hexdigest()[:10], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    with torch.device("meta"):
        init = mod.get_init_inputs()
        model = mod.Model(*init)
        inputs = mod.get_inputs()
    named = {}
    shapes = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            named[id(x)] = f"in{i}"
            shapes.append(list(x.shape))
        else:
            shapes.append(None)
    for j, (_, p) in enumerate(list(model.named_parameters()) + list(model.named_buffers())):
        named[id(p)] = f"p{j}"
    tracer = Tracer(named)
    with torch.no_grad(), tracer:
        model(*inputs)
    ops = tracer.ops
    key = hashlib.sha256(json.dumps(ops, sort_keys=True).encode()).hexdigest()[:16]
    return {"ops": ops, "input_shapes": shapes, "graph_key": key,
            "op_sequence": [o["op"] for o in ops]}


def main(argv):
    for path in argv:
        try:
            row = {"path": path, "ok": True, **trace(path)}
        except BaseException as e:  # a benchmark file that cannot run on meta: reported, not fatal
            row = {"path": path, "ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
