#!/usr/bin/env bash
# A plan for session 53's lease on one H200 (not part of the project; lease52.sh's pattern).
# Build first: bash scripts/build-device.sh; .kb/bench (scripts/get-kernelbench.sh); .kb/whl.
#   lease53.sh start   call 1 (carry build-device-dist/{musacoder,musacoder-model,lib}, .kb/whl,
#                      .kb/bench, this file): env; the GPU suite's hack section (the verifier
#                      changed: deferred answers timed without repeating their trials); then
#                      detached: "chain" (corpus .. probe-rl from the committed seed: RFT 4eb253b8
#                      expected, overlap off) and, once it has ended, "bench" (the pipeline bench)
#   lease53.sh wait    later calls: wait and bring back both, and the async arms' judge logs.
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
    echo $(( $(now) - up + ${LEASE_S:-1800} - 40 )) > /tmp/lease-end
    echo "lease ends (40 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    mkdir -p /tmp/kb-bench && cp -r .kb/bench/. /tmp/kb-bench/
    BIN=$BIN STAGES=env bash scripts/gpu-check.sh > "$OUT/env.out" 2>&1; tail -4 "$OUT/env.out"
    # The chain first (it needs ~660 s), the suite beside it would perturb the suite's timings:
    # the suite runs first, bounded.
    t0=$(now)
    BIN=$BIN STAGES=suite SUITE_ARGS="--sections hacks" timeout 300 bash scripts/gpu-check.sh > "$OUT/suite.out" 2>&1
    echo "suite: rc $? in $(( $(now) - t0 )) s"; grep -E "passed|FAIL" "$OUT/suite.out" | tail -12
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
    # The arms finished so far, should the machine go before the stage packs them; the judges' logs.
    (cd /tmp/rl-pipeline && tar czf "$OUT/partial.tgz" SUMMARY.json ./*.log ./*/metrics.jsonl) 2>/dev/null
    (cd /tmp/rl-pipeline && tar czf "$OUT/judge-logs.tgz" ./cache-*/scratch/*/judge.log) 2>/dev/null; ls -la "$OUT" ;;
  *) echo "usage: lease53.sh start|wait"; exit 2 ;;
esac
