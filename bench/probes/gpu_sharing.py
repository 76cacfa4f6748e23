"""The engine on a GPU that other processes use at the same time (issue 15).

With train rl --rollout overlapped, RL's engine decodes and prefills while MooreEval's judges run answers' trials on
the same GPU, each judge a process with its own CUDA context. In the RL pipeline bench
(one H200, alone) the async arms' prefill took 60-68 ms of GPU time a call for ~2,500 tokens,
against 17 ms for ~12,800 tokens turn by turn, whose prefill runs while no judge is busy; their
decode steps took 2.5 ms of model GPU time against 1.8 ms. Both point at the GPU's time-slicing
between contexts rather than at the engine's own work. This bench asks it directly: the same
`musacoder generate` run (recipes/small's model shape, random weights; prompts arriving a few
at a time as RL's pipelined turns send them) alone, then beside N processes that each load the
GPU like a judge's trials: bursts of small kernels (--busy-ms), then idle (--idle-ms); and
beside processes that keep a CPU core busy each, as the compile pool's nvcc runs do (a run
"G+C": G GPU loads and C CPU loads).

Reports, for each run: prefill calls and ms each (wall and GPU events), decode ms per step (wall
and the model's GPU time), tokens/s, and the bursts the load processes ran; as a table and JSON.
  python3 bench/probes/gpu_sharing.py --musacoder build/musacoder --out sharing.json
  (gpu-check stage `sharing`; --device cpu checks this script, with CPU load processes)"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for generate_bench
from generate_bench import SHAPES, arrival_cmd, engine_row, make_model, write_prompts  # noqa: E402

# One judge-like process: tensors of a level-1 problem's size, a burst of elementwise work,
# a reduction and a small matmul, synchronized, for busy_ms; then idle_ms asleep. It writes its
# burst count to `count` when stopped (SIGTERM).
# With kernel_ms > 0 a burst is instead one fp32 matmul that runs about kernel_ms on its own, as
# a judge's trial of a slow reference or candidate does (recipes/small's problems may take up to
# 200 ms in eager PyTorch): the GPU then has a long kernel of another context to switch around.
LOAD = r"""
import os, signal, sys, time, torch
dev, busy, idle, ready, count, kernel_ms = (sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4],
                                            sys.argv[5], float(sys.argv[6]))
x = torch.randn(1 << 22, device=dev); w = torch.randn(512, 512, device=dev)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
big = None
if kernel_ms > 0:
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 1024
    while True:  # the size whose matmul takes about kernel_ms here (timed after one warm-up call:
        # a first try timed the library's start-up and stopped at n = 1024, ~0.1 ms)
        big = torch.randn(n, n, device=dev); big @ big; sync(); t = time.perf_counter(); big @ big; sync()
        took = (time.perf_counter() - t) * 1e3
        if took >= kernel_ms or n >= 16384: break
        n = min(16384, int(n * max(1.1, (kernel_ms / max(took, 1e-3)) ** (1 / 3))))
sync(); open(ready + ".tmp", "w").write(f"{took if big is not None else 0.0}"); os.rename(ready + ".tmp", ready)
bursts = 0
def stop(*_):
    open(count, "w").write(str(bursts)); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    t = time.perf_counter()
    if big is not None:
        big @ big; sync()
    else:
        while (time.perf_counter() - t) * 1e3 < busy:
            y = torch.relu(x * 1.5 + 0.5).sum() + (w @ w).sum()
            sync()
    bursts += 1
    if idle > 0: time.sleep(idle / 1e3)
"""


# One judge-spare-like process (--churn): it holds no CUDA context itself, but starts one fresh
# process after another, each of which creates a CUDA context, runs one small op and exits, as a
# judge's spare candidate processes do, one for every answer it judges (a candidate never runs in
# a process another has used). Its count is the contexts it made.
CHURN = r"""
import os, signal, subprocess, sys
dev, ready, count = sys.argv[1], sys.argv[2], sys.argv[3]
child = "import torch; x = torch.randn(1 << 20, device=%r); float((x * 2).sum())" % dev
made = 0
def stop(*_):
    open(count, "w").write(str(made)); sys.exit(0)  # subprocess.run kills the child on the way out
signal.signal(signal.SIGTERM, stop)
open(ready + ".tmp", "w").write("0.0"); os.rename(ready + ".tmp", ready)
while True:
    subprocess.run([sys.executable, "-c", child], check=True); made += 1
"""


# One compile-like process: a CPU core kept busy, no CUDA.
SPIN = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\nwhile True: pass\n"


def start_loads(n, device, busy, idle, work, cpu=0, kernel_ms=0.0, churn=False):
    procs = [(subprocess.Popen([sys.executable, "-c", SPIN]), None, None) for _ in range(cpu)]
    for i in range(n):
        ready, count = os.path.join(work, f"ready{i}"), os.path.join(work, f"count{i}")
        for f in (ready, count):
            if os.path.exists(f):
                os.remove(f)
        args = ([CHURN, device, ready, count] if churn else
                [LOAD, device, str(busy), str(idle), ready, count, str(kernel_ms)])
        procs.append((subprocess.Popen([sys.executable, "-c", *args]), ready, count))
    deadline = time.time() + 120
    while not all(r is None or os.path.exists(r) for _, r, _ in procs):
        if time.time() > deadline or any(p.poll() is not None for p, _, _ in procs):
            stop_loads(procs)
            raise SystemExit("gpu_sharing: a load process did not start (no CUDA, or it died)")
        time.sleep(0.1)
    return procs


def kernel_ms_of(procs):
    """The mean time of one long kernel, as each --kernel-ms load process measured it when it
    sized its matrix (0 for burst loads)."""
    ms = [float(open(r).read() or 0) for _, r, _ in procs if r is not None]
    return sum(ms) / len(ms) if ms else 0.0


def stop_loads(procs):
    bursts = 0
    for p, _, count in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if count and os.path.exists(count):
            bursts += int(open(count).read() or 0)
    return bursts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", default="gpu_sharing.json")
    ap.add_argument("--shape", default="recipe-small", choices=sorted(SHAPES))
    ap.add_argument("--model-dir", default=None, help="default: /tmp/<shape>-random")
    ap.add_argument("--loads", default="0,1,4,0+8,0+16",
                    help="one run each: G (GPU load processes beside the engine) or G+C (and C CPU load processes)")
    ap.add_argument("--busy-ms", type=float, default=3.0, help="a load process's burst of GPU work")
    ap.add_argument("--idle-ms", type=float, default=3.0, help="its idle time between bursts")
    ap.add_argument("--kernel-ms", type=float, default=0.0,
                    help="a burst is one long kernel of about this many ms instead (a slow trial), then --idle-ms")
    ap.add_argument("--churn", action="store_true",
                    help="a GPU load process instead starts one fresh process after another, each creating a CUDA "
                         "context, running one small op and exiting (a judge's spares, one per answer)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=1500)
    ap.add_argument("--prompt-len-spread", type=int, default=700)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--arrive-every", type=int, default=4, help="engine steps between two prompts' arrivals")
    ap.add_argument("--device", default="cuda", help="cpu: a check of this script (fp32, CPU loads)")
    ap.add_argument("--profile", default="",
                    help="runs (G or G+C) to repeat under libtorch's profiler after the measured ones "
                         "(generate --profile): OUT's folder gets gpu_sharing-profile-G_C.md and .json, naming "
                         "prefill's parts and the host ops")
    a = ap.parse_args()
    gpu = a.device != "cpu"
    def runs(spec, what):
        try:
            return [tuple(int(x) for x in (r.split("+") + ["0"])[:2]) for r in spec.split(",") if r]
        except ValueError:
            ap.error(f"{what}: runs are G or G+C (whole numbers), got {spec}")
    loads, profiled = runs(a.loads, "--loads"), runs(a.profile, "--profile")
    a.model_dir = a.model_dir or f"/tmp/{a.shape}-random"
    make_model(a.model_dir, a.shape)
    work = tempfile.mkdtemp(prefix="gpu-sharing-")
    import torch
    pfile = os.path.join(work, "prompts.jsonl")
    lens = [len(p) for p in write_prompts(pfile, a.shape, a.prompts, a.prompt_len, a.prompt_len_spread)]
    res = {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "device": torch.cuda.get_device_name(0) if gpu else "cpu", "shape": a.shape, "prompts": a.prompts,
           "prompt_tokens": sum(lens), "new_tokens": a.new_tokens, "arrive_every": a.arrive_every,
           "busy_ms": a.busy_ms, "idle_ms": a.idle_ms, "kernel_ms": a.kernel_ms, "churn": a.churn, "runs": []}
    outdir = os.path.dirname(os.path.abspath(a.out))
    for k, (n, c) in enumerate(loads + profiled):
        prof = k >= len(loads)
        procs = start_loads(n, a.device, a.busy_ms, a.idle_ms, work, c, a.kernel_ms, a.churn)
        load_kernel_ms = kernel_ms_of(procs)
        loads_up = time.time()
        stats = os.path.join(work, f"stats{n}+{c}.json")
        extra = ["--profile", os.path.join(outdir, f"gpu_sharing-profile-{n}_{c}")] if prof else []
        cmd = arrival_cmd(a, pfile, stats, a.prompts, *extra)
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            stop_loads(procs)
            sys.stderr.write(r.stderr[-3000:])
            raise SystemExit(f"gpu_sharing: musacoder generate failed (rc {r.returncode}) beside {n} GPU and {c} CPU load(s)")
        if prof:
            print(f"loads {n}+{c}, profiled: {os.path.join(outdir, f'gpu_sharing-profile-{n}_{c}.md')}", flush=True)
        else:
            row = {"loads": n, "cpu_loads": c, "wall_s": wall, "load_kernel_ms": load_kernel_ms,
                   **engine_row(stats)}
            res["runs"].append(row)
            print(f"loads {n}+{c}: {row['tokens_per_s']:.0f} tokens/s, prefill {row['prefill_wall_ms']:.1f} ms wall / "
                  f"{row['prefill_gpu_ms']:.1f} ms GPU a call, decode step {row['step_wall_ms']:.2f} ms wall / "
                  f"{row['step_model_gpu_ms']:.2f} ms model GPU", flush=True)
        bursts, load_s = stop_loads(procs), time.time() - loads_up
        for row in res["runs"]:
            if (row["loads"], row["cpu_loads"]) == (n, c):
                row["load_bursts_per_s"] = bursts / load_s if n else 0.0
    json.dump(res, open(a.out, "w"), indent=2)
    base = res["runs"][0]
    print(f"\n{res['device']}, {a.shape} (random weights), {a.prompts} prompts ({res['prompt_tokens']} tokens) arriving "
          f"one every {a.arrive_every} engine steps, {a.new_tokens} new tokens each; load processes "
          + ("each starting one fresh CUDA process after another (bursts/s: contexts made a second)" if a.churn else
             f"one ~{a.kernel_ms:g} ms kernel (measured: "
             + ", ".join(f"{r['load_kernel_ms']:.1f} ms" for r in res["runs"] if r["loads"]) + ")"
             if a.kernel_ms > 0 else f"{a.busy_ms:g} ms busy") + f" / {a.idle_ms:g} ms idle\n")
    print(f"host: {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} for this process\n")
    # decode ms a step: the engine's own clock, launching a step and waiting for its tokens
    print("| GPU + CPU load processes | tokens/s | prefill ms a call (wall / GPU) | decode ms a step (launch+wait / model GPU) | "
          "vs alone: prefill GPU, tokens/s | load bursts/s |\n|---:|---:|---:|---:|---:|---:|")
    for row in res["runs"]:
        # Prefill against alone by its GPU time where there is one (CUDA), else its wall time.
        k = "prefill_gpu_ms" if base["prefill_gpu_ms"] > 0 else "prefill_wall_ms"
        print(f"| {row['loads']} + {row['cpu_loads']} | {row['tokens_per_s']:.0f} | "
              f"{row['prefill_wall_ms']:.1f} / {row['prefill_gpu_ms']:.1f} | "
              f"{row['step_wall_ms']:.2f} / {row['step_model_gpu_ms']:.2f} | {row[k] / max(1e-9, base[k]):.2f}x, "
              f"{row['tokens_per_s'] / max(1e-9, base['tokens_per_s']):.2f}x | {row['load_bursts_per_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
