"""The dependency direction: nsightlab imports neither torch nor any kernel package (flash_kernels plugs
into nsightlab, never the other way); modules that need torch import it inside their functions."""

import subprocess
import sys

CODE = """
import importlib, pkgutil, sys
import nsightlab

names = sorted(m.name for m in pkgutil.walk_packages(nsightlab.__path__, "nsightlab.") if not m.name.endswith("__main__"))
expected = {"nsightlab.import", "nsightlab.run.workload", "nsightlab.problems.attention", "nsightlab.run.ceilings",
            "nsightlab.core.environment", "nsightlab.run.capture", "nsightlab.run.sweep", "nsightlab.problems.impls", "nsightlab.core.ranges"}
assert expected <= set(names), sorted(expected - set(names))
for name in names:
    importlib.import_module(name)  # nsightlab.import too: a keyword, so only importlib can load it

# what the capture command does before any subprocess: resolve a built-in, expand a sweep, name its ranges
from nsightlab.run.sweep import from_args
cases = from_args("d", ["sdpa_flash"], {"N": [64]}, ["forward", "backward"], {}, ["ncu"]).cases(load=False)
assert len(cases) == 2 and cases[0].model["flop"] > 0

bad = [m for m in ("torch", "flash_kernels", "triton") if m in sys.modules]
assert not bad, f"importing {len(names)} nsightlab modules imported {bad}"
print(len(names))
"""


def test_nsightlab_imports_neither_torch_nor_the_kernels():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) >= 20
