"""KernelBench's own Python modules, loaded from a checkout (the layout scripts/get-kernelbench.sh
makes: SRC/src/kernelbench) without its package __init__, for the tests and GPU checks that
compare our code with KernelBench's."""
import importlib.util
import os
import sys
import types


def load_kernelbench_module(src, name):
    """KernelBench's module `name`, loaded from the checkout without its package __init__ (which
    imports API clients this test does not need); utils gets the three file helpers it uses."""
    import tomllib
    pkg = os.path.join(src, "src", "kernelbench")
    sys.modules.setdefault("tomli", tomllib)
    kb = types.ModuleType("kernelbench")
    kb.__path__ = [pkg]
    utils = types.ModuleType("kernelbench.utils")
    utils.read_file = lambda p: open(p).read()
    utils.get_package_resource_path = lambda rel: os.path.join(pkg, rel)
    utils.resolve_path = lambda rel: rel if os.path.isabs(rel) else (
        os.path.join(pkg, rel[len("src/kernelbench/"):]) if rel.startswith("src/kernelbench/") else os.path.join(src, rel))
    utils.REPO_TOP_PATH = src
    sys.modules["kernelbench"], sys.modules["kernelbench.utils"] = kb, utils
    spec = importlib.util.spec_from_file_location(f"kernelbench.{name}", os.path.join(pkg, f"{name}.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m
