#!/usr/bin/env bash
# Set-up step: a KernelBench checkout in .kb/ (ignored by git), pinned to the commit our results
# use. recipes/small decontaminates its data against .kb/bench/KernelBench and evaluates on its
# level 1; scripts/gpu-check.sh carries .kb to GPU machines (which have no network) and its
# bench stage reads the harness from .kb/src. Needs network once; does nothing when present.
#   KERNELBENCH_REPO: a local clone or URL (default GitHub); KERNELBENCH_COMMIT: the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=${KERNELBENCH_REPO:-https://github.com/ScalingIntelligence/KernelBench}
COMMIT=${KERNELBENCH_COMMIT:-423217d}
if [ -d .kb/bench/KernelBench/level1 ] && [ -d .kb/src/kernelbench ]; then
  echo "kernelbench: .kb/bench/KernelBench present"
  exit 0
fi
grep -qx '/.kb/' .git/info/exclude 2>/dev/null || echo /.kb/ >> .git/info/exclude
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "kernelbench: cloning $REPO at $COMMIT"
git clone -q "$REPO" "$tmp/kb"
git -C "$tmp/kb" checkout -q "$COMMIT"
mkdir -p .kb/bench .kb/src
rm -rf .kb/bench/KernelBench .kb/src/kernelbench
cp -r "$tmp/kb/KernelBench" .kb/bench/KernelBench
cp -r "$tmp/kb/src/kernelbench" .kb/src/kernelbench
echo "kernelbench: .kb/bench/KernelBench ($(find .kb/bench/KernelBench -name '*.py' | wc -l) problems), .kb/src/kernelbench"
