#!/usr/bin/env bash
# Session 46's lease on two H200s (not part of the project: a one-off plan, carried in .kb).
#   lease.sh start   call 1: the lease's end from the machine's uptime, env, engine tests
#   lease.sh launch  call 3: unpack the start; seed 2's arms on GPU 1 (cores 16-31); issue 15's
#                    bench on GPU 0 (cores 0-15); then KernelBench level 1 of the RL, SFT and RFT
#                    models on whichever GPU is free, while the lease lasts
#   lease.sh wait    later calls: wait (up to ~565 s, or the lease's end) and bring back results
set -u
cd "$(dirname "$0")/.."
BIN=$PWD/build-device-dist/musacoder
R=/tmp/recipe-run
A="--set rft_samples=2 --set rl_steps=16 --set rl_lr=3e-6 --set rl_profile_step=0 --set rl_temperature=0.9 --set rl_seed=2"
SEED2="--stages rl,rl-no-primeecho,rl-no-bdr,rl-no-mirrorpop,rl-single-turn,eval-rl,eval-ablations,report,eval-rl-seen --together-per-gpu 5 $A"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
now() { date +%s; }
pin() { local c=$1; shift; if command -v taskset >/dev/null; then taskset -c "$c" "$@"; else "$@"; fi; }
end() { cat /tmp/lease-end; }
done_stage() {  # is stage $1 done in the run's state.json
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["stages"].get(sys.argv[2], {}).get("done") else 1)' \
    "$R/recipe/state.json" "$1" 2>/dev/null
}
seed2() {  # the recipe stage of gpu-check for seed 2 (starts it, or waits on it)
  BIN=$BIN STAGES=recipe RECIPE_GPUS=1 RECIPE_VERIFIER_GPU=1 RECIPE_TIMEOUT=$1 RECIPE_ARGS="$SEED2" \
    pin 16-31 bash scripts/gpu-check.sh
}
kb1() {  # kb1 GPU CORES STAGE: one KernelBench level 1 evaluation, if it can end before the lease
  if [ $(( $(now) + 250 )) -gt "$(end)" ]; then echo "kb1: $3 not started: too close to the lease's end"; return 1; fi
  echo "kb1: $3 on GPU $1 from $(date -u +%T)"
  CUDA_VISIBLE_DEVICES=$1 pin "$2" "$BIN" recipe recipes/small/recipe.toml --out "$R" --stages "$3" --no-progress \
    $A --set kernelbench=/tmp/kb-bench/KernelBench
  echo "kb1: $3 exit $? at $(date -u +%T)"
}
case "${1:-}" in
  start)
    up=$(cut -d. -f1 /proc/uptime)
    [ "$up" -gt 900 ] && up=150  # not the VM's own uptime: assume a start of 150 s
    echo $(( $(now) - up + 1800 - 80 )) > /tmp/lease-end
    echo "uptime ${up} s; lease ends (80 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    nproc; python3 -c 'import os; print("affinity", len(os.sched_getaffinity(0)))'; nvidia-smi -L
    BIN=$BIN STAGES=env bash scripts/gpu-check.sh > "$OUT/env.txt" 2>&1; tail -5 "$OUT/env.txt"
    BIN=$BIN STAGES=engine-tests bash scripts/gpu-check.sh && touch /tmp/engine-ok
    ls /tmp/engine-ok ;;
  stash)
    # call 2: the start's first parts (gpu-check stashes them) and KernelBench kept outside the tree
    mkdir -p /tmp/kb-bench && cp -r .kb/bench/. /tmp/kb-bench/ && ls /tmp/kb-bench
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash ;;
  launch)
    [ -f /tmp/engine-ok ] || { echo "lease: the engine tests did not pass: nothing started"; exit 1; }
    BIN=$BIN STAGES=start bash scripts/gpu-check.sh || { echo "lease: the start did not unpack"; exit 1; }
    seed2 1
    DETACH=bench DETACH_WAIT=5 BIN=$BIN STAGES=rl-pipeline PIPE_GPUS=0 PIPE_STEPS=8 \
      PIPE_ARMS=turns,async-defer-kv,async-defer-kv@2,turns@2 PIPE_STOP_BY=$(( $(end) - 280 )) \
      pin 0-15 bash scripts/gpu-check.sh
    # GPU 0 after the bench: the RL model (once seed 2's rl stage is done), then the SFT model;
    # GPU 1 after seed 2: the RFT model.
    setsid bash .kb/lease.sh kb1-gpu0 > /tmp/kb1-gpu0.log 2>&1 < /dev/null &
    setsid bash .kb/lease.sh kb1-gpu1 > /tmp/kb1-gpu1.log 2>&1 < /dev/null &
    touch /tmp/launched
    sleep 20; tail -3 /tmp/kb1-gpu0.log /tmp/kb1-gpu1.log; nvidia-smi ;;
  kb1-gpu0)
    while [ ! -f /tmp/gpu-detached/bench/rc ] && [ "$(now)" -lt "$(end)" ]; do sleep 5; done
    until done_stage rl || [ $(( $(now) + 250 )) -gt "$(end)" ]; do sleep 10; done
    kb1 0 0-15 eval-kb1-rl; echo "kb1-gpu0 finished" ;;  # (the start holds no SFT checkpoint: eval-kb1 cannot run)
  kb1-gpu1)
    sleep 30; while kill -0 "$(cat $R/recipe.pid)" 2>/dev/null; do sleep 5; done
    kb1 1 16-31 eval-kb1-rft; echo "kb1-gpu1 finished" ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    FINAL=$OUT; OUT=/tmp/lease-out; rm -rf "$OUT"; mkdir -p "$OUT"; export OUT
    stop=$(( SECONDS + ${WAIT:-560} )); lim=$(( $(end) - 40 - $(now) + SECONDS )); [ $lim -lt $stop ] && stop=$lim
    while [ $SECONDS -lt $stop ]; do
      grep -q finished /tmp/kb1-gpu0.log 2>/dev/null && grep -q finished /tmp/kb1-gpu1.log 2>/dev/null && break
      sleep 5
    done
    echo "waited ${SECONDS} s; $(( $(end) - $(now) )) s left in the lease"
    cat /tmp/kb1-gpu0.log /tmp/kb1-gpu1.log | grep -v "^judge:" | tail -20
    cp /tmp/kb1-gpu0.log /tmp/kb1-gpu1.log "$OUT/" 2>/dev/null
    DETACH=bench DETACH_WAIT=1 BIN=$BIN bash scripts/gpu-check.sh | tail -40
    # only when seed 2 is still running (a finished recipe would start again)
    if kill -0 "$(cat $R/recipe.pid)" 2>/dev/null; then seed2 1 | tail -15
    else
      (cd "$R" && find . -path '*/checkpoints/*' -name '*.safetensors' -print0 | sort -z | xargs -0 -r sha256sum > checkpoint-sha256.txt
       shopt -s nullglob; tar czf "$OUT/recipe.tgz" --exclude='*/checkpoints' --exclude='*/work' recipe report eval ./*/metrics.jsonl \
         ./*/events* ./rl/sample[s] gpu-samples.csv host-samples.csv host-top.log checkpoint-sha256.txt verifier.log 2>/dev/null)
      tail -5 "$R/recipe-console.log"
    fi
    tar czf "$FINAL/lease.tgz" -C "$OUT" . && ls -la "$OUT" "$FINAL" ;;
  *) echo "usage: lease.sh start|stash|launch|wait"; exit 2 ;;
esac
