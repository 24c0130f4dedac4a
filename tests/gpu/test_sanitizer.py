"""compute-sanitizer memcheck and racecheck on a small case of every kernel."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

SANITIZER = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_sanitizer_clean(tool: str) -> None:
    if not shutil.which(SANITIZER):
        pytest.fail("compute-sanitizer not found (it ships with the CUDA toolkit)")
    cmd = [SANITIZER, f"--tool={tool}", "--error-exitcode=86",
           sys.executable, "-m", "flash_kernels.sanitize_case"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{tool} found problems (rc={proc.returncode}):\n{out[-6000:]}"
    assert "ERROR SUMMARY: 0 errors" in out or "RACECHECK SUMMARY: 0 hazards" in out, out[-3000:]
    assert "sanitize_case: ran" in out, out[-3000:]
