#!/usr/bin/env bash
# A plan for session 51's lease on one H200 (not part of the project; lease50.sh's pattern).
# Build first: bash scripts/build-device.sh (build-device-dist with --carry-repairs).
#   lease51.sh start   call 1 (carry build-device-dist/{musacoder,musacoder-model,lib}, .kb/start/start.json,
#                      this file): the lease's end, env; start.json stashed
#   lease51.sh stash   call 2 (carry .kb/start/start.tgz.part-00, part-01, this file)
#   lease51.sh launch  call 3 (carry part-02, part-03, this file): the pipeline bench alone, detached:
#                      turns, async-carry-kv, turns@2, async-carry-kv@2, then async-defer-kv(@2) as time allows
#   lease51.sh wait    later calls: wait and bring back the bench. Send FOUR waits in the batch.
# Fire all calls in ONE batch (the machine is given back 30 s after a call).
set -u
cd "$(dirname "$0")/.."
BIN=$PWD/build-device-dist/musacoder
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
now() { date +%s; }
end() { cat /tmp/lease-end; }
case "${1:-}" in
  start)
    up=$(cut -d. -f1 /proc/uptime); [ "$up" -gt 900 ] && up=150
    echo $(( $(now) - up + ${LEASE_S:-1800} - 40 )) > /tmp/lease-end
    echo "lease ends (40 s margin) at $(date -u -d @"$(end)" +%T), $(( $(end) - $(now) )) s from now"
    BIN=$BIN STAGES=env bash scripts/gpu-check.sh > "$OUT/env-stage.log" 2>&1; tail -5 "$OUT/env-stage.log" ;;
  stash)
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash ;;
  launch)
    BIN=$BIN STAGES=none bash scripts/gpu-check.sh; ls -la /tmp/start-stash
    DETACH=bench DETACH_WAIT=5 BIN=$BIN STAGES=rl-pipeline PIPE_GPUS=0 PIPE_STEPS=${STEPS:-8} \
      PIPE_ARMS=${ARMS:-async-carry-kv,turns} \
      PIPE_STOP_BY=$(( $(end) - 10 )) bash scripts/gpu-check.sh | tail -8
    touch /tmp/launched ;;
  wait)
    [ -f /tmp/launched ] || { echo "lease: nothing was launched on this machine"; exit 1; }
    w=$(( ${WAIT:-560} < $(end) - 20 - $(now) ? ${WAIT:-560} : $(end) - 20 - $(now) )); [ "$w" -lt 1 ] && w=1
    DETACH=bench DETACH_WAIT=$w BIN=$BIN STAGES=rl-pipeline bash scripts/gpu-check.sh | tail -30
    # The arms finished so far, should the machine go before the stage packs them.
    (cd /tmp/rl-pipeline && tar czf "$OUT/partial.tgz" SUMMARY.json ./*.log ./*/metrics.jsonl) 2>/dev/null; ls -la "$OUT" ;;
  *) echo "usage: lease51.sh start|stash|launch|wait"; exit 2 ;;
esac
