#!/usr/bin/env python3
"""MooreEval as a service vs the local `musacoder eval`, on the same batch of real candidates.

  A  musacoder eval                                   (one process: compile pool + judges)
  B  musacoder serve --redis + worker compile + worker gpu, driven by `musacoder verify`
  C  musacoder serve (embedded pools), driven by `musacoder verify`

Each run starts from an empty cache, so every candidate is compiled and judged. Reports wall
time per run, throughput relative to A, and whether the verdicts agree. Needs a GPU (or
--device cpu with CPU-mode candidates) and a redis-server (REDIS_SERVER, default on PATH).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def make_batch(dest, copies, device):
    """Honest KernelBench-format and native candidates, `copies` distinct variants of each
    (a comment differs, so every one is compiled and judged on its own)."""
    os.makedirs(dest, exist_ok=True)
    if device == "cpu":
        srcs = [os.path.join(ROOT, "tests/cases/cpu", f) for f in ("honest_add.py",)]
    else:
        srcs = [os.path.join(ROOT, "tests/cases/gpu/honest", f)
                for f in sorted(os.listdir(os.path.join(ROOT, "tests/cases/gpu/honest")))]
        srcs += [os.path.join(ROOT, "tests/cases/gpu/native", f)
                 for f in sorted(os.listdir(os.path.join(ROOT, "tests/cases/gpu/native")))]
    n = 0
    for src in srcs:
        text = open(src).read()
        prob = next(l.split(":", 1)[1].strip() for l in text.splitlines() if "problem:" in l)
        ext = os.path.splitext(src)[1]
        mark = "//" if ext == ".cu" else "#"
        os.makedirs(os.path.join(dest, prob), exist_ok=True)
        for k in range(copies):
            with open(os.path.join(dest, prob, f"{n}{ext}"), "w") as f:
                f.write(text + f"\n{mark} variant {k}\n")
            n += 1
    return n


def verdicts(path):
    """(problem, sample) -> verdict, for the batch's candidates (eval also writes a row for each
    problem without a candidate; those are not part of the batch)."""
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("reason", "").startswith("no solution for this problem"):
            continue
        out[(r["problem"], r["sample_id"])] = r["verdict"]
    return out


def run_timed(cmd, log, env=None):
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    return time.monotonic() - t0, rc


def start(cmd, log, env=None):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", default=os.path.join(ROOT, "build", "musacoder"))
    ap.add_argument("--out", default=os.path.join(ROOT, "gpu-out", "service"))
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile-workers", type=int, default=max(1, os.cpu_count() // 2))
    ap.add_argument("--redis-server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    ap.add_argument("--work", default="/tmp/mc-service-work", help="caches and the batch (not results)")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    sol = os.path.join(work, "solutions")
    n = make_batch(sol, a.copies, a.device)
    problems = os.path.join(ROOT, "tests/cases/problems")
    B = a.musacoder
    common = ["--problems", problems, "--device", a.device]
    results = {"candidates": n, "device": a.device, "runs": {}}

    # A: the local CLI.
    wall, rc = run_timed([B, "eval", *common, "--solutions", sol, "--no-progress",
                          "--compile-workers", str(a.compile_workers),
                          "--cache-dir", os.path.join(work, "cache-eval"),
                          "--out", os.path.join(out, "eval.jsonl")], os.path.join(out, "eval.log"))
    results["runs"]["eval"] = {"wall_s": wall, "rc": rc}
    print(f"A eval: {wall:.1f} s (rc {rc})", flush=True)

    def via_server(name, server_args, workers):
        procs = []
        try:
            srv = start([B, "serve", *common, "--port", "0", "--cache-dir",
                         os.path.join(work, f"cache-{name}-server"), *server_args],
                        os.path.join(out, f"{name}-serve.log"))
            procs.append(srv)
            line = srv.stdout.readline()
            if "listening on" not in line:
                raise RuntimeError(f"{name}: server did not start: {line}")
            url = line.split("listening on ")[1].split()[0]
            for w in workers:
                procs.append(start([B, "worker", *w], os.path.join(out, f"{name}-{w[w.index('--role') + 1]}.log")))
            wall, rc = run_timed([B, "verify", "--server", url, "--problems", problems,
                                  "--solutions", sol, "--out", os.path.join(out, f"{name}.jsonl")],
                                 os.path.join(out, f"{name}-verify.log"))
            results["runs"][name] = {"wall_s": wall, "rc": rc}
            print(f"{name}: {wall:.1f} s (rc {rc})", flush=True)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()

    # B: distributed on a local Redis.
    port = free_port()
    rdir = os.path.join(work, "redis")
    os.makedirs(rdir)
    renv = dict(os.environ)
    if os.environ.get("REDIS_LIB"):  # a bundled redis-server's libraries, for it alone
        renv["LD_LIBRARY_PATH"] = os.environ["REDIS_LIB"]
    redis = subprocess.Popen([a.redis_server, "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir,
                              "--appendonly", "yes", "--save", ""], env=renv,
                             stdout=open(os.path.join(out, "redis.log"), "w"), stderr=subprocess.STDOUT)
    try:
        time.sleep(1.0)
        url = f"redis://127.0.0.1:{port}"
        via_server("redis", ["--redis", url], [
            ["--redis", url, "--role", "compile", "--threads", str(a.compile_workers),
             "--cache-dir", os.path.join(work, "cache-redis-compile")],
            ["--redis", url, "--role", "gpu", "--device", a.device, "--gpus", "0",
             "--cache-dir", os.path.join(work, "cache-redis-gpu")]])
    finally:
        redis.terminate()
        redis.wait(10)

    # C: embedded service.
    via_server("embedded", ["--compile-workers", str(a.compile_workers)], [])

    base = verdicts(os.path.join(out, "eval.jsonl"))
    t0 = results["runs"]["eval"]["wall_s"]
    print(f"\n{'run':<12}{'wall s':>10}{'cand/min':>10}{'vs eval':>10}  verdicts")
    for name, r in results["runs"].items():
        path = os.path.join(out, f"{name}.jsonl")
        v = verdicts(path) if os.path.exists(path) else {}
        same = sum(1 for k in base if v.get(k) == base[k])
        r["verdicts_agree"] = f"{same}/{len(base)}"
        r["throughput_rel"] = t0 / r["wall_s"] if r["wall_s"] else 0
        r["verdict_counts"] = {x: list(v.values()).count(x) for x in sorted(set(v.values()))}
        print(f"{name:<12}{r['wall_s']:>10.1f}{60 * n / r['wall_s']:>10.1f}{r['throughput_rel']:>9.2f}x  "
              f"{r['verdicts_agree']} agree {r['verdict_counts']}")
    json.dump(results, open(os.path.join(out, "service_compare.json"), "w"), indent=2)
    return 0 if all(r["rc"] == 0 for r in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
