# One detached chain: synth (KernelBench format and prompt) -> 0.5B from the GGUF parts -> SFT -> bench-model L1.
set -x
cd /tmp/repo
export MUSACODER_HOME=/tmp/repo MUSACODER_SKIP_SETUP=1 PYTHONUNBUFFERED=1
BIN=/tmp/repo/.cache/dist/musacoder; MB=/tmp/repo/.cache/dist/musacoder-model
export LD_LIBRARY_PATH=$(python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
BIN=$BIN bash scripts/device/sandbox-probe.sh > /tmp/probe.log 2>&1
w=$(sed -n 's/^landlock_writable=//p' /tmp/probe.log); f=$(sed -n 's/^first_working=//p' /tmp/probe.log)
[ -n "$w" ] && export MUSACODER_SANDBOX_WRITABLE=$w
[ -z "$w" ] && [ -n "$f" ] && [ "$f" != none ] && export MUSACODER_SANDBOX_DISABLE=$f
R=/tmp/coder; mkdir -p $R
$BIN synth --out $R/synth --count 200 --seed 1 --verify gpu --device cuda --max-eager-us 200000 --formats kernelbench \
  --prompt kernelbench --decontaminate .kb/bench/KernelBench --timing-budget 0.1 --no-progress > $R/synth.log 2>&1
while [ "$(ls /tmp/parts 2>/dev/null | wc -l)" -lt 9 ]; do sleep 2; done; sleep 3
cat /tmp/parts/part0* > /tmp/m.gguf
MODELS=$R/model GGUF=/tmp/m.gguf MUSACODER_MODEL_BINARY=$MB bash scripts/get-model.sh qwen2.5-coder-0.5b-instruct > $R/model.log 2>&1
$MB train sft --model $R/model/qwen2.5-coder-0.5b-instruct --data $R/synth/dataset.jsonl --out $R/sft --epochs 3 --max-len 8192 \
  --tokens-per-step 65536 --micro-batch-tokens 32768 --lr 2e-5 --min-lr 2e-6 --warmup-steps 10 --weight-decay 0.0 --save-every 50 \
  --keep 1 --device cuda --deterministic --no-progress > $R/sft.log 2>&1
m=$(ls -d $R/sft/checkpoints/step-* | tail -1)
$BIN bench-model --model $m --problems .kb/bench/KernelBench --levels 1 --samples 4 --turns 1 --max-new-tokens 2048 \
  --no-compile-baseline --out $R/eval --no-progress > $R/eval.log 2>&1
echo done > $R/done
