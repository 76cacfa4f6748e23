"""Prints, as one JSON line, what the C++ compile pool needs to build torch extensions
exactly as torch.utils.cpp_extension.load_inline would on this machine."""
import json
import os
import sys
import sysconfig

# Probing must not touch a GPU.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def main():
    import torch
    import torch.utils.cpp_extension as ce

    def call(fn, cuda):
        try:
            return fn(device_type="cuda") if cuda else fn()
        except TypeError:
            return fn(cuda=cuda)

    info = {
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
    print(json.dumps(info))


if __name__ == "__main__":
    main()
