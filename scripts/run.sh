#!/usr/bin/env bash
# The main job: set up, build, and verify the bundled candidate kernels against their
# KernelBench-format problems with MooreEval, on embedded defaults (no service to install).
# With a GPU: the CUDA candidates, timed against eager PyTorch. Without one: the CPU-mode
# candidates (C++ extensions judged on the CPU), so the whole pipeline still runs.
# Extra arguments go to `musacoder eval` (e.g. --problems DIR --solutions DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p results
if [ $# -gt 0 ]; then exec build/musacoder eval "$@"; fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  build/musacoder eval --problems tests/cases/problems --solutions tests/cases/gpu/honest \
    --out results/eval.jsonl
else
  echo "no GPU found: judging the CPU-mode candidates on the CPU (--device cpu)"
  build/musacoder eval --problems tests/cases/problems --solutions examples/cpu \
    --device cpu --timing-budget 0.3 --trial-timeout 10 --out results/eval.jsonl
fi
