#!/usr/bin/env bash
# Builds a musacoder binary to carry to a machine that lacks our -dev packages (the GPU
# machines): our dependencies are linked statically, except cpp-httplib (Debian ships it as a
# shared library only) and, for musacoder-model, libstdc++ (libtorch needs the shared one),
# which go with their dependencies into build-device/lib (found through RPATH $ORIGIN/lib).
# libtorch itself is not carried: the GPU machines have the same torch wheel, and
# scripts/gpu-check.sh puts its lib folder on LD_LIBRARY_PATH. Also bundles redis-server and its libraries into build-device/redis/, for
# the service's device run (the GPU machines have no Redis).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# A source saved while the build compiles it (after the compiler read it, before the object was
# written) leaves an object newer than the file but made from its old text, which ninja never
# rebuilds (a carried trainer then lacks what its source says). Sources
# newer than the build's start fail it (fresh).
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
fresh() {
  local changed
  changed=$(find src include tests/unit CMakeLists.txt -newer "$stamp" -type f 2>/dev/null | head -5)
  [ -z "$changed" ] && return 0
  echo "build-device: sources changed while building (e.g. $(echo $changed)): their objects may be stale;" \
       "touch them and run it again" >&2
  rm -rf build-device-dist
  exit 1
}
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSACODER_TESTS=OFF \
  -DMUSACODER_PORTABLE=ON -DCMAKE_BUILD_RPATH='$ORIGIN/lib' >/dev/null
cmake --build build-device --target musacoder
strip build-device/musacoder build-device/musacoder-model

# Non-glibc shared libraries of a binary, copied next to it.
bundle() {  # bundle BINARY DEST_DIR
  mkdir -p "$2"
  ldd "$1" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
      *) case "$lib" in */site-packages/*|*/cuda*/lib*) ;; *) [ -e "$2/$(basename "$lib")" ] || cp -L "$lib" "$2/" ;; esac ;;
    esac
  done
}
rm -rf build-device/lib build-device/redis
bundle build-device/musacoder build-device/lib
bundle build-device/musacoder-model build-device/lib
mkdir -p build-device/redis
cp -L "$(command -v redis-server)" build-device/redis/
bundle build-device/redis/redis-server build-device/redis/lib
du -sh build-device/musacoder build-device/lib build-device/redis
# The corpus's CUTLASS/CuTe source for recipes/small on the GPU machines (no network there):
# the nvidia-cutlass wheel in .kb/whl, which scripts/gpu-check.sh installs under /tmp. Needs
# network once; without it the recipe's corpus skips that source and says so.
if ! ls .kb/whl/nvidia_cutlass-4.2.0*.whl >/dev/null 2>&1; then
  grep -qx '/.kb/' .git/info/exclude 2>/dev/null || echo /.kb/ >> .git/info/exclude
  python3 -m pip download -q --no-deps nvidia-cutlass==4.2.0 -d .kb/whl \
    || echo "build-device: could not download nvidia-cutlass 4.2.0 into .kb/whl (the corpus will skip CUTLASS/CuTe)"
fi
fresh
# What travels to the GPU machine (the device tool carries at most 64 MiB): the binary and the
# bundled libraries, without the build tree.
rm -rf build-device-dist && mkdir -p build-device-dist
cp -r build-device/musacoder build-device/musacoder-model build-device/lib build-device/redis build-device-dist/
# DEVICE_TESTS=1: the model library's C++ tests too (mc_model_tests), for the tests that run on
# CUDA where there is a GPU (the engine's kept caches: scripts/gpu-check.sh STAGES=engine-tests).
if [ "${DEVICE_TESTS:-0}" = 1 ]; then
  cmake -S . -B build-device -DMUSACODER_TESTS=ON >/dev/null
  cmake --build build-device --target mc_model_tests
  strip -o build-device-dist/mc_model_tests build-device/mc_model_tests
  fresh
fi
du -sh build-device-dist
