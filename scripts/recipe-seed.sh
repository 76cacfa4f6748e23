#!/usr/bin/env bash
# A recipe run's seed: its finished synth stage (synth/, synth-eval/, synth-rl/ where the recipe
# makes it, and a state.json that lists that stage alone), the one stage whose output is small
# enough to travel to a fresh GPU machine, where checkpoints are not. scripts/gpu-check.sh
# (STAGES=recipe) starts an empty run folder from it (RECIPE_SEED, default .kb/recipe-seed.tgz),
# so the lease starts at corpus. Where RFT has sampled and judged, its samples and verdicts
# travel too (rft/prompts.jsonl, samples.jsonl, samples.meta.json, verified.jsonl; the stage
# itself stays unfinished): `musacoder rft` reuses samples only when the meta matches (the
# same model weights, by hash, prompts and sampling) and verdicts only for the same answer text
# under the same MooreEval settings. Since SFT is bit for bit the same from lease to lease, the
# next lease's RFT then skips sampling and judging and fine-tunes to the same model, so RL's
# arms of two leases start from the same checkpoint.
#
#   bash scripts/recipe-seed.sh pack RUN OUT.tgz
#       pack the finished synth stage of RUN (gpu-check does this after every recipe call)
#   bash scripts/recipe-seed.sh start-pack RUN DIR [--keep FOLDER]...
#   bash scripts/recipe-seed.sh start-unpack DIR RUN
#       a run's *start*: everything its finished stages made that a later stage reads, with the
#       last checkpoint of each kept training folder (default: the recipe's rl_from, rft/sft), so
#       that a later lease starts at RL's arms instead of spending ~640 s of a 1,800 s lease on
#       corpus to probe-rl. See start_pack below for what is left out. The packed tgz is split into
#       parts of START_PART_MIB MiB (default 14) beside a manifest, start.json, because the
#       device tool returns files of at most 16 MiB (64 MiB a call) and sends 64 MiB a call with
#       the working tree: a lease carries the parts over two or three calls (a call's carry
#       replaces .kb/start there, so scripts/gpu-check.sh keeps each call's parts in
#       /tmp/start-stash while the machine stays warm). start-unpack needs every part (sizes and
#       the whole's sha256 are checked), fills a run folder that holds no more than the seed,
#       and checks that the seed's files the start left out are there, unchanged.
#   bash scripts/recipe-seed.sh cpu [RUN] [OUT.tgz]
#       make the synth stage here, on a machine without a GPU, then pack it (defaults:
#       /tmp/recipe-seed-run, .kb/recipe-seed.tgz; RECIPE: the recipe file, recipes/small).
#       Teacher solutions are compile-checked, not run, and the eager-time band is lifted (CPU
#       times are not GPU times), so the data differs slightly from a GPU synth (recipes/small,
#       seed 1: 400 dataset rows against 389 verified on an H100); about 11 minutes on 2 cores.
#       RECIPE_ARGS: more recipe options for the synth stage, e.g. "--set problems=1000".
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
pack() {  # pack RUN OUT
  local run=$1 out=$2 tmp
  [ -f "$run/recipe/state.json" ] || { echo "recipe-seed: $run is no recipe run (no recipe/state.json)" >&2; return 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$tmp/recipe"
  python3 - "$run/recipe/state.json" "$tmp/recipe/state.json" <<'PY'
import json, sys
state = json.load(open(sys.argv[1]))
synth = state.get("stages", {}).get("synth", {})
if not synth.get("done"):
    sys.exit(f"recipe-seed: {sys.argv[1]} has no finished synth stage")
state["stages"] = {"synth": synth}
json.dump(state, open(sys.argv[2], "w"), indent=1)
PY
  cp -r "$run/synth" "$run/synth-eval" "$tmp/"
  [ -d "$run/synth-rl" ] && cp -r "$run/synth-rl" "$tmp/"
  [ -f "$run/recipe/synth.log" ] && cp "$run/recipe/synth.log" "$tmp/recipe/"
  if [ -f "$run/rft/samples.meta.json" ] && [ -f "$run/rft/verified.jsonl" ]; then
    mkdir -p "$tmp/rft"
    cp "$run/rft/prompts.jsonl" "$run/rft/samples.jsonl" "$run/rft/samples.meta.json" "$run/rft/verified.jsonl" "$tmp/rft/"
  fi
  mkdir -p "$(dirname "$out")"
  tar czf "$out" -C "$tmp" .
  echo "recipe-seed: $out ($(du -h "$out" | cut -f1)) from $run"
}
case $what in
  pack)
    [ $# -eq 3 ] || { echo "usage: recipe-seed.sh pack RUN OUT.tgz" >&2; exit 2; }
    pack "$2" "$3" ;;
  start-pack)
    [ $# -ge 3 ] || { echo "usage: recipe-seed.sh start-pack RUN DIR [--keep FOLDER]..." >&2; exit 2; }
    python3 scripts/device/recipe_start.py pack "${@:2}" ;;
  start-unpack)
    [ $# -eq 3 ] || { echo "usage: recipe-seed.sh start-unpack DIR RUN" >&2; exit 2; }
    python3 scripts/device/recipe_start.py unpack "$2" "$3" ;;
  cpu)
    run=${2:-/tmp/recipe-seed-run} out=${3:-.kb/recipe-seed.tgz}
    bin=${BIN:-build/musacoder}
    [ -x "$bin" ] || { echo "recipe-seed: no $bin (bash scripts/build.sh, or BIN=...)" >&2; exit 2; }
    bash scripts/get-kernelbench.sh  # synth decontaminates against KernelBench
    MUSACODER_HOME=$PWD "$bin" recipe "${RECIPE:-recipes/small/recipe.toml}" --out "$run" --stages synth \
      --set synth_verify=compile --set synth_device=cpu --set synth_max_eager_us=1e12 ${RECIPE_ARGS:-}
    pack "$run" "$out" ;;
  *)
    echo "usage: recipe-seed.sh pack RUN OUT.tgz | start-pack RUN DIR [--keep FOLDER]... | start-unpack DIR RUN | cpu [RUN] [OUT.tgz]" >&2
    exit 2 ;;
esac
