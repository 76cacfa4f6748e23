"""Decides whether a candidate's outputs match the reference (runs in the judge only)."""
import math

import torch


def flatten_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        flat = []
        for o in out:
            flat.extend(flatten_outputs(o))
        return flat
    if isinstance(out, (int, float, bool)):
        return [torch.tensor(out)]
    raise TypeError(f"output of type {type(out).__name__} is not a tensor or tuple of tensors")


def scale_tolerance(dtype):
    """Bound on ||out - ref|| / ||ref||: holds even where atol exceeds every output (a softmax
    over a long row), so a constant kernel cannot pass on the absolute tolerance alone."""
    return 1e-3 if dtype in (torch.float32, torch.float64) else 2e-2


def compare_outputs(ref, out, atol, rtol):
    """Returns (ok, details). details describes the first mismatch for feedback."""
    refs, outs = flatten_outputs(ref), flatten_outputs(out)
    if len(refs) != len(outs):
        return False, {"kind": "output_count", "expected": len(refs), "got": len(outs)}
    for i, (r, o) in enumerate(zip(refs, outs)):
        if not isinstance(o, torch.Tensor):
            return False, {"kind": "type", "output": i, "got": type(o).__name__}
        if tuple(o.shape) != tuple(r.shape):
            return False, {"kind": "shape", "output": i, "expected": list(r.shape),
                           "got": list(o.shape)}
        if o.dtype != r.dtype:
            return False, {"kind": "dtype", "output": i, "expected": str(r.dtype),
                           "got": str(o.dtype)}
        if o.device != r.device:
            o = o.to(r.device)
        if not r.is_floating_point() and not r.is_complex():
            bad = o != r
            if bool(bad.any()):
                return False, _first(i, bad, r, o, "value")
            continue
        r64, o64 = r.double(), o.double()
        both_nan = torch.isnan(r64) & torch.isnan(o64)
        diff = (o64 - r64).abs()
        diff = torch.where(both_nan, torch.zeros_like(diff), diff)
        bound = atol + rtol * r64.abs()
        bad = ~(diff <= bound) & ~both_nan  # NaN in diff counts as bad
        bad |= torch.isnan(o64) & ~torch.isnan(r64)
        if bool(bad.any()):
            return False, _first(i, bad, r64, o64, "tolerance", diff, r64)
        ref_norm = float(torch.linalg.vector_norm(torch.nan_to_num(r64)))
        err_norm = float(torch.linalg.vector_norm(torch.nan_to_num(diff)))
        tol = scale_tolerance(r.dtype)
        if ref_norm > 0 and err_norm / ref_norm > tol:
            d = _first(i, diff == diff.max(), r64, o64, "relative_norm", diff, r64)
            d["relative_norm_error"] = err_norm / ref_norm
            d["relative_norm_tolerance"] = tol
            return False, d
    return True, None


def _first(i, bad, r, o, kind, diff=None, r64=None):
    flat = bad.reshape(-1).nonzero()
    j = int(flat[0]) if flat.numel() else 0
    idx = list(_unravel(j, r.shape))
    d = {"kind": kind, "output": i, "index": idx, "mismatched": int(bad.sum()),
         "total": int(bad.numel()),
         "expected": _num(r.reshape(-1)[j]), "got": _num(o.reshape(-1)[j])}
    if diff is not None:
        finite = torch.nan_to_num(diff, nan=math.inf)
        d["max_abs_error"] = _num(finite.max())
        rel = finite / r64.abs().clamp_min(1e-12)
        d["max_rel_error"] = _num(rel.max())
    return d


def _unravel(j, shape):
    out = []
    for s in reversed(list(shape)):
        out.append(j % s if s else 0)
        j = j // s if s else 0
    return reversed(out)


def _num(x):
    v = x.item()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return v


def degenerate(ref):
    """True when a reference output is near-zero or near-constant: a constant kernel could
    match it, so the problem is flagged."""
    for r in flatten_outputs(ref):
        if not r.is_floating_point() or r.numel() < 2:
            continue
        r64 = r.double()
        finite = r64[torch.isfinite(r64)]
        if finite.numel() == 0:
            return True
        scale = float(finite.abs().max())
        spread = float(finite.max() - finite.min())
        if scale < 1e-6 or spread <= 1e-6 * scale:
            return True
    return False
