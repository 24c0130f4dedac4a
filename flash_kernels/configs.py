"""Benchmark configurations, declared as data (torch-free)."""

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


def seed004() -> list[Config]:
    """Seed 004's ten configurations (D = 64), Small-1 ... Stress-1."""
    rows = [("Small-1", 1, 1, 128), ("Small-2", 2, 4, 256), ("Small-3", 2, 8, 256), ("Edge-SmallSeq", 8, 16, 32),
            ("Medium-1", 2, 8, 512), ("Edge-NonPowerOf2", 8, 16, 100), ("Medium-2", 4, 8, 512),
            ("Large-1", 2, 8, 1024), ("Large-2", 4, 12, 1024), ("Stress-1", 8, 16, 2048)]
    return [Config(n, B, H, N, 64) for n, B, H, N in rows]


def seed002() -> list[Config]:
    """Seed 002's D = 128 table: B*N = 16384, H = 16, N from 512 to 16384."""
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
    "seed004": (seed004(), ("float32", "float16"), "seed 004's ten configurations, fp32 and fp16"),
    "seed002": (seed002(), ("float16",), "seed 002's D=128 table, fp16"),
    "convention": (convention(), ("float16",), "FlashAttention convention sweep, fp16, causal and not"),
}


def get_suite(name: str) -> tuple[list[Config], tuple[str, ...], str]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return SUITES[name]


# --------------------------------------------------------------------------- capture suites (Nsight)

#: implementations outside the registry that the workload can run as references
SDPA_REFERENCES = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math")


@dataclass(frozen=True)
class Case:
    """One variant x one config x one pass: what the workload runs inside one NVTX range."""

    variant: str
    pass_: str
    B: int
    H: int
    N: int
    D: int
    dtype: str = "float16"
    causal: bool = False
    options: tuple[tuple[str, object], ...] = ()

    @property
    def options_dict(self) -> dict[str, object]:
        return dict(self.options)

    def resolved_options(self) -> dict[str, object]:
        """The options the kernel will run with (registry defaults filled in; validated)."""
        from .registry import VARIANTS, get_variant

        if self.variant in VARIANTS:
            return get_variant(self.variant).resolve_options(self.options_dict, self.D)
        if self.variant not in SDPA_REFERENCES:
            get_variant(self.variant)  # raises, listing the known names
        if self.options:
            raise ValueError(f"{self.variant} takes no options (got {self.options_dict})")
        return {}

    def range_name(self) -> str:
        from nsightlab.ranges import range_name

        return range_name(self.variant, self.pass_, self.B, self.H, self.N, self.D, self.dtype, self.causal,
                          self.resolved_options())

    def as_dict(self) -> dict[str, object]:
        return {"variant": self.variant, "pass": self.pass_, "B": self.B, "H": self.H, "N": self.N, "D": self.D,
                "dtype": self.dtype, "causal": self.causal, "options": self.options_dict}


@dataclass(frozen=True)
class CaptureSuite:
    name: str
    description: str
    #: "ncu", "nsys" (run the cases under the tool) and/or "bench" (run flash_kernels.bench suites)
    tools: tuple[str, ...]
    cases: tuple[Case, ...] = ()
    #: (case, reason) pairs the suite leaves out on purpose, recorded in the manifest
    skipped: tuple[tuple[Case, str], ...] = ()
    bench_suites: tuple[str, ...] = ()
    bench_args: tuple[str, ...] = ()
    #: how ncu replays for its counter passes (nsightlab.capture.ncu_command says what each costs)
    replay_mode: str = "application"


SEQLEN_N = (256, 512, 1024, 2048, 3000, 4096, 8192, 16384)
#: B*H for the seqlen sweep: the materializing variants' N x N fp32 scores (8*N^2*4 bytes) pass the
#: L2 size of an H100/H200 (50-60 MiB) between N = 1024 (32 MiB) and N = 2048 (128 MiB)
SEQLEN_BH = (1, 8)
#: the materializing variants stop at N = 2048 (128 MiB per score matrix, 2x the L2: thrashing is
#: well under way) and the CUDA-core flash variants at N = 8192: the three suites must fit one
#: 8-minute call, and the instruction-counting pass runs long kernels ~10x slower
SEQLEN_MAX_SCORES = 8 * 2048 * 2048
SEQLEN_MAX_N_SIMT = 8192


def _seqlen() -> tuple[tuple[Case, ...], tuple[tuple[Case, str], ...]]:
    from .registry import VARIANTS

    cases, skipped = [], []
    B, H = SEQLEN_BH
    for D in (64, 128):
        for N in SEQLEN_N:
            for name, var in VARIANTS.items():
                for pass_ in var.passes:
                    c = Case(name, pass_, B, H, N, D)
                    if pass_ == "forward" and var.forward_of:
                        skipped.append((c, f"forward is {var.forward_of}'s"))
                    elif var.materializes and B * H * N * N > SEQLEN_MAX_SCORES:
                        skipped.append((c, f"materializes {B * H * N * N:.2e} scores > {SEQLEN_MAX_SCORES:.2e}"))
                    elif name in ("flash_fa1", "flash_simt") and N > SEQLEN_MAX_N_SIMT:
                        skipped.append((c, f"CUDA-core flash variant above N={SEQLEN_MAX_N_SIMT} (seconds per pass)"))
                    else:
                        cases.append(c)
            for ref in ("sdpa_flash", "sdpa_cudnn"):
                for pass_ in ("forward", "backward"):
                    cases.append(Case(ref, pass_, B, H, N, D))
    return tuple(cases), tuple(skipped)


def _blocksize() -> tuple[Case, ...]:
    from .registry import VARIANTS

    cases = []
    for N in (1024, 4096):
        for D in (64, 128):
            B, H = 4, 16
            for bs in VARIANTS["flash_simt"].options["block_size"].choices:
                for pass_ in ("forward", "backward"):
                    cases.append(Case("flash_simt", pass_, B, H, N, D, options=(("block_size", bs),)))
            mma = VARIANTS["flash_mma"].options
            for opt, pass_ in (("tile", "forward"), ("bwd_tile", "backward")):
                for choice in mma[opt].choices:
                    if D in mma[opt].head_dims.get(choice, (D,)):
                        cases.append(Case("flash_mma", pass_, B, H, N, D, options=((opt, choice),)))
    return tuple(cases)


_seqlen_cases, _seqlen_skipped = _seqlen()
CAPTURE_SUITES: dict[str, CaptureSuite] = {
    "seqlen": CaptureSuite(
        "seqlen", "every variant, forward and backward, D=64/128, fp16, N=256..16384 (B=1, H=8), with SDPA "
        "flash and cuDNN; Nsight Compute counters and an Nsight Systems timeline", ("ncu", "nsys"),
        _seqlen_cases, _seqlen_skipped),
    "blocksize": CaptureSuite(
        "blocksize", "flash_simt block sizes 4/8/16/32 and flash_mma tile shapes, D=64/128, N=1024/4096 "
        "(B=4, H=16), fp16; Nsight Compute counters", ("ncu",), _blocksize(),
        # long CUDA-core kernels: application replay would run every launch patched in the
        # instruction-counting pass (266 s of 345 s on an H100); kernel replay patches only the profiled one
        replay_mode="kernel"),
    "seeds": CaptureSuite(
        "seeds", "the kernel issue's benchmark suites (timings only: CUDA events, L2 flushed, medians)",
        ("bench",), bench_suites=("seed004", "seed002", "convention"),
        bench_args=("--reps", "5", "--budget-ms", "30", "--warmup", "1", "--max-call-ms", "200",
                    "--refs", "sdpa_flash,sdpa_cudnn,sdpa_efficient,sdpa_math")),
}


def get_capture_suite(name: str) -> CaptureSuite:
    if name not in CAPTURE_SUITES:
        raise ValueError(f"unknown capture suite {name!r}; known: {', '.join(CAPTURE_SUITES)}")
    return CAPTURE_SUITES[name]
