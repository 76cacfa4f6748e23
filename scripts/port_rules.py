"""Writes src/port/cuda_musa.toml, the CUDA <-> MUSA rule table of `musacoder port`, from a
torch_musa checkout (MooreThreads/torch_musa: torch_musa/utils/mapping/*.json and its sources),
and prints how much of torch_musa's own mapping the table reproduces, family by family.

    python3 scripts/port_rules.py --torch-musa /path/to/torch_musa [--check]

The table holds facts (API names), each row naming the file it comes from; rules that are not
in torch_musa's mapping files cite where in torch_musa they were seen. Nothing is fetched here.
--check only compares the committed table with what the checkout gives (exit 1 on a difference).
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "src", "port", "cuda_musa.toml")

# Identifier prefixes, longest first. A prefix applies when the next character is an upper-case
# letter, a digit or '_' (cudaMalloc, cublasLtMatmul, CUBLAS_OP_N), never inside a longer word.
PREFIXES = [
    ("cublasLt", "mublasLt", "blas"), ("cublas", "mublas", "blas"), ("CUBLAS", "MUBLAS", "blas"),
    ("curand", "murand", "rand"), ("CURAND", "MURAND", "rand"),
    ("cuda", "musa", "runtime"), ("CUDA", "MUSA", "runtime"), ("cu", "mu", "driver"),
]
# Exact identifiers taken from general.json by pattern (families the prefixes do not cover).
EXACT_PATTERNS = [
    (r"^__CUDA[A-Z_]*__$|^__CUDACC[A-Z_]*__?$", "macros"),   # __CUDA_ARCH__, __CUDACC__
    (r"^CUDART_[A-Z0-9_]+$", "macros"),                       # CUDART_VERSION, CUDART_PI_F
    (r"^(__)?nv_bfloat16[0-9]*(_raw)?$|^__nv_bfloat162?$", "types"),
    (r"^CU[a-z][A-Za-z]*$", "driver"),                         # CUresult, CUstream, CUdevice
]
# Found in torch_musa's own sources (no mapping file covers ATen's CUDA headers).
ATEN_INCLUDES = [
    ("ATen/cuda/CUDAContext.h", "torch_musa/csrc/aten/musa/MUSAContext.h"),
    ("c10/cuda/CUDAGuard.h", "torch_musa/csrc/core/MUSAGuard.h"),
    ("c10/cuda/CUDAStream.h", "torch_musa/csrc/core/MUSAStream.h"),
]


def git_show(repo, path):
    git_dir = repo if repo.endswith(".git") or os.path.basename(repo) == "repo" else os.path.join(repo, ".git")
    if os.path.isdir(git_dir):
        return subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{path}"], check=True,
                              capture_output=True, text=True).stdout
    with open(os.path.join(repo, path)) as f:
        return f.read()


def head_commit(repo):
    git_dir = repo if os.path.basename(repo) == "repo" else os.path.join(repo, ".git")
    return subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def prefix_apply(name):
    for cuda, musa, fam in PREFIXES:
        if name.startswith(cuda) and len(name) > len(cuda):
            nxt = name[len(cuda)]
            if nxt.isupper() or nxt.isdigit() or nxt == "_":
                return musa + name[len(cuda):], cuda, fam
    return None, None, None


def q(s):
    return json.dumps(s)  # a TOML basic string is a JSON string for these characters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-musa", required=True, help="torch_musa checkout (work tree or bare git dir)")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    mp = "torch_musa/utils/mapping/"
    general = json.loads(git_show(args.torch_musa, mp + "general.json"))
    include = json.loads(git_show(args.torch_musa, mp + "include.json"))
    extra = json.loads(git_show(args.torch_musa, mp + "extra.json"))
    commit = head_commit(args.torch_musa)

    rows, stats = [], {}
    # Prefix families: the exceptions torch_musa maps otherwise become exact rules.
    for name, want in sorted(general.items()):
        got, pfx, fam = prefix_apply(name)
        if pfx is None:
            continue
        st = stats.setdefault(pfx, [0, 0])
        st[0] += 1
        if got == want:
            st[1] += 1
        else:
            rows.append(("exact", name, want, fam, "general.json"))
    for pattern, fam in EXACT_PATTERNS:
        for name, want in sorted(general.items()):
            if re.match(pattern, name) and prefix_apply(name)[0] is None:
                rows.append(("exact", name, want, fam, "general.json"))
    for name, want in sorted(extra.items()):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            rows.append(("exact", name, want, "aten", "extra.json"))
    incl = [(k, v, "headers", "include.json") for k, v in sorted(include.items())]
    incl += [(k, v, "aten", f"torch_musa sources (#include \"{v}\")") for k, v in ATEN_INCLUDES]

    out = [f"# CUDA <-> MUSA rules of `musacoder port`, written by scripts/port_rules.py from",
           f"# MooreThreads/torch_musa at {commit} (torch_musa/utils/mapping/*.json and its sources).",
           "# Regenerate with that script; edit the script, not this file. Coverage of torch_musa's",
           "# general.json by the prefix rules (keys with the prefix, of them mapped alike; the rest are",
           "# exact rules below):"]
    for cuda, musa, fam in PREFIXES:
        n, ok = stats.get(cuda, [0, 0])
        out.append(f"#   {cuda:9s} {n:5d} keys, {ok:5d} alike")
    out += ["", "version = 1", f"source = {q('MooreThreads/torch_musa@' + commit)}", ""]
    for cuda, musa, fam in PREFIXES:
        n, ok = stats.get(cuda, [0, 0])
        out += ["[[prefix]]", f"cuda = {q(cuda)}", f"musa = {q(musa)}", f"family = {q(fam)}",
                f"source = {q(f'general.json ({ok} of {n} keys)')}", ""]
    seen = set()
    for kind, cuda, musa, fam, src in rows:
        if cuda in seen:
            continue
        seen.add(cuda)
        out += ["[[exact]]", f"cuda = {q(cuda)}", f"musa = {q(musa)}", f"family = {q(fam)}", f"source = {q(src)}", ""]
    for cuda, musa, fam, src in incl:
        out += ["[[include]]", f"cuda = {q(cuda)}", f"musa = {q(musa)}", f"family = {q(fam)}", f"source = {q(src)}", ""]
    text = "\n".join(out)
    tail_path = os.path.join(ROOT, "src", "port", "cuda_musa_manual.toml")
    if args.check:
        with open(OUT) as f:
            if f.read() != text:
                print(f"{OUT} differs from what torch_musa at {commit} gives", file=sys.stderr)
                return 1
        print("table matches")
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {len(seen)} exact, {len(incl)} include rules; manual rules stay in {tail_path}")
    for cuda, musa, fam in PREFIXES:
        print(f"  {cuda:9s} {stats.get(cuda, [0, 0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
