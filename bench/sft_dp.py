"""Data parallelism over NCCL: `musacoder train sft` on one GPU against the same run on N GPUs
(torchrun --no-python), same model, data, global batch and steps, in the same call (issue 14).

What it measures, per side: the per-step losses (N ranks must match one GPU within bf16 noise,
since the global batch is the same), tokens/s of the whole job, the scaling N-GPU / 1-GPU, and the
peak memory per GPU (the trainer reports the maximum over ranks), where the sharded optimizer's
fp32 master weights and moments are split N ways.

The model and data are sft_bench.py's: Qwen2-0.5B's shape with random weights, chat rows of
code-like text; here the data holds --steps-data global steps' worth of rows, so the runs see
fresh rows for several steps before the epoch repeats.

usage: python3 bench/sft_dp.py --musacoder BIN --out DIR [--gpus 2] [--steps 50] [--tokens-per-step 131072]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sft_bench import make_data, make_model  # noqa: E402


def run(cmd, env, log):
    t0 = time.time()
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        print(open(log).read()[-3000:])
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}")
    return time.time() - t0


def rows_of(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if '"train"' in line]


def summary(rows):
    warm = rows[3:] if len(rows) > 5 else rows
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in warm),
            "step_s": statistics.median(r["step_s"] for r in warm),
            "mfu": statistics.median(r.get("mfu", 0) for r in warm),
            "peak_alloc_gib": max(r.get("peak_alloc_gib", 0) for r in rows),
            "peak_reserved_gib": max(r.get("peak_reserved_gib", 0) for r in rows),
            "losses": [r["loss"] for r in rows], "grad_norms": [r["grad_norm"] for r in rows]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--steps-data", type=int, default=4, help="global steps' worth of distinct rows")
    ap.add_argument("--tokens-per-step", type=int, default=131072)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-4)
    a = ap.parse_args()
    if torch.cuda.device_count() < a.gpus:
        sys.exit(f"sft_dp: {a.gpus} GPUs asked, {torch.cuda.device_count()} visible")
    torchrun = shutil.which("torchrun")
    if not torchrun:
        sys.exit("sft_dp: torchrun not found (it comes with the torch wheel)")
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "work")
    os.makedirs(os.path.join(work, "model"), exist_ok=True)
    data = os.path.join(work, "data.jsonl")
    tok, rows, total = make_data(data, os.path.join(work, "tokenizer.json"), a.tokens_per_step * a.steps_data, a.max_len)
    cfg, nparams = make_model(os.path.join(work, "model"), tok)
    print(f"model: Qwen2-0.5B shape, {nparams / 1e6:.0f}M parameters; data: {len(rows)} rows, {total} tokens "
          f"(~{a.steps_data} steps of {a.tokens_per_step}); {a.steps} steps on 1 and on {a.gpus} GPUs", flush=True)

    model_bin = os.path.join(os.path.dirname(os.path.abspath(a.musacoder)), "musacoder-model")
    common = ["train", "sft", "--model", os.path.join(work, "model"), "--data", data, "--max-steps", str(a.steps),
              "--tokens-per-step", str(a.tokens_per_step), "--micro-batch-tokens", str(a.micro_batch_tokens),
              "--max-len", str(a.max_len), "--lr", str(a.lr), "--warmup-steps", "5", "--schedule", "cosine",
              "--min-lr", str(a.lr / 10), "--grad-clip", "1.0", "--weight-decay", "0.1", "--seed", "3",
              "--save-every", "0", "--no-progress"]
    env = dict(os.environ)
    one_dir, n_dir = os.path.join(work, "one"), os.path.join(work, "many")
    env1 = dict(env, CUDA_VISIBLE_DEVICES="0")
    wall1 = run([model_bin, *common, "--out", one_dir], env1, os.path.join(a.out, "one.log"))
    print(f"1 GPU: {wall1:.0f} s", flush=True)
    wall_n = run([torchrun, "--no-python", "--nproc-per-node", str(a.gpus), "--master-port", "29631", model_bin, *common,
                  "--out", n_dir], env, os.path.join(a.out, "many.log"))
    print(f"{a.gpus} GPUs: {wall_n:.0f} s", flush=True)

    one, many = rows_of(one_dir), rows_of(n_dir)
    assert [r["micro_batches"] for r in one] == [r["micro_batches"] for r in many], "different batches"
    s1, sn = summary(one), summary(many)
    diffs = [abs(x - y) for x, y in zip(s1["losses"], sn["losses"])]
    res = {"device": torch.cuda.get_device_name(0), "gpus": a.gpus, "torch": torch.__version__, "params": nparams,
           "rows": len(rows), "tokens_per_step": a.tokens_per_step, "steps": a.steps, "one_gpu": s1, "n_gpu": sn,
           "scaling": sn["tokens_per_s"] / s1["tokens_per_s"], "max_loss_diff": max(diffs),
           "mean_loss_diff": sum(diffs) / len(diffs), "wall_s": {"one": wall1, "n": wall_n}}
    for name, d in (("one", one_dir), ("many", n_dir)):
        shutil.copy(os.path.join(d, "metrics.jsonl"), os.path.join(a.out, f"metrics-{name}.jsonl"))
    with open(os.path.join(a.out, "sft_dp.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(f"\n{'':<10}{'tokens/s':>12}{'step s':>9}{'MFU':>7}{'peak alloc GiB/GPU':>20}{'reserved GiB/GPU':>18}")
    for name, x in (("1 GPU", s1), (f"{a.gpus} GPUs", sn)):
        print(f"{name:<10}{x['tokens_per_s']:>12.0f}{x['step_s']:>9.3f}{x['mfu']:>7.1%}{x['peak_alloc_gib']:>20.2f}"
              f"{x['peak_reserved_gib']:>18.2f}")
    print(f"scaling {res['scaling']:.2f}x; |loss diff| over {a.steps} steps: max {res['max_loss_diff']:.4f}, "
          f"mean {res['mean_loss_diff']:.4f} (losses 1 GPU {s1['losses'][0]:.4f}->{s1['losses'][-1]:.4f}, "
          f"{a.gpus} GPUs {sn['losses'][0]:.4f}->{sn['losses'][-1]:.4f})")


if __name__ == "__main__":
    main()
