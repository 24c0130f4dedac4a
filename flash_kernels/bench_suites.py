"""The benchmark's suites of configurations, declared as data (torch-free)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Config:
    """One shape: q [B, H, N, D], k and v [B, Hkv, Nk, D] (Hkv and Nk: None = H and N)."""

    name: str
    B: int
    H: int
    N: int
    D: int
    causal: bool = False
    #: key/value heads (grouped-query attention when < H, multi-query when 1); None: H
    Hkv: int | None = None
    #: keys (cross attention, decoding against a KV cache); None: N
    Nk: int | None = None

    def __post_init__(self) -> None:
        if self.H % self.kv_heads:
            raise ValueError(f"{self.name}: H={self.H} must be a multiple of Hkv={self.Hkv}")

    @property
    def kv_heads(self) -> int:
        return self.H if self.Hkv is None else self.Hkv

    @property
    def keys(self) -> int:
        return self.N if self.Nk is None else self.Nk

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def mixed() -> list[Config]:
    """Ten mixed configurations at D = 64, from tiny (Small-1) to large (Stress-1), with edge cases
    (N = 32, N = 100 not a multiple of any tile)."""
    rows = [("Small-1", 1, 1, 128), ("Small-2", 2, 4, 256), ("Small-3", 2, 8, 256), ("Edge-SmallSeq", 8, 16, 32),
            ("Medium-1", 2, 8, 512), ("Edge-NonPowerOf2", 8, 16, 100), ("Medium-2", 4, 8, 512),
            ("Large-1", 2, 8, 1024), ("Large-2", 4, 12, 1024), ("Stress-1", 8, 16, 2048)]
    return [Config(n, B, H, N, 64) for n, B, H, N in rows]


def d128() -> list[Config]:
    """Head dim 128 against N: B*N = 16384, H = 16, N from 512 to 16384."""
    return [Config(f"B{16384 // N}-H16-N{N}-D128", 16384 // N, 16, N, 128) for N in (512, 1024, 2048, 4096, 8192, 16384)]


def convention() -> list[Config]:
    """FlashAttention's benchmark convention: B*N = 16384 tokens, H*D = 2048, causal and not."""
    out = []
    for D in (64, 128):
        for causal in (False, True):
            for N in (512, 1024, 2048, 4096, 8192, 16384):
                B, H = 16384 // N, 2048 // D
                out.append(Config(f"D{D}-N{N}-{'causal' if causal else 'full'}", B, H, N, D, causal))
    return out


def d256() -> list[Config]:
    """Head dim 256 at the convention's scale: B*N = 16384 tokens, H*D = 2048 (H = 8), causal and not."""
    return [Config(f"D256-N{N}-{'causal' if causal else 'full'}", 16384 // N, 8, N, 256, causal)
            for causal in (False, True) for N in (512, 1024, 2048, 4096, 8192, 16384)]


def fp8() -> list[Config]:
    """The FP8 forward at the convention's scale (B*N = 16384 tokens, H*D = 2048): D = 64 and 128 at N = 1024 to
    16384, and D = 256 at N = 8192 and 16384, causal and not."""
    return [Config(f"D{D}-N{N}-{'causal' if causal else 'full'}", 16384 // N, 2048 // D, N, D, causal)
            for D, lengths in ((64, (1024, 2048, 4096, 8192, 16384)), (128, (1024, 2048, 4096, 8192, 16384)),
                               (256, (8192, 16384)))
            for causal in (False, True) for N in lengths]


def gqa() -> list[Config]:
    """Grouped-query and multi-query attention at the convention's scale: H = 32 query heads, D = 128,
    Hkv = 32 (plain multi-head), 8 and 1 key/value heads, B*N = 16384, causal and not."""
    out = []
    for Hkv in (32, 8, 1):
        for causal in (False, True):
            for N in (2048, 4096, 8192):
                out.append(Config(f"Hkv{Hkv}-N{N}-{'causal' if causal else 'full'}", 16384 // N, 32, N, 128, causal,
                                  Hkv=Hkv))
    return out


def decode() -> list[Config]:
    """Decoding against a KV cache: Nq = 1, 4, 16 new queries against Nk = 1024 to 65536 cached keys,
    B = 8, H = 32, Hkv = 32, 8 and 1 (multi-head, grouped, multi-query), D = 128, not causal (a top-left
    causal mask would let query i see only keys 0..i, which is not what a decode step does). Nk >= 8k
    are the shapes of the bandwidth target (compulsory K + V bytes near the HBM limit)."""
    return [Config(f"Nq{Nq}-Nk{Nk}-Hkv{Hkv}", 8, 32, Nq, 128, False, Hkv=Hkv, Nk=Nk)
            for Hkv in (32, 8, 1) for Nq in (1, 4, 16) for Nk in (1024, 4096, 16384, 65536)]


#: suite name -> (configs, dtypes, description)
SUITES: dict[str, tuple[list[Config], tuple[str, ...], str]] = {
    "mixed": (mixed(), ("float32", "float16"), "ten mixed configurations at D=64, fp32 and fp16"),
    "d128": (d128(), ("float16",), "head dim 128 against N (B*N = 16384, H = 16), fp16"),
    "convention": (convention(), ("float16", "bfloat16"), "FlashAttention convention sweep, fp16 and bf16, causal "
                   "and not"),
    "d256": (d256(), ("float16", "bfloat16"), "head dim 256 at the convention's scale (B*N = 16384, H = 8), fp16 and "
             "bf16, causal and not, forward and backward"),
    "fp8": (fp8(), ("float16",), "the FP8 forward (e4m3, by attention_fp8_from's defaults) against flash_wgmma and "
            "SDPA's fp16 backends on the same fp16 inputs: D = 64, 128 (and 256), B*N = 16384, causal and not"),
    "gqa": (gqa(), ("float16",), "grouped-query / multi-query attention: H=32, D=128, Hkv = 32, 8, 1, "
            "B*N = 16384, fp16, causal and not"),
    "decode": (decode(), ("float16", "bfloat16"), "KV-cache decode: Nq = 1, 4, 16 queries against Nk = 1024-65536 "
               "keys, B=8, H=32, Hkv = 32, 8, 1, D=128, fp16 and bf16, not causal (top-left causal masking is "
               "meaningless for decode: query i would see only keys 0..i)"),
}


#: the passes a suite times, where not both: a decode step is inference (forward only), and its backward
#: references at Nk = 64k cost more device time than every other suite together; fp8: the FP8 forward
SUITE_PASSES: dict[str, tuple[str, ...]] = {"decode": ("forward",), "fp8": ("forward",)}

#: the FP8 forward's timed calls, run in the suites that name them (SUITE_IMPLS) and in no other: the kernel alone
#: (inputs quantized and V transposed beforehand), with V's transpose (attention_fp8 on the quantized inputs), and
#: the whole call from the 16-bit inputs (attention_fp8_from: quantize, rotate, transpose V, the kernel)
FP8_IMPLS = ("flash_wgmma_fp8", "flash_wgmma_fp8_vt", "flash_wgmma_fp8_call")

#: the implementations a suite times, where not every one selected: fp8 compares the FP8 calls with the fp16
#: forwards that matter to them (flash_wgmma, cuDNN's and FlashAttention-2's), not with the whole ladder
SUITE_IMPLS: dict[str, tuple[str, ...]] = {"fp8": (*FP8_IMPLS, "flash_wgmma", "sdpa_cudnn", "sdpa_flash")}


def suite_impls(name: str, impls: list[str]) -> list[str]:
    """Of ``impls`` (in their order), those suite ``name`` times: its SUITE_IMPLS where it has them, else all but the
    FP8 calls."""
    keep = SUITE_IMPLS.get(name)
    return [i for i in impls if (i in keep if keep is not None else i not in FP8_IMPLS)]


def suite_passes(name: str, passes: list[str]) -> list[str]:
    """Of ``passes``, those suite ``name`` times."""
    return [p for p in passes if p in SUITE_PASSES.get(name, ("forward", "backward"))]


def get_suite(name: str) -> tuple[list[Config], tuple[str, ...], str]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return SUITES[name]
