#!/usr/bin/env bash
# A plan for session 50's lease on one H200 (not part of the project; session 49 wrote it, untried).
# Rebuild first: DEVICE_TESTS=1 bash scripts/build-device.sh (build-device-dist at HEAD, with model::upload).
#   lease50.sh start   call 1 (carry build-device-dist/{musacoder,musacoder-model,lib}, .kb/bench, .kb/whl,
#                      this file; ~61 MiB with the tree): the lease's end, env; .kb/bench copied to /tmp/kb-bench
#                      (the corpus decontaminates against it) and nvidia-cutlass installed into /tmp/site-cutlass
#                      (a later call's carry may drop .kb/ paths an earlier one brought; /tmp stays)
#   lease50.sh stash   call 2 (carry .kb/start/start.json, part-00, part-01, this file)
#   lease50.sh launch  call 3 (carry part-02, part-03, this file; PYTHONPATH=/tmp/site-cutlass for the detached
#                      runs, since the recipe stage refuses a corpus without CUTLASS):
#                      "bench": issue 15's pipeline bench alone, prefill padded and uploaded without syncs
#                               (turns, async-defer-kv, each twice, 8 steps: ~800 s)
#                      "chain": once bench has ended, issue 17's SFT row at 8 samples: corpus, init,
#                               pretrain, sft --redo, eval-sft (SFT b493fcc3 expected; ~480 s)
#   lease50.sh wait    later calls: wait and bring back both runs. Send FOUR waits in the batch: session 49
#                      sent two, and the bench's results went with the machine 30 s after the last.
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
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-cutlass .kb/whl/nvidia_cutlass-*.whl &&
      PYTHONPATH=/tmp/site-cutlass python3 -c 'import cutlass_library; print("cutlass_library in /tmp/site-cutlass")'
    BIN=$BIN STAGES=env bash scripts/gpu-check.sh > "$OUT/env-stage.log" 2>&1; tail -5 "$OUT/env-stage.log" ;;
  stash)
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash ;;
  launch)
    export PYTHONPATH=/tmp/site-cutlass${PYTHONPATH:+:$PYTHONPATH}
    python3 -c 'import cutlass_library' || { echo "lease: no cutlass_library in /tmp/site-cutlass (start carries .kb/whl)"; exit 1; }
    DETACH=bench DETACH_WAIT=5 BIN=$BIN STAGES=rl-pipeline PIPE_GPUS=0 PIPE_STEPS=8 \
      PIPE_ARMS=turns,async-defer-kv,turns@2,async-defer-kv@2 PIPE_STOP_BY=$(( $(end) - 520 )) \
      bash scripts/gpu-check.sh | tail -5
    DETACH=chain DETACH_AFTER=bench DETACH_WAIT=20 BIN=$BIN STAGES=recipe RECIPE_GPUS=0 RECIPE_TIMEOUT=1500 \
      RECIPE_ARGS="--stages corpus,init,pretrain,sft,eval-sft --redo $A" bash scripts/gpu-check.sh | tail -8
    touch /tmp/launched ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    w=$(( ${WAIT:-540} < $(end) - 40 - $(now) ? ${WAIT:-540} : $(end) - 40 - $(now) )); [ "$w" -lt 1 ] && w=1
    DETACH=bench DETACH_WAIT=1 BIN=$BIN STAGES=rl-pipeline bash scripts/gpu-check.sh | tail -25
    DETACH=chain DETACH_WAIT=$w BIN=$BIN STAGES=recipe bash scripts/gpu-check.sh | tail -14
    DETACH=bench DETACH_WAIT=1 BIN=$BIN STAGES=rl-pipeline bash scripts/gpu-check.sh > /dev/null ;;  # its latest files
  *) echo "usage: lease50.sh start|stash|launch|wait"; exit 2 ;;
esac
