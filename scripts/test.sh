#!/usr/bin/env bash
# Installs what is missing, builds, and runs every CPU test: the C++ suite through ctest
# (real nvcc compiles, real sandboxed candidate processes on the CPU) and the Python harness
# tests through pytest. GPU tests: scripts/gpu-check.sh on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
status=0
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 1800) || status=1
# --durations: the slowest tests in the log, for keeping CI inside its time.
python3 -m pytest -q --durations=25 tests/python || status=1
exit $status
