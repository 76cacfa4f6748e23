#!/usr/bin/env python3
"""Issue 15's target over several leases: bench/rl_pipeline.py's SUMMARY.json files pooled.

One lease's bench is two runs of each arm, and repeats differ by ~15% of step time (session 44),
so the target (step time per answer token beyond turn by turn's generation and training, <= 25%)
is judged on every lease's runs together. For each SUMMARY.json: each async run's overhead
against that lease's turn-by-turn runs, the lease's runs pooled, and then every lease pooled
(steps, answer tokens and times summed, as rl_pipeline.py's own "pooled"). The span is the filled
one (steps 3 to N-1) unless --span steady (steps 2 to N-1).

  python3 bench/rl_pipeline_pool.py RUN1/bench/SUMMARY.json RUN2/bench/SUMMARY.json ...
  (--json FILE writes the same numbers)"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_pipeline import base_of, overhead_vs_per_token, pooled_steps  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summaries", nargs="+", help="bench/rl_pipeline.py SUMMARY.json files, one a lease")
    ap.add_argument("--arms", default="async-defer,async-defer-kv", help="the arms measured (NAME@K repeats included)")
    ap.add_argument("--turns", default="turns,turns-kv", help="the turn-by-turn arms they are measured against")
    ap.add_argument("--span", default="filled", choices=["filled", "steady"])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    arms, turns = set(a.arms.split(",")), set(a.turns.split(","))
    lo = 2 if a.span == "filled" else 1
    pct = lambda x: "-" if x is None else f"{100 * x:+.1f}%"  # noqa: E731
    every_a, every_t, out = [], [], {"span": a.span, "leases": []}
    print(f"| lease | run | per answer token, steps {lo + 1} to N-1, against its lease's turn-by-turn runs |\n|---|---|---:|")
    for path in a.summaries:
        try:
            summary = json.load(open(path))
            runs = summary["arms"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"rl_pipeline_pool: {path}: not a bench/rl_pipeline.py SUMMARY.json ({e})")
        t = pooled_steps([s for arm, s in runs.items() if base_of(arm) in turns], lo)
        mine = {arm: pooled_steps([s], lo) for arm, s in runs.items() if base_of(arm) in arms}
        if not t or not mine:
            sys.exit(f"rl_pipeline_pool: {path} has no {'turn-by-turn' if not t else 'measured'} run "
                     f"(arms there: {', '.join(runs)})")
        lease = {"summary": path, "turns_runs": sum(base_of(x) in turns for x in runs), "runs": {}}
        for arm, rows in mine.items():
            lease["runs"][arm] = overhead_vs_per_token(rows, t)
            print(f"| {path} | {arm} | {pct(lease['runs'][arm])} |")
        pooled = [r for rows in mine.values() for r in rows]
        lease["pooled"] = overhead_vs_per_token(pooled, t)
        print(f"| {path} | pooled ({len(mine)} runs against {lease['turns_runs']}) | **{pct(lease['pooled'])}** |")
        out["leases"].append(lease)
        every_a += pooled
        every_t += t
    n_a = sum(len(x["runs"]) for x in out["leases"])
    n_t = sum(x["turns_runs"] for x in out["leases"])
    out["pooled"] = overhead_vs_per_token(every_a, every_t)
    print(f"| {len(a.summaries)} leases | pooled ({n_a} runs against {n_t}) | **{pct(out['pooled'])}** |")
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
