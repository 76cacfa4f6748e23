#!/usr/bin/env bash
# A plan for session 49's lease on one H200 (not part of the project; session 48 wrote it, untried).
#   lease49.sh start   call 1 (carry build-device-dist/{musacoder,musacoder-model,lib}, .kb/bench, this file;
#                      the corpus stage decontaminates against KernelBench, copied to /tmp/kb-bench):
#                      the lease's end, env, then issue 15's long-kernel sharing runs, fixed: 50 ms kernels
#                      back to back (profiled beside one), and 20 ms with 5 ms idle (~90 s)
#   lease49.sh stash   call 2 (carry .kb/start/start.json, part-00, part-01, this file)
#   lease49.sh launch  call 3 (carry part-02, part-03, this file), detached:
#                      "chain": issue 17's SFT row at 8 samples: corpus, init, pretrain, sft again
#                               (deterministic on an H200: SFT b493fcc3 expected), eval-sft (~480 s)
#                      "bench": once chain has ended, issue 15's pipeline bench alone with padded
#                               prefill, 4 arms x 8 steps (~760 s), stopped before the lease's end
#   lease49.sh wait    later calls: wait on the bench (up to ~540 s) and bring back both runs
# Fire all calls in ONE batch (the machine is given back 30 s after a call).
set -u
cd "$(dirname "$0")/.."
BIN=$PWD/build-device-dist/musacoder
A="--set rft_samples=2 --set rl_steps=16 --set rl_lr=3e-6 --set rl_profile_step=0 --set rl_temperature=0.9 --set kernelbench=/tmp/kb-bench/KernelBench"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
now() { date +%s; }
end() { cat /tmp/lease-end; }
case "${1:-}" in
  start)
    up=$(cut -d. -f1 /proc/uptime); [ "$up" -gt 900 ] && up=150
    echo $(( $(now) - up + 1800 - 120 )) > /tmp/lease-end
    echo "lease ends (120 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    mkdir -p /tmp/kb-bench && cp -r .kb/bench/. /tmp/kb-bench/ && ls /tmp/kb-bench
    BIN=$BIN STAGES="env sharing" SHARING_ARGS="--loads 0,1 --kernel-ms 50 --idle-ms 0 --profile 1" \
      bash scripts/gpu-check.sh > "$OUT/issue15.log" 2>&1
    grep -v "^judge:" "$OUT/issue15.log" | tail -25 ;;
  stash)
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash ;;
  launch)
    DETACH=chain DETACH_WAIT=20 BIN=$BIN STAGES=recipe RECIPE_GPUS=0 RECIPE_TIMEOUT=1500 \
      RECIPE_ARGS="--stages corpus,init,pretrain,sft,eval-sft --redo $A" bash scripts/gpu-check.sh | tail -8
    DETACH=bench DETACH_AFTER=chain DETACH_WAIT=5 BIN=$BIN STAGES=rl-pipeline PIPE_GPUS=0 PIPE_STEPS=8 \
      PIPE_ARMS=turns,async-defer-kv,turns@2,async-defer-kv@2,async-defer-kv-exact PIPE_STOP_BY=$(( $(end) - 30 )) \
      bash scripts/gpu-check.sh | tail -5; touch /tmp/launched ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    w=$(( ${WAIT:-540} < $(end) - 40 - $(now) ? ${WAIT:-540} : $(end) - 40 - $(now) )); [ "$w" -lt 1 ] && w=1
    DETACH=chain DETACH_WAIT=1 BIN=$BIN STAGES=recipe bash scripts/gpu-check.sh | tail -12
    DETACH=bench DETACH_WAIT=$w BIN=$BIN STAGES=rl-pipeline bash scripts/gpu-check.sh | tail -25 ;;
  *) echo "usage: lease49.sh start|stash|launch|wait"; exit 2 ;;
esac
