"""The benchmark's suites of configurations, declared as data (torch-free)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Config:
    name: str
    B: int
    H: int
    N: int
    D: int
    causal: bool = False

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


#: suite name -> (configs, dtypes, description)
SUITES: dict[str, tuple[list[Config], tuple[str, ...], str]] = {
    "mixed": (mixed(), ("float32", "float16"), "ten mixed configurations at D=64, fp32 and fp16"),
    "d128": (d128(), ("float16",), "head dim 128 against N (B*N = 16384, H = 16), fp16"),
    "convention": (convention(), ("float16",), "FlashAttention convention sweep, fp16, causal and not"),
}


def get_suite(name: str) -> tuple[list[Config], tuple[str, ...], str]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return SUITES[name]
