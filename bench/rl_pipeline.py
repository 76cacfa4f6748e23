#!/usr/bin/env python3
"""Issue 15's verification target, turn by turn against --pipeline-turns, side by side.

Runs `musacoder-model train rl` twice from one model over the same problems, seeds and steps:
A turn by turn (each turn waits for all its verdicts), B with --pipeline-turns (a failed
trajectory's next answer is asked for as soon as its verdict is in). Each run gets its own fresh
cache folder, so neither finds the other's compiles or reference timings. Prints a table per
step and writes SUMMARY.json: verify_overhead (MooreEval's wait over generation plus training,
target <= 0.25) over all steps and over steps 2 and on.

  python3 bench/rl_pipeline.py --musacoder-model build/musacoder-model --model SFT_DIR \
      --problems synth-rl/problems.jsonl --out /tmp/rl-pipeline --steps 3 -- --level 1 ...

Options after `--` go to both runs."""
import argparse
import json
import os
import subprocess
import sys
import time

KEYS = ("generate_s", "verify_wait_s", "train_s", "step_s", "verify_overhead", "asked_while_decoding",
        "pass_rate_turn1", "pass_rate_turn2", "pass_rate_turn3", "answers")


def overhead(rows):
    gen = sum(r["generate_s"] + r["train_s"] for r in rows)
    return sum(r["verify_wait_s"] for r in rows) / gen if gen else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--musacoder-model", required=True)
    ap.add_argument("--model", required=True, help="Hugging Face model directory (the policy)")
    ap.add_argument("--problems", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--arms", default="turns,pipelined", help="which runs, in this order")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then more `train rl` options for both runs")
    a = ap.parse_args()
    extra = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    os.makedirs(a.out, exist_ok=True)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "model": a.model,
               "problems": a.problems, "steps": a.steps, "extra": extra, "arms": {}}
    for arm in a.arms.split(","):
        flag = {"turns": [], "pipelined": ["--pipeline-turns"]}[arm]
        out = os.path.join(a.out, arm)
        cmd = [a.musacoder_model, "train", "rl", "--model", a.model, "--problems", a.problems, "--out", out,
               "--cache-dir", os.path.join(a.out, "cache-" + arm), "--max-steps", str(a.steps), "--no-progress",
               *flag, *extra]
        print("$", " ".join(cmd), flush=True)
        t0 = time.time()
        with open(os.path.join(a.out, arm + ".log"), "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            sys.exit(f"{arm}: train rl exited with {rc} (see {a.out}/{arm}.log)")
        rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
        summary["arms"][arm] = {"wall_s": time.time() - t0, "overhead_all": overhead(rows),
                                "overhead_from_step2": overhead(rows[1:]),
                                "steps": [{k: r.get(k) for k in ("step",) + KEYS} for r in rows]}
    print(f"{'arm':<10} {'step':>4} " + " ".join(f"{k[:14]:>14}" for k in KEYS))
    for arm, s in summary["arms"].items():
        for r in s["steps"]:
            print(f"{arm:<10} {r['step']:>4} " + " ".join(
                f"{r[k]:>14.3f}" if isinstance(r[k], float) else f"{str(r[k]):>14}" for k in KEYS))
    for arm, s in summary["arms"].items():
        f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{arm}: verify_overhead over all steps {f(s['overhead_all'])}, from step 2 {f(s['overhead_from_step2'])}, "
              f"{s['wall_s']:.0f} s")
    with open(os.path.join(a.out, "SUMMARY.json"), "w") as fh:
        json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
