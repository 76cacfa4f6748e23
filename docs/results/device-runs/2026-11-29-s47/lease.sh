#!/usr/bin/env bash
# Session 47's lease on one H200 (not part of the project: a one-off plan, carried in .kb).
#   lease47.sh start   call 1: the lease's end from the machine's uptime, env
#   lease47.sh stash   call 2: the start's first parts and KernelBench kept outside the tree
#   lease47.sh launch  call 3: unpack the start, then, detached: issue 17's rl (seed 1) with its
#                      service, eval-rl, eval-kb1-rl, and beside it eval-kb1-rft (RECIPE_JOB);
#                      then, with the GPU alone, issue 15's pipeline bench while the lease lasts
#   lease47.sh wait    later calls: wait (up to ~560 s, or the lease's end) and bring back results
set -u
cd "$(dirname "$0")/.."
BIN=$PWD/build-device-dist/musacoder
R=/tmp/recipe-run
A="--set rft_samples=2 --set rl_steps=16 --set rl_lr=3e-6 --set rl_profile_step=0 --set rl_temperature=0.9 --set kernelbench=/tmp/kb-bench/KernelBench"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
now() { date +%s; }
end() { cat /tmp/lease-end; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
case "${1:-}" in
  start)
    up=$(cut -d. -f1 /proc/uptime)
    [ "$up" -gt 900 ] && up=150  # not the VM's own uptime: assume a start of 150 s
    echo $(( $(now) - up + 1800 - 120 )) > /tmp/lease-end
    echo "uptime ${up} s; lease ends (120 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    nproc; python3 -c 'import os; print("affinity", len(os.sched_getaffinity(0)))'; nvidia-smi -L
    BIN=$BIN STAGES=env bash scripts/gpu-check.sh > "$OUT/env.txt" 2>&1; tail -5 "$OUT/env.txt" ;;
  stash)
    mkdir -p /tmp/kb-bench && cp -r .kb/bench/. /tmp/kb-bench/ && ls /tmp/kb-bench
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash ;;
  launch)
    BIN=$BIN STAGES=start bash scripts/gpu-check.sh || { echo "lease: the start did not unpack"; exit 1; }
    setsid bash .kb/lease47.sh plan > /tmp/plan.log 2>&1 < /dev/null &
    touch /tmp/launched; sleep 45; cat /tmp/plan.log; nvidia-smi ;;
  plan)
    echo "plan: from $(date -u +%T), lease ends $(date -u -d @"$(end)" +%T)"
    # Issue 17: RL (seed 1, as the table's), its held-out evaluation, then KernelBench level 1 of
    # the RL model; beside it KernelBench level 1 of the RFT model, as a second recipe job.
    BIN=$BIN STAGES=recipe RECIPE_GPUS=0 RECIPE_VERIFIER_GPU=0 RECIPE_TIMEOUT=1 \
      RECIPE_ARGS="--stages rl,eval-rl,eval-kb1-rl $A" bash scripts/gpu-check.sh | tail -5
    sleep 20
    BIN=$BIN STAGES=recipe RECIPE_JOB=kb1 RECIPE_GPUS=0 RECIPE_TIMEOUT=1 \
      RECIPE_ARGS="--stages eval-kb1-rft $A" bash scripts/gpu-check.sh | tail -5
    while alive $R/recipe.pid || alive $R/recipe-kb1.pid; do sleep 5; done
    echo "plan: recipes finished at $(date -u +%T)"; tail -4 $R/recipe-console.log $R/recipe-kb1-console.log
    # Issue 15: the GPU alone. The service holds a CUDA context on it: stop it first.
    alive $R/verifier.pid && kill "$(cat $R/verifier.pid)"
    for _ in $(seq 30); do alive $R/verifier.pid || break; sleep 1; done
    nvidia-smi --query-compute-apps=pid,process_name --format=csv
    BIN=$BIN OUT=/tmp/bench-out STAGES=rl-pipeline PIPE_GPUS=0 PIPE_STEPS=8 \
      PIPE_ARMS=turns,async-defer-kv,turns@2,async-defer-kv@2 PIPE_STOP_BY=$(( $(end) - 30 )) \
      bash scripts/gpu-check.sh
    echo "plan: finished at $(date -u +%T)" ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    FINAL=$OUT; OUT=/tmp/lease-out; rm -rf "$OUT"; mkdir -p "$OUT"
    stop=$(( SECONDS + ${WAIT:-560} )); lim=$(( $(end) - 25 - $(now) + SECONDS )); [ $lim -lt $stop ] && stop=$lim
    while [ $SECONDS -lt $stop ] && ! grep -q "plan: finished" /tmp/plan.log; do sleep 5; done
    echo "waited ${SECONDS} s; $(( $(end) - $(now) )) s left in the lease"
    grep -v "^judge:" /tmp/plan.log | tail -25
    for j in "" -kb1; do [ -f $R/recipe$j-console.log ] && { echo "== recipe$j"; grep -v "^judge:" $R/recipe$j-console.log | tail -8; }; done
    for m in $R/rl/metrics.jsonl; do [ -f "$m" ] && echo "rl: $(grep -c '"reward_mean"' "$m") step(s)"; done
    cp /tmp/plan.log "$OUT/"; cp $R/recipe*-console.log "$OUT/" 2>/dev/null
    (cd "$R" && find . -path '*/checkpoints/*' -name '*.safetensors' -print0 | sort -z | xargs -0 -r sha256sum > checkpoint-sha256.txt
     shopt -s nullglob; tar czf "$OUT/recipe.tgz" --exclude='*/checkpoints' --exclude='*/work' recipe report eval ./rl/metrics.jsonl \
       ./rl/events* ./rl/sample[s] ./rl/profile gpu-samples*.csv host-samples.csv host-top.log checkpoint-sha256.txt verifier.log 2>/dev/null)
    [ -d /tmp/bench-out ] && cp -r /tmp/bench-out "$OUT/"
    [ -d /tmp/rl-pipeline ] && (cd /tmp/rl-pipeline && tar czf "$OUT/rl-pipeline-now.tgz" SUMMARY.json ./*.log ./*/metrics.jsonl 2>/dev/null)
    tar czf "$FINAL/lease.tgz" -C "$OUT" . && ls -la "$FINAL" ;;
  *) echo "usage: lease47.sh start|stash|launch|wait"; exit 2 ;;
esac
