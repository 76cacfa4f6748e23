"""Is `musacoder train sft --deterministic` reproducible on this GPU, and what does it cost?

The same SFT run (a small Qwen3 from `musacoder init`, code-like chat rows, several packed
micro-batches a step, a high learning rate so that differences grow) four times: twice as is and
twice with --deterministic. For each pair: whether every step's loss and grad norm, and the
final weights (a hash of the last checkpoint's safetensors), are identical, and the largest loss
difference; and each run's median step time.

Why it matters: two SFT runs of the small recipe from one checkpoint, data and seed passed 13%
and 0.1% of the same RL problems on the H100, more apart than any RL arm.

usage: python3 bench/sft_determinism.py --musacoder BIN --out DIR [--steps 30]
"""
import argparse
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sft_bench import make_data  # noqa: E402


def weights_hash(run, pattern="*.safetensors"):
    """The last checkpoint's files matching `pattern` (default: the model's and the optimizer's)."""
    last = sorted(glob.glob(os.path.join(run, "checkpoints", "step-*")))[-1]
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(last, pattern))):
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tokens-per-step", type=int, default=32768)
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--max-len", type=int, default=4096)
    a = ap.parse_args()
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    make_data(os.path.join(work, "data.jsonl"), os.path.join(work, "tokenizer.json"), a.tokens_per_step, a.max_len)
    subprocess.run([a.musacoder, "init", "--tokenizer", os.path.join(work, "tokenizer.json"), "--out",
                    os.path.join(work, "model"), "--hidden", "256", "--layers", "4", "--heads", "4", "--kv-heads", "2",
                    "--max-positions", str(a.max_len), "--seed", "1"], check=True, capture_output=True)
    runs = {}
    for name, extra in (("plain-1", []), ("plain-2", []), ("deterministic-1", ["--deterministic"]),
                        ("deterministic-2", ["--deterministic"])):
        out = os.path.join(work, name)
        t0 = time.time()
        r = subprocess.run([a.musacoder, "train", "sft", "--model", os.path.join(work, "model"), "--data",
                            os.path.join(work, "data.jsonl"), "--out", out, "--max-steps", str(a.steps),
                            "--tokens-per-step", str(a.tokens_per_step), "--micro-batch-tokens", str(a.micro_batch_tokens),
                            "--max-len", str(a.max_len), "--lr", "1e-3", "--schedule", "constant", "--seed", "1",
                            "--no-progress", *extra], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-3000:], flush=True)
            runs[name] = {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
            continue
        rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"train"' in l]
        runs[name] = {"losses": [x["loss"] for x in rows], "grad_norms": [x.get("grad_norm") for x in rows],
                      "step_s": statistics.median(x["step_s"] for x in rows[2:] or rows), "wall_s": time.time() - t0,
                      "weights": weights_hash(out)}
        print(f"{name}: last loss {rows[-1]['loss']:.6f}, median step {runs[name]['step_s'] * 1e3:.1f} ms, "
              f"weights {runs[name]['weights']}", flush=True)

    def pair(x, y):
        rx, ry = runs[x], runs[y]
        if "error" in rx or "error" in ry:
            return {"error": rx.get("error") or ry.get("error")}
        return {"losses_identical": rx["losses"] == ry["losses"], "grad_norms_identical": rx["grad_norms"] == ry["grad_norms"],
                "weights_identical": rx["weights"] == ry["weights"],
                "max_loss_diff": max(abs(p - q) for p, q in zip(rx["losses"], ry["losses"]))}
    res = {"steps": a.steps, "tokens_per_step": a.tokens_per_step, "micro_batch_tokens": a.micro_batch_tokens,
           "runs": runs, "plain": pair("plain-1", "plain-2"), "deterministic": pair("deterministic-1", "deterministic-2")}
    with open(os.path.join(a.out, "sft_determinism.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("\n| runs | losses identical | grad norms identical | weights identical | largest loss difference | median step (ms) |")
    print("|---|---|---|---|---|---|")
    for kind in ("plain", "deterministic"):
        p = res[kind]
        ms = " / ".join(f"{runs[n]['step_s'] * 1e3:.1f}" for n in (f"{kind}-1", f"{kind}-2") if "step_s" in runs[n])
        if "error" in p:
            print(f"| {kind} | error: {p['error']} | | | | {ms} |")
        else:
            print(f"| {kind} | {p['losses_identical']} | {p['grad_norms_identical']} | {p['weights_identical']} | "
                  f"{p['max_loss_diff']:.3g} | {ms} |")
    d = res["deterministic"]
    return 0 if d.get("weights_identical") and d.get("losses_identical") else 1


if __name__ == "__main__":
    sys.exit(main())
