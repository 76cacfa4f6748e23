"""What a GEMM of a new shape costs the host (issue 15).

A profile of `musacoder generate` on an H200 (`git show 0e57a4c:docs/results/2026-11-25-recipe-small.md`,
"Twenty-seventh run") found prefill host-bound: a call of recipes/small's 8 layers spent ~25 ms,
of which ~44 `aten::mm` calls took ~206 us of host time each. Decode, captured in CUDA graphs,
reuses its shapes; each prefill call has a token count of its own, so each of its GEMMs has an
M the library may not have seen. This times the host side of `torch.nn.functional.linear` at the
recipe's layer shapes (bf16): the same M again and again, against a new M every call, and the
same for M rounded up to a multiple of --bucket (what padding a prefill call would give).

Reports host microseconds per call (launch only, then synchronized) and the GPU time, as a table
and JSON. The recipe's shapes: hidden 512, q/k/v 768, MLP 2x1536, vocabulary 16384.
  python3 bench/probes/gemm_shapes.py --out gemm_shapes.json   (gpu-check stage gemm-shapes)"""
import argparse
import json
import random
import sys
import time

import torch

SHAPES = {"qkv": (512, 768), "o": (512, 512), "gate_up": (512, 3072), "down": (1536, 512)}


def host_us(x_for, w, ms, device):
    """Mean host time of F.linear over the Ms, and the GPU time of all of them (ms)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    xs = [x_for(m) for m in ms]
    sync()
    start = end = None
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for x in xs:
        torch.nn.functional.linear(x, w)
    host = (time.perf_counter() - t0) / len(ms) * 1e6
    if end is not None:
        end.record()
    sync()
    return host, (start.elapsed_time(end) if end is not None else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gemm_shapes.json")
    ap.add_argument("--calls", type=int, default=200, help="calls per measurement")
    ap.add_argument("--bucket", type=int, default=256, help="M rounded up to a multiple of this")
    ap.add_argument("--m-range", default="800,13000", help="the token counts drawn from (a prefill call's)")
    ap.add_argument("--device", default="cuda", help="cpu: a check of this script (fp32)")
    a = ap.parse_args()
    lo, hi = (int(v) for v in a.m_range.split(","))
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    rng = random.Random(1)
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu", "calls": a.calls,
           "bucket": a.bucket, "m_range": [lo, hi], "rows": []}
    for name, (k, n) in SHAPES.items():
        w = torch.randn(n, k, device=a.device, dtype=dtype)
        big = torch.randn(hi + a.bucket, k, device=a.device, dtype=dtype)
        x_for = lambda m: big[:m]  # noqa: E731  (a contiguous view: no allocation in the timed loop)
        fixed_m = (lo + hi) // 2
        # Warm: the fixed shape once, so its first-call cost is not in "same M".
        host_us(x_for, w, [fixed_m] * 3, a.device)
        fresh = rng.sample(range(lo, hi), a.calls)  # every M new to this process
        bucketed = [-(-m // a.bucket) * a.bucket for m in rng.sample(range(lo, hi), a.calls)]
        row = {"gemm": name, "k": k, "n": n}
        for label, ms in (("same_m", [fixed_m] * a.calls), ("new_m", fresh), ("bucketed_m", bucketed)):
            h, g = host_us(x_for, w, ms, a.device)
            row[label + "_host_us"], row[label + "_gpu_ms"] = h, g
        res["rows"].append(row)
        print(f"{name}: host us a call, same M {row['same_m_host_us']:.1f}, new M {row['new_m_host_us']:.1f}, "
              f"M rounded to {a.bucket} {row['bucketed_m_host_us']:.1f}", flush=True)
    json.dump(res, open(a.out, "w"), indent=2)
    print(f"\n{res['device']}, torch {torch.__version__}, {a.calls} calls each, M in [{lo}, {hi})\n")
    print("| GEMM (K x N) | same M: host us / GPU ms | new M every call | M rounded up to a multiple of "
          f"{a.bucket} |\n|---|---:|---:|---:|")
    for r in res["rows"]:
        print(f"| {r['gemm']} ({r['k']} x {r['n']}) | {r['same_m_host_us']:.1f} / {r['same_m_gpu_ms']:.1f} | "
              f"{r['new_m_host_us']:.1f} / {r['new_m_gpu_ms']:.1f} | {r['bucketed_m_host_us']:.1f} / "
              f"{r['bucketed_m_gpu_ms']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
