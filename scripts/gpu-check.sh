#!/usr/bin/env bash
# Every GPU test and benchmark in one call (run on the GPU machine, e.g. through the device
# tool with build-device/musacoder carried). Logs go under $OUT (default ./gpu-out); the last
# thing printed is a short table.
#   STAGES="env suite selftest bench timing service synth model genbench train" (default: all; contention, prefill, sharing, gemm-shapes, real-model, published and baseline are run by name; train-dp needs
#   2+ GPUs, determinism checks train sft --deterministic, shard-weights compares --shard weights with optimizer, engine-tests needs DEVICE_TESTS=1's test binary, and rft-small / rl-small / recipe take several slices, start only unpacks a carried start, rl-pipeline needs the recipe run's model (or a carried start), bench-model needs the small model, eval needs
#   EVAL_PROBLEMS and EVAL_SOLUTIONS, and port-roundtrip
#   wants synth first: they are run by name)   BIN=path/to/musacoder (default: build it)
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/.."
export MUSACODER_HOME=$PWD MUSACODER_SKIP_SETUP=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"env suite selftest bench timing service synth model genbench train"}
# DETACH=NAME: run these stages detached from the call (scripts/device/detach.sh says how).
if [ -n "${DETACH:-}" ] && [ -z "${GPU_CHECK_DETACHED:-}" ]; then
  . scripts/device/detach.sh
fi
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  if [ -x build-device-dist/musacoder ]; then BIN=$PWD/build-device-dist/musacoder
  elif [ -x build-device/musacoder ]; then BIN=$PWD/build-device/musacoder
  else
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSACODER_TESTS=OFF >"$OUT/build.log" 2>&1 &&
      cmake --build build-gpu --target musacoder >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
    BIN=$PWD/build-gpu/musacoder
  fi
fi
echo "binary: $BIN"
# musacoder links libtorch dynamically: the machine's own torch wheel (the same version).
TORCH_LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A lease's start (RECIPE_START below) comes in parts over several calls, but a call's carry
# does not keep what an earlier call carried into the same folder (part 3 of .kb/start carried
# in one call and parts 0-2 in the next, on the same warm machine, leaves part 3 gone). So every call copies the start's files it
# carries into /tmp/start-stash, which lives as long as the machine, and the stages read the
# start from there.
START_STASH=${START_STASH:-/tmp/start-stash}
if compgen -G ".kb/start/start*" >/dev/null; then
  mkdir -p "$START_STASH" && cp -f .kb/start/start* "$START_STASH/" &&
    echo "start: $(cd "$START_STASH" && echo start*) in $START_STASH"
fi
# RUN's folder made ready for the recipe: the seed (the finished synth stage) once, then the
# start over it once, when there is one (RECIPE_START, default the stash above). Returns 1 when
# the start's parts are not all here yet or do not unpack: then nothing is started, so that a
# partial start never turns into a run of the whole chain.
prepare_run() {
  local R=$1 committed_seed start
  # The seed committed beside the recipe (recipes/small/seed.tgz), so that a fresh clone's
  # lease starts at corpus too (a new checkout has no .kb/recipe-seed.tgz).
  committed_seed=$(dirname "${RECIPE:-recipes/small/recipe.toml}")/seed.tgz
  if [ -z "${RECIPE_SEED:-}" ]; then
    if [ -f .kb/recipe-seed.tgz ]; then RECIPE_SEED=.kb/recipe-seed.tgz
    elif [ -f "$committed_seed" ]; then RECIPE_SEED=$committed_seed
    fi
  fi
  mkdir -p "$R"
  if [ -n "${RECIPE_SEED:-}" ] && [ ! -f "$R/recipe/state.json" ]; then
    tar xzf "$RECIPE_SEED" -C "$R" && echo "recipe: run folder started from $RECIPE_SEED"
  fi
  start=${RECIPE_START:-}
  if [ -z "$start" ] && [ -d "$START_STASH" ]; then
    if [ ! -f "$START_STASH/start.json" ]; then
      echo "recipe: not started: $START_STASH holds part of a start but not its start.json (carry it)"; return 1
    fi
    start=$START_STASH
  fi
  if [ -n "$start" ] && [ ! -f "$R/recipe/start-from" ]; then
    if bash scripts/recipe-seed.sh start-unpack "$start" "$R"; then
      echo "$start" > "$R/recipe/start-from"
    else
      echo "recipe: not started: the start in $start could not be unpacked (above)"; return 1
    fi
  fi
}
rc=0
for stage in $STAGES; do
  case $stage in
    env)
      { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv;
        nproc; uname -r; python3 -c 'import torch,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))';
        nvcc --version | tail -2; g++ --version | head -1; } 2>&1 | tee "$OUT/env.log"
      BIN=$BIN bash scripts/device/sandbox-probe.sh 2>&1 | tee "$OUT/sandbox-probe.log"
      first=$(sed -n 's/^first_working=//p' "$OUT/sandbox-probe.log")
      writable=$(sed -n 's/^landlock_writable=//p' "$OUT/sandbox-probe.log")
      if [ -n "$writable" ]; then
        export MUSACODER_SANDBOX_WRITABLE=$writable
        echo "sandbox: landlock needs these folders writable on this machine: $writable"
      elif [ -n "$first" ] && [ "$first" != none ]; then
        export MUSACODER_SANDBOX_DISABLE=$first
        echo "sandbox: layers disabled on this machine: $first"
      fi ;;
    engine-tests)
      # The C++ model tests that also run on CUDA (the engine's kept caches: a continued turn
      # equals a fresh prefill, with the decode step's CUDA graphs), from the binary
      # scripts/build-device.sh makes with DEVICE_TESTS=1 (carry build-device-dist).
      t=$(dirname "$BIN")/mc_model_tests
      if [ ! -x "$t" ]; then echo "engine-tests: no $t (DEVICE_TESTS=1 bash scripts/build-device.sh)"; rc=1; continue; fi
      "$t" --gtest_filter="${ENGINE_TESTS_FILTER:-Devices/EngineKv.*}" 2>&1 | tee "$OUT/engine-tests.log" | tail -40
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    suite)
      # SUITE_ARGS, e.g. "--sections honest,faults" (default: every section).
      # shellcheck disable=SC2086
      python3 tests/gpu/run_gpu_suite.py --musacoder "$BIN" --out "$OUT/suite" ${SUITE_ARGS:-} 2>&1 | tee "$OUT/suite.log" || rc=1 ;;
    selftest)
      # MooreEval against itself over KernelBench at its published sizes (carry the checkout in
      # .kb/bench). Resumable: rows of an earlier slice, copied into .kb/selftest, are kept and
      # only the missing candidates are judged (SELFTEST_TIMEOUT ends a slice cleanly).
      if [ ! -d .kb/bench/KernelBench ]; then echo "selftest: no KernelBench in .kb/bench"; rc=1; continue; fi
      mkdir -p "$OUT/selftest"
      for f in rows.jsonl wall.json; do [ -f ".kb/selftest/$f" ] && cp ".kb/selftest/$f" "$OUT/selftest/"; done
      # shellcheck disable=SC2086
      timeout "${SELFTEST_TIMEOUT:-540}" "$BIN" selftest --problems .kb/bench --out "$OUT/selftest" \
        --resume --no-progress ${SELFTEST_ARGS:---levels 1,2,3} > "$OUT/selftest.log" 2>&1 || rc=1
      grep -v "^judge:" "$OUT/selftest.log" | tail -60 ;;
    bench)
      # BENCH_ARGS, e.g. "--set kb-level1 --variants 5 --hang" (KernelBench's real level-1 files
      # at published sizes, from .kb/bench, and what one hanging candidate costs the others).
      # Several runs separated by ";": the first writes $OUT/bench, the next $OUT/bench-2, ...
      # BENCH_CONFIGS="label: flags and NAME=VALUE | ...": kernelbench_compare.py --configs (arguments here split at spaces);
      # BENCH_CONFIGS_N for the Nth run alone (BENCH_CONFIGS_2= : none for the second). BENCH_HANG_CONFIGS: --hang-configs.
      n=0
      IFS=';' read -ra runs <<< "${BENCH_ARGS:-}"
      [ ${#runs[@]} -eq 0 ] && runs=("")
      for args in "${runs[@]}"; do
        n=$((n + 1)); sfx=""; [ $n -gt 1 ] && sfx="-$n"
        echo "bench$sfx: $args"
        mkdir -p "$OUT/bench$sfx"
        # shellcheck disable=SC2086
        cv="BENCH_CONFIGS_$n"
        BENCH_CONFIGS="${!cv-${BENCH_CONFIGS:-}}" BIN=$BIN OUT=$OUT/bench$sfx.d bash bench/run_bench.sh $args 2>&1 \
          | tee "$OUT/bench$sfx.log" || rc=1
        if [ -d "$OUT/bench$sfx.d/bench" ]; then rm -rf "$OUT/bench$sfx"; mv "$OUT/bench$sfx.d/bench" "$OUT/bench$sfx"; fi
        rm -rf "$OUT/bench$sfx.d"
      done ;;
    service)
      # The GPU machines have no Redis: scripts/build-device.sh bundles one next to the binary.
      rs=$(command -v redis-server || true); rl=""
      if [ -x "$(dirname "$BIN")/redis/redis-server" ]; then
        rs="$(dirname "$BIN")/redis/redis-server"; rl="$(dirname "$BIN")/redis/lib"
      fi
      REDIS_SERVER=$rs REDIS_LIB=$rl python3 bench/service_compare.py --musacoder "$BIN" \
        --out "$OUT/service" 2>&1 | tee "$OUT/service.log" || rc=1 ;;
    contention)
      # Fresh CUDA processes started at once on this host (bench/probes/context_contention.py): the
      # context, allocation and synchronize times per child as the slots grow, on GPU 0 alone
      # and then spread over every GPU: a limit per GPU shows in the first, one of the whole
      # host in both alike (CONTENTION_ARGS replaces both runs' options with one).
      g=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
      if [ -n "${CONTENTION_ARGS:-}" ]; then runs=("$CONTENTION_ARGS")
      else runs=("--gpus 0 --slots 1,4,16 --children 4" "--gpus $g --slots 4,16,64 --children 4"); fi
      for args in "${runs[@]}"; do
        echo "contention: $args"
        # shellcheck disable=SC2086
        python3 bench/probes/context_contention.py $args --out "$OUT/contention.jsonl" 2>&1 | tee -a "$OUT/contention.log" || rc=1
      done ;;
    timing)
      python3 bench/probes/timing_methods.py --out "$OUT/timing_methods.json" 2>&1 | tee "$OUT/timing.log" || rc=1 ;;
    model)
      python3 tests/gpu/model_parity.py --musacoder "$BIN" --out "$OUT/model_parity.json" 2>&1 | tee "$OUT/model.log" || rc=1 ;;
    real-model)
      # A real checkpoint against transformers (tests/gpu/real_model_parity.py: tokenizer on
      # KernelBench's files and the model's answers, chat template, weights, logits, greedy).
      # MODEL_NAME (default qwen2.5-coder-1.5b-instruct) is converted first into MODELS (default
      # /tmp/models) by scripts/get-model.sh from MODEL_GGUF, or from the parts in MODEL_PARTS
      # (split -b of the GGUF, carried over several calls: the machine has no network).
      MODEL_NAME=${MODEL_NAME:-qwen2.5-coder-1.5b-instruct}
      export MODELS=${MODELS:-/tmp/models}
      gg=${MODEL_GGUF:-$MODELS/$MODEL_NAME.gguf}
      if [ ! -f "$gg" ] && [ -n "${MODEL_PARTS:-}" ]; then cat "$MODEL_PARTS"/* > "$gg"; fi
      GGUF=$gg MUSACODER_MODEL_BINARY="$(dirname "$BIN")/musacoder-model" bash scripts/get-model.sh "$MODEL_NAME" \
        2>&1 | tee "$OUT/get-model.log" || { rc=1; continue; }
      python3 tests/gpu/real_model_parity.py --musacoder "$BIN" --model "$MODELS/$MODEL_NAME" --gguf "$gg" \
        --kernelbench .kb/bench/KernelBench --out "$OUT/real-model" 2>&1 | grep -v "it/s]" | tee "$OUT/real-model.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    published)
      # MooreEval on KernelBench's real level-1 files at their published sizes (carry .kb):
      # bench/kb_level1's honest, wrong, memory-hog and hanging answers, each verdict against its
      # `# expect:` line (PUBLISHED_ARGS, e.g. "--answers 8", "--kernelbench .kb/src" for
      # KernelBench's own harness on the same answers in the same run).
      # shellcheck disable=SC2086
      python3 bench/published_sizes.py --musacoder "$BIN" --problems .kb/bench/KernelBench \
        --out "$OUT/published" ${PUBLISHED_ARGS:-} 2>&1 | tee "$OUT/published.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    baseline)
      # bench-model of a real checkpoint (real-model converts it) on KernelBench at published
      # sizes with KernelBench's own prompt: BASELINE_ARGS (e.g. --levels 1 --samples 8 --turns 3).
      MODEL_NAME=${MODEL_NAME:-qwen2.5-coder-1.5b-instruct}
      # shellcheck disable=SC2086
      "$BIN" bench-model --model "${MODELS:-/tmp/models}/$MODEL_NAME" --problems .kb/bench/KernelBench \
        --out "$OUT/baseline" --no-progress ${BASELINE_ARGS:---levels 1} > "$OUT/baseline.log" 2>&1 || rc=1
      grep -v "^judge:" "$OUT/baseline.log" | tail -40 ;;
    genbench)
      # shellcheck disable=SC2086
      python3 bench/generate_bench.py --musacoder "$BIN" --out "$OUT/generate_bench.json" ${GENBENCH_ARGS:-} 2>&1 \
        | tee "$OUT/genbench.log" || rc=1 ;;
    prefill)
      # Issue 15: RL's pipelined turns prefill answers one or a few at a time, each of its own
      # length. The recipe's model shape, 64 prompts of 800-2200 tokens arriving one every 4
      # engine steps: prefill calls and ms per call.
      # shellcheck disable=SC2086
      python3 bench/generate_bench.py --musacoder "$BIN" --out "$OUT/prefill_bench.json" --shape recipe-small \
        --prompts 64 --n 1 --new-tokens 256 --prompt-len 1500 --prompt-len-spread 700 --max-batch 64 --skip-transformers \
        --arrive-every 4 ${PREFILL_ARGS:-} 2>&1 | tee "$OUT/prefill.log" || rc=1 ;;
    sharing)
      # Issue 15: the engine beside processes that load the same GPU as MooreEval's judges do
      # (bench/probes/gpu_sharing.py): prefill and decode alone, beside 1 and 4 bursting small kernels,
      # and beside 8 and 16 CPU-bound processes (as the compile pool's nvcc runs); alone and beside
      # 16 CPU loads again under libtorch's profiler (gpu_sharing-profile-*.md). SHARING_ARGS
      # replaces those options. Then beside 1 and 2 processes running one long kernel after another
      # (a slow trial; SHARING_LONG_ARGS), into gpu_sharing-long.json. Either set to "none" skips it.
      # shellcheck disable=SC2086
      [ "${SHARING_ARGS:-}" = none ] || python3 bench/probes/gpu_sharing.py --musacoder "$BIN" --out "$OUT/gpu_sharing.json" \
        ${SHARING_ARGS:---profile 0,0+16} 2>&1 | tee "$OUT/sharing.log" || rc=1
      # shellcheck disable=SC2086
      [ "${SHARING_LONG_ARGS:-}" = none ] || python3 bench/probes/gpu_sharing.py --musacoder "$BIN" --out "$OUT/gpu_sharing-long.json" \
        ${SHARING_LONG_ARGS:---loads 0,1,2 --kernel-ms 20 --idle-ms 5} 2>&1 | tee "$OUT/sharing-long.log" || rc=1 ;;
    gemm-shapes)
      # Issue 15: a GEMM's host cost for a shape seen before against a new one (bench/probes/gemm_shapes.py):
      # whether prefill's ~200 us per aten::mm is the library meeting a new token count every call.
      python3 bench/probes/gemm_shapes.py --out "$OUT/gemm_shapes.json" ${GEMM_SHAPES_ARGS:-} 2>&1 | tee "$OUT/gemm-shapes.log" || rc=1 ;;
    train)
      # SFT on a Qwen-0.5B-shaped model against a plain PyTorch + transformers loop, same data
      # and batch, in this run; then the curves as an image.
      python3 tests/gpu/train_fused_parity.py --musacoder "$BIN" --out "$OUT/train-parity" 2>&1 | tail -3 | tee "$OUT/train-parity.log" || rc=1
      rm -rf "$OUT/train-parity"
      # shellcheck disable=SC2086
      python3 bench/sft_bench.py --musacoder "$BIN" --out "$OUT/train" ${TRAIN_ARGS:-} 2>&1 | tee "$OUT/train.log" || rc=1
      "$BIN" plot "$OUT/train/work/ours" --out "$OUT/train/sft_curves.svg" >/dev/null 2>&1 || true
      cp "$OUT/train/work/ours/metrics.jsonl" "$OUT/train/metrics.jsonl" 2>/dev/null
      rm -rf "$OUT/train/work" ;;
    determinism)
      # train sft --deterministic: two runs alike bit for bit, and what it costs (two plain runs beside them).
      python3 bench/sft_determinism.py --musacoder "$BIN" --out "$OUT/determinism" ${DETERMINISM_ARGS:-} 2>&1 \
        | tee "$OUT/determinism.log" || rc=1
      rm -rf "$OUT/determinism/work" ;;
    shard-weights)
      # train sft --shard weights against --shard optimizer on this GPU, --deterministic: losses
      # identical step by step, and the step time (a random model of Qwen2.5-Coder-1.5B's shape;
      # SHARD_ARGS="--model DIR" for another; the data: recipes/small's synthesized SFT set).
      mkdir -p "$OUT/shard-weights/data" && tar xzf recipes/small/seed.tgz -C "$OUT/shard-weights/data" ./synth/dataset.jsonl
      # shellcheck disable=SC2086
      python3 bench/shard_weights.py --musacoder-model "$(dirname "$BIN")/musacoder-model" --out "$OUT/shard-weights" \
        --data "$OUT/shard-weights/data/synth/dataset.jsonl" ${SHARD_ARGS:-} 2>&1 | tee "$OUT/shard-weights.log" || rc=1
      rm -rf "$OUT/shard-weights/data" "$OUT/shard-weights/model-1.5b-shape" "$OUT"/shard-weights/{optimizer,weights}/checkpoints ;;
    train-dp)
      # NCCL data parallelism: the same SFT run on 1 GPU and on every GPU of the machine.
      n=$(nvidia-smi -L | wc -l)
      # shellcheck disable=SC2086
      python3 bench/sft_dp.py --musacoder "$BIN" --out "$OUT/train-dp" --gpus "$n" ${TRAIN_DP_ARGS:-} 2>&1 \
        | tee "$OUT/train-dp.log" || rc=1
      "$BIN" plot "$OUT/train-dp/work/one" "$OUT/train-dp/work/many" --out "$OUT/train-dp/curves.svg" \
        --metrics loss,grad_norm,tokens_per_s,peak_alloc_gib >/dev/null 2>&1 || true
      rm -rf "$OUT/train-dp/work" ;;
    rft-small)
      # A small model from scratch through synth -> SFT (loss curve) -> RFT (bench/small_model_rft.py).
      # Resumable across slices: the work folder (.gl/rft-work, carry it) keeps each stage's outputs.
      W=${RFT_WORK:-$PWD/.gl/rft-work}
      mkdir -p "$W"
      # shellcheck disable=SC2086
      python3 bench/small_model_rft.py --musacoder "$BIN" --work "$W" ${RFT_ARGS:-} 2>&1 | tee -a "$OUT/rft-small.log" || rc=1
      [ -d "$W/sft" ] && "$BIN" plot "$W/sft" --out "$W/sft_curves.svg" --metrics loss,eval_loss,lr,tokens_per_s >/dev/null 2>&1
      [ -f "$W/rft/report.txt" ] && cat "$W/rft/report.txt"
      # What comes back (one archive): everything but the weights, synth's scratch, and the token
      # ids / log-probs of the samples.
      if [ -f "$W/rft/samples.jsonl" ]; then
        python3 -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
open(sys.argv[1],"w").writelines(json.dumps({k:r[k] for k in ("index","sample","id","text","finish_reason","prompt_tokens") if k in r})+"\n" for r in rows)' "$W/rft/samples.jsonl"
      fi
      tar czf "$OUT/rft-small.tgz" -C "$W" --exclude=./model --exclude=./sft/checkpoints --exclude=./synth/work . ;;
    bench-model)
      # bench-model on the GPU (bench/bench_model_gpu.py): the small SFT model of rl-small
      # (trained first when RFT_WORK has none) through --model on KernelBench level 1 (a subset,
      # with eager and torch.compile baselines) and on the held-out synthesized problems, then
      # through serve-model + --endpoint on the same problems. BM_ARGS: more options.
      W=${RFT_WORK:-$PWD/.gl/rft-work}
      mkdir -p "$W"
      if [ ! -d .kb/bench/KernelBench ]; then echo "bench-model: no KernelBench in .kb/bench (carry it)"; rc=1; continue; fi
      # shellcheck disable=SC2086
      python3 bench/bench_model_gpu.py --musacoder "$BIN" --work "$W" --kernelbench .kb/bench/KernelBench \
        --out "$OUT/bench-model" ${BM_ARGS:-} 2>&1 | tee -a "$OUT/bench-model.log" || rc=1
      ;;
    rl-small)
      # Multi-turn GRPO on the small model of rft-small (bench/small_model_rft.py --stages rl):
      # synth and SFT first when the work folder does not have them yet (RL_STAGES), then
      # `train rl`, resumed from its last checkpoint in later slices. RL_ARGS: more options for
      # the script (--rl-out NAME --deadline S); RL_TRAIN_ARGS: more `train rl` options.
      W=${RFT_WORK:-$PWD/.gl/rft-work}
      mkdir -p "$W"
      # shellcheck disable=SC2086
      python3 bench/small_model_rft.py --musacoder "$BIN" --work "$W" --stages "${RL_STAGES:-synth,sft,rl}" ${RL_ARGS:-} \
        --rl-args "${RL_TRAIN_ARGS:-}" 2>&1 | tee -a "$OUT/rl-small.log" || rc=1
      for run in "$W"/rl*/; do
        [ -f "$run/metrics.jsonl" ] || continue
        name=$(basename "$run")
        "$BIN" plot "$run" --out "$W/plot-$name-reward.svg" --metrics reward_mean,pass_rate_turn1,solved_by_turn3,all_failed_share,bdr_size,speedup_geomean_correct >/dev/null 2>&1
        "$BIN" plot "$run" --out "$W/plot-$name-policy.svg" --metrics mirrorpop_mean_abs_log_ratio,mirrorpop_filtered_share,entropy,grad_norm,clip_fraction,turn1_tokens_mean >/dev/null 2>&1
        "$BIN" plot "$run" --out "$W/plot-$name-time.svg" --metrics generate_s,verify_wait_s,train_s,step_s >/dev/null 2>&1
      done
      tar czf "$OUT/rl-small.tgz" -C "$W" --exclude='*/checkpoints' --exclude=./model --exclude=./sft/checkpoints \
        --exclude=./synth/work --exclude=./rft ./ 2>/dev/null ;;
    rl-pipeline)
      # bench/rl_pipeline.py runs `train rl --rollout turns`, then `--rollout overlapped` (PIPE_ARMS:
      # e.g. turns,overlapped,turns@2), from one model over the same problems and seeds, one after
      # the other on this GPU, each with a fresh cache. The model: PIPE_MODEL, else the recipe run's
      # RL start (RECIPE_RUN, default /tmp/recipe-run: rft/sft, else sft). PIPE_STEPS (default 3);
      # PIPE_ARGS replaces the recipe's RL options below. PIPE_GPUS (CUDA_VISIBLE_DEVICES) gives
      # it a GPU of its own, e.g. GPU 1 beside a recipe on GPU 0 (run it with DETACH=NAME).
      R=${RECIPE_RUN:-/tmp/recipe-run}
      # On a fresh machine, the carried start's RL model (seed and start, as the recipe stage).
      [ -z "${PIPE_MODEL:-}" ] && { prepare_run "$R" || { rc=1; continue; }; }
      m=${PIPE_MODEL:-$(ls -d "$R"/rft/sft/checkpoints/step-* "$R"/sft/checkpoints/step-* 2>/dev/null | head -1)}
      # The probe's problems once probe-rl has finished (its results half written give train rl
      # nothing to learn from); before that, every problem.
      keep=""
      if python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["stages"]["probe-rl"].get("done") else 1)' \
          "$R/recipe/state.json" 2>/dev/null; then keep="--keep-varied=$R/eval/rl-probe/results.jsonl"; fi
      if [ -z "$m" ]; then echo "rl-pipeline: no model (PIPE_MODEL, or a recipe run with sft)"; rc=1
      else
        # PIPE_RESUME=1: a later call on the same machine goes on with the arms an earlier call
        # did not finish (an arm takes ~3 min of a call's 10; bench/rl_pipeline.py --resume).
        # PIPE_STOP_BY (a Unix time, e.g. $(( $(date +%s) + 585 - SECONDS ))): an arm that would not
        # finish by then is left for the next call instead of being killed half run.
        [ -z "${PIPE_RESUME:-}" ] && rm -rf /tmp/rl-pipeline
        # shellcheck disable=SC2086
        env ${PIPE_GPUS:+CUDA_VISIBLE_DEVICES=$PIPE_GPUS} python3 bench/rl_pipeline.py --musacoder-model "$(dirname "$BIN")/musacoder-model" --model "$m" \
          --problems "${PIPE_PROBLEMS:-$R/synth-rl/problems.jsonl}" --out /tmp/rl-pipeline --steps "${PIPE_STEPS:-3}" ${PIPE_ARMS:+--arms "$PIPE_ARMS"} \
          ${PIPE_RESUME:+--resume} ${PIPE_STOP_BY:+--stop-by "$PIPE_STOP_BY"} -- \
          ${PIPE_ARGS:---format native --temperature 0.9 --order shuffle --group-size 8 --level 1 --max-problems 48 $keep
          --prompts-per-step 8 --max-new-tokens 2048 --stop-loops 512 --max-seq-len 16384 --micro-batch-tokens 32768
          --timing-budget 0.1 --lr 1e-6 --seed 1} 2>&1 | tee "$OUT/rl-pipeline.log" || rc=1
        # One file back (a call brings back 8 at most): the summary, each arm's log and metrics, and
        # the summaries of steps profiled with `--profile-step N` in PIPE_ARGS (not their traces).
        (cd /tmp/rl-pipeline && tar czf "$OUT/rl-pipeline.tgz" SUMMARY.json ./*.log ./*/metrics.jsonl \
          $(ls ./*/profile/step-*.md ./*/profile/step-*.json 2>/dev/null | grep -v trace) 2>/dev/null)
      fi ;;
    port-roundtrip)
      # Issue 18: the GPU suite's cases (and the synth stage's solutions, when it ran first)
      # ported to MUSA and back, judged beside the originals on this GPU: identical verdicts.
      # (the synth stage leaves its folder only as synth.tgz)
      syn=""
      if [ -f "$OUT/synth.tgz" ]; then rm -rf /tmp/port-synth && mkdir -p /tmp/port-synth && tar xzf "$OUT/synth.tgz" -C /tmp/port-synth; fi
      [ -f /tmp/port-synth/synth/dataset.jsonl ] && syn="--synth /tmp/port-synth/synth"
      # shellcheck disable=SC2086
      python3 bench/port_roundtrip.py --musacoder "$BIN" --out "$OUT/port-roundtrip" $syn --cases \
        tests/cases/gpu/honest tests/cases/gpu/native tests/cases/gpu/variants tests/cases/hacks tests/cases/faults \
        > "$OUT/port-roundtrip.log" 2>&1 || rc=1
      tail -40 "$OUT/port-roundtrip.log" ;;
    eval)
      # MooreEval over given problems and solutions: EVAL_PROBLEMS, EVAL_SOLUTIONS (folders
      # carried in .kb), EVAL_ARGS. Once per harness folder in EVAL_HARNESS (default: this
      # tree's python/), each with its own cache (EVAL_CACHE: one for all), so an older harness can be compared with this
      # one on the same machine in the same call. Rows: $OUT/eval-N.jsonl, N counting from 1.
      n=0
      for hd in ${EVAL_HARNESS:-$PWD/python}; do
        n=$((n + 1))
        echo "eval $n: harness $hd"
        # shellcheck disable=SC2086
        MUSACODER_HARNESS_DIR=$hd "$BIN" eval --problems "$EVAL_PROBLEMS" --solutions "$EVAL_SOLUTIONS" \
          --cache-dir "${EVAL_CACHE:-/tmp/eval-cache-$n}" --out "$OUT/eval-$n.jsonl" --no-progress ${EVAL_ARGS:-} \
          > "$OUT/eval-$n.log" 2>&1 || rc=1
        grep -v "^judge:" "$OUT/eval-$n.log" | tail -25
      done ;;
    start)
      # Only the run folder made ready (seed and start, as recipe and rl-pipeline do first).
      prepare_run "${RECIPE_RUN:-/tmp/recipe-run}" || rc=1 ;;
    recipe)
      # The recipe (recipes/small, docs/recipe.md; RECIPE: another recipe file).
      # RECIPE_RUN: the run folder (default /tmp/recipe-run: it survives while the machine stays
      # warm); RECIPE_ARGS: more options (--stages, --set NAME=VALUE, ...); RECIPE_GPUS: the GPUs
      # it may use (default every one; a `together` group such as rl and its arms spreads over
      # them). The recipe runs detached from this call: the call waits RECIPE_TIMEOUT seconds
      # (default 540) for it, and the next call, on the same warm machine, waits on the same
      # process instead of restarting a stage from its checkpoint. Finished stages are skipped and a stopped one resumes.
      # A fresh machine has lost the run folder: RECIPE_SEED (a recipe-seed.tgz an earlier call
      # brought back, or scripts/recipe-seed.sh made without a GPU; default .kb/recipe-seed.tgz
      # when carried) starts it with the finished synth stage, the one stage whose output is
      # small enough to travel (checkpoints are not). The machine stays warm only 30 s after a
      # call: a later call that comes after that finds a fresh machine.
      R=${RECIPE_RUN:-/tmp/recipe-run}
      mkdir -p "$R"
      # The corpus's CUTLASS/CuTe source: the nvidia-cutlass wheel carried in .kb/whl (the GPU
      # machines have no network; scripts/build-device.sh downloads it there).
      # Without it the corpus skips that source and says so, and the tokenizer and every model
      # after it differ from the recorded runs'.
      if ! python3 -c 'import cutlass_library' 2>/dev/null && ls .kb/whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-cutlass .kb/whl/nvidia_cutlass-*.whl &&
          export PYTHONPATH=/tmp/site-cutlass${PYTHONPATH:+:$PYTHONPATH} && echo "recipe: nvidia-cutlass from .kb/whl"
      fi
      # RECIPE_START=DIR (default the start's files carried in .kb/start, kept in /tmp/start-stash
      # above): a start an earlier lease packed (RECIPE_PACK_START below; scripts/recipe-seed.sh
      # start-pack), laid over the seed once per machine: the finished stages through probe-rl
      # and RL's starting checkpoint, so the recipe begins at the arms. Its parts may come over
      # several calls (a call carries 64 MiB with the tree).
      prepare_run "$R" || { rc=1; continue; }
      # A corpus made without CUTLASS/CuTe gives another tokenizer's input, and pretrain and SFT
      # other weights than the recorded runs' and than a carried start's: a model no table can use. So a run that will make the
      # corpus (a recipe with a corpus stage) stops here without it, unless RECIPE_NO_CUTLASS=1 says that is meant.
      if ! python3 -c 'import cutlass_library' 2>/dev/null && [ -z "${RECIPE_NO_CUTLASS:-}" ] &&
        grep -q '^name = "corpus"' "${RECIPE:-recipes/small/recipe.toml}" &&
        { [[ "${RECIPE_ARGS:-}" == *corpus* ]] ||
          ! python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["stages"]["corpus"]["done"] else 1)' \
            "$R/recipe/state.json" 2>/dev/null; }; then
        echo "recipe: not started: the corpus stage would run without CUTLASS/CuTe (nvidia-cutlass is not importable and"
        echo "  .kb/whl holds no nvidia_cutlass wheel: carry .kb/whl, made by scripts/build-device.sh), so every model"
        echo "  after it would differ from the recorded runs'; RECIPE_NO_CUTLASS=1 runs it anyway"
        rc=1; continue
      fi
      J=${RECIPE_JOB:+-$RECIPE_JOB}  # RECIPE_JOB below
      # The GPUs' utilization and memory every 2 s while the machine is held (gpu-samples.csv:
      # timestamp, GPU index, utilization, memory used).
      if ! { [ -f "$R/smi$J.pid" ] && kill -0 "$(cat "$R/smi$J.pid")" 2>/dev/null; }; then
        # shellcheck disable=SC2046
        setsid nvidia-smi $([ -n "${RECIPE_GPUS:-}" ] && echo "-i $RECIPE_GPUS") \
          --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -l 2 \
          >> "$R/gpu-samples$J.csv" 2>/dev/null < /dev/null & echo $! > "$R/smi$J.pid"
      fi
      # The host beside them (host-samples.csv: timestamp, 1-minute load, CPU busy % over the
      # last 2 s, available memory in MiB, tasks running, tasks blocked in the kernel, iowait % over
      # the last 2 s), and every 30 s its ten busiest processes
      # (host-top.log, with thread counts and the last second's top): what the host was doing when
      # runs beside each other wait far longer for MooreEval than one alone.
      if ! { [ -f "$R/host.pid" ] && kill -0 "$(cat "$R/host.pid")" 2>/dev/null; }; then
        setsid bash -c 'r=$1; n=0; prev=""
          while :; do
            read -r _ u ni sy id io irq sirq st _ < /proc/stat
            t=$((u + ni + sy + id + io + irq + sirq + st)); busy=$((t - id - io))
            if [ -n "$prev" ]; then
              set -- $prev
              echo "$(date -u +%FT%TZ),$(cut -d" " -f1 /proc/loadavg),$(( (busy - $2) * 100 / (t - $1 > 0 ? t - $1 : 1) )),$(awk "/MemAvailable/{print int(\$2/1024)}" /proc/meminfo),$(awk "/^procs_running/{r=\$2} /^procs_blocked/{b=\$2} END{print r\",\"b}" /proc/stat),$(( (io - $3) * 100 / (t - $1 > 0 ? t - $1 : 1) ))"
            fi
            prev="$t $busy $io"
            if [ $((n % 15)) -eq 0 ]; then
              # ps: CPU % over each process lifetime, and its thread count; the threads asleep in
              # the kernel (state D) by the kernel function they wait in; top: the last second alone
              { date -u +%FT%TZ; ps -eo pcpu,nlwp,rss,etimes,comm --sort=-pcpu | head -11
                echo "state D threads by wait channel:"; ps -eLo stat,wchan:40,comm | awk "\$1 ~ /^D/ {c[\$2\" \"\$3]++} END {for (k in c) print c[k], k}" | sort -rn | head -12
                top -b -c -n 2 -d 1 -w 200 2>/dev/null | awk "/^top -/{f++} f==2" | head -24; } >> "$r/host-top.log"
            fi
            n=$((n + 1)); sleep 2
          done' host "$R" >> "$R/host-samples.csv" 2>/dev/null < /dev/null & echo $! > "$R/host.pid"
      fi
      # RECIPE_VERIFIER_GPU=N: one MooreEval service (musacoder serve) on GPU N judges for RL and
      # its arms (recipe var rl_verifier), with their settings (RECIPE_VERIFIER_ARGS, default
      # "--timing-budget 0.1"; train rl refuses a service that judges otherwise). Keep N out of
      # RECIPE_GPUS where there are GPUs to spare; on one GPU it may be the arms' own (its timings
      # then taken beside training). A list (2,3) gives the service several GPUs: it times one answer at a time
      # per GPU, and five arms' passing answers all need timing. It lives while the machine
      # does; verifier.log and its /metrics come back.
      health() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/" + sys.argv[2], timeout=5).read().decode()[:int(sys.argv[3])])' "$@" 2>/dev/null; }
      vurl=""
      if [ -n "${RECIPE_VERIFIER_GPU:-}" ]; then
        vurl=http://127.0.0.1:${RECIPE_VERIFIER_PORT:-18731}
        if ! { [ -f "$R/verifier.pid" ] && kill -0 "$(cat "$R/verifier.pid")" 2>/dev/null; }; then
          # shellcheck disable=SC2086
          CUDA_VISIBLE_DEVICES=$RECIPE_VERIFIER_GPU setsid "$BIN" serve \
            --gpus "$(seq -s, 0 $(( $(tr ',' '\n' <<< "$RECIPE_VERIFIER_GPU" | wc -l) - 1 )))" --port "${vurl##*:}" --allow-inline-problems \
            --cache-dir "$R/verifier-cache" --no-progress ${RECIPE_VERIFIER_ARGS:---timing-budget 0.1} \
            >> "$R/verifier.log" 2>&1 < /dev/null & echo $! > "$R/verifier.pid"
          for _ in $(seq 180); do health "$vurl" health 1 >/dev/null && break; sleep 1; done
        fi
        echo "recipe: RL verifies through $vurl on GPU $RECIPE_VERIFIER_GPU: $(health "$vurl" health 400 || echo 'not answering (verifier.log)')"
        RECIPE_ARGS="${RECIPE_ARGS:-} --set rl_verifier=--verifier=$vurl"
      fi
      # RECIPE_JOB=NAME: a second recipe on the same run folder, e.g. KernelBench evaluations on
      # one GPU while the arms train on another (recipe merges state.json under a lock): its own
      # pid, console log and recipe-NAME.log back, so that it neither waits on nor restarts the other.
      if [ -f "$R/recipe$J.pid" ] && kill -0 "$(cat "$R/recipe$J.pid")" 2>/dev/null; then
        echo "recipe: still running (pid $(cat "$R/recipe$J.pid")), waiting on it"
      else
        rm -f "$R/recipe$J.pid"
        # shellcheck disable=SC2086
        R=$R J=$J BIN=$BIN env ${RECIPE_GPUS:+CUDA_VISIBLE_DEVICES=$RECIPE_GPUS} setsid bash -c 'echo $$ > "$R/recipe$J.pid"; exec "$BIN" recipe "${RECIPE:-recipes/small/recipe.toml}" \
          --out "$R" --no-progress "$@"' recipe ${RECIPE_ARGS:-} >> "$R/recipe$J-console.log" 2>&1 < /dev/null &
        while [ ! -s "$R/recipe$J.pid" ]; do sleep 0.2; done
        echo "recipe: started (pid $(cat "$R/recipe$J.pid"))"
      fi
      end=$((SECONDS + ${RECIPE_TIMEOUT:-540}))
      while kill -0 "$(cat "$R/recipe$J.pid")" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
      if kill -0 "$(cat "$R/recipe$J.pid")" 2>/dev/null; then echo "recipe: still running after this call's wait"
      else grep -q '^recipe: state in' "$R/recipe$J-console.log" || rc=1; fi
      [ -n "$vurl" ] && health "$vurl" metrics 100000 > "$R/verifier-metrics.txt"
      cp "$R/recipe$J-console.log" "$OUT/recipe$J.log"
      tail -30 "$OUT/recipe$J.log"
      # How far each RL run (the arms) has come, for the next call's plan.
      for m in "$R"/rl*/metrics.jsonl; do
        [ -f "$m" ] && echo "recipe: $(basename "$(dirname "$m")"): $(grep -c '"reward_mean"' "$m") RL step(s)"
      done
      # What comes back: the state, reports, curves, stage logs and training metrics (no
      # checkpoints, no corpus), and each checkpoint's weights hash (checkpoint-sha256.txt): two
      # leases' runs with --set deterministic=--deterministic should name the same SFT model.
      (cd "$R" && find . -path '*/checkpoints/*' -name '*.safetensors' -print0 2>/dev/null | sort -z \
        | xargs -0 -r sha256sum > checkpoint-sha256.txt)
      (cd "$R" && shopt -s nullglob && tar czf "$OUT/recipe.tgz" --exclude='*/checkpoints' --exclude='*/work' recipe \
        report eval corpus/report.json corpus/report.md synth/report.json synth-eval/report.json synth-r[l]/report.json tokenizer/tokenizer.json \
        ./*/metrics.jsonl ./*/events* ./rft/*.jsonl ./rft/sft/metrics.jsonl ./*/infra_errors.jsonl ./rl/sample[s] \
        ./*/profile/*.md ./*/profile/*.json gpu-samples*.csv host-samples.csv host-top.log checkpoint-sha256.txt \
        verifier.log verifier-metrics.txt 2>/dev/null)
      # The seed for a fresh machine: the synth stage's folders and a state that lists it alone.
      # RECIPE_PACK_START=1: the run's start instead (finished stages and RL's starting checkpoint,
      # RECIPE_START_KEEP naming other training folders), in parts under $OUT/start, for a later
      # lease's RECIPE_START. ~55 MiB for recipes/small: a call returns 64 MiB and 8 files at most.
      if [ -n "${RECIPE_PACK_START:-}" ]; then
        # shellcheck disable=SC2046
        bash scripts/recipe-seed.sh start-pack "$R" "$OUT/start" ${RECIPE_SEED:+--seed "$RECIPE_SEED"} \
          $(for k in ${RECIPE_START_KEEP:-}; do echo "--keep $k"; done) || rc=1
      else
        bash scripts/recipe-seed.sh pack "$R" "$OUT/recipe-seed.tgz" >/dev/null 2>&1 || true
      fi ;;
    synth)
      # Data synthesis on this GPU: validity probes, built-in teacher verified by MooreEval,
      # decontaminated against KernelBench when a checkout sits in .kb/bench (carry it).
      dc=""; [ -d .kb/bench/KernelBench ] && dc="--decontaminate .kb/bench/KernelBench"
      # shellcheck disable=SC2086
      "$BIN" synth --out "$OUT/synth" ${SYNTH_ARGS:---count 150 --seed 1 --formats native} $dc --no-progress \
        > "$OUT/synth.log" 2>&1 || rc=1
      tail -60 "$OUT/synth.log"
      tar czf "$OUT/synth.tgz" -C "$OUT" synth && rm -rf "$OUT/synth" ;;
  esac
done
# The device tool brings back only names made of letters, digits, '.', '_' and '-' (a profile
# named ...-0+16.md does not come back): any other character becomes '_', and is said.
find "$OUT" -mindepth 1 -depth -name '*[!A-Za-z0-9._-]*' 2>/dev/null | while read -r f; do
  b=$(basename "$f"); to="$(dirname "$f")/$(printf '%s' "$b" | tr -c 'A-Za-z0-9._-' '_')"
  [ -e "$to" ] || { mv "$f" "$to" && echo "renamed for the device tool: $b -> $(basename "$to")"; }
done
exit $rc
