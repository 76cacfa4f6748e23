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
    """Floor of the bound on ||out - ref|| / ||ref||: holds even where atol exceeds every output
    (a softmax over a long row), so a constant kernel cannot pass on the absolute tolerance
    alone. For fp32 it is KernelBench's own fp32 tolerance, 1e-4, applied to the norm: an honest
    fp32 kernel errs 1e-7-1e-6 there, while fp32 work done in half precision (inputs, weights
    or intermediates rounded to 11 bits) errs 3e-4-5e-4 and is rejected even where the
    problem's conditioning widens the elementwise bound (level 3's ShallowWideMLP, 1e-3 let it
    through). The bound grows past the floor with PyTorch's own error (compare_outputs)."""
    return 1e-4 if dtype in (torch.float32, torch.float64) else 2e-2


# How many times PyTorch's own rounding error an honest kernel may make. Measured on the CPU
# for fp32 sums of 4096 signed terms (tests/python/test_compare.py): a sequential loop errs
# 16-18x more than torch.sum, inputs rounded to half 1700-2300x more. 128 accepts any
# reasonable summation order and still rejects half precision by an order of magnitude.
TORCH_ERROR_MULTIPLE = 128.0

CHUNK = 1 << 24  # elements compared at once: bounds the judge's extra memory at any output size


def reference_truth(ref, truth64):
    """What the comparison keeps of a float64 reference, per output: (the float64 values
    rounded to the reference's dtype, PyTorch's largest error against them, its 2-norm), or
    None where an output is not floating or its shape differs. Rounding costs at most half a
    unit in the last place, far below any tolerance, and lets the judge hold one copy of the
    output's size instead of two."""
    out = []
    refs, truths = flatten_outputs(ref), flatten_outputs(truth64)
    for i, r in enumerate(refs):
        t = truths[i] if i < len(truths) else None
        if t is None or not r.is_floating_point() or tuple(t.shape) != tuple(r.shape):
            out.append(None)
            continue
        err_max, err_norm = _torch_error(r, t)
        out.append((t.to(r.device, r.dtype), err_max, err_norm))
    return out


def compare_outputs(ref, out, atol, rtol, truth=None, extra_atol=None):
    """Returns (ok, details); details describes the first mismatch, or (ok) the bound used.

    ref: PyTorch's result in the run's precision. truth: the same reference computed in float64
    (or reference_truth()'s summary of it; None where it could not be). With truth, outputs are compared against it, and the absolute
    tolerance of each output tensor grows by TORCH_ERROR_MULTIPLE times the largest error
    PyTorch's own result makes against it: the error that the problem's conditioning forces on
    any implementation in this precision (long signed reductions, cancellations), so an honest
    kernel summing in another order passes, while exact ops (max, relu, copies) keep the plain
    bound. extra_atol: per output tensor, that allowance when it was measured before (timing
    runs, which have no float64 reference)."""
    refs, outs = flatten_outputs(ref), flatten_outputs(out)
    if truth is None:
        truths = [None] * len(refs)
    elif isinstance(truth, list) and all(t is None or isinstance(t, tuple) for t in truth):
        truths = truth  # reference_truth()'s summary
    else:
        truths = reference_truth(ref, truth)
    if len(refs) != len(outs):
        return False, {"kind": "output_count", "expected": len(refs), "got": len(outs)}
    bounds = []
    for i, (r, o) in enumerate(zip(refs, outs)):
        if not isinstance(o, torch.Tensor):
            return False, {"kind": "type", "output": i, "got": type(o).__name__}
        if tuple(o.shape) != tuple(r.shape):
            return False, {"kind": "shape", "output": i, "expected": list(r.shape),
                           "got": list(o.shape)}
        if o.dtype != r.dtype:
            return False, {"kind": "dtype", "output": i, "expected": str(r.dtype),
                           "got": str(o.dtype)}
        if not r.is_floating_point() and not r.is_complex():
            o = o.to(r.device)
            bad = o != r
            if bool(bad.any()):
                return False, _first(i, bad, r, o, "value")
            bounds.append(None)
            continue
        t, torch_err_max, torch_err_norm = truths[i] if i < len(truths) and truths[i] else (None, 0.0, 0.0)
        extra = TORCH_ERROR_MULTIPLE * torch_err_max
        if extra_atol is not None and i < len(extra_atol) and extra_atol[i]:
            extra = max(extra, float(extra_atol[i]))
        target = t if t is not None else r
        ok, detail, err_norm, ref_norm = _check_bounds(i, target, o, atol, rtol, extra)
        if not ok:
            return False, detail
        tol = scale_tolerance(r.dtype)
        norm_bound = max(tol * ref_norm, TORCH_ERROR_MULTIPLE * torch_err_norm)
        if ref_norm > 0 and err_norm > norm_bound:
            d = _worst(i, target, o)
            d.update(kind="relative_norm", relative_norm_error=err_norm / ref_norm,
                     relative_norm_tolerance=norm_bound / ref_norm)
            return False, d
        bounds.append({"atol": atol, "rtol": rtol, "extra_atol": extra,
                       "torch_error_max": torch_err_max, "against": "float64" if t is not None
                       else "reference", "relative_norm_tolerance": norm_bound / ref_norm
                       if ref_norm > 0 else None,
                       "relative_norm_error": err_norm / ref_norm if ref_norm > 0 else None})
    return True, {"bounds": bounds}


def _chunks(*tensors):
    """Flat float64 views of matching chunks, on the first tensor's device."""
    flat = [x.reshape(-1) for x in tensors]
    n = flat[0].numel()
    dev = flat[0].device
    for s in range(0, n, CHUNK):
        yield s, [f[s:s + CHUNK].to(dev, torch.float64) for f in flat]


def all_finite(t):
    """torch.isfinite(t).all(), chunk by chunk (no full-size mask at published sizes)."""
    flat = t.reshape(-1)
    return all(bool(torch.isfinite(flat[s:s + CHUNK]).all()) for s in range(0, flat.numel(), CHUNK))


def _torch_error(r, t):
    """(max, 2-norm) of |PyTorch's result - the float64 reference| over finite elements."""
    mx, sq = 0.0, 0.0
    for _, (r64, t64) in _chunks(r, t):
        d = (r64 - t64).abs()
        d = torch.where(torch.isfinite(d), d, torch.zeros_like(d))
        if d.numel():
            mx = max(mx, float(d.max()))
            sq += float((d * d).sum())
    return mx, math.sqrt(sq)


def _check_bounds(i, target, o, atol, rtol, extra):
    """Elementwise |o - target| <= atol + rtol |target| + extra (NaN only where the target has
    NaN), chunk by chunk. Returns (ok, detail, ||o - target||, ||target||)."""
    sq_err, sq_ref = 0.0, 0.0
    for s, (t64, o64) in _chunks(target, o):
        both_nan = torch.isnan(t64) & torch.isnan(o64)
        diff = (o64 - t64).abs()
        diff = torch.where(both_nan, torch.zeros_like(diff), diff)
        bound = atol + rtol * t64.abs() + extra
        bad = ~(diff <= bound) & ~both_nan  # NaN in diff counts as bad
        bad |= torch.isnan(o64) & ~torch.isnan(t64)
        if bool(bad.any()):
            d = _first(i, bad, t64, o64, "tolerance", diff, t64, offset=s, shape=target.shape)
            d["bound"] = {"atol": atol, "rtol": rtol, "extra_atol": extra}
            return False, d, 0.0, 0.0
        sq_err += float(torch.nan_to_num(diff).pow(2).sum())
        sq_ref += float(torch.nan_to_num(t64).pow(2).sum())
    return True, None, math.sqrt(sq_err), math.sqrt(sq_ref)


def _worst(i, target, o):
    """The element with the largest error, for feedback."""
    best, at = -1.0, 0
    for s, (t64, o64) in _chunks(target, o):
        d = torch.nan_to_num((o64 - t64).abs(), nan=math.inf)
        j = int(d.argmax())
        if float(d[j]) > best:
            best, at = float(d[j]), s + j
    t = target.reshape(-1)[at]
    return {"kind": "", "output": i, "index": list(_unravel(at, target.shape)),
            "expected": _num(t.double()), "got": _num(o.reshape(-1)[at].double()),
            "max_abs_error": best}


def _first(i, bad, r, o, kind, diff=None, r64=None, offset=0, shape=None):
    flat = bad.reshape(-1).nonzero()
    j = int(flat[0]) if flat.numel() else 0
    idx = list(_unravel(offset + j, shape if shape is not None else r.shape))
    d = {"kind": kind, "output": i, "index": idx, "mismatched": int(bad.sum()),
         "total": int(bad.numel()) if shape is None else math.prod(shape),
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
    match it, so the problem is flagged. Chunk by chunk (published sizes)."""
    for r in flatten_outputs(ref):
        if not r.is_floating_point() or r.numel() < 2:
            continue
        lo, hi, amax, any_finite = math.inf, -math.inf, 0.0, False
        for _, (r64,) in _chunks(r):
            finite = r64[torch.isfinite(r64)]
            if finite.numel() == 0:
                continue
            any_finite = True
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
            amax = max(amax, float(finite.abs().max()))
        if not any_finite:
            return True
        if amax < 1e-6 or hi - lo <= 1e-6 * amax:
            return True
    return False
