#!/usr/bin/env bash
# A plan for session 48's lease on one H200 (not part of the project; session 47 wrote it, untried).
#   lease48.sh start   call 1 (carry build-device-dist/{musacoder,musacoder-model,lib}, this file):
#                      the lease's end, env, then issue 15's `sharing` and `gemm-shapes` (~150 s)
#   lease48.sh stash   call 2 (carry .kb/start/start.json, part-00, part-01, this file)
#   lease48.sh launch  call 3 (carry part-02, part-03, this file): issue 17 at eval_samples 8
#                      (recipes/small's default now): the five arms, eval-rft, eval-rl, the arms'
#                      evaluations and report, with the MooreEval service on the same GPU (detached)
#   lease48.sh wait    later calls: wait (up to ~560 s, or the lease's end) and bring back results
# Fire all calls in ONE batch (the machine is given back 30 s after a call).
set -u
cd "$(dirname "$0")/.."
BIN=$PWD/build-device-dist/musacoder
R=/tmp/recipe-run
A="--set rft_samples=2 --set rl_steps=16 --set rl_lr=3e-6 --set rl_profile_step=0 --set rl_temperature=0.9"
ARMS="--stages rl,rl-no-primeecho,rl-no-bdr,rl-no-mirrorpop,rl-single-turn,eval-rft,eval-rl,eval-ablations,report --together-per-gpu 5 $A"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
now() { date +%s; }
end() { cat /tmp/lease-end; }
case "${1:-}" in
  start)
    up=$(cut -d. -f1 /proc/uptime); [ "$up" -gt 900 ] && up=150
    echo $(( $(now) - up + 1800 - 120 )) > /tmp/lease-end
    echo "lease ends (120 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    BIN=$BIN STAGES="env gemm-shapes sharing" SHARING_ARGS=none \
      SHARING_LONG_ARGS="--loads 0,1,2 --kernel-ms 20 --idle-ms 5 --profile 1" \
      bash scripts/gpu-check.sh > "$OUT/issue15.log" 2>&1
    grep -v "^judge:" "$OUT/issue15.log" | tail -40 ;;
  stash)
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash ;;
  launch)
    # Issue 15 first, alone on the GPU: step 4 of async-defer-kv under libtorch's profiler.
    BIN=$BIN STAGES=rl-pipeline PIPE_ARMS=async-defer-kv PIPE_STEPS=4 PIPE_ARGS="--format native --temperature 0.9 \
      --order shuffle --group-size 8 --level 1 --max-problems 48 --keep-varied=$R/eval/rl-probe/results.jsonl \
      --prompts-per-step 8 --max-new-tokens 2048 --stop-loops 512 --max-seq-len 16384 --micro-batch-tokens 32768 \
      --timing-budget 0.1 --lr 1e-6 --seed 1 --profile-step 4" bash scripts/gpu-check.sh > "$OUT/profile-run.log" 2>&1
    tail -12 "$OUT/profile-run.log"
    BIN=$BIN STAGES=recipe RECIPE_GPUS=0 RECIPE_VERIFIER_GPU=0 RECIPE_TIMEOUT=30 RECIPE_ARGS="$ARMS" \
      bash scripts/gpu-check.sh | tail -15; touch /tmp/launched ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    BIN=$BIN STAGES=recipe RECIPE_GPUS=0 RECIPE_VERIFIER_GPU=0 \
      RECIPE_TIMEOUT=$(( ${WAIT:-540} < $(end) - 40 - $(now) ? ${WAIT:-540} : $(end) - 40 - $(now) )) \
      RECIPE_ARGS="$ARMS" bash scripts/gpu-check.sh | tail -25 ;;
  *) echo "usage: lease48.sh start|stash|launch|wait"; exit 2 ;;
esac
