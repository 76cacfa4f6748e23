"""`musacoder bench-model` on a GPU (issue 16's GPU run), with the small model of
bench/small_model_rft.py (trained from scratch by `train sft` on synthesized problems; no
pretrained model can be fetched here):

  kb      --model on a subset of KernelBench level 1 (--kb-subset), with eager and torch.compile
          baselines timed by the run;
  held    --model on the held-out synthesized problems (those SFT never saw), two turns;
  served  the same checkpoint through `musacoder-model serve-model` and --endpoint on the
          held-out problems, with the same sampling: its answers and numbers are set beside the
          engine's (`bench-model compare`, and the share of identical answers).

Trains the SFT model first when --work has none (small_model_rft.py --stages synth,sft).
Reports, plots and logs go to --out.

usage: python3 bench/bench_model_gpu.py --musacoder BIN --work DIR --kernelbench DIR --out DIR [...]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
START = time.time()


def sh(cmd, log, timeout=None):
    t0 = time.time()
    print("$", " ".join(map(str, cmd)), flush=True)
    with open(log, "a") as f:
        rc = subprocess.run(list(map(str, cmd)), stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
    print(f"  -> {rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--kernelbench", required=True, help="KernelBench folder (level1/ ...)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=25)
    ap.add_argument("--kb-subset", default="1_Square_matrix_multiplication_,4_Matrix_vector_multiplication_,19_ReLU,"
                    "23_Softmax,36_RMSNorm_,40_LayerNorm,47_Sum_reduction_over_a_dimension,88_MinGPTNewGelu,"
                    "94_MSELoss,100_HingeLoss", help="comma-separated stems, or all (the whole of level 1)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=3072)
    ap.add_argument("--seen", type=int, default=30, help="problems SFT trained on, for the engine/endpoint agreement pair")
    ap.add_argument("--runs", default="kb,held,served,seen,seen-served")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "bench-model-commands.log")
    ck_root = os.path.join(a.work, "sft", "checkpoints")
    if not (os.path.isdir(ck_root) and any(d.startswith("step-") for d in os.listdir(ck_root))):
        rc = sh([sys.executable, os.path.join(HERE, "small_model_rft.py"), "--musacoder", a.musacoder, "--work", a.work,
                 "--stages", "synth,sft", "--epochs", a.epochs], log)
        if rc != 0:
            sys.exit("sft failed")
    model = os.path.join(ck_root, sorted(d for d in os.listdir(ck_root) if d.startswith("step-"))[-1])
    print("model:", model, flush=True)
    # held_out.json names problems as L<level>/<id>; bench-model's subset takes file stems.
    held = set(json.load(open(os.path.join(a.work, "held_out.json"))))
    stems = [os.path.splitext(os.path.basename(r["path"]))[0]
             for r in map(json.loads, open(os.path.join(a.work, "synth", "problems.jsonl")))
             if f"L{r['level']}/{r['id']}" in held]
    with open(os.path.join(a.work, "held_subset.txt"), "w") as f:
        f.write("\n".join(stems) + "\n")
    seen = [os.path.splitext(os.path.basename(r["path"]))[0]
            for r in map(json.loads, open(os.path.join(a.work, "synth", "problems.jsonl")))
            if f"L{r['level']}/{r['id']}" not in held][:a.seen]
    with open(os.path.join(a.work, "seen_subset.txt"), "w") as f:
        f.write("\n".join(seen) + "\n")
    with open(os.path.join(a.work, "kb_subset.txt"), "w") as f:
        f.write("\n".join(a.kb_subset.split(",")) + "\n")
    common = ["--samples", a.samples, "--temperature", a.temperature, "--max-new-tokens", a.max_new_tokens,
              "--prompt", "musacoder", "--format", "native", "--timing-budget", "0.2", "--no-progress", "--seed", "1"]
    synth = os.path.join(a.work, "synth", "problems.jsonl")
    runs = a.runs.split(",")
    done = []
    if "kb" in runs:
        out = os.path.join(a.work, "bench-kb")
        subset = [] if a.kb_subset == "all" else ["--subset", os.path.join(a.work, "kb_subset.txt")]
        sh([a.musacoder, "bench-model", "--problems", a.kernelbench, "--levels", "1", *subset, "--model", model,
            "--out", out, "--turns", 1, *common,
            *(["--resume"] if os.path.exists(os.path.join(out, "run.json")) else [])], log)
        done.append(out)
    model_bin = os.path.join(os.path.dirname(os.path.abspath(a.musacoder)), "musacoder-model")

    def bench(name, subset, endpoint=None):
        out = os.path.join(a.work, f"bench-{name}")
        src = ["--endpoint", endpoint, "--model-name", "small", "--concurrency", "32"] if endpoint else ["--model", model]
        sh([a.musacoder, "bench-model", "--problems", synth, "--subset", os.path.join(a.work, subset), *src, "--out", out,
            "--turns", a.turns, "--no-compile-baseline", *common,
            *(["--resume"] if os.path.exists(os.path.join(out, "run.json")) else [])], log)
        done.append(out)

    def served(name, subset, engine_run):
        log_path = os.path.join(a.out, f"serve-model-{name}.log")
        srv = subprocess.Popen([model_bin, "serve-model", "--model", model, "--port", "0", "--max-seq-len", "8192",
                                "--served-model-name", "small"], stdout=subprocess.PIPE,
                               stderr=open(log_path, "w"), text=True)
        try:
            line = srv.stdout.readline()
            print("serve-model:", line.strip(), flush=True)
            m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
            if not m:
                sys.exit("serve-model did not start")
            url = f"http://127.0.0.1:{m.group(1)}"
            # One request first: the server answers chat on this GPU.
            import urllib.request
            req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
                {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode(),
                headers={"Content-Type": "application/json"})
            try:
                print("probe:", urllib.request.urlopen(req, timeout=120).read()[:200], flush=True)
            except Exception as e:  # noqa: BLE001
                print("probe failed:", e, flush=True)
            bench(name, subset, url)
        finally:
            print("serve-model alive after the run:", srv.poll() is None, "exit", srv.poll(), flush=True)
            srv.terminate()
            try:
                rest, _ = srv.communicate(timeout=60)
                print("serve-model stdout tail:", (rest or "")[-1500:], flush=True)
            except subprocess.TimeoutExpired:
                srv.kill()
        eng = {(r["problem"], r["sample"], r["turn"]): r["text"]
               for r in map(json.loads, open(os.path.join(a.work, f"bench-{engine_run}", "answers.jsonl")))}
        got = {(r["problem"], r["sample"], r["turn"]): r["text"]
               for r in map(json.loads, open(os.path.join(a.work, f"bench-{name}", "answers.jsonl")))}
        t1 = [k for k in eng if k[2] == 1 and k in got]
        same = sum(eng[k] == got[k] for k in t1)
        print(f"engine vs served ({name}): {same} of {len(t1)} turn-1 answers identical", flush=True)

    if "held" in runs:
        bench("held", "held_subset.txt")
    if "served" in runs:
        served("served", "held_subset.txt", "held")
    if "seen" in runs:
        bench("seen", "seen_subset.txt")
    if "seen-served" in runs:
        served("seen-served", "seen_subset.txt", "seen")
    if done:
        subprocess.run([a.musacoder, "bench-model", "compare", *done, "--out", os.path.join(a.out, "compare.md")])
    for d in done:
        name = os.path.basename(d)
        for f in ("report.md", "report.json", "report.txt", "fast_p.svg", "grid.svg", "run.json", "engine.log", "timing.json",
                  "answers.jsonl", "results.jsonl"):
            if os.path.exists(os.path.join(d, f)):
                shutil.copy(os.path.join(d, f), os.path.join(a.out, f"{name}-{f}"))
        print(open(os.path.join(d, "report.txt")).read() if os.path.exists(os.path.join(d, "report.txt")) else f"{d}: no report")
    print(f"total {time.time() - START:.0f} s")
    # One archive: the device returns a limited number of files.
    subprocess.run(["tar", "czf", os.path.join(os.path.dirname(os.path.abspath(a.out)), "bench-model.tgz"), "-C",
                    os.path.dirname(os.path.abspath(a.out)), os.path.basename(os.path.abspath(a.out))])
    shutil.rmtree(a.out)


if __name__ == "__main__":
    main()
