"""A recipe run's start: what its finished stages made, packed so that a later GPU lease begins
where this one stood (scripts/recipe-seed.sh start-pack / start-unpack call this).

A lease of the device tool lasts 1,800 s, and recipes/small spends ~640 s of it on corpus to
probe-rl before RL's arms start: the checkpoint RL starts from (65 MB) is larger than a call may
carry or return. The chain is deterministic (SFT and RFT came out bit for bit on nine machine
starts), so moving the checkpoint loses nothing and lets the arms have the lease.

pack RUN DIR [--keep FOLDER]... [--seed SEED.tgz]
    Packs, from the stages recipe/state.json lists as done:
    - each stage's outputs: the paths after `--out` in the commands it ran (so a stage that
      has not finished, e.g. an arm still training, contributes nothing, and a stage's folder
      that no command named, such as a verifier cache, stays behind);
    - in those, every checkpoint's files are left out except the last checkpoint of each kept
      training folder (default: the recipe's rl_from var), without its optimizer shards: a
      stage that reads another checkpoint (pretrain's, sft's) cannot be rerun from the start;
    - the corpus's text (corpus*.jsonl: only pretraining reads it) and any other weights
      (*.safetensors outside the kept checkpoints, e.g. init's) are left out too;
    - files the seed holds unchanged (SEED: default the seed.tgz beside the recipe, if any) are
      left out and named in the manifest by hash: start-unpack checks they are there.
    Writes DIR/start.tgz.part-NN (START_PART_MIB MiB each, default 14) and DIR/start.json.
unpack DIR RUN
    Checks every part (size) and the whole (sha256), checks that RUN holds the seed's files the
    start left out, extracts the start into RUN and writes its state. RUN may hold nothing, or a
    seed (every stage it has finished must be finished in the start too).
"""
import hashlib
import io
import json
import os
import sys
import tarfile
import time

PART_MIB = float(os.environ.get("START_PART_MIB", "14"))


def die(msg):
    sys.exit(f"recipe-start: {msg}")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def describe(checkpoints):
    """{checkpoint: {weights file: sha256}} as one line: 'rft/sft/checkpoints/step-N (model.safetensors 4eb253b8)'."""
    return ", ".join(f"{c} ({', '.join(f'{n} {h[:8]}' for n, h in w.items())})" for c, w in checkpoints.items())


def out_paths(stage):
    """The paths a stage's recorded commands wrote to (`--out X`, `--out=X`)."""
    outs = []
    for cmd in stage.get("commands", []):
        words = cmd.split()
        for i, w in enumerate(words):
            if w == "--out" and i + 1 < len(words):
                outs.append(words[i + 1])
            elif w.startswith("--out="):
                outs.append(w[len("--out="):])
    return outs


def last_checkpoint(folder):
    ck = os.path.join(folder, "checkpoints")
    steps = sorted(d for d in os.listdir(ck) if d.startswith("step-") and os.path.exists(os.path.join(ck, d, "config.json"))) \
        if os.path.isdir(ck) else []
    return os.path.join(ck, steps[-1]) if steps else None


def seed_hashes(seed):
    """{relative path: sha256} of the seed's regular files."""
    out = {}
    with tarfile.open(seed) as t:
        for m in t:
            if m.isfile():
                out[os.path.normpath(m.name)] = hashlib.sha256(t.extractfile(m).read()).hexdigest()
    return out


def pack(args):
    if len(args) < 2:
        die("usage: pack RUN DIR [--keep FOLDER]... [--seed SEED.tgz]")
    run, out_dir = os.path.abspath(args[0]), args[1]
    keep, seed, rest = [], None, args[2:]
    while rest:
        if rest[0] == "--keep" and len(rest) > 1:
            keep.append(rest[1].strip("/"))
        elif rest[0] == "--seed" and len(rest) > 1:
            seed = rest[1]
        else:
            die(f"unknown argument '{rest[0]}' (pack RUN DIR [--keep FOLDER]... [--seed SEED.tgz])")
        rest = rest[2:]
    state_path = os.path.join(run, "recipe", "state.json")
    if not os.path.exists(state_path):
        die(f"{run} is no recipe run (no recipe/state.json)")
    state = json.load(open(state_path))
    stages = state.get("stages", {})
    done = {n: s for n, s in stages.items() if s.get("done")}
    if not done:
        die(f"{state_path} lists no finished stage")
    if not keep:
        rl_from = state.get("vars", {}).get("rl_from")
        if not rl_from:
            die("the recipe has no rl_from var: name the training folders whose last checkpoint to keep (--keep rft/sft)")
        keep = [rl_from.strip("/")]
    if seed is None and state.get("recipe"):
        beside = os.path.join(os.path.dirname(state["recipe"]), "seed.tgz")
        seed = beside if os.path.exists(beside) else None

    # What finished stages wrote, as paths relative to RUN (outputs outside RUN are not the run's).
    # A run unpacked from a start ran its earlier stages elsewhere: the start's state names
    # those folders (packed_from), and their paths count as this run's.
    homes = [run] + [h for h in state.get("packed_from", []) if h != run]
    roots = {"recipe"}
    for s in done.values():
        for p in out_paths(s):
            for home in homes:
                rel = os.path.relpath(os.path.abspath(p), home)
                if not rel.startswith(".."):
                    roots.add(rel)
                    break
    kept = {}
    for k in keep:
        ck = last_checkpoint(os.path.join(run, k))
        if ck is None:
            die(f"--keep {k}: {os.path.join(run, k)} has no checkpoint")
        rel = os.path.relpath(ck, run)
        if not any(rel == r or rel.startswith(r + os.sep) for r in roots):
            die(f"--keep {k}: {rel} is no output of a finished stage")
        kept[rel] = {n: sha256_file(os.path.join(ck, n)) for n in sorted(os.listdir(ck))
                     if n.endswith(".safetensors") and not n.startswith("optimizer-")}
    in_seed = seed_hashes(seed) if seed else {}

    files, left_out, from_seed = [], {"checkpoints": 0, "weights": 0, "corpus text": 0}, {}
    for root in sorted(roots):
        full = os.path.join(run, root)
        walk = [(os.path.dirname(full), [], [os.path.basename(full)])] if os.path.isfile(full) else os.walk(full)
        for d, _, names in walk:
            for n in sorted(names):
                path = os.path.join(d, n)
                rel = os.path.relpath(path, run)
                parts = rel.split(os.sep)
                ck = next((c for c in kept if rel.startswith(c + os.sep)), None)
                if "checkpoints" in parts and (ck is None or n.startswith("optimizer-")):
                    left_out["checkpoints"] += 1
                elif n.endswith(".safetensors") and ck is None:
                    left_out["weights"] += 1
                elif parts[0] == "corpus" and n.startswith("corpus") and n.endswith(".jsonl"):
                    left_out["corpus text"] += 1
                elif rel in in_seed and sha256_file(path) == in_seed[rel]:
                    from_seed[rel] = in_seed[rel]
                elif parts[0] == "recipe" and n.endswith(".log") and n[:-4] not in done:
                    continue  # the log of a stage the start does not hold
                elif rel != os.path.join("recipe", "state.json"):
                    files.append(rel)
    files = list(dict.fromkeys(files))  # one stage's output inside another's

    start_state = dict(state)
    start_state["stages"] = done
    start_state["packed_from"] = homes
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        if old.startswith("start.tgz.part-") or old == "start.json":
            os.remove(os.path.join(out_dir, old))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as t:
        for rel in files:
            t.add(os.path.join(run, rel), arcname=rel, recursive=False)
        data = (json.dumps(start_state, indent=1) + "\n").encode()
        info = tarfile.TarInfo("recipe/state.json")
        info.size, info.mtime = len(data), int(time.time())
        t.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    size = max(1, int(PART_MIB * (1 << 20)))
    parts = []
    for i in range(0, len(blob), size):
        name = f"start.tgz.part-{len(parts):02d}"
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob[i:i + size])
        parts.append({"name": name, "bytes": len(blob[i:i + size])})
    manifest = {
        "run": run, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(), "parts": parts,
        "stages": sorted(done), "checkpoints": kept, "files": len(files), "left_out": left_out,
        "seed": {"path": seed, "sha256": sha256_file(seed) if seed else None, "files": from_seed},
        "packed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(os.path.join(out_dir, "start.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"recipe-start: {out_dir}: {len(blob) / (1 << 20):.1f} MiB in {len(parts)} part(s) of at most {PART_MIB:g} MiB; "
          f"{len(files)} files of {len(done)} finished stages; checkpoints kept: "
          + describe(kept) + f"; left out: {left_out['checkpoints']} checkpoint files, {left_out['weights']} other weights, "
          f"{left_out['corpus text']} corpus files, {len(from_seed)} files the seed holds")


def unpack(args):
    if len(args) != 2:
        die("usage: unpack DIR RUN")
    src, run = args
    mpath = os.path.join(src, "start.json")
    if not os.path.exists(mpath):
        die(f"{src} holds no start.json")
    m = json.load(open(mpath))
    missing = [p["name"] for p in m["parts"] if not os.path.exists(os.path.join(src, p["name"]))]
    if missing:
        die(f"{src} lacks {len(missing)} of the start's {len(m['parts'])} parts: {', '.join(missing)} (carry them)")
    short = [f"{p['name']} ({os.path.getsize(os.path.join(src, p['name']))} of {p['bytes']} bytes)" for p in m["parts"]
             if os.path.getsize(os.path.join(src, p["name"])) != p["bytes"]]
    if short:
        die(f"{src}: parts of the wrong size: {', '.join(short)}")
    h, blob = hashlib.sha256(), bytearray()
    for p in m["parts"]:
        with open(os.path.join(src, p["name"]), "rb") as f:
            b = f.read()
        h.update(b)
        blob += b
    if h.hexdigest() != m["sha256"]:
        die(f"{src}: the parts joined have sha256 {h.hexdigest()[:16]}…, the start's is {m['sha256'][:16]}…: a part is corrupt")
    state_path = os.path.join(run, "recipe", "state.json")
    if os.path.exists(state_path):
        have = {n for n, s in json.load(open(state_path)).get("stages", {}).items() if s.get("done")}
        extra = sorted(have - set(m["stages"]))
        if extra:
            die(f"{run} already has finished stages the start has not ({', '.join(extra)}): unpack into an empty or seed-only run folder")
    bad = []
    for rel, digest in m["seed"]["files"].items():
        path = os.path.join(run, rel)
        if not os.path.exists(path) or sha256_file(path) != digest:
            bad.append(rel)
    if bad:
        die(f"{run} lacks {len(bad)} file(s) of the seed the start was packed over ({m['seed']['path']}, sha256 "
            f"{(m['seed']['sha256'] or '')[:16]}…), or has them changed, e.g. {bad[0]}: unpack that seed into {run} first")
    os.makedirs(run, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(bytes(blob)), mode="r:gz") as t:
        t.extractall(run, filter="data")
    for c, weights in m["checkpoints"].items():
        for n, digest in weights.items():
            if sha256_file(os.path.join(run, c, n)) != digest:
                die(f"{os.path.join(run, c, n)}: sha256 differs from the packed checkpoint's")
    print(f"recipe-start: {run} starts from {src} (packed {m['packed_at']}): finished stages {', '.join(m['stages'])}; "
          "checkpoints " + describe(m["checkpoints"]))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("pack", "unpack"):
        die("usage: recipe_start.py pack RUN DIR [--keep FOLDER]... [--seed SEED.tgz] | unpack DIR RUN")
    (pack if sys.argv[1] == "pack" else unpack)(sys.argv[2:])
