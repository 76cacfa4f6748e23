"""Prints, as one JSON line, what the C++ compile pool needs to build torch extensions
exactly as torch.utils.cpp_extension.load_inline would on this machine.

`--cache FILE`: reuses the facts FILE holds when they were read from the same interpreter and
the same installed torch (`import torch` takes seconds; this check, milliseconds)."""
import argparse
import hashlib
import importlib.util
import json
import os
import sys
import sysconfig

from .files import write_json_atomic

# Probing must not touch a GPU.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def fingerprint():
    """What the facts depend on, read without importing torch: the interpreter, torch's
    installed files (its version file and libraries change with every install), CUDA_HOME, and
    this probe itself."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    root = os.path.dirname(spec.origin)
    h = hashlib.sha256()
    h.update(json.dumps([sys.executable, sys.version, root, os.environ.get("CUDA_HOME", ""),
                         os.environ.get("CUDA_PATH", "")]).encode())
    for rel in ("version.py", "__init__.py", os.path.join("lib", "libtorch.so"),
                os.path.join("lib", "libtorch_cuda.so"), os.path.join("utils", "cpp_extension.py")):
        try:
            st = os.stat(os.path.join(root, rel))
            h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}".encode())
        except OSError:
            h.update(f"{rel}:-".encode())
    with open(__file__, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def probe():
    import torch
    import torch.utils.cpp_extension as ce

    def call(fn, cuda):
        try:
            return fn(device_type="cuda") if cuda else fn()
        except TypeError:
            return fn(cuda=cuda)

    return {
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "include_paths": call(ce.include_paths, True),
        "library_paths": call(ce.library_paths, True),
        "python_include": sysconfig.get_paths()["include"],
        "cuda_home": ce.CUDA_HOME,
        "nvcc_flags": list(ce.COMMON_NVCC_FLAGS),
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python": sys.executable,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="", help="JSON file the facts are kept in")
    args = ap.parse_args()
    fp = fingerprint() if args.cache else None
    if fp:
        try:
            with open(args.cache) as f:
                kept = json.load(f)
            if kept.get("fingerprint") == fp and isinstance(kept.get("facts"), dict):
                print(json.dumps(dict(kept["facts"], cached=True)))
                return
        except (OSError, ValueError):
            pass  # absent or unreadable: probe again
    info = probe()
    if fp:
        write_json_atomic(args.cache, {"fingerprint": fp, "facts": info})
    print(json.dumps(info))


if __name__ == "__main__":
    main()
