"""MooreEval at KernelBench's published sizes: every case of bench/kb_level1 (honest, wrong, a
memory hog, a hang) judged against KernelBench's real level-1 files, each case sent as N distinct
answers (as bench-model sends 8 samples of one problem), with the verdict checked against the
case's `# expect:` line. Run on a GPU machine.

Prints a table (verdict against expectation, seconds per answer, where the judge's time went)
and writes rows.jsonl (musacoder eval's rows) and summary.json to --out.
  python3 bench/published_sizes.py --musacoder BIN --problems .kb/bench/KernelBench --out DIR [--answers 8]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernelbench_compare as kc  # noqa: E402  (the case headers, and KernelBench's harness runner)

header = kc.header


def answers(cases, n, only=None):
    """n distinct sources per case: a comment in the CUDA text makes each its own compile, as
    a model's samples are."""
    rows = []
    for name in sorted(os.listdir(cases)):
        path = os.path.join(cases, name)
        if not name.endswith(".py") or (only and os.path.splitext(name)[0] not in only):
            continue
        src, prob, expect = open(path).read(), header(path, "problem"), header(path, "expect")
        for k in range(n):
            text = src.replace('cuda_src = r"""', f'cuda_src = r"""\n// answer {k}', 1)
            rows.append({"problem": f"L1/{prob}", "sample_id": f"{os.path.splitext(name)[0]}#{k}",
                         "answer": f"```python\n{text}\n```", "expect": expect.split()[0]})
    return rows


def kernelbench_anchor(a, items, expect):
    """KernelBench's harness on the same answers (bench/kernelbench_compare.py's runner: parallel
    pre-build, then eval_kernel_against_ref one after the other), hangs left out."""
    kc.SET.update(problems=a.problems, level=1)
    todo = [(r["sample_id"], r["problem"].split("/", 1)[1], r["answer"].split("```python\n", 1)[1].rsplit("```", 1)[0])
            for r in items if expect[r["sample_id"]] != "timeout"]
    kb = kc.kernelbench_harness(a.kernelbench, todo, a.out, workers=14)
    per = [row["s"] for row in kb["rows"]]
    print(f"KernelBench harness: {len(todo)} answers, pre-build {kb['prebuild_s']:.1f} s, total {kb['total_s']:.1f} s "
          f"({kb['total_s'] / max(1, len(todo)):.1f} s each)")
    for row in kb["rows"]:
        print(f"  {row['sample'][:28]:28} {expect[row['sample']]:14} kb correct={row.get('correct')} {row['s']:.1f} s "
              f"{row.get('error', '')[:100]}")
    return {"answers": len(todo), "prebuild_s": round(kb["prebuild_s"], 1), "total_s": round(kb["total_s"], 1),
            "s_per_answer": round(kb["total_s"] / max(1, len(todo)), 2), "eval_s": per,
            "rows": [{k: v for k, v in row.items()} for row in kb["rows"]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--problems", default=os.path.join(ROOT, ".kb", "bench", "KernelBench"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "bench", "kb_level1"))
    ap.add_argument("--answers", type=int, default=1, help="distinct answers per case")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--out", required=True)
    ap.add_argument("--eval-args", default="", help="more arguments for musacoder eval")
    ap.add_argument("--kernelbench", default="", help="KernelBench's src/ folder: also judge the same answers "
                    "(every case but the hang, which it cannot stop) with KernelBench's own harness, in this run")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before the eval is stopped (its rows so far are kept)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    items = answers(a.cases, a.answers, set(filter(None, a.only.split(","))))
    expect = {r["sample_id"]: r.pop("expect") for r in items}
    sol = os.path.join(a.out, "answers.jsonl")
    with open(sol, "w") as f:
        for r in items:
            f.write(json.dumps(r) + "\n")
    rows_path = os.path.join(a.out, "rows.jsonl")
    cmd = [a.musacoder, "eval", "--problems", a.problems, "--solutions", sol, "--out", rows_path,
           "--no-progress"] + a.eval_args.split()
    t0 = time.time()
    with open(os.path.join(a.out, "eval.log"), "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            p.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    wall = time.time() - t0
    rows = [json.loads(l) for l in open(rows_path)] if os.path.exists(rows_path) else []
    print(f"{'answer':28} {'expect':14} {'verdict':16} {'exec_s':>7} {'wall_s':>7}  judge stages (s)")
    wrong, infra = [], []
    rows = [r for r in rows if r["sample_id"] in expect]  # eval also lists problems without an answer
    for r in sorted(rows, key=lambda r: r["sample_id"]):
        want, got = expect.get(r["sample_id"], "?"), r["verdict"]
        if got == "infra_error":
            infra.append(r["sample_id"])
        elif got != want:
            wrong.append(r["sample_id"])
        stages = r.get("exec_stages") or {}
        st = " ".join(f"{k}={v:.1f}" for k, v in stages.items() if isinstance(v, (int, float)) and v >= 0.05)
        print(f"{r['sample_id'][:28]:28} {want:14} {got:16} {r.get('exec_s', 0):7.1f} "
              f"{r.get('wall_s', 0):7.1f}  {st}{'  ' + r['infra_error'][:120] if r.get('infra_error') else ''}")
    missing = sorted(set(expect) - {r["sample_id"] for r in rows})
    summary = {"answers": len(items), "judged": len(rows), "missing": missing,
               "verdict_not_expected": wrong, "infra_errors": infra, "wall_s": round(wall, 1),
               "wall_s_per_answer": round(wall / max(1, len(items)), 2),
               "exec_s_median": round(statistics.median([r.get("exec_s", 0) for r in rows]), 2) if rows else None,
               "exit_code": p.returncode, "command": " ".join(cmd)}
    if a.kernelbench:
        summary["kernelbench"] = kernelbench_anchor(a, items, expect)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    return 0 if not wrong and not infra and not missing and p.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
