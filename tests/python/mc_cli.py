"""The built binaries as the Python tests call them: where they are, a call that fails with
the command's own output, the MooreEval service on loopback, and JSONL in and out."""
import contextlib
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


@contextlib.contextmanager
def serving(log_dir, *args):
    """`musacoder serve --port 0 ARGS...` (str()-ed) for the block, on loopback: yields its URL.
    Its log is LOG_DIR/serve.log, shown if it does not come up."""
    log = os.path.join(log_dir, "serve.log")
    p = subprocess.Popen([BINARY, "serve", "--port", "0", *map(str, args)], stdout=subprocess.PIPE,
                         stderr=open(log, "w"), text=True)
    try:
        line = p.stdout.readline()
        assert "listening on" in line, open(log).read()
        yield line.split("listening on ")[1].split()[0]
    finally:
        p.terminate()
        p.wait(20)


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def read_jsonl(path):
    return [json.loads(line) for line in open(path) if line.strip()]
