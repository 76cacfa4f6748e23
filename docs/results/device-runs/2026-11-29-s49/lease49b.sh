#!/usr/bin/env bash
# Session 49's second machine (not part of the project): prefill's uploads without stream syncs
# (model::upload) on CUDA: engine-tests, then bench/gpu_sharing.py with the build before the change
# (musacoder-model-old, ae223b3) and after it, alternating, beside one process of long kernels.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; W=/tmp/w49b; mkdir -p $W  # one tarball back (8 files at most)
TORCH_LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$TORCH_LIB:$PWD/build-device-dist/lib" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/env.log"
build-device-dist/mc_model_tests --gtest_filter='Devices/EngineKv.*:*PrefillBucket*' > "$W/engine-tests.log" 2>&1; echo "engine-tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$W/engine-tests.log" | head
D=build-device-dist
i=0
for cfg in "50 0" "20 5"; do
  set -- $cfg
  for b in old new old new; do
    i=$((i + 1)); exe=$D/musacoder-model; [ $b = old ] && exe=$D/musacoder-model-old
    prof=""; [ $i = 2 ] && prof="--profile 1"
    python3 bench/gpu_sharing.py --musacoder "$exe" --out "$W/s$i-$b-k$1.json" --loads 0,1 --kernel-ms "$1" --idle-ms "$2" $prof \
      > "$W/s$i-$b-k$1.log" 2>&1
    echo "run $i ($b, ${1} ms kernels, ${2} ms idle): rc=$?"; grep -E "^\| [0-9]" "$W/s$i-$b-k$1.log"
  done
done
tar czf "$OUT/lease49b.tgz" -C $W . && ls $W
