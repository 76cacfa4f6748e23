#!/usr/bin/env bash
# The main job: set up, build, and verify the bundled candidate kernels against their
# KernelBench-format problems with MooreEval, on embedded defaults (no service to install).
# With a GPU: the CUDA candidates, timed against eager PyTorch. Without one: the CPU-mode
# candidates (C++ extensions judged on the CPU), so the whole pipeline still runs. Then the
# training recipe in miniature (recipes/tiny: synth, corpus, tokenizer, a model pretrained,
# SFT, RFT, RL, evaluated after each; under a minute on the CPU) into results/recipe-tiny;
# RECIPE=small runs the one-GPU recipe instead (resumable: run again to continue; it gets a
# KernelBench checkout into .kb first, scripts/get-kernelbench.sh),
# RECIPE=none skips it.
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
case ${RECIPE:-tiny} in
  none) ;;
  tiny|small)
    # recipes/small decontaminates against, and evaluates on, a KernelBench checkout in .kb.
    [ "${RECIPE:-tiny}" = small ] && bash scripts/get-kernelbench.sh
    echo "the training recipe, recipes/${RECIPE:-tiny} (docs/recipe.md): results/recipe-${RECIPE:-tiny}"
    build/musacoder recipe "recipes/${RECIPE:-tiny}/recipe.toml" --out "results/recipe-${RECIPE:-tiny}" ;;
  *) echo "RECIPE must be tiny, small or none" >&2; exit 2 ;;
esac
