"""How much of the softmax ptxas leaves between a kernel's two wgmma waits: for each kernel of an object file,
the MUFU.EX2 instructions between each WARPGROUP.DEPBAR.LE gsb0, 0x1 (the scores of this tile are in, the
previous tile's P V still in flight) and the next WARPGROUP.DEPBAR.LE gsb0, 0x0 (everything in), against all the
kernel's MUFU.EX2. FlashAttention-3's intra-warpgroup overlap hides the softmax behind P V only for the
exponentials that land there; the source's order does not decide it, ptxas does.

    nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -c flash_kernels/csrc/flash_wgmma_fwd.cu -o /tmp/f.o
    python scripts/sass_overlap.py /tmp/f.o [--match REGEX]

Needs cuobjdump (the CUDA toolkit's, or $CUOBJDUMP). Reads SASS only: it says nothing about time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")


def overlap(sass: str) -> list[tuple[str, list[int], int]]:
    """(kernel, MUFU.EX2 between each 0x1 wait and the next 0x0 wait, MUFU.EX2 in the kernel) per kernel."""
    out = []
    for block in sass.split("Function : ")[1:]:
        name, _, body = block.partition("\n")
        ops = [_ADDR.sub("", line).strip() for line in body.splitlines() if _ADDR.search(line)]
        ones = [i for i, o in enumerate(ops) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in o]
        zeros = [i for i, o in enumerate(ops) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in o]
        between = []
        for a in ones:
            b = next((z for z in zeros if z > a), None)
            if b is not None:
                between.append(sum("MUFU.EX2" in o for o in ops[a:b]))
        out.append((name.strip(), between, sum("MUFU.EX2" in o for o in ops)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("obj", help="an object file compiled for sm_90a (nvcc -c)")
    p.add_argument("--match", default="", help="only kernels whose mangled name matches this regular expression")
    a = p.parse_args(argv)
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(a.obj):
        p.error(f"obj: {a.obj} does not exist")
    if not shutil.which(tool) and not os.path.exists(tool):
        p.error("cuobjdump not found: put the CUDA toolkit's bin on PATH or set CUOBJDUMP")
    proc = subprocess.run([tool, "-sass", a.obj], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"sass_overlap: cuobjdump failed on {a.obj}: {proc.stderr.strip()}", file=sys.stderr)
        return 2
    want = re.compile(a.match) if a.match else None
    for name, between, total in overlap(proc.stdout):
        if (want and not want.search(name)) or not between:
            continue
        print(f"{' '.join(str(n) for n in between):>8} of {total:4d} MUFU.EX2 between the waits  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
