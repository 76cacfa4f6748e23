"""The recipe on the CPU: `musacoder recipe recipes/tiny/recipe.toml` runs every stage once
(synth, corpus, tokenizer, init, pretrain, sft, eval, rft with repair rows, rl, eval), each
writing what the next reads, and a second run skips what finished. Also the corpus builder's
drops (duplicates, binaries, KernelBench copies and near-copies), `musacoder-model init`
against transformers, and the runner's errors. Asserts on artifacts, not on model quality."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from run_record import check_run_record  # noqa: E402
import mc_cli  # noqa: E402
from mc_cli import BINARY, MODEL_BINARY, ROOT, read_jsonl  # noqa: E402
pytestmark = pytest.mark.skipif(not os.path.exists(MODEL_BINARY), reason="musacoder-model not built")
ADD = os.path.join(ROOT, "tests", "cases", "problems", "1_Add.py")


def mc(*args, check=True, timeout=1500, **kw):
    return mc_cli.run(*args, check=check, timeout=timeout, **kw)


def test_tiny_recipe_end_to_end(tmp_path):
    run = tmp_path / "run"
    r = mc("recipe", os.path.join(ROOT, "recipes", "tiny", "recipe.toml"), "--out", run, "--no-progress")
    stages = ["synth", "corpus", "tokenizer", "init", "pretrain", "sft", "eval-sft", "rft", "eval-rft", "rl", "eval-rl",
              "eval-rl-seen", "rl-no-mirrorpop", "report"]
    state = json.load(open(run / "recipe" / "state.json"))
    assert [s for s in stages if state["stages"][s]["done"]] == stages, state
    check_run_record(run, "recipe", 1, given=("--out",))
    check_run_record(run / "sft", "train sft", 1)  # each training stage records its own
    assert all(state["stages"][s]["seconds"] > 0 for s in stages)
    for s in stages:
        assert s in r.stdout
    # synth: training problems with verified rows; held-out problems decontaminated against them.
    assert len(read_jsonl(run / "synth" / "problems.jsonl")) == 4
    assert read_jsonl(run / "synth" / "dataset.jsonl")
    ev = json.load(open(run / "synth-eval" / "report.json"))
    assert ev["decontamination"]["benchmark"].endswith("synth/problems")
    assert ev["decontamination"]["against"][0]["relative"] == "../synth/problems"  # a carried seed still names it
    # ... and by content: one sha256 per problem it was checked against (a copy elsewhere is known).
    assert len(set(ev["decontamination"]["against"][0]["problem_sha256"])) == 4
    # RL's own problems, kept clear of both, SFT's (memorized) and evaluation's, and of KernelBench.
    rl_set = json.load(open(run / "synth-rl" / "report.json"))
    assert [a["relative"] for a in rl_set["decontamination"]["against"]][:2] == ["../synth/problems", "../synth-eval/problems"]
    assert rl_set["decontamination"]["against"][2]["path"] == os.path.join(ROOT, "tests", "cases", "problems")
    rl_keys = {f"L{p['level']}/{os.path.splitext(os.path.basename(p['path']))[0]}"
               for p in read_jsonl(run / "synth-rl" / "problems.jsonl")}
    assert rl_keys
    # corpus: licences and sizes per source; the synthesized solutions are in it.
    rep = json.load(open(run / "corpus" / "report.json"))
    by = {s["name"]: s for s in rep["sources"]}
    assert by["synth"]["files"] > 0 and by["musacoder-headers"]["files"] > 0
    assert all(s["license"] for s in rep["sources"]) and rep["benchmark_files"] > 0
    assert rep["held_out_files"] > 0 and read_jsonl(run / "corpus" / "corpus-eval.jsonl")
    # pretraining reports its eval loss on the held-out corpus files
    assert [m for m in read_jsonl(run / "pretrain" / "metrics.jsonl") if "eval_loss" in m]
    # tokenizer: ChatML tokens; the C++ tokenizer reads it with the ids of `tokenizers`.
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(run / "tokenizer" / "tokenizer.json"))
    assert all(tok.token_to_id(s) is not None for s in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"))
    text = open(ADD).read()
    (tmp_path / "t.jsonl").write_text(json.dumps({"text": text}) + "\n")
    mc("tokenize", "--tokenizer", run / "tokenizer" / "tokenizer.json", "--input", tmp_path / "t.jsonl", "--output",
       tmp_path / "ids.jsonl", "--no-progress")
    assert read_jsonl(tmp_path / "ids.jsonl")[0]["ids"] == tok.encode(text).ids
    # init: a Qwen3 model sized by the tokenizer.
    cfg = json.load(open(run / "init" / "config.json"))
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["vocab_size"] == tok.get_vocab_size()
    # pretrain -> sft -> rft (repair rows, trained) -> rl: each started from the one before.
    def steps(d):
        return sorted(os.listdir(run / d / "checkpoints"))
    assert steps("pretrain") and steps("sft") and steps("rft/sft") and steps("rl")
    sft_cmd = state["stages"]["sft"]["commands"][0]
    assert str(run / "pretrain" / "checkpoints") in sft_cmd
    assert str(run / "rft" / "sft" / "checkpoints") in state["stages"]["rl"]["commands"][0]
    assert json.load(open(run / "rft" / "report.json"))["repair"]["per_problem"] == 1
    rl1 = [m for m in read_jsonl(run / "rl" / "metrics.jsonl") if m.get("step") == 1]
    assert rl1 and rl1[0]["anchor_loss"] > 0 and "anchor_loss_change" in rl1[0]  # --anchor-data: SFT's data
    # RL trained on synth-rl's problems (--max-problems 2); eval-rl-seen judged those, before and after.
    seen = open(run / "rl" / "problems.txt").read().split()
    assert 0 < len(seen) <= 2 and set(seen) <= rl_keys, (seen, rl_keys)
    assert str(run / "synth-rl" / "problems.jsonl") in state["stages"]["rl"]["commands"][0]
    for e in ("rl-seen-before", "rl-seen-after"):
        assert sorted(json.load(open(run / "eval" / e / "run.json"))["problem_keys"]) == sorted(seen), e
    assert "rl-seen-after" in open(run / "report" / "rl-seen.md").read()
    # evaluation after sft and after rl, by bench-model, on the held-out problems.
    for e in ("sft", "rft", "rl", "rl-no-mirrorpop"):
        assert (run / "eval" / e / "report.json").exists(), os.listdir(run / "eval" / e)
        # SFT and RFT: the held-out problems were synthesized against the training problems, and
        # the report says so, following rft's rows back to the problems they were sampled from.
        # RL: its problems were synthesized against the held-out ones.
        d = json.load(open(run / "eval" / e / "report.json"))["decontamination"]
        how = "kept out of them" if e in ("sft", "rft") else "against these problems"
        assert d["status"] == "decontaminated" and how in d["text"], (e, d)
    # The report: both evaluations in order, as a table and a chart; the LM curves.
    md = open(run / "report" / "stages.md").read()
    assert "| 1 | " + str(run / "eval" / "sft") in md and "| 4 | " + str(run / "eval" / "rl-no-mirrorpop") in md
    for svg in ("stages.svg", "lm-curves.svg"):
        assert open(run / "report" / svg).read().startswith("<svg")
    # Again: every stage finished, so nothing runs.
    r = mc("recipe", os.path.join(ROOT, "recipes", "tiny", "recipe.toml"), "--out", run, "--no-progress")
    assert r.stderr.count("finished before") == len(stages), r.stderr
    assert "may be stale" not in r.stderr, r.stderr  # the recipe's `uses` hold in a run made in order
    # The seed a fresh GPU machine starts from (scripts/recipe-seed.sh): the synth stage alone,
    # which a new run folder then skips.
    seed = tmp_path / "seed.tgz"
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "recipe-seed.sh"), "pack", str(run), str(seed)], check=True)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    subprocess.run(["tar", "xzf", str(seed), "-C", str(fresh)], check=True)
    assert sorted(json.load(open(fresh / "recipe" / "state.json"))["stages"]) == ["synth"]
    assert read_jsonl(fresh / "synth" / "dataset.jsonl") == read_jsonl(run / "synth" / "dataset.jsonl")
    r = mc("recipe", os.path.join(ROOT, "recipes", "tiny", "recipe.toml"), "--out", fresh, "--stages", "synth",
           "--no-progress")
    assert "synth finished before" in r.stderr, r.stderr
    # RFT's samples and verdicts travel too: the same SFT weights there (training is deterministic
    # here, as on the H100 with --deterministic), so RFT reuses them, judges nothing, and
    # fine-tunes to the same model; RL's arms of two leases start from the same checkpoint.
    assert sorted(os.listdir(fresh / "rft")) == ["prompts.jsonl", "samples.jsonl", "samples.meta.json", "verified.jsonl"]
    mc("recipe", os.path.join(ROOT, "recipes", "tiny", "recipe.toml"), "--out", fresh, "--stages",
       "corpus,tokenizer,init,pretrain,sft,rft", "--no-progress")
    log = open(fresh / "recipe" / "rft.log").read()
    assert "rft: reusing" in log and "already judged" in log and ", 0 to judge" in log, log[-2000:]

    def weights(r, d):
        ck = sorted(os.listdir(r / d / "checkpoints"))[-1]
        return hashlib.sha256(open(r / d / "checkpoints" / ck / "model.safetensors", "rb").read()).hexdigest()
    assert weights(fresh, "sft") == weights(run, "sft") and weights(fresh, "rft/sft") == weights(run, "rft/sft")
    # Pretraining and SFT data parallel (train_launcher, as recipes/small's on several GPUs): two
    # gloo ranks here, and SFT starts from the data-parallel pretraining.
    dp = tmp_path / "dp"
    dp.mkdir()
    subprocess.run(["tar", "xzf", str(seed), "-C", str(dp)], check=True)
    mc("recipe", os.path.join(ROOT, "recipes", "tiny", "recipe.toml"), "--out", dp, "--stages",
       "corpus,tokenizer,init,pretrain,sft", "--no-progress", "--set",
       f"train_launcher={sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2 --no-python")
    for stage in ("pretrain", "sft"):
        log = open(dp / "recipe" / f"{stage}.log").read()
        assert "2 rank" in log and "gloo" in log, log[-2000:]
    assert sorted(os.listdir(dp / "sft" / "checkpoints"))

    # A start (scripts/recipe-seed.sh start-pack): what the finished stages made, with RFT's last
    # checkpoint, over the seed and in parts, as a GPU lease returns it and a later one carries it
    # (the arms then start at once). rl-no-mirrorpop is taken as stopped mid-training: the start
    # leaves out what it wrote, and a later run trains it from the carried checkpoint.
    state = json.load(open(run / "recipe" / "state.json"))
    arm = state["stages"]["rl-no-mirrorpop"]
    arm["done"] = False
    open(run / "recipe" / "state.json", "w").write(json.dumps(state))
    start, seed_sh = tmp_path / "start", os.path.join(ROOT, "scripts", "recipe-seed.sh")
    r = subprocess.run(["bash", seed_sh, "start-pack", str(run), str(start), "--keep", "rft/sft", "--seed", str(seed)],
                       env={**os.environ, "START_PART_MIB": "0.25"}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = json.load(open(start / "start.json"))
    ck = "rft/sft/checkpoints/" + sorted(os.listdir(run / "rft" / "sft" / "checkpoints"))[-1]
    assert list(m["checkpoints"]) == [ck] and len(m["parts"]) > 1, m
    assert "rl-no-mirrorpop" not in m["stages"] and "rft" in m["stages"]
    assert m["left_out"]["checkpoints"] > 0 and "synth/dataset.jsonl" in m["seed"]["files"]
    later = tmp_path / "later"
    later.mkdir()
    # Unpacked before the seed it was packed over: refused, naming the seed.
    r = subprocess.run(["bash", seed_sh, "start-unpack", str(start), str(later)], capture_output=True, text=True)
    assert r.returncode != 0 and "unpack that seed" in r.stderr, r.stderr
    subprocess.run(["tar", "xzf", str(seed), "-C", str(later)], check=True)
    # A part not carried yet, or one that changed on the way: refused, naming it.
    last = start / m["parts"][-1]["name"]
    os.rename(last, tmp_path / "part")
    r = subprocess.run(["bash", seed_sh, "start-unpack", str(start), str(later)], capture_output=True, text=True)
    assert r.returncode != 0 and last.name in r.stderr and "carry them" in r.stderr, r.stderr
    data = bytearray(open(tmp_path / "part", "rb").read())
    data[0] ^= 1
    last.write_bytes(bytes(data))
    r = subprocess.run(["bash", seed_sh, "start-unpack", str(start), str(later)], capture_output=True, text=True)
    assert r.returncode != 0 and "a part is corrupt" in r.stderr, r.stderr
    os.replace(tmp_path / "part", last)
    r = subprocess.run(["bash", seed_sh, "start-unpack", str(start), str(later)], capture_output=True, text=True)
    assert r.returncode == 0 and "rft/sft" in r.stdout, r.stderr
    assert weights(later, "rft/sft") == weights(run, "rft/sft")
    assert not [f for f in os.listdir(later / ck) if f.startswith("optimizer-")]
    assert not (later / "pretrain" / "checkpoints").exists() and not (later / "rl-no-mirrorpop").exists()
    assert not (later / "corpus" / "corpus.jsonl").exists() and (later / "corpus" / "report.json").exists()
    # The same start carried to a GPU machine over two calls, as scripts/gpu-check.sh takes it:
    # a call's carry replaces .kb/start, so the first call's last part must outlive the second
    # call's carry (session 43 lost it). A checkout whose .kb/start holds first the last part
    # alone, then the rest: the first call stashes its part and starts nothing; the second
    # unpacks the whole start over the seed.
    repo = tmp_path / "checkout"
    (repo / ".kb" / "start").mkdir(parents=True)
    for d in ("scripts", "recipes"):
        os.symlink(os.path.join(ROOT, d), repo / d)
    leased = tmp_path / "leased"
    env = {**os.environ, "BIN": "/bin/true", "STAGES": "start", "RECIPE_RUN": str(leased), "RECIPE_SEED": str(seed),
           "START_STASH": str(tmp_path / "stash"), "OUT": str(tmp_path / "gpu-out")}
    gpu_check = [str(repo / "scripts" / "gpu-check.sh")]
    shutil.copy(last, repo / ".kb" / "start")
    r = subprocess.run(["bash"] + gpu_check, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "not its start.json" in r.stdout, r.stdout + r.stderr
    assert not (leased / "recipe" / "start-from").exists()
    shutil.rmtree(repo / ".kb" / "start")
    shutil.copytree(start, repo / ".kb" / "start", ignore=shutil.ignore_patterns(last.name))
    r = subprocess.run(["bash"] + gpu_check, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "rft/sft" in r.stdout, r.stdout + r.stderr
    assert weights(leased, "rft/sft") == weights(run, "rft/sft")
    r = mc("recipe", os.path.join(ROOT, "recipes", "tiny", "recipe.toml"), "--out", later, "--stages",
           "corpus,tokenizer,init,pretrain,sft,eval-sft,rft,eval-rft,rl-no-mirrorpop", "--no-progress")
    assert r.stderr.count("finished before") == 8, r.stderr
    # The arm trained from the carried checkpoint: the same first step as from RFT's own.
    a, b = (next(x for x in read_jsonl(d / "rl-no-mirrorpop" / "metrics.jsonl") if x.get("step") == 1) for d in (run, later))
    assert (a["answer_tokens_mean"], a["pass_rate_turn1"]) == (b["answer_tokens_mean"], b["pass_rate_turn1"]), (a, b)
    assert str(later / ck) in json.load(open(later / "recipe" / "state.json"))["stages"]["rl-no-mirrorpop"]["commands"][0]
    # Over a run with finished stages the start has not (the arm, now): refused.
    r = subprocess.run(["bash", seed_sh, "start-unpack", str(start), str(later)], capture_output=True, text=True)
    assert r.returncode != 0 and "rl-no-mirrorpop" in r.stderr, r.stderr
    # A run that began from a start packs one in turn: its earlier stages ran in `run`, and
    # their outputs (the kept checkpoint among them) count as its own.
    r = subprocess.run(["bash", seed_sh, "start-pack", str(later), str(tmp_path / "again"), "--keep", "rft/sft", "--seed",
                        str(seed)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = json.load(open(tmp_path / "again" / "start.json"))
    assert list(m["checkpoints"]) == [ck] and "rl-no-mirrorpop" in m["stages"], m


def test_corpus_drops_duplicates_binaries_and_benchmark_copies(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.h").write_text("#pragma once\nint add(int a, int b);\n")
    (src / "b.h").write_text("#pragma once   \nint add(int a, int b);\n\n")  # a.h up to trailing space
    (src / "blob.h").write_bytes(b"\x00\x01binary")
    (src / "copy.py").write_text(open(ADD).read())  # a KernelBench file itself
    (src / "embeds.py").write_text("# a tutorial\nimport os\n\n" + open(ADD).read() + "\nprint('done')\n")
    (src / "own.py").write_text("def square(x):\n    return x * x\n")
    (src / "skip.txt").write_text("not taken: wrong ending\n")
    cfg = tmp_path / "corpus.toml"
    cfg.write_text('eval_share = 0\n[[source]]\nname = "local"\npath = "$SRC_DIR"\nextensions = [".h", ".py"]\nlicense = "MIT"\n')
    out = tmp_path / "out"
    mc("corpus", "--config", cfg, "--out", out, "--decontaminate", os.path.join(ROOT, "tests", "cases", "problems"),
       "--no-progress", env={"SRC_DIR": str(src)})
    rows = read_jsonl(out / "corpus.jsonl")
    assert sorted(os.path.basename(r["path"]) for r in rows) == ["a.h", "own.py"]
    rep = json.load(open(out / "report.json"))
    s = rep["sources"][0]
    assert s["license"] == "MIT" and s["files"] == 2
    assert s["dropped"] == {"binary": 1, "duplicate": 1, "kernelbench_copy": 1, "kernelbench_near_copy": 1}
    rules = {os.path.basename(c["path"]): (c["rule"], os.path.basename(c["benchmark"])) for c in rep["contaminated"]}
    assert rules == {"copy.py": ("copy", "1_Add.py"), "embeds.py": ("near_copy", "1_Add.py")}
    assert "| local | MIT | 2 | 0.00 | 0 |" in open(out / "report.md").read()
    assert (out / "corpus-eval.jsonl").read_text() == ""
    # Errors name what is wrong.
    r = mc("corpus", "--config", cfg, "--out", out, check=False, env={"SRC_DIR": ""})
    assert r.returncode == 2 and "$SRC_DIR is not set" in r.stderr, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[[source]]\nname = "x"\npath = "/tmp"\n')
    r = mc("corpus", "--config", bad, "--out", out, check=False)
    assert r.returncode == 2 and "[[source]] 1: 'license' is missing" in r.stderr, r.stderr


def test_init_writes_a_model_transformers_loads(tmp_path):
    import torch
    import transformers
    import bpe_fixtures
    tok = tmp_path / "tokenizer.json"
    vocab = bpe_fixtures.train_bpe(tok, [open(ADD).read()] * 3, "qwen", vocab_size=400).get_vocab_size()
    args = ["init", "--tokenizer", tok, "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
            "--max-positions", "256", "--seed", "7", "--dtype", "fp32"]
    mc(*args, "--out", tmp_path / "a", binary=MODEL_BINARY)
    mc(*args, "--out", tmp_path / "b", binary=MODEL_BINARY)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"), dtype=torch.float32)
    sd = model.state_dict()
    assert model.config.model_type == "qwen3" and model.config.vocab_size == vocab
    assert torch.equal(sd["model.norm.weight"], torch.ones(64))
    assert torch.equal(sd["model.layers.0.self_attn.q_norm.weight"], torch.ones(16))
    w = sd["model.layers.1.mlp.down_proj.weight"]
    assert abs(float(w.std()) - 0.02) < 0.002 and abs(float(w.mean())) < 0.002
    assert torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])  # tied
    mc(*args[:-4], "--seed", "8", "--dtype", "fp32", "--out", tmp_path / "c", binary=MODEL_BINARY)
    assert (tmp_path / "c" / "model.safetensors").read_bytes() != (tmp_path / "a" / "model.safetensors").read_bytes()
    r = mc("init", "--tokenizer", tok, "--heads", "3", "--kv-heads", "2", "--out", tmp_path / "d", check=False,
           binary=MODEL_BINARY)
    assert r.returncode == 2 and "must be a multiple of --kv-heads" in r.stderr, r.stderr


def test_recipe_errors_name_the_stage(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[vars]\nx = 1\n\n[[stage]]\nname = "ok"\ncommands = [["true"]]\n\n'
                      '[[stage]]\nname = "fails"\ncommands = [["sh", "-c", "echo boom-{var.x}; exit 3"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run", "--no-progress", check=False)
    assert r.returncode == 2 and "recipe stage 'fails' failed (exit 3)" in r.stderr and "boom-1" in r.stderr, r.stderr
    state = json.load(open(tmp_path / "run" / "recipe" / "state.json"))
    assert state["stages"]["ok"]["done"] and not state["stages"]["fails"]["done"]
    r = mc("recipe", recipe, "--out", tmp_path / "run", "--set", "x=2", "--from", "fails", check=False)
    assert "boom-2" in r.stderr, r.stderr
    for args, says in ((["--set", "y=1"], "--set y: the recipe has no such var"),
                       (["--stages", "nope"], "--stages: the recipe has no stage 'nope'")):
        r = mc("recipe", recipe, "--out", tmp_path / "run2", *args, check=False)
        assert r.returncode == 2 and says in r.stderr, r.stderr
    r = mc("recipe", recipe, "--out", tmp_path / "run3", "--from", "fails", check=False)
    assert r.returncode == 2 and "'ok', has not finished" in r.stderr, r.stderr
    # A typo in a later stage is found before the first stage runs.
    marker = tmp_path / "first-ran"
    recipe.write_text(f'[[stage]]\nname = "first"\ncommands = [["touch", "{marker}"]]\n\n'
                      '[[stage]]\nname = "x"\ncommands = [["echo", "{last:{var.nope}/a}"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run4", check=False)
    assert r.returncode == 2 and "stage 'x'" in r.stderr and "unknown placeholder {var.nope}" in r.stderr, r.stderr
    assert not marker.exists()
    r = mc("recipe", tmp_path / "missing.toml", "--out", tmp_path / "run6", check=False)
    assert r.returncode == 2 and "missing.toml: no such file" in r.stderr, r.stderr
    recipe.write_text('[[stage]]\nname = "x"\ncommands = [["echo", "{last:nowhere}"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run5", check=False)
    assert r.returncode == 2 and "has no checkpoint" in r.stderr, r.stderr


def test_a_stage_made_again_warns_of_what_read_it(tmp_path):
    """`uses`: a finished stage whose input was made again after it (session 49: corpus redone
    without CUTLASS, the tokenizer kept from before) is skipped with a warning naming why and the
    command that remakes it, followed back through `uses`; redone in order, nothing is said."""
    recipe = tmp_path / "r.toml"
    recipe.write_text('[[stage]]\nname = "a"\ncommands = [["true"]]\n\n'
                      '[[stage]]\nname = "b"\nuses = ["a"]\ncommands = [["true"]]\n\n'
                      '[[stage]]\nname = "c"\nuses = ["b"]\ncommands = [["true"]]\n')
    run = tmp_path / "run"
    r = mc("recipe", recipe, "--out", run, "--no-progress")
    assert "stale" not in r.stderr, r.stderr
    time.sleep(1.1)  # finished_at is to the second
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--stages", "a", "--redo")
    assert "stale" not in r.stderr, r.stderr
    r = mc("recipe", recipe, "--out", run, "--no-progress")
    assert "recipe: warning: b may be stale: a, which it reads, finished after it (" in r.stderr, r.stderr
    assert "(run it again: --stages b --redo)" in r.stderr
    assert "recipe: warning: c may be stale: it reads b, and a, which it reads, finished after it" in r.stderr, r.stderr
    assert "warning: a may be stale" not in r.stderr
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--stages", "c", "--redo")
    assert "recipe: warning: c reads b, which may be stale: a, which it reads, finished after it" in r.stderr, r.stderr
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--stages", "b,c", "--redo")
    assert "stale" not in r.stderr, r.stderr
    r = mc("recipe", recipe, "--out", run, "--no-progress")
    assert "stale" not in r.stderr and r.stderr.count("finished before") == 3, r.stderr
    for uses, says in (('["c"]', "uses[0] 'c' is not a stage before it"), ('["b"]', "uses[0] 'b' is not a stage before it"),
                       ('"a"', "'uses' must be an array of earlier stages' names")):
        recipe.write_text('[[stage]]\nname = "a"\ncommands = [["true"]]\n\n'
                          f'[[stage]]\nname = "b"\nuses = {uses}\ncommands = [["true"]]\n\n'
                          '[[stage]]\nname = "c"\ncommands = [["true"]]\n')
        r = mc("recipe", recipe, "--out", tmp_path / "bad", check=False)
        assert r.returncode == 2 and "stage 'b'" in r.stderr and says in r.stderr, r.stderr


def test_list_vars_become_several_arguments(tmp_path):
    """A [vars] array is a list of arguments written once for several stages: exactly
    {var.NAME} becomes its elements, each expanded (vars, {run}, an empty one dropped, a list
    var's elements); --set gives it new words; inside a longer argument it is refused before
    anything runs."""
    recipe = tmp_path / "r.toml"
    out = tmp_path / "args.txt"
    recipe.write_text('[vars]\nn = 3\nnone = ""\ncommon = ["--n", "{var.n}", "{var.none}", "{run}/x"]\n\n'
                      f'[[stage]]\nname = "a"\ncommands = [["sh", "-c", "printf \'%s|\' \\"$@\\" > {out}", "sh", "first", "{{var.common}}", "last"]]\n')
    run = tmp_path / "run"
    mc("recipe", recipe, "--out", run, "--no-progress")
    assert open(out).read() == f"first|--n|3|{run}/x|last|"
    state = json.load(open(run / "recipe" / "state.json"))
    assert state["vars"]["common"] == ["--n", "{var.n}", "{var.none}", "{run}/x"]
    mc("recipe", recipe, "--out", tmp_path / "run2", "--no-progress", "--set", "common=-a  -b")
    assert open(out).read() == "first|-a|-b|last|"
    recipe.write_text('[vars]\ncommon = ["-a"]\n\n[[stage]]\nname = "a"\ncommands = [["echo", "x{var.common}"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run3", check=False)
    assert r.returncode == 2 and "{var.common} is a list of arguments: it must be a whole argument" in r.stderr, r.stderr
    # A list inside a list: its elements in its place,
    # none while it is empty; a list that names itself is refused.
    recipe.write_text('[vars]\ninner = []\nouter = ["a", "{var.inner}", "b"]\n\n'
                      f'[[stage]]\nname = "a"\ncommands = [["sh", "-c", "printf \'%s|\' \\"$@\\" > {out}", "sh", "{{var.outer}}"]]\n')
    mc("recipe", recipe, "--out", tmp_path / "run4", "--no-progress")
    assert open(out).read() == "a|b|"
    mc("recipe", recipe, "--out", tmp_path / "run5", "--no-progress", "--set", "inner=--p --q")
    assert open(out).read() == "a|--p|--q|b|"
    recipe.write_text('[vars]\nouter = ["a", "{var.outer}"]\n\n[[stage]]\nname = "a"\ncommands = [["echo", "{var.outer}"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run6", check=False)
    assert r.returncode == 2 and "names list vars more than 8 levels deep" in r.stderr, r.stderr


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(ROOT, "recipes"))))
def test_every_shipped_recipe_expands(name, tmp_path):
    # Every placeholder of every stage of recipes/*/recipe.toml is known: the runner checks them
    # all before anything runs, so a bad name stops here, not after a GPU slice (an emptied
    # [vars] table once cost one). `--stages` with no such stage then stops the run.
    r = mc("recipe", os.path.join(ROOT, "recipes", name, "recipe.toml"), "--out", tmp_path / "run",
           "--stages", "no-such-stage", check=False)
    assert r.returncode == 2 and "--stages: the recipe has no stage 'no-such-stage'" in r.stderr, r.stderr


def test_a_stopped_recipe_leaves_its_stage_unfinished(tmp_path):
    """SIGTERM (a GPU slice's time limit) stops the stage's commands and leaves the stage to run
    again next time; nothing keeps running."""
    import signal
    import time
    recipe = tmp_path / "r.toml"
    recipe.write_text('[[stage]]\nname = "long"\ncommands = [["sh", "-c", "sleep 31.7; echo done"]]\n')
    p = subprocess.Popen([BINARY, "recipe", str(recipe), "--out", str(tmp_path / "run"), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and "recipe stopped by SIGTERM in stage 'long'" in err, err
    assert time.time() - t0 < 10
    state = json.load(open(tmp_path / "run" / "recipe" / "state.json"))
    assert not state["stages"]["long"]["done"] and "SIGTERM" in state["stages"]["long"]["stopped"]
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "sleep 31.7"], capture_output=True, text=True).stdout.split()
    assert not left, left


def test_two_recipes_share_a_run_folder(tmp_path):
    """Two `recipe` processes on one run folder (evaluations on one GPU while the arms train on
    another): the one that finishes last keeps what the other recorded in state.json."""
    recipe = tmp_path / "r.toml"
    recipe.write_text('[[stage]]\nname = "long"\ncommands = [["sh", "-c", "sleep 2; touch {run}/long"]]\n\n'
                      '[[stage]]\nname = "short"\ncommands = [["touch", "{run}/short"]]\n')
    run = tmp_path / "run"
    p = subprocess.Popen([BINARY, "recipe", str(recipe), "--out", str(run), "--stages", "long", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    mc("recipe", recipe, "--out", run, "--stages", "short", "--no-progress")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    state = json.load(open(run / "recipe" / "state.json"))
    assert state["stages"]["long"]["done"] and state["stages"]["short"]["done"], state
    r = mc("recipe", recipe, "--out", run, "--no-progress")
    assert r.stderr.count("finished before") == 2, r.stderr


def test_stages_together_run_at_once(tmp_path):
    """Stages next to each other with the same `together` run at the same time (the ablation
    arms); one failing lets the others finish, and the next run redoes only it."""
    recipe = tmp_path / "r.toml"
    stages = ""
    for name in ("a", "b", "c"):
        body = f"date +%s.%N > {{run}}/{name}.start; sleep 2; date +%s.%N > {{run}}/{name}.end"
        if name == "c":
            body += "; test -e {run}/c.ok"
        stages += (f'[[stage]]\nname = "{name}"\ntogether = "arms"\n'
                   f'commands = [["sh", "-c", "{body}"]]\n\n')
    recipe.write_text(stages + '[[stage]]\nname = "after"\ncommands = [["touch", "{run}/after"]]\n')
    run = tmp_path / "run"
    t0 = time.time()
    r = mc("recipe", recipe, "--out", run, "--no-progress", check=False)
    assert r.returncode == 2 and "recipe stage 'c' failed (exit 1)" in r.stderr, r.stderr
    assert time.time() - t0 < 5.5, "the three 2 s stages ran one after another"
    starts = [float(open(run / f"{n}.start").read()) for n in "abc"]
    ends = [float(open(run / f"{n}.end").read()) for n in "abc"]
    assert max(starts) < min(ends), (starts, ends)
    state = json.load(open(run / "recipe" / "state.json"))
    assert state["stages"]["a"]["done"] and state["stages"]["b"]["done"] and not state["stages"]["c"]["done"]
    assert state["stages"]["a"]["together"] == "arms" and not (run / "after").exists()
    (run / "c.ok").touch()
    r = mc("recipe", recipe, "--out", run, "--no-progress")
    assert r.stderr.count("finished before") == 2 and (run / "after").exists(), r.stderr
    recipe.write_text('[[stage]]\nname = "x"\ntogether = 3\ncommands = [["true"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run2", check=False)
    assert r.returncode == 2 and "'together' must be a group's name" in r.stderr, r.stderr


def test_together_group_fits_gpu_memory(tmp_path):
    """`together_gpu_mib` caps how many of a group share a GPU, whatever --together-per-gpu asks
    (session 42: five RL arms and an evaluation held 82 GB of one GPU, more than an H100 has);
    never below one, and a stage that names it outside a group is refused."""
    recipe = tmp_path / "r.toml"
    stages = ""
    for name in ("a", "b", "c"):
        body = f"date +%s.%N > {{run}}/{name}.start; sleep 1; date +%s.%N > {{run}}/{name}.end"
        stages += (f'[[stage]]\nname = "{name}"\ntogether = "arms"\ntogether_gpu_mib = 30000\n'
                   f'commands = [["sh", "-c", "{body}"]]\n\n')
    recipe.write_text(stages)
    one_gpu = dict(os.environ, CUDA_VISIBLE_DEVICES="3")

    def times(run):
        return ([float(open(run / f"{n}.start").read()) for n in "abc"],
                [float(open(run / f"{n}.end").read()) for n in "abc"])
    # An 80 GB GPU holds two of 30,000 MiB: three asked, two at once, then the third.
    run = tmp_path / "h100"
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--together-per-gpu", "3", "--gpu-mib", "81559", env=one_gpu)
    assert "recipe: arms: 2 a GPU, not 3: each may hold 30000 MiB (together_gpu_mib) and a GPU has 81559 MiB" in r.stderr
    (sa, sb, sc), (ea, eb, ec) = times(run)
    assert max(sa, sb) < min(ea, eb) and sc >= max(ea, eb), "a and b at once, c after"
    # A larger GPU: all three at once, no note. A GPU smaller than one stage: one at a time.
    run = tmp_path / "h200"
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--together-per-gpu", "3", "--gpu-mib", "143771", env=one_gpu)
    assert "a GPU, not" not in r.stderr
    starts, ends = times(run)
    assert max(starts) < min(ends), "all three at once"
    run = tmp_path / "small"
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--gpu-mib", "16000", env=one_gpu)
    assert "recipe: arms: 1 a GPU, not all:" in r.stderr, r.stderr
    starts, ends = times(run)
    assert starts[1] >= ends[0] and starts[2] >= ends[1], (starts, ends)
    # Without --gpu-mib, nvidia-smi says (this machine has none: a script in its place answers as
    # the GPU machines' does, and records what it was asked); the smallest GPU counts.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/smi-args\nprintf "143771\\n81559\\n"\n')
    (fake / "nvidia-smi").chmod(0o755)
    run = tmp_path / "smi"
    r = mc("recipe", recipe, "--out", run, "--no-progress", "--gpus", "0,1", "--together-per-gpu", "3",
           env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))
    assert "recipe: arms: 2 a GPU, not 3:" in r.stderr and "a GPU has 81559 MiB" in r.stderr, r.stderr
    assert open(tmp_path / "smi-args").read().split() == [
        "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0,1"]
    recipe.write_text('[[stage]]\nname = "x"\ntogether_gpu_mib = 100\ncommands = [["true"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "bad", check=False)
    assert r.returncode == 2 and "'together_gpu_mib' belongs to a stage of a `together` group" in r.stderr, r.stderr
    recipe.write_text('[[stage]]\nname = "x"\ntogether = "g"\ntogether_gpu_mib = "lots"\ncommands = [["true"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "bad2", check=False)
    assert r.returncode == 2 and "'together_gpu_mib' must be a whole number of MiB >= 1" in r.stderr, r.stderr


def test_together_stages_spread_over_gpus(tmp_path):
    """With several GPUs a group's stages get one each in turn (CUDA_VISIBLE_DEVICES), and
    `together_per_gpu = 1` starts the rest as GPUs come free: the paper's arms, which do not fit
    beside each other on one H100, run at once on four and one after another on one. Stages side
    by side split the compile workers (MUSACODER_COMPILE_WORKERS)."""
    recipe = tmp_path / "r.toml"
    stages = ""
    for name in ("a", "b", "c"):
        body = (f"echo $CUDA_VISIBLE_DEVICES > {{run}}/{name}.gpu; echo $MUSACODER_COMPILE_WORKERS > {{run}}/{name}.cw; "
                f"date +%s.%N > {{run}}/{name}.start; "
                f"sleep 1; date +%s.%N > {{run}}/{name}.end")
        stages += (f'[[stage]]\nname = "{name}"\ntogether = "arms"\ntogether_per_gpu = 1\n'
                   f'commands = [["sh", "-c", "{body}"]]\n\n')
    recipe.write_text(stages)

    def times(run):
        return ([float(open(run / f"{n}.start").read()) for n in "abc"],
                [float(open(run / f"{n}.end").read()) for n in "abc"])
    run = tmp_path / "run"
    mc("recipe", recipe, "--out", run, "--no-progress", "--gpus", "5,GPU-7f")
    assert [open(run / f"{n}.gpu").read().strip() for n in "abc"] == ["5", "GPU-7f", "5"]
    (sa, sb, sc), (ea, eb, ec) = times(run)
    assert max(sa, sb) < min(ea, eb) and sc >= max(ea, eb), "a and b at once, c once a GPU was free"
    state = json.load(open(run / "recipe" / "state.json"))
    assert [state["stages"][n]["gpu"] for n in "abc"] == ["5", "GPU-7f", "5"]
    rows = read_jsonl(run / "recipe" / "stages.jsonl")
    assert sorted(r["gpu"] for r in rows) == ["5", "5", "GPU-7f"]
    # One GPU (or none): one stage at a time, each with the machine's own CUDA_VISIBLE_DEVICES.
    run = tmp_path / "run-one"
    mc("recipe", recipe, "--out", run, "--no-progress", env=dict(os.environ, CUDA_VISIBLE_DEVICES="3"))
    starts, ends = times(run)
    assert starts[1] >= ends[0] and starts[2] >= ends[1], (starts, ends)
    assert [open(run / f"{n}.gpu").read().strip() for n in "abc"] == ["3", "3", "3"]
    assert "gpu" not in json.load(open(run / "recipe" / "state.json"))["stages"]["a"]
    # --together-per-gpu overrides the group's own: two at once on the one GPU, then the third.
    run = tmp_path / "run-two"
    mc("recipe", recipe, "--out", run, "--no-progress", "--together-per-gpu", "2",
       env=dict(os.environ, CUDA_VISIBLE_DEVICES="3"))
    (sa, sb, sc), (ea, eb, ec) = times(run)
    assert max(sa, sb) < min(ea, eb) and sc >= max(ea, eb), "a and b at once, c after"
    # Side by side, each gets its share of the compile workers (half the cores between them); alone,
    # the command's own default. A value in the caller's environment is left as it is.
    share = str(max(1, (os.cpu_count() or 1) // 2 // 2))
    assert [open(run / f"{n}.cw").read().strip() for n in "abc"] == [share, share, ""]
    run = tmp_path / "run-two-own"
    mc("recipe", recipe, "--out", run, "--no-progress", "--together-per-gpu", "2",
       env=dict(os.environ, CUDA_VISIBLE_DEVICES="3", MUSACODER_COMPILE_WORKERS="5"))
    assert [open(run / f"{n}.cw").read().strip() for n in "abc"] == ["5", "5", "5"]
    recipe.write_text('[[stage]]\nname = "x"\ntogether_per_gpu = 1\ncommands = [["true"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run2", check=False)
    assert r.returncode == 2 and "'together_per_gpu' belongs to a stage of a `together` group" in r.stderr, r.stderr
    recipe.write_text('[[stage]]\nname = "x"\ntogether = "g"\ntogether_per_gpu = 1\ncommands = [["true"]]\n'
                      '[[stage]]\nname = "y"\ntogether = "g"\ncommands = [["true"]]\n')
    r = mc("recipe", recipe, "--out", tmp_path / "run3", check=False)
    assert r.returncode == 2 and "stage 'y': 'together_per_gpu' unset differs from stage 'x' of the same group 'g' (1)" \
        in r.stderr, r.stderr


def test_coder_recipe_miniature(tmp_path):
    """recipes/coder's whole stage graph on the CPU, from a tiny model converted from a GGUF this
    test writes (scripts/get-model.sh with GGUF= and SHA256=), against a KernelBench-shaped folder
    of three of the test problems: every stage runs once and leaves what the next reads and what
    the report shows. Nothing here is about model quality."""
    pytest.importorskip("gguf")
    import tiny_models
    import gguf_fixtures
    from gguf_fixtures import Q, quantize
    src = tmp_path / "src"
    model, _ = tiny_models.make_model(str(src), "qwen2", max_positions=32768)
    tensors = {n: quantize(p.detach().numpy(), Q.Q8_0 if p.dim() == 2 else Q.F32) for n, p in model.state_dict().items()}
    template = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
                "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    gguf_file = gguf_fixtures.write(tmp_path / "tiny.gguf", model.config, tensors, src / "tokenizer.json",
                                    chat_template=template)
    sha = hashlib.sha256(open(gguf_file, "rb").read()).hexdigest()
    kb = tmp_path / "kb" / "KernelBench"
    for level, names in ((1, ["1_Add.py", "2_ReLU.py"]), (2, ["3_Softmax.py"])):
        (kb / f"level{level}").mkdir(parents=True)
        for n in names:
            shutil.copy(os.path.join(ROOT, "tests", "cases", "problems", n), kb / f"level{level}")
    sets = {"model": "tiny-coder", "kernelbench": kb, "problems": 3, "eval_problems": 2, "rl_set_count": 2, "device": "cpu",
            "synth_verify": "compile", "synth_device": "cpu", "max_len": 8192, "sft_epochs": 1, "rft_samples": 2,
            "rl_steps": 1, "rl_prompts": 2, "rl_problems": 2, "rl_max_new_tokens": 16, "max_new_tokens": 16,
            "eval_samples": 1, "eval_turns": 2, "deterministic": "", "rl_keep": ""}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    run = tmp_path / "run"
    env = {"GGUF": gguf_file, "SHA256": sha, "MUSACODER_DEVICE": "cpu"}
    mc("recipe", os.path.join(ROOT, "recipes", "coder", "recipe.toml"), "--out", run, *args, "--no-progress", env=env,
       timeout=2400)
    state = json.load(open(run / "recipe" / "state.json"))
    stages = ["model", "synth", "eval-base", "sft", "eval-sft", "rft", "eval-rft", "probe-rl", "rl", "rl-no-primeecho",
              "rl-no-bdr", "rl-no-mirrorpop", "rl-single-turn", "eval-rl", "report"]
    assert [s for s in stages if state["stages"][s]["done"]] == stages, state
    # The model: converted from the GGUF, its provenance recorded.
    prov = json.load(open(run / "model" / "tiny-coder" / "gguf.json"))
    assert prov["sha256"] == sha
    # synth: KernelBench-format solutions in KernelBench's prompt, decontaminated against the folder.
    rows = read_jsonl(run / "synth" / "dataset.jsonl")
    assert rows and all(r["format"] == "kernelbench" for r in rows)
    assert "ModelNew" in rows[0]["messages"][-1]["content"]
    # Every evaluation the report compares, on both levels, and the RL runs.
    for stage in ("base", "sft", "rft", "rl"):
        for part in ("kb1", "kb2", "heldout"):
            assert (run / "eval" / f"{stage}-{part}" / "results.jsonl").exists(), (stage, part)
    for arm in ("rl", "rl-no-primeecho", "rl-no-bdr", "rl-no-mirrorpop", "rl-single-turn"):
        assert [r["step"] for r in read_jsonl(run / arm / "metrics.jsonl")] == [1], arm
        assert (run / "eval" / ("rl-kb1" if arm == "rl" else f"{arm}-kb1") / "results.jsonl").exists(), arm
    for f in ("stages-kb1.md", "stages-kb2.md", "ablations.md", "stages-kb1.svg", "sft-curves.svg"):
        assert (run / "report" / f).stat().st_size > 0, f
    check_run_record(run, "recipe", 1, given=("--out",))
