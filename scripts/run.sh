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
bash scripts/build.sh musacoder  # the binaries this job runs (musacoder-model with it), no test targets
mkdir -p results
if [ $# -gt 0 ]; then exec build/musacoder eval "$@"; fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  solutions=tests/cases/gpu/honest
  build/musacoder eval --problems tests/cases/problems --solutions $solutions --out results/eval.jsonl
else
  echo "no GPU found: judging the CPU-mode candidates on the CPU (--device cpu)"
  solutions=examples/cpu
  build/musacoder eval --problems tests/cases/problems --solutions $solutions \
    --device cpu --timing-budget 0.3 --trial-timeout 10 --out results/eval.jsonl
fi
# Each candidate's intent (its "# expect:" header) beside its verdict, and what the run showed.
python3 - "$solutions" results/eval.jsonl <<'PY'
import json, os, re, sys
folder, rows = sys.argv[1], [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
def expect(problem):
    path = os.path.join(folder, problem + ".py")
    if not os.path.exists(path):
        return "extract_error"  # no candidate for this problem
    m = re.search(r"^# expect: (.+)$", open(path).read(), re.M)
    return m.group(1).strip() if m else "ok"
as_meant = 0
print(f"\n{'problem':<12} {'intent':<19} {'verdict':<34} as meant")
for r in rows:
    want = expect(r["problem"])
    intent = ("honest" if want == "ok" else "no candidate" if want == "extract_error" else
              "a hack" if want.split()[0] in ("illegal", "static_violation") else "deliberately wrong")
    got = r["verdict"] + (f" ({r['rule']})" if r.get("rule") else "")
    ok = r["verdict"] == want.split()[0] and (len(want.split()) < 2 or r.get("rule") == want.split()[1])
    as_meant += ok
    print(f"{r['problem']:<12} {intent:<19} {got:<34} {'yes' if ok else 'NO'}")
print(f"\nMooreEval judged {as_meant} of {len(rows)} candidates as they were meant: honest kernels accepted, "
      "the wrong one and the hack rejected." + (" On the CPU the speedups compare plain C++ loops with "
      "PyTorch's vectorized CPU kernels, so they say nothing of GPU kernels." if folder == "examples/cpu" else ""))
PY
case ${RECIPE:-tiny} in
  none) ;;
  tiny|small)
    # recipes/small decontaminates against, and evaluates on, a KernelBench checkout in .kb.
    [ "${RECIPE:-tiny}" = small ] && bash scripts/get-kernelbench.sh
    echo "the training recipe, recipes/${RECIPE:-tiny} (docs/recipe.md): results/recipe-${RECIPE:-tiny}"
    build/musacoder recipe "recipes/${RECIPE:-tiny}/recipe.toml" --out "results/recipe-${RECIPE:-tiny}" ;;
  *) echo "RECIPE must be tiny, small or none" >&2; exit 2 ;;
esac
