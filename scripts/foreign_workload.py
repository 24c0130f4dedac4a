"""A workload this project did not write, for the foreign-capture test data: a cuBLAS GEMM, an
elementwise multiply, PyTorch's flash attention and a reduction, under plain NVTX ranges of its own
naming (a custom domain, a nested range, a kernel outside every range), as a colleague might send.

    ncu --nvtx --set roofline -o foreign python scripts/foreign_workload.py
    nsys profile --trace=cuda,nvtx -o foreign python scripts/foreign_workload.py
"""

import nvtx
import torch
import torch.nn.functional as F

torch.manual_seed(0)
dev = "cuda"
a = torch.randn(2048, 2048, device=dev, dtype=torch.float16)
b = torch.randn(2048, 2048, device=dev, dtype=torch.float16)
x = torch.randn(1 << 22, device=dev, dtype=torch.float32)
y = torch.randn(1 << 22, device=dev, dtype=torch.float32)
q, k, v = (torch.randn(4, 16, 2048, 64, device=dev, dtype=torch.float16) + 0.5 for _ in range(3))
torch.cuda.synchronize()

x.add_(1.0)  # outside every range
with nvtx.annotate("gemm:fwd M=2048 N=2048 K=2048"):
    c = a @ b
with nvtx.annotate("elementwise mul n=4194304"):
    z = x * y
with nvtx.annotate("attention block", domain="model"):  # a named domain, and a range nested in it
    with nvtx.annotate("sdpa flash B=4 H=16 N=2048 D=64", domain="model"):
        o = F.scaled_dot_product_attention(q, k, v)
with nvtx.annotate("reduce: sum"):  # a name outside every key=value grammar
    s = z.sum()
torch.cuda.synchronize()
print("ok", float(c[0, 0]), float(s), float(o[0, 0, 0, 0]))
