#!/usr/bin/env python3
"""What fresh CUDA processes cost when many start at once on one host (GPU machine).

MooreEval runs every candidate in a fresh process, forked from a zygote that has imported torch,
which then creates its own CUDA context. Five RL arms on one 4-GPU host
waited 10-30x longer for MooreEval than one arm alone, while the host's CPUs were 7-22% busy and
its load average stood at 40-54: processes asleep in the kernel. There a candidate
process's CUDA context took ~7 s to create (0.25 s alone) and its imports ~3.5 s.

This bench separates the host from MooreEval. For each level N of --slots it starts N slots at
once, spread over --gpus; each slot is a zygote-like process that imports torch and then forks
--children children one after another. Each child creates a CUDA context on its slot's GPU,
allocates and frees --alloc-mib, and runs --syncs tiny kernels each followed by a synchronize,
as a correctness trial does. Per N it prints the median and p90 of each part and the wall time,
and writes one JSON line per N to --out. If per-child times grow with N while the host's CPUs
stay idle, the limit is host-wide (the driver, the VM's IOMMU), not the GPUs.

  python3 bench/probes/context_contention.py --gpus 0,1,2,3 --slots 1,4,16,32 --children 4 --out /tmp/cc.jsonl
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

SLOT = r'''
import json, os, sys, time
t0 = time.monotonic()
import torch
imports_s = time.monotonic() - t0
children, alloc_mib, syncs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def child(out):
    t = time.monotonic()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    out["context_s"] = time.monotonic() - t
    t = time.monotonic()
    x = torch.empty(alloc_mib << 20, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()
    out["alloc_s"] = time.monotonic() - t
    y = torch.ones(1024, device="cuda")
    t = time.monotonic()
    for _ in range(syncs):
        y.add_(1)
        torch.cuda.synchronize()
    out["syncs_s"] = time.monotonic() - t


for k in range(children):
    r, w = os.pipe()
    t_fork = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = {"fork_s": time.monotonic() - t_fork}
        try:
            child(out)
        except BaseException as e:  # the parent's loop must never run on in a child
            out["failed"], out["stderr"] = True, repr(e)[:300]
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        data += b
    os.close(r)
    t = time.monotonic()
    os.waitpid(pid, 0)
    row = json.loads(data) if data else {"failed": True}
    row["exit_s"] = time.monotonic() - t  # the child's teardown: its context destroyed
    row["imports_s"] = imports_s if k == 0 else None
    print(json.dumps(row), flush=True)
'''


def pct(xs, q):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_level(n, gpus, a):
    rows, lock = [], threading.Lock()

    def slot(i):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus[i % len(gpus)], OMP_NUM_THREADS="1")
        p = subprocess.run([sys.executable, "-c", SLOT, str(a.children), str(a.alloc_mib), str(a.syncs)],
                           env=env, capture_output=True, text=True, timeout=a.timeout)
        got = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        if p.returncode != 0 or len(got) < a.children:
            got.append({"failed": True, "stderr": p.stderr[-300:]})
        with lock:
            rows.extend(got)

    t0 = time.monotonic()
    threads = [threading.Thread(target=slot, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in rows if not r.get("failed")]
    out = {"slots": n, "gpus": len(gpus), "children": len(ok), "failed": len(rows) - len(ok), "wall_s": round(wall, 2),
           "children_per_s": round(len(ok) / wall, 2) if wall else None}
    for part in ("imports_s", "fork_s", "context_s", "alloc_s", "syncs_s", "exit_s"):
        xs = [r.get(part) for r in ok]
        med, p90 = pct(xs, 0.5), pct(xs, 0.9)
        out[part] = {"p50": round(med, 3) if med is not None else None, "p90": round(p90, 3) if p90 is not None else None}
    errors = [r["stderr"] for r in rows if r.get("failed") and r.get("stderr")]
    if errors:
        out["first_error"] = errors[0]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="0", help="CUDA_VISIBLE_DEVICES entries the slots are spread over")
    ap.add_argument("--slots", default="1,4,16", help="concurrent slots per level, comma-separated")
    ap.add_argument("--children", type=int, default=4, help="children each slot forks, one after another")
    ap.add_argument("--alloc-mib", type=int, default=256)
    ap.add_argument("--syncs", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    gpus = [g.strip() for g in a.gpus.split(",") if g.strip()]
    levels = [int(s) for s in a.slots.split(",") if s.strip()]
    if not gpus or not levels or min(levels) < 1 or a.children < 1:
        sys.exit("context_contention: want --gpus, --slots of whole numbers >= 1 and --children >= 1")
    print(f"{'slots':>5} {'gpus':>4} {'ok':>4} {'wall s':>7} {'child/s':>7} {'imports':>13} {'context':>13} "
          f"{'alloc':>13} {'syncs':>13} {'exit':>13}   (p50/p90 s)")
    for n in levels:
        r = run_level(n, gpus, a)
        cell = lambda k: f"{r[k]['p50']}/{r[k]['p90']}"  # noqa: E731
        print(f"{n:>5} {len(gpus):>4} {r['children']:>4} {r['wall_s']:>7} {r['children_per_s']:>7} {cell('imports_s'):>13} "
              f"{cell('context_s'):>13} {cell('alloc_s'):>13} {cell('syncs_s'):>13} {cell('exit_s'):>13}"
              + (f"  {r['failed']} failed: {r.get('first_error', '')[:120]}" if r["failed"] else ""), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
