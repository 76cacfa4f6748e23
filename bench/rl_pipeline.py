#!/usr/bin/env python3
"""RL's two rollout schedules side by side: `train rl --rollout turns` against `--rollout overlapped`.

Runs `musacoder-model train rl` from one model over the same problems, seeds and steps, once per
arm: "turns" (each turn waits for all its verdicts, then the next turn is generated) and
"overlapped" (the next step's first turn is decoded beside this step's turns, a failed answer's
repair is asked for as soon as its verdict is in, later turns continue their conversation's KV
cache, and a passing answer's timing waits until the engine stops; one step off-policy).
NAME@K is the K-th repeat of arm NAME (turns@2, ...), kept apart; SUMMARY.json's "repeats" gives
each repeated arm's step times and their spread, since one run of each arm does not tell arms
~15% apart. With --max-steps N the last step draws no next step, so N steps' step times hold N
steps' work.
Each run gets its own fresh cache folder, so none finds another's compiles or reference timings. Prints a table per step and writes SUMMARY.json, with
two measures per arm, over all steps and over steps 2 and on:
- verify_overhead: the arm's own MooreEval wait over its own generation plus training;
- overhead_vs_turns: the arm's step time beyond the turn-by-turn arm's generation plus training,
  over the latter. Overlapped, the engine decodes while verdicts are awaited, so its own
  generate_s grows and only this measure compares like with like.
A third span, "steady" (steps 2 to N-1, with N >= 3), is what a long run sees: overlapped, the
first step also makes the second's first turn, and the last makes none, so only the middle steps
hold one step's work each with the pipeline full. A fourth, "filled" (steps 3 to N-1), leaves
out step 2 too, the first with the pipeline full; and "pooled" sums every run of an arm (NAME@K
repeats) against every turn-by-turn run. Per token (the steady span's step time per
answer token, against turn by turn's generation and training per answer token): the arms'
rollouts part after step 1, and one with more failed answers has more turns to make.
Each arm also records its host ("host" in SUMMARY.json): GPU processes not its own seen while
it ran, and the 1-minute load; an arm beside other GPU work is flagged, since its times are
that host's.

  python3 bench/rl_pipeline.py --musacoder-model build/musacoder-model --model SFT_DIR \
      --problems synth-rl/problems.jsonl --out /tmp/rl-pipeline --steps 3 -- --level 1 ...

Options after `--` go to both runs."""
import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time

KEYS = ("generate_s", "verify_wait_s", "drain_s", "train_s", "step_s", "verify_overhead", "asked_while_decoding",
        "pass_rate_turn1", "pass_rate_turn2", "pass_rate_turn3", "answers")
# Kept in SUMMARY.json, not printed: where the wait went (the waited-for answers' compile,
# trials, timing, ...) and how many decode steps the engine took.
MORE = ("wait_answers", "wait_work_s", "gen_decode_steps", "gen_decode_step_ms", "twin_answers_share", "gen_prefill_s",
        "gen_prefill_calls", "gen_admissions_held", "answer_tokens_mean", "submit_s", "ask_s", "gen_continued",
        "gen_reused_tokens", "gen_prompt_tokens", "gen_kept_evicted", "gen_model_gpu_ms", "gen_prefill_gpu_s",
        "trained_groups")


def smi(*query):
    """nvidia-smi's CSV answer to a query, one list of fields per line (empty without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def visible_buses():
    """The PCI bus ids of the GPUs CUDA_VISIBLE_DEVICES names (indices or UUIDs), None when it is
    unset (every GPU is this bench's). A bench given GPU 0 beside a recipe on GPU 1 is not flagged for the recipe's processes, nor waits on them between arms."""
    return buses_of(os.environ.get("CUDA_VISIBLE_DEVICES", "").strip())


@functools.lru_cache(maxsize=None)
def buses_of(vis):
    """visible_buses for one CUDA_VISIBLE_DEVICES value: asked of nvidia-smi once, not at every
    sample of every arm."""
    if not vis:
        return None
    bus = {}
    for f in smi("--query-gpu=index,uuid,pci.bus_id"):
        if len(f) == 3:
            bus[f[0]] = bus[f[1]] = f[2].lower()
    named = [v.strip() for v in vis.split(",") if v.strip()]
    return {bus[v] for v in named if v in bus} if all(v in bus for v in named) else None


def gpu_pids():
    """Processes holding a CUDA context on this bench's GPUs (visible_buses; a process whose GPU
    nvidia-smi does not name counts), empty without nvidia-smi."""
    buses = visible_buses()
    return {int(f[0]) for f in smi("--query-compute-apps=pid,gpu_bus_id")
            if f[0].isdigit() and (buses is None or len(f) < 2 or f[1].lower() in buses)}


def stat_fields(pid):
    """/proc/PID/stat's fields after the command name (state, parent, ...); None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(root):
    """root and every process below it, from /proc."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            fields = stat_fields(d)
            if fields and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(d))
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def command_of(pid):
    """pid's command line (80 characters), or None once it has exited. A process without one
    (exiting, or a zombie) is named by its state and parent from /proc, "[616: Z, parent 1]",
    so that a flagged arm says whose it was."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return None
    if cmd:
        return cmd
    fields = stat_fields(pid)
    return f"[{pid}: {fields[0]}, parent {fields[1]}]" if fields and len(fields) > 1 else None


def wait_gpu_released(before, timeout=60.0, every=1.0):
    """Wait until no GPU process is left but those in `before` (what held the GPUs before the
    first arm): an arm's processes may hold their CUDA contexts for a while after it has exited,
    and the next arm would start beside them. Returns (seconds waited, what is left after `timeout`)."""
    t0 = time.time()
    while True:
        left = gpu_pids() - before - {os.getpid()}
        if not left or time.time() - t0 >= timeout:
            return time.time() - t0, sorted(n for n in map(command_of, left) if n is not None)
        time.sleep(every)


class HostWatch:
    """What else ran on the machine while an arm ran: its 1-minute load, and GPU processes that
    are not the arm's own (an arm's numbers beside other GPU work are that host's, not its
    method's). Sampled every `every` seconds."""

    def __init__(self, proc, every=5.0):
        self.proc, self.every, self.loads, self.others, self.exited = proc, every, [], {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            with open("/proc/loadavg") as f:
                self.loads.append(float(f.read().split()[0]))
            # The arm's tree before and after nvidia-smi's list: a judge that starts or ends while
            # the list is taken is still the arm's.
            mine = descendants(self.proc.pid)
            pids = gpu_pids()
            if pids:
                mine |= descendants(self.proc.pid)
                for pid in pids - mine - {os.getpid()}:
                    fields = stat_fields(pid)
                    if fields and fields[0] == "Z":
                        # Exited, not yet reaped (an orphan under a PID 1 that does not reap): it
                        # runs nothing on the GPU.
                        self.exited[pid] = command_of(pid)
                        continue
                    name = command_of(pid)
                    if name is not None:  # gone by now: it was no long-lived neighbour
                        self.others[pid] = name
            self.stop.wait(self.every)

    def finish(self):
        self.stop.set()
        self.thread.join()
        # Quiet: no GPU process but the arm's own (the load counts the arm's compiles and judges
        # too, so it is reported, not judged).
        return {"load_1m_max": max(self.loads, default=None), "cores": len(os.sched_getaffinity(0)),
                "other_gpu_processes": len(self.others), "quiet_host": not self.others,
                "others": sorted(set(self.others.values())), "exited_listed": len(self.exited)}


def overhead(rows):
    gen = sum(r["generate_s"] + r["train_s"] for r in rows)
    return sum(r["verify_wait_s"] for r in rows) / gen if gen else None


def overhead_vs(rows, base):
    """Step time beyond `base`'s generation plus training, over the latter (steps paired by number)."""
    by = {r["step"]: r for r in base}
    pairs = [(r, by[r["step"]]) for r in rows if r["step"] in by]
    gen = sum(b["generate_s"] + b["train_s"] for _, b in pairs)
    return (sum(r["step_s"] for r, _ in pairs) - gen) / gen if gen else None


def tokens(r):
    return (r.get("answer_tokens_mean") or 0) * (r.get("answers") or 0)


def base_of(arm):
    """The arm a run repeats: NAME@K is the K-th run of arm NAME."""
    return arm.split("@", 1)[0]


def pooled_steps(runs, lo):
    """The steps lo to N-1 (0-based lo; the last step left out, as it draws no next one) of every
    run (SUMMARY.json arm entries), in one list: what "pooled" sums."""
    return [r for s in runs for r in s["steps"][lo:-1]]


def overhead_vs_per_token(rows, base):
    """As overhead_vs, per token answered: the arms' rollouts part after step 1 (their policies
    and so their failures and turns differ), and a step with more answers takes longer."""
    t, tb = sum(tokens(r) for r in rows), sum(tokens(b) for b in base)
    gen = sum(b["generate_s"] + b["train_s"] for b in base)
    if not (t and tb and gen):
        return None
    return (sum(r["step_s"] for r in rows) / t) / (gen / tb) - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--musacoder-model", required=True)
    ap.add_argument("--model", required=True, help="Hugging Face model directory (the policy)")
    ap.add_argument("--problems", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--arms", default="turns,overlapped", help="which runs, in this order")
    ap.add_argument("--resume", action="store_true",
                    help="keep the arms OUT/SUMMARY.json already holds from the same model, problems, steps and "
                         "options (SUMMARY.json is written after every arm), run the rest")
    ap.add_argument("--stop-by", type=float, default=None,
                    help="a Unix time: an arm that would not finish by then (its length taken as the longest "
                         "arm so far, else --arm-estimate) is not started; --resume runs it later (a killed "
                         "arm's time is lost)")
    ap.add_argument("--arm-estimate", type=float, default=240.0,
                    help="seconds an arm is taken to need before one has run (default 240)")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then more `train rl` options for both runs")
    a = ap.parse_args()
    extra = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    os.makedirs(a.out, exist_ok=True)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "model": a.model,
               "problems": a.problems, "steps": a.steps, "extra": extra, "arms": {}}
    flags = {"turns": [], "overlapped": ["--rollout", "overlapped"]}
    # NAME@K: the K-th repeat of arm NAME, run and kept apart (repeats of one arm differ by ~15%
    # of step time).
    unknown = [arm for arm in a.arms.split(",") if base_of(arm) not in flags]
    if unknown:
        sys.exit(f"--arms: unknown arm(s) {', '.join(unknown)} (known: {', '.join(flags)})")
    path = os.path.join(a.out, "SUMMARY.json")
    if a.resume and os.path.exists(path):
        old = json.load(open(path))
        same = all(old.get(k) == summary[k] for k in ("model", "problems", "steps", "extra"))
        if not same:
            sys.exit(f"--resume: {path} is another run's (model, problems, steps or options differ)")
        summary["arms"] = {arm: s for arm, s in old["arms"].items() if arm in a.arms.split(",")}
        if summary["arms"]:
            print(f"resumed: {', '.join(summary['arms'])} from {path}", flush=True)
    before = gpu_pids()  # another job's, if any: not waited for
    for arm in a.arms.split(","):
        if arm in summary["arms"]:
            continue
        if a.stop_by is not None:
            need = max([s["wall_s"] for s in summary["arms"].values()] or [a.arm_estimate])
            if time.time() + need > a.stop_by:
                print(f"{arm}: not started, {need:.0f} s would end {time.time() + need - a.stop_by:.0f} s past "
                      f"--stop-by (--resume runs it later)", flush=True)
                break
        waited, left = wait_gpu_released(before)
        if waited >= 1 or left:
            print(f"{arm}: waited {waited:.1f} s for earlier GPU processes to exit"
                  + (f"; still there: {'; '.join(left)}" if left else ""), flush=True)
        flag = flags[base_of(arm)]
        out = os.path.join(a.out, arm)
        for d in (out, os.path.join(a.out, "cache-" + arm)):  # a killed try's, which train rl would resume
            shutil.rmtree(d, ignore_errors=True)
        cmd = [a.musacoder_model, "train", "rl", "--model", a.model, "--problems", a.problems, "--out", out,
               "--cache-dir", os.path.join(a.out, "cache-" + arm), "--max-steps", str(a.steps), "--no-progress",
               *flag, *extra]
        print("$", " ".join(cmd), flush=True)
        t0 = time.time()
        with open(os.path.join(a.out, arm + ".log"), "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            watch = HostWatch(proc)
            rc = proc.wait()
            host = watch.finish()
        if not host["quiet_host"]:
            print(f"{arm}: NOT on a quiet host: {host['other_gpu_processes']} other GPU process(es) "
                  f"({'; '.join(host['others'])}), 1-minute load up to "
                  f"{host['load_1m_max']} on {host['cores']} cores; its times are that host's", flush=True)
        if rc != 0:
            sys.exit(f"{arm}: train rl exited with {rc} (see {a.out}/{arm}.log)")
        rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
        # An overlapped arm in which no prompt continued a kept cache did not run the schedule it
        # names (a stale build, say). Said, and kept in the summary.
        kv_continued = None
        if "overlapped" in flag:
            kv_continued = sum(r.get("gen_continued") or 0 for r in rows)
            if not kv_continued:
                print(f"{arm}: overlapped, but no prompt continued a kept cache (no gen_continued in its "
                      f"metrics): this arm ran without KV reuse", flush=True)
        summary["arms"][arm] = {"wall_s": time.time() - t0, "host": host, "waited_for_gpu_s": waited,
                                "kv_continued": kv_continued,
                                "gpu_processes_at_start": left, "overhead_all": overhead(rows),
                                "overhead_from_step2": overhead(rows[1:]), "step_s": sum(r["step_s"] for r in rows),
                                "steps": [{k: r.get(k) for k in ("step",) + KEYS + MORE} for r in rows]}
        with open(path, "w") as fh:
            json.dump(summary, fh, indent=1)
    if "turns" in summary["arms"]:
        base = summary["arms"]["turns"]["steps"]
        for s in summary["arms"].values():
            s["overhead_vs_turns_all"] = overhead_vs(s["steps"], base)
            s["overhead_vs_turns_from_step2"] = overhead_vs(s["steps"][1:], base)
            s["overhead_vs_turns_steady"] = overhead_vs(s["steps"][1:-1], base) if len(s["steps"]) >= 3 else None
            s["overhead_vs_turns_per_token_steady"] = (overhead_vs_per_token(s["steps"][1:-1], base[1:-1])
                                                       if len(s["steps"]) >= 3 else None)
            s["overhead_vs_turns_per_token_all"] = overhead_vs_per_token(s["steps"], base)
            # Steps 3 to N-1: steady once the pipeline has filled. Overlapped, step 2 is the first
            # with a full pipeline, and its MooreEval tail weighs one sixth of an 8-step window.
            s["overhead_vs_turns_per_token_filled"] = (overhead_vs_per_token(s["steps"][2:-1], base[2:-1])
                                                       if len(s["steps"]) >= 4 else None)
    # Every run of an arm (NAME and its NAME@K repeats), grouped.
    runs_of = {}
    for arm, s in summary["arms"].items():
        runs_of.setdefault(base_of(arm), []).append(s)
    # Each arm run more than once: its steps' total time, every run's and their spread.
    summary["repeats"] = {}
    for b, runs in runs_of.items():
        v = [s["step_s"] for s in runs]
        if len(v) > 1:
            summary["repeats"][b] = {"step_s": v, "mean": sum(v) / len(v), "spread": (max(v) - min(v)) / min(v)}
    # Every run of an arm against every turn-by-turn run, pooled (steps, tokens and times summed
    # over the runs), per token: one run of each is within the spread of a repeat.
    turns_runs = runs_of.get("turns", [])
    summary["pooled"] = {}
    if turns_runs and len(turns_runs[0]["steps"]) >= 4:
        for b, runs in runs_of.items():
            summary["pooled"][b] = {"runs": len(runs), "turns_runs": len(turns_runs),
                                    "per_token_steady": overhead_vs_per_token(pooled_steps(runs, 1), pooled_steps(turns_runs, 1)),
                                    "per_token_filled": overhead_vs_per_token(pooled_steps(runs, 2), pooled_steps(turns_runs, 2))}
        for b, r in summary["pooled"].items():
            print(f"{b} ({r['runs']} run(s), against {r['turns_runs']} turn-by-turn run(s), pooled): per token, steps "
                  f"2 to N-1 {100 * r['per_token_steady']:+.1f}%, steps 3 to N-1 {100 * r['per_token_filled']:+.1f}%")
    for b, r in summary["repeats"].items():
        print(f"{b}: {len(r['step_s'])} runs, steps {', '.join(f'{x:.1f}' for x in r['step_s'])} s "
              f"(mean {r['mean']:.1f}, spread {100 * r['spread']:.1f}%)")
    print(f"{'arm':<10} {'step':>4} " + " ".join(f"{k[:14]:>14}" for k in KEYS))
    for arm, s in summary["arms"].items():
        for r in s["steps"]:
            print(f"{arm:<10} {r['step']:>4} " + " ".join(
                f"{r[k]:>14.3f}" if isinstance(r[k], float) else f"{str(r[k]):>14}" for k in KEYS))
    for arm, s in summary["arms"].items():
        f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{arm}: verify_overhead over all steps {f(s['overhead_all'])}, from step 2 {f(s['overhead_from_step2'])}; "
              f"against turn by turn's generation and training {f(s.get('overhead_vs_turns_all'))}, from step 2 "
              f"{f(s.get('overhead_vs_turns_from_step2'))}, steady (steps 2 to N-1) "
              f"{f(s.get('overhead_vs_turns_steady'))}, per token steady {f(s.get('overhead_vs_turns_per_token_steady'))} "
              f"(steps 3 to N-1: {f(s.get('overhead_vs_turns_per_token_filled'))}), "
              f"per token over every step {f(s.get('overhead_vs_turns_per_token_all'))}; steps {s['step_s']:.1f} s, {s['wall_s']:.0f} s in all")
        # Prefill: host time against GPU time (where the engine measured it), to tell computing
        # from waiting on a shared GPU, and the tokens it computed.
        tot = lambda k: sum(r.get(k) or 0 for r in s["steps"])  # noqa: E731
        fresh = tot("gen_prompt_tokens") - tot("gen_reused_tokens")
        if tot("gen_prefill_calls"):
            print(f"{arm}: prefill {tot('gen_prefill_s'):.1f} s in {tot('gen_prefill_calls'):.0f} calls, "
                  f"{tot('gen_prefill_gpu_s'):.1f} s on the GPU; {fresh:.0f} prompt tokens prefilled")
    with open(path, "w") as fh:
        json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
