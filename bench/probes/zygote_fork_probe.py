"""Which state of a parent process lets a forked child create a CUDA context (GPU machine).
Each case runs in a fresh interpreter: it sets up the parent as described, forks, and the
child tries torch.cuda.set_device + torch.zeros on the GPU. Prints one line per case."""
import os
import subprocess
import sys

COUNT = "import ctypes\nctypes.CDLL('libcuda.so.1').cuDeviceGetCount(ctypes.byref(ctypes.c_int()))\n"
NVML = "os.environ['PYTORCH_NVML_BASED_CUDA_CHECK']='1'\nimport torch\ntorch.cuda.is_available()\n"
CASES = {
    "import_torch": "import torch",
    "libcuda_device_count": "import torch\n" + COUNT,
    "nvml_available": NVML,
    "nvml_available+count": NVML + COUNT,
    "nvml_available+cpp_ext": NVML + "import torch.utils.cpp_extension",
    "import_profiler": "import torch, torch.profiler",
    "zygote_warm_imports": "from musacoder_harness.zygote import warm_imports\nwarm_imports()",
    "zygote_warm_landlock": "from musacoder_harness.zygote import warm_imports, restrict_writes_to, writable_paths\n"
                            "warm_imports()\nLANDLOCK=True",
}

CHILD = r'''
import os, sys, threading, time, json
LANDLOCK = False
{setup}
print("threads before fork:", threading.active_count(), len(os.listdir("/proc/self/task")), flush=True)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        if LANDLOCK:
            import tempfile
            why = restrict_writes_to(writable_paths(tempfile.mkdtemp()))
            assert not why, why
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        t0 = time.time()
        import torch
        import torch.utils.cpp_extension
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda")
        msg = f"ok in {{time.time() - t0:.2f}} s"
    except BaseException as e:
        msg = f"FAILED {{type(e).__name__}}: {{str(e)[:160]}}"
    os.write(w, msg.encode())
    os._exit(0)
os.close(w)
print(os.read(r, 4096).decode(), flush=True)
os.waitpid(pid, 0)
'''

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
for name, setup in CASES.items():
    p = subprocess.run([sys.executable, "-c", CHILD.format(setup=setup)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=here), timeout=120)
    lines = [l for l in (p.stdout + p.stderr).splitlines() if "Warning" not in l and "pid = os.fork" not in l]
    print(f"{name:24s} {' | '.join(lines)[-300:]}", flush=True)
