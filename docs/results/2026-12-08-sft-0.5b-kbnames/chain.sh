# Detached chain on the device: sandbox probe and the suite's hack and fault sections while the
# GGUF parts arrive -> 0.5B from the parts -> SFT on the carried synth set -> (suite done) ->
# bench-model L1 (1 sample, 1 turn, the base's settings).
set -x
cd /tmp/repo
export MUSACODER_HOME=/tmp/repo MUSACODER_SKIP_SETUP=1 PYTHONUNBUFFERED=1
D=/tmp/repo/.cache/dev; BIN=$D/musacoder; MB=$D/musacoder-model
TL=$(python3 -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
export LD_LIBRARY_PATH=$D/lib:$TL
R=/tmp/coder; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total --format=csv > $R/gpu.txt
date +%s > $R/t0
BIN=$BIN bash scripts/device/sandbox-probe.sh > $R/probe.log 2>&1
w=$(sed -n 's/^landlock_writable=//p' $R/probe.log); f=$(sed -n 's/^first_working=//p' $R/probe.log)
[ -n "$w" ] && export MUSACODER_SANDBOX_WRITABLE=$w
[ -z "$w" ] && [ -n "$f" ] && [ "$f" != none ] && export MUSACODER_SANDBOX_DISABLE=$f
setsid timeout 330 python3 tests/gpu/run_gpu_suite.py --musacoder $BIN --out $R/suite --sections hacks,faults > $R/suite.log 2>&1 &
su=$!
while [ "$(ls /tmp/parts 2>/dev/null | grep -c '^part0[0-8]$')" -lt 9 ]; do sleep 1; done
date +%s > $R/t_parts
cat /tmp/parts/part0[0-8] > /tmp/m.gguf
MODELS=$R/model GGUF=/tmp/m.gguf MUSACODER_MODEL_BINARY=$MB bash scripts/get-model.sh qwen2.5-coder-0.5b-instruct > $R/model.log 2>&1
date +%s > $R/t_model
$MB train sft --model $R/model/qwen2.5-coder-0.5b-instruct --data /tmp/repo/.cache/data/dataset.jsonl --out $R/sft --epochs 3 --max-len 8192 \
  --tokens-per-step 65536 --micro-batch-tokens 16384 --lr 2e-5 --min-lr 2e-6 --warmup-steps 10 --weight-decay 0.0 --save-every 1000 \
  --keep 1 --device cuda --deterministic --no-progress > $R/sft.log 2>&1
date +%s > $R/t_sft
wait $su; echo "suite rc $?" > $R/suite.rc
date +%s > $R/t_suite
for i in $(seq 30); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 1; done
m=$(ls -d $R/sft/checkpoints/step-* | tail -1)
$BIN bench-model --model $m --problems .kb/bench/KernelBench --levels 1 --samples 1 --turns 1 --max-new-tokens 2048 \
  --no-compile-baseline --out $R/eval --no-progress > $R/eval.log 2>&1
date +%s > $R/t_eval
echo done > $R/done
