"""The analytic model: FLOPs, compulsory bytes and working sets of attention (torch-free).

The FLOP and byte formulas are the attention problem's work model, :mod:`nsightlab.problems.attention`
(FlashAttention's convention: forward 4·B·H·N·Nk·D, causal halved when N = Nk and otherwise the
pairs a top-left mask leaves visible; backward 2.5 x forward; compulsory bytes: every input read
once, every output written once); this module gives them the positional signature the benchmark
and the studies use. ``Hkv`` (key/value heads, grouped-query attention) and ``Nk`` (keys, cross
attention) default to H and N.
"""

from __future__ import annotations

from typing import Any

from nsightlab.problems import attention

DTYPE_BYTES = attention.DTYPE_BYTES

#: dense e4m3 wgmma FLOP per SM per cycle on Hopper: twice fp16's 4,096 (NVIDIA's H100 whitepaper: 1,979
#: dense FP8 TFLOP/s = 8,192 x 132 SMs x 1.83 GHz, the clock of its published rates)
FP8_FLOP_PER_SM_CYCLE = 8192


def fp8_dense_peak_tflops(sms: int, clock_ghz: float = 1.83) -> float:
    """The dense FP8 tensor peak in TFLOP/s of a Hopper GPU with ``sms`` SMs at ``clock_ghz``."""
    if sms < 1 or not clock_ghz > 0:
        raise ValueError(f"sms must be >= 1 and clock_ghz > 0; got {sms}, {clock_ghz}")
    return FP8_FLOP_PER_SM_CYCLE * sms * clock_ghz * 1e9 / 1e12


#: head dims where the FP8 kernel sums O one way only: at D = 256 in the tensor cores' accumulator (an fp32 sum
#: beside O would take 256 registers per thread); elsewhere fp32 registers by default (flash_kernels.fp8.o_sum_for)
FP8_O_SUM_ONLY = {256: "tensor"}


#: the head dims the fused Triton quantization takes (flash_kernels.quantize: a block of rows and the D x D sign
#: matrix stay on chip); other head dims quantize with torch operations, several passes over memory
FP8_FUSED_QUANT_DIMS = (64, 128, 256)


def fp8_default_o_sum(D: int) -> str:
    """Where the FP8 kernel sums O at head dim ``D`` unless told: :data:`FP8_O_SUM_ONLY`'s, else fp32 registers."""
    return FP8_O_SUM_ONLY.get(int(D), "fp32")


def _check_pass(pass_: str) -> None:
    if pass_ not in ("forward", "backward"):
        raise ValueError(f"pass must be 'forward' or 'backward', not {pass_!r}")


def _params(B: int, H: int, N: int, D: int, dtype: str = "float16", causal: bool = False, Hkv: int | None = None,
            Nk: int | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"B": B, "H": H, "N": N, "D": D, "dtype": dtype, "causal": bool(causal)}
    if Hkv is not None and Hkv != H:
        if H % Hkv:
            raise ValueError(f"H={H} must be a multiple of Hkv={Hkv} (grouped-query attention)")
        p["Hkv"] = Hkv
    if Nk is not None and Nk != N:
        p["Nk"] = Nk
    return p


def flops(B: int, H: int, N: int, D: int, *, causal: bool = False, pass_: str = "forward", Hkv: int | None = None,
          Nk: int | None = None) -> float:
    """Forward 4·B·H·N·Nk·D (causal: see :func:`nsightlab.problems.attention.visible_pairs`), backward 2.5 x.
    Hkv does not change the FLOPs (every query head computes its own scores)."""
    _check_pass(pass_)
    return attention.flops(_params(B, H, N, D, causal=causal, Hkv=Hkv, Nk=Nk), pass_)


def compulsory_bytes(B: int, H: int, N: int, D: int, dtype: str, *, pass_: str = "forward", Hkv: int | None = None,
                     Nk: int | None = None) -> float:
    """Forward reads Q, K, V and writes O and LSE (fp32); backward reads Q, K, V, O, dO, LSE and
    writes dQ, dK, dV. K, V, dK, dV are [B, Hkv, Nk, D]."""
    _check_pass(pass_)
    return attention.compulsory_bytes(_params(B, H, N, D, dtype, Hkv=Hkv, Nk=Nk), pass_)


def score_matrix_bytes(B: int, H: int, N: int, *, Nk: int | None = None) -> float:
    """One fp32 B*H*N*Nk matrix (S, P or dP) as the materializing variants store it."""
    return 4.0 * B * H * N * (N if Nk is None else Nk)


def working_set_bytes(variant_materializes: bool, B: int, H: int, N: int, D: int, dtype: str,
                      *, pass_: str = "forward", Hkv: int | None = None, Nk: int | None = None) -> float:
    """Bytes a pass touches repeatedly: the score matrices (one forward, two backward) plus the
    operands for the materializing variants; only the operands for flash variants."""
    base = compulsory_bytes(B, H, N, D, dtype, pass_=pass_, Hkv=Hkv, Nk=Nk)
    if not variant_materializes:
        return base
    return base + score_matrix_bytes(B, H, N, Nk=Nk) * (2 if pass_ == "backward" else 1)


def tflops(flop: float, ms: float) -> float:
    return flop / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9
