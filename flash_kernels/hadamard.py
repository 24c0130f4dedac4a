"""Incoherent processing for FP8 attention (FlashAttention-3, section 3.3): Q and K times one random orthogonal
matrix M along the head dimension before they are quantized.

    M = diag(s) H / sqrt(D)      H: D x D Sylvester Hadamard matrix (entries +-1), s: seeded random +-1 signs

M M^T = I, so (Q M)(K M)^T = Q K^T in exact arithmetic: the scores, the softmax and the LSE are those of the
unrotated inputs. A coordinate that stands out (an outlier) is spread over all D coordinates of its row: e_i M has
every entry +-1/sqrt(D). Per-tensor e4m3 scales set by max|x| then leave the other entries more of e4m3's range.
V is not rotated: the output is P V, and a rotated V would give the rotated output (P V) M.

    qr, kr = rotate_qk(q, k)                 # q @ M, k @ M (computed in fp32, returned in q's and k's dtypes)
    M = hadamard_rotation(128, seed=0)       # the matrix itself (fp32 on the CPU unless asked otherwise)

The signs come from a CPU torch.Generator seeded with ``seed``: the same matrix on every device and run.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

#: dtypes hadamard_rotation returns M in (fp16 / bf16 cannot hold 1/sqrt(D) for odd log2 D, nor keep M orthogonal)
MATRIX_DTYPES = (torch.float32, torch.float64)
#: dtypes rotate_qk takes and returns (the product is computed in fp32, or fp64 for fp64 inputs)
TENSOR_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_dim(D: Any) -> int:
    if isinstance(D, bool) or not isinstance(D, int):
        raise TypeError(f"the head dim D must be an int (a power of two such as 64, 128 or 256); got "
                        f"{type(D).__name__} {D!r}")
    if D < 1 or D & (D - 1):
        raise ValueError(f"the Hadamard rotation needs D a power of two (64, 128, 256, ...): Sylvester's "
                         f"construction has no D x D matrix otherwise; got D={D}")
    return D


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"seed must be a non-negative int; got {seed!r}")
    return seed


def signs(D: int, seed: int = 0) -> torch.Tensor:
    """The random diagonal of :func:`hadamard_rotation`: D signs (+1.0 or -1.0, fp64, CPU) drawn from a CPU
    generator seeded with ``seed``."""
    D, seed = _check_dim(D), _check_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (D,), generator=gen, dtype=torch.int64).double() * 2 - 1


def sylvester(D: int) -> torch.Tensor:
    """The D x D Sylvester Hadamard matrix (fp64, CPU): H[i, j] = (-1) ** popcount(i & j), so H H^T = D I."""
    D = _check_dim(D)
    idx = torch.arange(D, dtype=torch.int64)
    both = idx[:, None] & idx[None, :]
    parity = torch.zeros_like(both)
    for b in range(max(D.bit_length() - 1, 0)):
        parity ^= (both >> b) & 1
    return 1.0 - 2.0 * parity.double()


@functools.lru_cache(maxsize=32)
def _matrix(D: int, seed: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """diag(s) H / sqrt(D), built in fp64 on the CPU, then cast and moved (kept: callers must not write to it)."""
    m = signs(D, seed)[:, None] * sylvester(D) / math.sqrt(D)
    return m.to(device=device, dtype=dtype)


def hadamard_rotation(D: int, seed: int = 0, device: torch.device | str | None = None,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The D x D orthogonal matrix M = diag(s) H / sqrt(D): H the Sylvester Hadamard matrix, s D random signs
    seeded by ``seed`` (:func:`signs`). D a power of two (the FP8 kernel's head dims 64 and 128, or 256, ...);
    ``dtype`` fp32 or fp64 (every entry is +-1/sqrt(D), exact in fp32 for even log2 D and rounded once
    otherwise); on ``device`` (default the CPU). A new tensor on every call."""
    D, seed = _check_dim(D), _check_seed(seed)
    if dtype not in MATRIX_DTYPES:
        raise TypeError(f"hadamard_rotation makes M in torch.float32 or torch.float64; got {dtype}")
    return _matrix(D, seed, torch.device(device if device is not None else "cpu"), dtype).clone()


def rotate_qk(q: torch.Tensor, k: torch.Tensor, seed: int = 0,
              out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q @ M, k @ M) with M = :func:`hadamard_rotation` (D, seed), D the last dimension of q and k (any leading
    shape: [B, H, N, D] and [B, Hkv, Nk, D] for grouped-query or cross attention).

    The products are computed in fp32 (fp64 for fp64 inputs; TF32 on a GPU only where the caller enabled it for
    torch.matmul) and returned in ``out_dtype``, by default each input's own dtype (fp32, fp16, bf16 or fp64);
    :func:`flash_kernels.fp8.attention_fp8_from` asks for fp32 so that the rotated values are rounded once, to
    e4m3. (q M)(k M)^T = q k^T up to that rounding. V is not to be rotated (P V would come out rotated)."""
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in TENSOR_DTYPES:
            raise TypeError(f"rotate_qk takes {', '.join(str(d) for d in TENSOR_DTYPES)} tensors (rotate before "
                            f"quantizing to e4m3); got {name} in {t.dtype}")
        if t.dim() < 1:
            raise ValueError(f"{name} must have a last (head) dimension; got a 0-d tensor")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their head dim; got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.device != k.device:
        raise ValueError(f"q and k must be on one device; got {q.device} and {k.device}")
    if out_dtype is not None and out_dtype not in TENSOR_DTYPES:
        raise TypeError(f"out_dtype must be None (each input's dtype) or one of "
                        f"{', '.join(str(d) for d in TENSOR_DTYPES)}; got {out_dtype}")
    D, seed = _check_dim(q.shape[-1]), _check_seed(seed)
    wide = torch.float64 if torch.float64 in (q.dtype, k.dtype) else torch.float32
    m = _matrix(D, seed, q.device, wide)
    return tuple(torch.matmul(t.to(wide), m).to(out_dtype or t.dtype) for t in (q, k))  # type: ignore[return-value]


#: FlashAttention-3's inputs for the error of FP8 attention (its section 4.3): N(0, 1) + N(0, 100) * Bernoulli(0.001),
#: i.e. standard normal entries, 0.1 % of which get an independent normal term of standard deviation 10 added
OUTLIER_P, OUTLIER_STD = 1e-3, 10.0


def outlier_normal(*shape: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu",
                   mean: float = 0.0, p: float = OUTLIER_P, std: float = OUTLIER_STD) -> torch.Tensor:
    """An fp32 tensor of FlashAttention-3's outlier distribution (:data:`OUTLIER_P`, :data:`OUTLIER_STD`), shifted
    by ``mean``: randn + randn * std * (rand < p) + mean, drawn in that order from ``generator`` (on ``device``)."""
    if not 0 <= p <= 1 or not std >= 0:
        raise ValueError(f"p must be in [0, 1] and std >= 0; got p={p}, std={std}")
    base = torch.randn(*shape, generator=generator, device=device)
    spike = torch.randn(*shape, generator=generator, device=device) * std
    hit = torch.rand(*shape, generator=generator, device=device) < p
    return base + spike * hit + mean
