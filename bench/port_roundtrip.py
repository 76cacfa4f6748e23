"""The CUDA -> MUSA -> CUDA round trip, judged (issue 18): every case is ported to MUSA and back
with `musacoder port`, and MooreEval judges the originals and the round-tripped sources in the
same run; their verdicts (and fired rules) must be identical. This shows that the port loses
nothing on the subset it maps, on the hardware MooreEval runs on; it says nothing about MUSA
hardware, which we have not had.

  python3 bench/port_roundtrip.py --musacoder build/musacoder --out OUT \\
      --cases tests/cases/gpu/honest tests/cases/gpu/native tests/cases/hacks tests/cases/faults \\
      [--synth SYNTH_DIR] [--device cpu] [-- extra `musacoder eval` options]

Cases are files with a `# problem: NAME` (or `// problem: NAME`) header, judged against
tests/cases/problems; --synth adds a `musacoder synth` folder's verified solutions, judged
against its own problems. Out: OUT/roundtrip.jsonl (one row per case: the MUSA port's changes
and warnings, whether the way back restored the text, both verdicts), a table on stdout, and
exit 1 when any verdict differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
from run_gpu_suite import header  # noqa: E402


def case_files(paths):
    out = []
    for p in paths:
        files = [os.path.join(p, n) for n in sorted(os.listdir(p))] if os.path.isdir(p) else [p]
        for f in files:
            if f.endswith((".py", ".cu")) and header(f, "problem"):
                out.append((os.path.splitext(os.path.basename(f))[0], header(f, "problem"), open(f).read(), f))
    # Names are sample ids: the same name in two folders (gpu/honest/1_Add.py, gpu/native/1_Add.cu)
    # would share one verdict, so those get their folder's name in front.
    names = [c[0] for c in out]
    return [(f"{os.path.basename(os.path.dirname(f))}-{n}" if names.count(n) > 1 else n, prob, text, f)
            for n, prob, text, f in out]


def synth_cases(folder):
    out = []
    for i, line in enumerate(open(os.path.join(folder, "dataset.jsonl"))):
        r = json.loads(line)
        key = f"{r['problem_id']}_{r['name']}"
        ext = ".cu" if r["format"] == "native" else ".py"
        out.append((f"synth{i}_{r['format']}", key, r["solution"], f"{folder}/dataset.jsonl:{i + 1}", ext))
    return out


def port(binary, text, ext, to, work):
    """One source through `musacoder port --to TO`: (text, summary)."""
    src = os.path.join(work, "in" + ext)
    with open(src, "w") as f:
        f.write(text)
    out = os.path.join(work, "out" + (ext if ext == ".py" else (".mu" if to == "musa" else ".cu")))
    r = subprocess.run([binary, "port", "--to", to, src, "-o", out, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"musacoder port --to {to} failed on {src}: {r.stderr}")
    summary = json.loads(r.stdout)["files"][0]
    return open(out).read(), summary


def judge(binary, problems, items, out, tag, extra):
    sol = os.path.join(out, f"{tag}.solutions.jsonl")
    res = os.path.join(out, f"{tag}.results.jsonl")
    with open(sol, "w") as f:
        for sample, problem, text in items:
            f.write(json.dumps({"problem": problem, "sample_id": sample, "answer": text}) + "\n")
    cmd = [binary, "eval", "--problems", problems, "--solutions", sol, "--out", res, "--no-progress", *extra]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(out, f"{tag}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + "\n" + p.stderr)
    rows = [json.loads(x) for x in open(res)] if os.path.exists(res) else []
    return {r["sample_id"]: r for r in rows}, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", nargs="*", default=[], help="case files or folders (with a `problem:` header)")
    ap.add_argument("--synth", default="", help="a `musacoder synth` output folder")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("extra", nargs="*", help="more `musacoder eval` options (after --)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    groups = []
    cases = case_files(a.cases)
    if cases:
        groups.append(("cases", os.path.join(ROOT, "tests", "cases", "problems"),
                       [(s, p, t, os.path.splitext(f)[1]) for s, p, t, f in cases]))
    if a.synth:
        groups.append(("synth", os.path.join(a.synth, "problems"),
                       [(s, p, t, ext) for s, p, t, _, ext in synth_cases(a.synth)]))
    if not groups:
        raise SystemExit("no cases: give --cases and/or --synth")
    extra = ["--device", a.device, *a.extra]
    rows, differ = [], 0
    with tempfile.TemporaryDirectory() as work:
        for name, problems, items in groups:
            back, meta = [], {}
            for sample, problem, text, ext in items:
                musa, to_musa = port(a.musacoder, text, ext, "musa", work)
                cuda, to_cuda = port(a.musacoder, musa, ".py" if ext == ".py" else ".mu", "cuda", work)
                back.append((sample, problem, cuda))
                meta[sample] = {"changes_to_musa": to_musa["changes"], "warnings": [w["id"] for w in to_musa["warnings"]],
                                "restored": cuda == text}
            orig, t_orig = judge(a.musacoder, problems, [(s, p, t) for s, p, t, _ in items], a.out, f"{name}-original",
                                 extra)
            rt, t_rt = judge(a.musacoder, problems, back, a.out, f"{name}-roundtrip", extra)
            for sample, problem, _, _ in items:
                o, r = orig.get(sample, {}), rt.get(sample, {})
                same = (o.get("verdict"), o.get("rule")) == (r.get("verdict"), r.get("rule")) and bool(o)
                differ += not same
                rows.append({"group": name, "sample": sample, "problem": problem, **meta[sample],
                             "verdict": o.get("verdict"), "rule": o.get("rule"),
                             "roundtrip_verdict": r.get("verdict"), "roundtrip_rule": r.get("rule"), "same": same})
            print(f"{name}: {len(items)} cases judged twice ({t_orig:.1f} s original, {t_rt:.1f} s round trip)")
    with open(os.path.join(a.out, "roundtrip.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print("\n| group | case | changes to MUSA | warnings | restored | verdict | round trip | same |")
    print("|---|---|---:|---|---|---|---|---|")
    for r in rows:
        v = f"{r['verdict']}" + (f" ({r['rule']})" if r["rule"] else "")
        w = f"{r['roundtrip_verdict']}" + (f" ({r['roundtrip_rule']})" if r["roundtrip_rule"] else "")
        print(f"| {r['group']} | {r['sample']} | {r['changes_to_musa']} | {', '.join(r['warnings']) or '-'} | "
              f"{'yes' if r['restored'] else 'NO'} | {v} | {w} | {'yes' if r['same'] else 'NO'} |")
    restored = sum(r["restored"] for r in rows)
    print(f"\nround trip: {len(rows)} cases, {restored} restored byte for byte, {len(rows) - differ} with the same "
          f"verdict, {differ} different")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
