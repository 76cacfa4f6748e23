#!/usr/bin/env bash
# MooreEval vs KernelBench's harness on the GPU machine. Needs KernelBench's src/ folder at
# $KERNELBENCH_SRC (default .kb/src: a checkout the user provides, never committed) and its
# Python dependencies (pydantic: carried as wheels in .kb/whl/ when the machine has no network).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/musacoder}
KB=${KERNELBENCH_SRC:-.kb/src}
OUT=${OUT:-$PWD/gpu-out}
if [ ! -d "$KB/kernelbench" ]; then echo "bench: no KernelBench at $KB (set KERNELBENCH_SRC)"; exit 1; fi
WHEELS=${WHEELS:-.kb/whl}  # e.g. `pip download pydantic -d .kb/whl` here, carried with the call
if ! python3 -c 'import pydantic' 2>/dev/null && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 bench/kernelbench_compare.py --musacoder "$BIN" --kernelbench "$KB" --out "$OUT/bench" "$@"
