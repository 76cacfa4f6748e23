"""The built binaries as the Python tests call them: where they are, a call that fails with
the command's own output, and JSONL in and out."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("MUSACODER_BINARY", os.path.join(ROOT, "build", "musacoder"))
MODEL_BINARY = os.path.join(os.path.dirname(BINARY), "musacoder-model")
HAS_MODEL = os.path.exists(MODEL_BINARY)


def run(*args, check=True, timeout=600, binary=BINARY, env=None):
    """`binary ARGS...` (arguments str()-ed; `env` added to this process's). With `check`, a
    non-zero exit fails the test with the tail of what the command printed."""
    r = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    if check and r.returncode != 0:
        raise AssertionError(f"{os.path.basename(binary)} {' '.join(map(str, args[:2]))} failed "
                             f"({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def read_jsonl(path):
    return [json.loads(line) for line in open(path) if line.strip()]
