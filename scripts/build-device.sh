#!/usr/bin/env bash
# Builds a musacoder binary to carry to a machine that lacks our -dev packages (the GPU
# machines): everything but glibc is linked statically, except cpp-httplib (Debian ships it as a
# shared library only), which goes with its dependencies into build-device/lib (found through
# RPATH $ORIGIN/lib). Also bundles redis-server and its libraries into build-device/redis/, for
# the service's device run (the GPU machines have no Redis).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSACODER_TESTS=OFF \
  -DMUSACODER_PORTABLE=ON -DCMAKE_BUILD_RPATH='$ORIGIN/lib' >/dev/null
cmake --build build-device --target musacoder

# Non-glibc shared libraries of a binary, copied next to it.
bundle() {  # bundle BINARY DEST_DIR
  mkdir -p "$2"
  ldd "$1" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      *) cp -L "$lib" "$2/" ;;
    esac
  done
}
rm -rf build-device/lib build-device/redis
bundle build-device/musacoder build-device/lib
mkdir -p build-device/redis
cp -L "$(command -v redis-server)" build-device/redis/
bundle build-device/redis/redis-server build-device/redis/lib
du -sh build-device/musacoder build-device/lib build-device/redis
