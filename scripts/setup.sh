#!/usr/bin/env bash
# Installs everything MusaCoder needs on a fresh Debian machine (idempotent).
#   apt: compilers are already on the image; we add the -dev libraries we build against.
#   pip: torch==2.11.0 (pinned: the GPU machines run exactly this version; its libtorch is what
#        the model stack links), numpy, pytest, and the references the model tests compare
#        against: tokenizers, safetensors, transformers==5.17.0 (the GPU machines' version), and
#        tensorboard (the trainer's event files are read back with it), and gguf==0.19.0 (ggml's own
#        reader and quantizers: the GGUF import's tests write and dequantize GGUF files with it) with
#        accelerate (transformers' GGUF loader needs it). tokenizers also trains the recipe's
#        tokenizer (python/musacoder_tools/train_tokenizer.py).
# Set MUSACODER_SKIP_SETUP=1 to skip (e.g. inside the GPU machine, which has no network).
set -euo pipefail
[ "${MUSACODER_SKIP_SETUP:-0}" = 1 ] && exit 0

# libgloo-dev: headers for libtorch's own ProcessGroupGloo (c10d on the CPU; the code is in libtorch).
# redis-server: the service tests start a real one on loopback (the service itself needs
# Redis only in distributed mode).
APT_PKGS=(cmake ninja-build g++ ccache pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev
          libgtest-dev libseccomp-dev libssl-dev libhiredis-dev libcpp-httplib-dev libtomlplusplus-dev libpcre2-dev libgloo-dev redis-server)
missing=()
for p in "${APT_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
need_pip=0
"$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.split("+")[0] == "2.11.0" else 1)' 2>/dev/null || need_pip=1
"$PY" -c 'import numpy, pytest, tokenizers, safetensors, tensorboard, accelerate' 2>/dev/null || need_pip=1
"$PY" -c 'import importlib.metadata as m, sys; sys.exit(0 if m.version("gguf") == "0.19.0" else 1)' 2>/dev/null || need_pip=1
"$PY" -c 'import transformers, sys; sys.exit(0 if transformers.__version__ == "5.17.0" else 1)' 2>/dev/null || need_pip=1
if [ $need_pip = 1 ]; then
  # tokenizers: the reference the C++ tokenizer's tests compare against, and the recipe's trainer.
  echo "setup: installing Python packages (torch==2.11.0, numpy, pytest, tokenizers, safetensors, transformers==5.17.0, tensorboard, gguf==0.19.0, accelerate)"
  "$PY" -m pip install -q torch==2.11.0 numpy pytest tokenizers safetensors transformers==5.17.0 tensorboard gguf==0.19.0 accelerate
fi
