"""MooreEval's GPU suite: honest kernels accepted with sane speedups, every hack class rejected
with the right rule (statically, and again at run time with the static stage skipped), faults
contained, the host undamaged, and repeated timings in agreement.

Case files carry their expectations in header comments:
    # problem: 2_ReLU
    # expect: static_violation torch_compute      (verdict [rule] with every stage on)
    # expect-runtime: illegal torch_compute        (with --skip-static; "reject" = any non-ok)
Usage: python3 tests/gpu/run_gpu_suite.py --musacoder BIN --out DIR
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests", "cases")


def header(path, key):
    pat = re.compile(r"^\s*(#|//)\s*" + re.escape(key) + r":\s*(.+?)\s*$")
    with open(path) as f:
        for line in f:
            m = pat.match(line)
            if m:
                return m.group(2)
    return None


def cases(folder):
    out = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith((".py", ".cu")):
            out.append((os.path.splitext(name)[0], path))
    return out


def run_eval(bin_, items, out_dir, tag, extra):
    sol = os.path.join(out_dir, f"{tag}.solutions.jsonl")
    res = os.path.join(out_dir, f"{tag}.results.jsonl")
    with open(sol, "w") as f:
        for sample, path in items:
            f.write(json.dumps({"problem": header(path, "problem"), "sample_id": sample,
                                "answer": open(path).read()}) + "\n")
    cmd = [bin_, "eval", "--problems", os.path.join(CASES, "problems"), "--solutions", sol,
           "--out", res, "--no-progress"] + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    with open(os.path.join(out_dir, f"{tag}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + "\n" + p.stderr)
    rows = [json.loads(l) for l in open(res)] if os.path.exists(res) else []
    by_sample = {r["sample_id"]: r for r in rows}
    return by_sample, wall, p


def matches(row, expect):
    if row is None:
        return False
    parts = expect.split()
    if parts[0] == "reject":
        return row["verdict"] not in ("ok", "infra_error")
    if row["verdict"] != parts[0]:
        return False
    return len(parts) < 2 or row["rule"] == parts[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache-dir", default="/tmp/musacoder-gpu-suite-cache")
    ap.add_argument("--sections", default="honest,hacks,faults",
                    help="which parts to run, comma-separated: honest (cold, warm, agreement), "
                         "hacks (static, runtime), faults (then the host check)")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if not sections or sections - {"honest", "hacks", "faults"}:
        ap.error(f"--sections: {args.sections!r}: name some of honest, hacks, faults")
    os.makedirs(args.out, exist_ok=True)
    common = ["--cache-dir", args.cache_dir, "--trial-timeout", "20", "--timing-budget", "1.0"]
    table, failures, details = [], 0, []

    def check(suite, name, row, expect, note=""):
        nonlocal failures
        ok = matches(row, expect)
        failures += not ok
        if not ok and row is not None:
            details.append(f"{suite}/{name}: {row.get('reason', '')[:200]} | "
                           f"{(row.get('runtime_error') or row.get('infra_error') or '')[-400:]}")
        got = "missing" if row is None else f"{row['verdict']} {row['rule']}".strip()
        table.append((suite, name, expect, got, "PASS" if ok else "FAIL", note))

    victim = "/etc/musacoder_victim"
    try:
        with open(victim, "w") as f:
            f.write("must survive")
    except OSError:
        victim = None

    wall_cold, wall_warm, agreement = 0.0, 0.0, []
    if "honest" in sections:
        # variants: more honest kernels per problem (static helpers, own parameter names, other
        # summation orders) that must be accepted too.
        honest = cases(os.path.join(CASES, "gpu", "honest")) + cases(os.path.join(CASES, "gpu", "native")) \
            + cases(os.path.join(CASES, "gpu", "variants"))
        honest = [(("native_" if p.endswith(".cu") else "") + n, p) for n, p in honest]
        rows, wall_cold, _ = run_eval(args.musacoder, honest, args.out, "honest_cold", common)
        for name, path in honest:
            r = rows.get(name)
            sp = r.get("speedup") if r else None
            note = f"speedup {sp:.3f} compile {r['compile_s']:.1f}s" if sp else ""
            if r and r["verdict"] == "ok" and not (sp and 0.01 < sp < 50):
                note += " INSANE SPEEDUP"
            check("honest", name, r, "ok", note)

        rows2, wall_warm, _ = run_eval(args.musacoder, honest, args.out, "honest_warm", common)
        for name, _ in honest:
            a, b = rows.get(name), rows2.get(name)
            if a and b and a.get("candidate_time") and b.get("candidate_time"):
                m1, m2 = a["candidate_time"]["median_us"], b["candidate_time"]["median_us"]
                agreement.append((name, m1, m2, abs(m1 - m2) / min(m1, m2)))

    if "hacks" in sections:
        hacks = cases(os.path.join(CASES, "hacks"))
        rows, _, _ = run_eval(args.musacoder, hacks, args.out, "hacks_static", common)
        for name, path in hacks:
            check("hack-static", name, rows.get(name), header(path, "expect"))
        rows, _, _ = run_eval(args.musacoder, hacks, args.out, "hacks_runtime", common + ["--skip-static"])
        for name, path in hacks:
            check("hack-runtime", name, rows.get(name), header(path, "expect-runtime"))

    if "faults" in sections:
        faults = cases(os.path.join(CASES, "faults"))
        after = [("after_faults_" + n, p) for n, p in cases(os.path.join(CASES, "gpu", "honest"))[:2]]
        rows, _, _ = run_eval(args.musacoder, faults + after, args.out, "faults", common + ["--gpus", "0"])
        for name, path in faults:
            check("fault", name, rows.get(name), header(path, "expect-runtime"))
        for name, _ in after:
            check("fault", name, rows.get(name), "ok", "executor recovered")

    damage = [p for p in ("/etc/musacoder_pwned", "/etc/musacoder_pwned2") if os.path.exists(p)]
    if victim and not os.path.exists(victim):
        damage.append(victim + " deleted")
    table.append(("host", "no damage", "none", ", ".join(damage) or "none",
                  "PASS" if not damage else "FAIL", ""))
    failures += bool(damage)

    print("\n| suite | case | expected | got | result | note |")
    print("|---|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print("\n| kernel | median us run 1 | median us run 2 | difference |")
    print("|---|---|---|---|")
    for name, m1, m2, d in agreement:
        print(f"| {name} | {m1:.2f} | {m2:.2f} | {100 * d:.1f}% |")
    print(f"\nhonest set wall: cold {wall_cold:.1f}s, warm {wall_warm:.1f}s")
    for d in details:
        print("FAIL DETAIL", d.replace("\n", " / "))
    passed = sum(1 for r in table if r[4] == "PASS")
    with open(os.path.join(args.out, "gpu_suite.json"), "w") as f:
        json.dump({"table": table, "agreement": agreement, "wall_cold_s": wall_cold,
                   "wall_warm_s": wall_warm}, f, indent=1)
    print(f"{passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
