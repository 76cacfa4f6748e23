#!/usr/bin/env bash
# Configures and builds MusaCoder into build/ (incremental; ccache when present): every target,
# or only the targets named (scripts/build.sh musacoder: the binaries, no tests).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} >/dev/null
cmake --build build -j "$(nproc)" ${1:+--target "$@"}
