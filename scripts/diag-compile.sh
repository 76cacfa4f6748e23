#!/usr/bin/env bash
# Where one KernelBench candidate's compile time goes on this machine: the first compile (it
# starts the precompiled header), then with the header built, plain nvcc and phased nvcc.
# Prints each build's steps (status.json). Usage: BIN=... scripts/diag-compile.sh SOLUTION.py
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/musacoder}
SOL=${1:?solution file}
work=$(mktemp -d)
mkdir -p "$work/sol" "$work/cache"
cp "$SOL" "$work/sol/1_Add.py"
run() {  # run NAME [env...]
  local name=$1; shift
  rm -rf "$work/cache/compile"
  env "$@" "$BIN" eval --problems tests/cases/problems --solutions "$work/sol" --cache-dir "$work/cache" \
    --no-timing --no-progress --out "$work/$name.jsonl" >/dev/null 2>"$work/$name.err"
  grep -h "nvcc phases" "$work/$name.err" | head -2
  python3 - "$work" "$name" <<'PY'
import glob, json, sys
for f in glob.glob(sys.argv[1] + "/cache/compile/*/status.json"):
    st = json.load(open(f))
    print(f"{sys.argv[2]:<10} total {st['seconds']:5.1f} s  " +
          "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(st.get("steps", {}).items())))
PY
}
run first MUSACODER_NVCC_PHASES=0  # its pool waits for the header on exit
run plain MUSACODER_NVCC_PHASES=0
run phased MUSACODER_NVCC_PHASES=debug
run phased2 MUSACODER_NVCC_PHASES=debug
rm -rf "$work"
