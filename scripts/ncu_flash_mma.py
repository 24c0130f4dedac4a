"""Run flash_mma forward + backward once at D=128, N=4096 (B=4, H=16, fp16) after warm-up, for ncu:
    ncu --clock-control none --kernel-name regex:flash_mma --section SpeedOfLight ... python scripts/ncu_flash_mma.py
"""
import torch

import flash_kernels as fk
from flash_kernels.testing import random_qkv

q, k, v, g = random_qkv(4, 16, 4096, 128, torch.float16, n=4)
for _ in range(2):
    o, lse = fk.forward(q, k, v)
    fk.backward(q, k, v, o, lse, g)
torch.cuda.synchronize()
