#!/usr/bin/env bash
# A plan for session 52's lease on one H200 (not part of the project; lease51.sh's pattern).
# Build first: DEVICE_TESTS=1 bash scripts/build-device.sh; .kb/bench (scripts/get-kernelbench.sh).
#   lease52.sh prep    call 1 (carry build-device-dist/{musacoder,lib,mc_model_tests}, .kb/whl, .kb/bench,
#                      this file): the lease's end; .kb/whl and .kb/bench kept in /tmp/stash; env and the
#                      engine's CUDA tests (overlapped decode against synchronous, kept caches)
#   lease52.sh start   call 2 (carry build-device-dist/{musacoder,musacoder-model,lib}, this file): the
#                      sharing bench with --sync-too (alone and beside one judge-like load), then
#                      detached: "chain" (corpus .. probe-rl from the committed seed: RFT 4eb253b8
#                      expected) and, once it has ended, "bench" (the pipeline bench alone)
#   lease52.sh wait    later calls: wait and bring back both. Send FOUR waits in the batch.
# A call carries 64 MiB with the tree (~25 MB): hence two calls to bring everything.
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
  prep)
    up=$(cut -d. -f1 /proc/uptime); [ "$up" -gt 900 ] && up=150
    echo $(( $(now) - up + ${LEASE_S:-1800} - 40 )) > /tmp/lease-end
    echo "lease ends (40 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    mkdir -p /tmp/stash && cp -r .kb/whl .kb/bench /tmp/stash/ && ls /tmp/stash/*
    BIN=$BIN STAGES="env engine-tests" bash scripts/gpu-check.sh > "$OUT/prep.log" 2>&1
    grep -v "^judge:" "$OUT/prep.log" | tail -30 ;;
  start)
    [ -d /tmp/stash/whl ] || { echo "lease: no /tmp/stash (run prep first, on this machine)"; exit 1; }
    mkdir -p .kb /tmp/kb-bench && cp -r /tmp/stash/whl .kb/ && cp -r /tmp/stash/bench/. /tmp/kb-bench/
    BIN=$BIN STAGES=sharing SHARING_ARGS="${SHARING:---loads 0,1 --sync-too}" SHARING_LONG_ARGS=none \
      bash scripts/gpu-check.sh > "$OUT/start.log" 2>&1
    tail -14 "$OUT/start.log"
    DETACH=chain DETACH_WAIT=3 BIN=$BIN STAGES=recipe RECIPE_GPUS=0 RECIPE_TIMEOUT=1500 \
      RECIPE_ARGS="--stages corpus,tokenizer,init,pretrain,sft,rft,probe-rl $A" bash scripts/gpu-check.sh | tail -6
    DETACH=bench DETACH_AFTER=chain DETACH_WAIT=2 BIN=$BIN STAGES=rl-pipeline PIPE_GPUS=0 PIPE_STEPS=${STEPS:-8} \
      PIPE_ARMS=${ARMS:-turns,async-defer-kv,async-defer-kv@2,turns@2} PIPE_STOP_BY=$(( $(end) - 10 )) \
      bash scripts/gpu-check.sh | tail -4
    touch /tmp/launched ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    w=$(( ${WAIT:-560} < $(end) - 20 - $(now) ? ${WAIT:-560} : $(end) - 20 - $(now) )); [ "$w" -lt 1 ] && w=1
    DETACH=chain DETACH_WAIT=1 DETACH_TAIL=8 BIN=$BIN STAGES=recipe bash scripts/gpu-check.sh | tail -10
    DETACH=bench DETACH_WAIT=$w BIN=$BIN STAGES=rl-pipeline bash scripts/gpu-check.sh | tail -30
    # The arms finished so far, should the machine go before the stage packs them.
    (cd /tmp/rl-pipeline && tar czf "$OUT/partial.tgz" SUMMARY.json ./*.log ./*/metrics.jsonl) 2>/dev/null; ls -la "$OUT" ;;
  *) echo "usage: lease52.sh prep|start|wait"; exit 2 ;;
esac
