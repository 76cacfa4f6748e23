#!/usr/bin/env bash
# Which sandbox layers let CUDA (and CUDA IPC between two sandboxed processes) work on this
# machine? Prints one line per configuration and, last, `first_working=<layers to disable>`.
BIN=${BIN:-build-device/musacoder}
d=$(mktemp -d)
first=""
for dis in "" nodump netns seccomp landlock "nodump,netns" "nodump,seccomp" "netns,seccomp" "nodump,netns,seccomp" "netns,landlock,seccomp,nodump"; do
  out=$(MUSACODER_SANDBOX_DISABLE=$dis timeout 120 "$BIN" sandbox-exec --scratch "$d" -- python3 -c 'import os,torch; torch.zeros(1,device="cuda"); print("cuda ok", os.environ.get("MUSACODER_SANDBOX"))' 2>&1 | tail -1)
  echo "disable=[$dis] -> $out"
  if [ -z "$first" ] && [[ "$out" == "cuda ok"* ]]; then first="$dis"; [ -z "$dis" ] && first="none"; fi
done
echo "first_working=$first"
