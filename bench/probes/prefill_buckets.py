"""Prefill padded to a few sizes against prefill of exactly the prompts' tokens (issue 15).

Each prefill call packs a token count of its own, and on an H200 a GEMM of a shape cuBLAS has
not met costs the host 0.4-1.3 ms against 22 us for one it has (bench/probes/gemm_shapes.py, session
48): ~44 GEMMs a call for recipes/small's 8 layers. The engine now pads each call's tokens to
model::prefill_bucket's count (CUDA; `--exact-prefill` turns it off). This runs the same
`musacoder generate` both ways, alternately (exact, padded, exact, padded, ...), over prompts
that arrive one every few engine steps as RL's pipelined turns send them, so each call is one
or a few prompts of its own length. Reports prefill ms a call (host wall and GPU events), the
padding computed, decode ms a step and tokens/s, as a table and JSON.
  python3 bench/probes/prefill_buckets.py --musacoder build/musacoder --out prefill_buckets.json
  (gpu-check stage `prefill-buckets`; --device cpu checks this script: the CPU never pads)"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for generate_bench
from generate_bench import SHAPES, arrival_cmd, engine_row, make_model, write_prompts  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", default="prefill_buckets.json")
    ap.add_argument("--shape", default="recipe-small", choices=sorted(SHAPES))
    ap.add_argument("--model-dir", default=None, help="default: /tmp/<shape>-random")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each way, alternating")
    ap.add_argument("--prompts", type=int, default=192)
    ap.add_argument("--prompt-len", type=int, default=1500)
    ap.add_argument("--prompt-len-spread", type=int, default=700)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--arrive-every", type=int, default=2, help="engine steps between two prompts' arrivals")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    gpu = a.device != "cpu"
    a.model_dir = a.model_dir or f"/tmp/{a.shape}-random"
    make_model(a.model_dir, a.shape)
    import torch
    work = tempfile.mkdtemp(prefix="prefill-buckets-")
    pfile = os.path.join(work, "prompts.jsonl")
    lens = [len(p) for p in write_prompts(pfile, a.shape, a.prompts, a.prompt_len, a.prompt_len_spread)]
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "device": torch.cuda.get_device_name(0) if gpu else "cpu", "shape": a.shape, "prompts": a.prompts,
           "prompt_tokens": sum(lens), "new_tokens": a.new_tokens, "arrive_every": a.arrive_every, "runs": []}
    for k in range(2 * a.repeats):
        exact = k % 2 == 0
        stats = os.path.join(work, f"stats{k}.json")
        cmd = arrival_cmd(a, pfile, stats, 64, *(["--exact-prefill"] if exact else []))
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-3000:])
            raise SystemExit(f"prefill_buckets: musacoder generate failed (rc {r.returncode})")
        row = {"way": "exact" if exact else "padded", "run": k // 2 + 1, **engine_row(stats)}
        res["runs"].append(row)
        print(f"{row['way']} #{row['run']}: {row['prefill_calls']} prefill calls, {row['prefill_wall_ms']:.1f} ms wall / "
              f"{row['prefill_gpu_ms']:.1f} ms GPU a call, {row['padded_tokens']} tokens of padding, decode step "
              f"{row['step_wall_ms']:.2f} ms, {row['tokens_per_s']:.0f} tokens/s", flush=True)
    for way in ("exact", "padded"):
        rows = [r for r in res["runs"] if r["way"] == way]
        res[way] = {"prefill_wall_ms": sum(r["prefill_s"] for r in rows) * 1e3 / max(1, sum(r["prefill_calls"] for r in rows)),
                    "seconds": sum(r["seconds"] for r in rows) / len(rows)}
    res["prefill_padded_over_exact"] = res["padded"]["prefill_wall_ms"] / max(1e-9, res["exact"]["prefill_wall_ms"])
    json.dump(res, open(a.out, "w"), indent=2)
    print(f"\n{res['device']}, {a.shape} (random weights), {a.prompts} prompts ({res['prompt_tokens']} tokens) arriving "
          f"one every {a.arrive_every} engine steps, {a.new_tokens} new tokens each, runs alternating\n")
    print("| way | run | prefill calls | prefill ms a call (wall / GPU) | padding tokens | decode ms a step | tokens/s |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for r in res["runs"]:
        print(f"| {r['way']} | {r['run']} | {r['prefill_calls']} | {r['prefill_wall_ms']:.1f} / {r['prefill_gpu_ms']:.1f} | "
              f"{r['padded_tokens']} | {r['step_wall_ms']:.2f} | {r['tokens_per_s']:.0f} |")
    print(f"\npadded against exact, prefill per call over all runs: {res['prefill_padded_over_exact']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
