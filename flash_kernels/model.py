"""The analytic model: FLOPs, compulsory bytes and working sets of attention (torch-free).

FLOP convention (FlashAttention's own benchmarks): forward = 4 B H N^2 D, halved when causal;
backward = 2.5 x forward. Compulsory bytes: every input read once, every output written once.
"""

from __future__ import annotations

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def _check_pass(pass_: str) -> None:
    if pass_ not in ("forward", "backward"):
        raise ValueError(f"pass must be 'forward' or 'backward', not {pass_!r}")


def flops(B: int, H: int, N: int, D: int, *, causal: bool = False, pass_: str = "forward") -> float:
    _check_pass(pass_)
    f = 4.0 * B * H * N * N * D
    if causal:
        f /= 2
    return f * (2.5 if pass_ == "backward" else 1.0)


def compulsory_bytes(B: int, H: int, N: int, D: int, dtype: str, *, pass_: str = "forward") -> float:
    """Forward reads Q, K, V and writes O and LSE (fp32); backward reads Q, K, V, O, dO, LSE and
    writes dQ, dK, dV."""
    _check_pass(pass_)
    e = DTYPE_BYTES[dtype]
    bhnd = B * H * N * D
    lse = 4 * B * H * N
    if pass_ == "forward":
        return float(4 * bhnd * e + lse)
    return float(8 * bhnd * e + lse)


def score_matrix_bytes(B: int, H: int, N: int) -> float:
    """One fp32 B*H*N*N matrix (S, P or dP) as the materializing variants store it."""
    return 4.0 * B * H * N * N


def working_set_bytes(variant_materializes: bool, B: int, H: int, N: int, D: int, dtype: str,
                      *, pass_: str = "forward") -> float:
    """Bytes a pass touches repeatedly: the score matrices (one forward, two backward) plus the
    operands for the materializing variants; only the operands for flash variants."""
    base = compulsory_bytes(B, H, N, D, dtype, pass_=pass_)
    if not variant_materializes:
        return base
    return base + score_matrix_bytes(B, H, N) * (2 if pass_ == "backward" else 1)


def tflops(flop: float, ms: float) -> float:
    return flop / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9
