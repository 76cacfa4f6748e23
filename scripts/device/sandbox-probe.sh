#!/usr/bin/env bash
# Which sandbox settings let CUDA start on this machine? One line per configuration; last,
# `first_working=` (layers to disable) and `landlock_writable=` (extra folders landlock needs).
BIN=${BIN:-build-device/musacoder}
d=$(mktemp -d)
try() {
  MUSACODER_SANDBOX_DISABLE=$1 MUSACODER_SANDBOX_WRITABLE=$2 HOME=$d TMPDIR=$d timeout 120 "$BIN" sandbox-exec --scratch "$d" -- \
    python3 -c 'import os,torch; torch.zeros(1,device="cuda"); print("cuda ok", os.environ.get("MUSACODER_SANDBOX"))' 2>&1 | tail -1
}
first=""
for dis in "" nodump netns caps seccomp landlock "netns,landlock,seccomp,nodump,caps"; do
  out=$(try "$dis" "")
  echo "disable=[$dis] -> $out"
  if [ -z "$first" ] && [[ "$out" == "cuda ok"* ]]; then first="$dis"; [ -z "$dis" ] && first="none"; fi
done
writable=""
if [ "$first" != none ]; then
  for w in /proc/self /proc /sys /run /var /tmp /root /proc:/sys /proc:/sys:/run:/var; do
    out=$(try "" "$w")
    echo "landlock+writable=[$w] -> $out"
    if [ -z "$writable" ] && [[ "$out" == "cuda ok"* ]]; then writable="$w"; fi
  done
fi
echo "first_working=$first"
echo "landlock_writable=$writable"
