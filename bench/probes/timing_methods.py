"""Where do MooreEval's timings and triton's do_bench part ways? (run on a GPU machine)

Times the eager reference of each problem in tests/cases/problems in ONE plain process, with
several methods interleaved over rounds, so method differences show apart from run-to-run
drift:
  do_bench          triton.testing.do_bench, one input set: median and trimmed mean (p5-p95)
  chunks_of_10      3 sets, 10 iterations per synchronisation (the judge's old reference rhythm)
  long_block        MooreEval's loop without the host waiting (1000 calls queued at once)
  mc_judge          MooreEval's time_adaptive as the judge calls it: median and trimmed mean
Between rounds a small allocation shifts where outputs land (a ~10 us kernel's time depends on
it by up to ~15%; do_bench reuses one output address per run).
and, last, all of them again after a torch.profiler session (CUPTI started), as every
candidate process has one before it is timed.
Prints a table and writes JSON (--out).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def load_problem(path):
    spec = importlib.util.spec_from_file_location("p_" + os.path.basename(path)[:-3], path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    from triton.testing import do_bench
    from musacoder_harness import legality, timing
    from musacoder_harness.inputs import seed_all, timing_sets
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    flusher = timing.L2Flusher(dev)
    folder = os.path.join(ROOT, "tests", "cases", "problems")
    probs = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
    results = {}

    def measure(tag, name, fn, sets):
        with torch.no_grad():
            r = {}
            tb = [x * 1e3 for x in do_bench(lambda: fn(*sets[0]), warmup=50, rep=300,
                                            return_mode="all")]
            st = timing.stats(tb)
            r["do_bench"] = st["median_us"]
            r["do_bench_trimmed"] = st["trimmed_mean_us"]
            t = []
            for _ in range(20):  # the judge's first reference rhythm: 10 per sync
                t += timing.time_iterations(fn, sets, dev, flusher, 10)[0]
            r["chunks_of_10"] = statistics.median(t)
            timing.SYNC_EVERY, every = 10 ** 9, timing.SYNC_EVERY
            t, _ = timing.time_iterations(fn, sets, dev, flusher, 1000)
            timing.SYNC_EVERY = every
            r["long_block_trimmed"] = timing.stats(t)["trimmed_mean_us"]
            st, _ = timing.time_adaptive(fn, sets, dev, flusher)
            r["mc_judge"] = st["median_us"]
            r["mc_judge_trimmed"] = st["trimmed_mean_us"]
            r["mc_judge_n"] = st["n"]
        results.setdefault(name, {}).setdefault(tag, []).append(r)
        # Shift the caching allocator's free blocks so the next round's outputs land elsewhere.
        shifts.append(torch.empty((len(shifts) % 7 + 1) << 20, dtype=torch.uint8, device=dev))

    shifts = []
    models = {}
    for f in probs:
        prob = load_problem(os.path.join(folder, f))
        seed_all(42)
        with torch.device(dev):
            model = prob.Model(*prob.get_init_inputs()).to(dev)
        models[f[:-3]] = (model, timing_sets(prob, 42, 3, dev, torch.float32))
    for rnd in range(args.rounds):
        for name, (model, sets) in models.items():
            measure("plain", name, model, sets)
    x = torch.ones(4, device=dev)
    legality.profile_kernels(lambda: x.add(1))  # what every candidate process does first
    for rnd in range(args.rounds):
        for name, (model, sets) in models.items():
            measure("after_profiler", name, model, sets)

    methods = ["do_bench", "do_bench_trimmed", "long_block_trimmed", "chunks_of_10", "mc_judge", "mc_judge_trimmed"]
    print("cells: mean over rounds (spread = (max-min)/mean across rounds)")
    print("| problem | phase | " + " | ".join(methods) + " | judge trimmed vs do_bench trimmed |")
    print("|---|---|" + "---|" * (len(methods) + 1))
    for name, by in results.items():
        for tag, rs in by.items():
            cells = []
            for m in methods:
                v = [r[m] for r in rs]
                mean = statistics.fmean(v)
                cells.append(f"{mean:.2f} ({(max(v) - min(v)) / mean * 100:.0f}%)")
            jd = statistics.fmean(r["mc_judge_trimmed"] for r in rs) / \
                statistics.fmean(r["do_bench_trimmed"] for r in rs) - 1
            print(f"| {name} | {tag} | " + " | ".join(cells) + f" | {jd * 100:+.1f}% |")
    if args.out:
        with open(args.out, "w") as fo:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                       "gpu": torch.cuda.get_device_name(0), "results": results}, fo, indent=1)


if __name__ == "__main__":
    main()
