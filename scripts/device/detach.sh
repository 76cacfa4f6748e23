# Sourced by scripts/gpu-check.sh when DETACH is set (SELF, OUT and STAGES are its): the stages
# run detached from the device tool's call, and the call only waits on them. It exits the script.
# DETACH=NAME: run these stages detached from the call, as the recipe stage runs itself, in
# /tmp/gpu-detached/NAME (it survives while the machine stays warm). The call waits up to
# DETACH_WAIT seconds (default 540), then copies what the stages wrote so far to $OUT/NAME; a
# later call with the same NAME, on the same warm machine, waits on the same run instead of
# starting another; once it has finished, that NAME only reports it (start anew under another
# NAME). Several named runs may share a machine: one per GPU set (CUDA_VISIBLE_DEVICES), e.g.
# the self-test on GPUs 0-2 and suite and bench on GPU 3. DETACH_AFTER=OTHER starts this run's
# stages only once the run OTHER has finished (whatever its exit status), so that one call can
# line up a lease's runs and later calls only wait on them: no choice is left to the gaps
# between calls, in which an idle machine is given back. E.g.
#   DETACH=a DETACH_WAIT=5 STAGES=... bash scripts/gpu-check.sh;
#   DETACH=b DETACH_AFTER=a STAGES=... bash scripts/gpu-check.sh
D=/tmp/gpu-detached/$DETACH
mkdir -p "$D/out"
if [ -f "$D/pid" ] && kill -0 "$(cat "$D/pid")" 2>/dev/null; then
  echo "$DETACH: still running (pid $(cat "$D/pid")), waiting on it"
elif [ -f "$D/rc" ]; then
  echo "$DETACH: finished earlier (rc $(cat "$D/rc"))"
else
  if [ -n "${DETACH_AFTER:-}" ] && [ ! -d "/tmp/gpu-detached/$DETACH_AFTER" ]; then
    echo "$DETACH: DETACH_AFTER=$DETACH_AFTER names no run started on this machine (/tmp/gpu-detached/$DETACH_AFTER)"
    exit 2
  fi
  GPU_CHECK_DETACHED=1 OUT=$D/out setsid bash -c 'echo $$ > "$1/pid"
    if [ -n "$3" ]; then
      echo "waiting for run $3 to finish"
      while [ ! -f "/tmp/gpu-detached/$3/rc" ]; do sleep 5; done
      echo "run $3 finished (rc $(cat "/tmp/gpu-detached/$3/rc")): starting"
    fi
    bash "$2"; echo $? > "$1/rc"' \
    detached "$D" "$SELF" "${DETACH_AFTER:-}" >> "$D/console.log" 2>&1 < /dev/null &
  while [ ! -s "$D/pid" ]; do sleep 0.2; done
  echo "$DETACH: started (pid $(cat "$D/pid")): $STAGES${DETACH_AFTER:+ (once $DETACH_AFTER has finished)}"
fi
end=$((SECONDS + ${DETACH_WAIT:-540}))
while kill -0 "$(cat "$D/pid")" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
mkdir -p "$OUT/$DETACH"
cp -r "$D/out/." "$OUT/$DETACH/" 2>/dev/null
cp "$D/console.log" "$OUT/$DETACH/console.log"
grep -v "^judge:" "$D/console.log" | tail -"${DETACH_TAIL:-25}"
if [ -f "$OUT/$DETACH/selftest/rows.jsonl" ]; then  # how far the self-test is
  python3 -c 'import collections, json, sys
c = collections.Counter()
for line in open(sys.argv[1]):
  try: r = json.loads(line)
  except ValueError: continue
  c[(r["problem"].split("/")[0], r["verdict"])] += 1
print("selftest rows:", ", ".join(f"{l} {v} {n}" for (l, v), n in sorted(c.items())))' "$OUT/$DETACH/selftest/rows.jsonl"
fi
if [ -f "$D/rc" ]; then echo "$DETACH: finished (rc $(cat "$D/rc"))"; exit "$(cat "$D/rc")"; fi
echo "$DETACH: still running after this call's wait"
exit 0
