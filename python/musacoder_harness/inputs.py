"""Seeded trial inputs beyond the problem's own distribution, and parameter re-draws.

KernelBench inputs all lie in [0, 1): a kernel that mishandles negatives, large values or
outliers passes them. Trials rotate through these variants; when a variant makes the
reference non-finite (log of a negative...), that trial falls back to the native inputs.

The timing sets' seeds mix in a secret of the judge process (timing_salt): the run's seed is no
secret (the candidate gets it, so that its weights start as the reference's), and a candidate
that knew its timed inputs in advance could compute their outputs at load, with any slow kernel,
and hand them back when the clock runs. The correctness trials' seeds follow the run's seed
alone, on purpose: synth's validity probe runs exactly these trials in fp32 and fp64 and drops
a problem that is ill-conditioned on them, and whether a borderline problem is depends on the
draw, so trials drawn afresh would fail an honest kernel by luck. A candidate that knows them
gains nothing: it must still compute their outputs, and legally.
"""
import hashlib
import os
import secrets

import torch

VARIANTS = ("native", "signed", "scaled", "outliers", "native")
REDRAW_TRIALS = (2, 4)  # trials whose module parameters are re-drawn away from defaults


def variant_for(trial):
    return VARIANTS[trial % len(VARIANTS)]


SALT_ENV = "MUSACODER_JUDGE_TIMING_SALT"  # MUSACODER_JUDGE_*: kept from candidates' environment
_salt = None


def timing_salt():
    """This judge process's secret for the timing sets, drawn once. Candidate processes never
    hold it: they are started (or forked by the zygote, itself started), never forked from the
    judge, and candidate_env drops MUSACODER_JUDGE_* variables. MUSACODER_JUDGE_TIMING_SALT=N
    fixes it, to replay a timing on the same inputs."""
    global _salt
    if _salt is None:
        v = os.environ.get(SALT_ENV, "").strip()
        if v:
            try:
                _salt = int(v)
            except ValueError:
                raise ValueError(f"{SALT_ENV} must be an integer, got {v!r}") from None
        else:
            _salt = secrets.randbits(64)
    return _salt


def timing_seed(seed, i):
    """The seed of timing set i: the run's seed and the process's secret hashed together, 56
    bits (room for make_inputs' offsets)."""
    h = hashlib.blake2b(f"{timing_salt()}:{seed}:timing:{i}".encode(), digest_size=7)
    return int.from_bytes(h.digest(), "little")


def trial_schedule(seed, trials):
    """(input seed, variant) of each correctness trial; the probe replays exactly these."""
    return [(seed * 1000 + t + 1, variant_for(t)) for t in range(trials)]


def timing_sets(problem, seed, k, device, dtype):
    """The fresh native input sets rotated across timed iterations."""
    return [make_inputs(problem, timing_seed(seed, i), "native", device, dtype) for i in range(k)]


def seed_all(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


CHUNK = 1 << 24  # elements transformed at once: no full-size temporaries at published sizes


def make_inputs(problem, seed, variant, device, dtype):
    seed_all(seed)
    with torch.device(device):
        raw = problem.get_inputs()
    gen = torch.Generator(device=device).manual_seed(seed + 7919)
    out, seen = [], set()
    for x in raw:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point():
                if variant != "native" and x.untyped_storage().data_ptr() in seen:
                    x = x.clone()  # the same tensor twice: each input gets its own values
                seen.add(x.untyped_storage().data_ptr())
                x = _transform(x, variant, gen).to(dtype)
        out.append(x)
    return out


@torch.no_grad()
def _transform(x, variant, gen):
    """The variant's values, written over x chunk by chunk (x is the problem's fresh input)."""
    if variant == "native":
        return x
    if variant not in ("signed", "scaled", "outliers"):
        raise ValueError(variant)
    x = x.contiguous()
    flat = x.view(-1)
    for s in range(0, flat.numel(), CHUNK):
        part = flat[s:s + CHUNK]
        noise = torch.randn(part.shape, generator=gen, device=x.device, dtype=torch.float32)
        if variant == "scaled":
            noise.mul_(10.0).add_(3.0)
        elif variant == "outliers":
            mask = torch.rand(part.shape, generator=gen, device=x.device) < 0.01
            noise = torch.where(mask, noise * 100.0, noise)
        part.copy_(noise)
    return x


@torch.no_grad()
def redraw_parameters(model, seed):
    """Moves every floating parameter and buffer away from its initial value, keeping its scale,
    so weight 1 / bias 0 defaults cannot hide an ignored affine. Returns {name: tensor}."""
    gen = torch.Generator(device="cpu").manual_seed(seed + 104729)
    new = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.is_floating_point() or "running_var" in name:
            continue
        scale = max(float(t.float().std()) if t.numel() > 1 else 0.0, 0.1) * 0.5
        noise = torch.randn(t.shape, generator=gen).to(t.device, t.dtype) * scale
        t.add_(noise)
        new[name] = t
    return new
