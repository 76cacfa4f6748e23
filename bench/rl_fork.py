"""How large an RL update a near-deterministic policy survives, on the CPU.

The policy is tests/python/fork_policy.py's: a tiny model fine-tuned (lr 5e-3) to answer one
KernelBench prompt with a working kernel or a refusal, half and half, and to reproduce every
other token of the answer almost surely. Each arm runs `musacoder-model train rl` from that
checkpoint through the real MooreEval in CPU mode (8 answers a step, one turn, T = 0.5) and
measures, teacher-forced with transformers on the final checkpoint:

  fork   log P(working branch) - log P(refusal) at the first answer token (before: about 0);
  tail   the summed log-prob of the rest of the working answer, against the SFT model's
         (what an update broke on the way: a negative change is damage);
  anchor the RL run's own anchor_loss (--anchor-data: the SFT data, per token), the metric a
         real run reports for the same damage.

plus the sampled pass rate of each step. Grid: --lrs x --warmups (AdamW, fresh state, as RL
starts). The question it answers: is a step of AdamW's first updates at a given lr, relative
to the SFT lr, small enough not to break what SFT memorized (an earlier GPU run at a larger lr lost most of
its passing answers to compile errors over 24 steps at lr 2e-5 after SFT at 5e-4).

Writes WORK/rl-fork.jsonl (one row per arm), WORK/rl-fork.md (the table) and, with
--plot, WORK/rl-fork.svg (pass rate by step, each arm a line, through `musacoder plot`).

usage: python3 bench/rl_fork.py --work DIR [--lrs 1e-5,1e-4,1e-3] [--warmups 0,4] [--steps 6]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import fork_policy  # noqa: E402
from mc_cli import BINARY, read_jsonl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--lrs", default="1e-5,3e-5,1e-4,3e-4,1e-3,2e-3")
    ap.add_argument("--warmups", default="0,4")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--plot", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    fork_dir = os.path.join(a.work, "fork")
    if not os.path.exists(os.path.join(fork_dir, "fork.json")):
        shutil.rmtree(fork_dir, ignore_errors=True)
        f = fork_policy.build(fork_dir)
        json.dump(f.__dict__, open(os.path.join(fork_dir, "fork.json"), "w"))
    fork = fork_policy.Fork(**json.load(open(os.path.join(fork_dir, "fork.json"))))
    print(f"fork policy ready in {time.time() - t0:.0f} s: {fork.sft}", flush=True)
    rows = []
    arms = [(lr, int(w)) for w in a.warmups.split(",") for lr in a.lrs.split(",")]
    for i, (lr, warmup) in enumerate(arms):
        name = f"lr{lr}-w{warmup}"
        out = os.path.join(a.work, name)
        shutil.rmtree(out, ignore_errors=True)
        t = time.time()
        fork_policy.model(*fork_policy.rl_args(fork, out, "--warmup-steps", str(warmup), "--dump-steps",
                                               os.path.join(out, "dump"), "--anchor-data", fork.data, lr=lr,
                                               steps=a.steps))
        steps = read_jsonl(os.path.join(out, "metrics.jsonl"))
        seqs = json.load(open(os.path.join(out, "dump", "step-00000001.json")))["sequences"]
        context = seqs[0]["tokens"][:seqs[0]["n_context"]]
        by_sign = {s["advantage"] > 0: s["tokens"][s["n_context"]:] for s in seqs}
        row = {"lr": float(lr), "warmup": warmup, "steps": len(steps),
               "pass_rate_by_step": [r["pass_rate_turn1"] for r in steps],
               "updates": sum(1 for r in steps if r["updated"]), "seconds": round(time.time() - t, 1),
               "anchor_loss_before": round(steps[-1]["anchor_loss"] - steps[-1]["anchor_loss_change"], 5),
               "anchor_loss_after": round(steps[-1]["anchor_loss"], 5)}
        if True in by_sign and False in by_sign:
            ok, refuse = by_sign[True], by_sign[False]
            ok0, no0, tail0 = fork_policy.branch_logprobs(fork.sft, context, ok, refuse[0])
            final = os.path.join(out, "checkpoints", f"step-{len(steps):08d}")
            ok1, no1, tail1 = fork_policy.branch_logprobs(final, context, ok, refuse[0])
            row.update(fork_before=round(ok0 - no0, 3), fork_after=round(ok1 - no1, 3), tail_before=round(tail0, 3),
                       tail_after=round(tail1, 3), tail_change=round(tail1 - tail0, 3))
        rows.append(row)
        print(f"[{i + 1}/{len(arms)}] {name}: pass rate by step {row['pass_rate_by_step']}, fork "
              f"{row.get('fork_before')} -> {row.get('fork_after')}, tail change {row.get('tail_change')} "
              f"({row['seconds']} s; ETA {(time.time() - t0) / (i + 1) * (len(arms) - i - 1):.0f} s)", flush=True)
    with open(os.path.join(a.work, "rl-fork.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    lines = ["| lr | warmup | updates | pass rate by step | fork before → after | tail log-prob change | anchor loss before → after |",
             "|---:|---:|---:|---|---|---:|---|"]
    for r in rows:
        lines.append(f"| {r['lr']:g} | {r['warmup']} | {r['updates']} | {' '.join(f'{p:.2f}' for p in r['pass_rate_by_step'])} "
                     f"| {r.get('fork_before', '–')} → {r.get('fork_after', '–')} | {r.get('tail_change', '–')} "
                     f"| {r['anchor_loss_before']:.4f} → {r['anchor_loss_after']:.4f} |")
    open(os.path.join(a.work, "rl-fork.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if a.plot:
        runs = [os.path.join(a.work, f"lr{lr}-w{w}") for lr, w in arms]
        subprocess.run([BINARY, "plot", *runs, "--out", os.path.join(a.work, "rl-fork.svg"), "--metrics",
                        "pass_rate_turn1,anchor_loss,grad_norm,entropy", "--log", "anchor_loss"], check=True)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
