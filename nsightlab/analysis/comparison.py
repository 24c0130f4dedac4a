"""The comparison of two captures: before/after a change, or one GPU against another, with a verdict
per range. Plain functions on frames; the page and the command line are nsightlab.render.compare.

Ranges are matched by their decoded fields (implementation, pass, shape, dtype, options: a renamed or
reordered range name still matches), foreign captures' ranges (no schema) by their raw names; ranges on
one side only are listed, never dropped.

Timing comes from the best source both captures hold: Nsight Systems (every measured launch of a
range), else the benchmark CSVs (median, min and max of the repeats), else Nsight Compute's
``gpu__time_duration`` (one launch per range: the noise is unknown and a default is used, and the
output says so). Counters (DRAM bytes and bandwidth, L2 hit rate, achieved occupancy, registers,
shared memory) come from Nsight Compute where both have it.

**Noise model.** Each side's relative spread is (max − min) / median over the repeated launches of
the range; the noise of the comparison is the two spreads added in quadrature, never below
:data:`NOISE_FLOOR` (run-to-run drift that a handful of back-to-back launches does not show), and
:data:`UNKNOWN_NOISE` where a side has a single launch. A row is *slower* when new/base exceeds
1 + max(threshold, noise), *faster* when it is below 1 / (1 + max(threshold, noise)), else *within
noise*. Ranges gate (:attr:`Comparison.regressions`); kernels are reported: a kernel that slows while
its range does not is no regression of the workload.

The comparison refuses captures that fail validation (checksums) and says when the two differ in
GPU, metric set, tool versions, clock control or replay mode; it compares what is comparable and
marks the rest (:attr:`Comparison.marks`).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import NotApplicable, ProfileError
from ..core.ranges import RangeSchema
from ..core.text import impl_key
from ..problems import problem as problems
from ..store.captures import cases, load_bench, load_manifest, short_commit, validate
from ..store.read import PROFILES, bench_files, capture_schemas, load_ncu, load_nsys, ncu_files, nsys_files, resolve
from . import roofline as rf
from .counters import attach_model, available, identity_columns, kernel_work, needed_metrics, option_columns, per_range
from .timeline import range_timing

#: default regression threshold (relative change of the time)
DEFAULT_THRESHOLD = 0.05
#: the least noise assumed for a range timed over repeated launches (clock and thermal drift between
#: two captures that a few back-to-back launches do not show)
NOISE_FLOOR = 0.01
#: the noise assumed where a side has a single launch (Nsight Compute only): unknown, so this
UNKNOWN_NOISE = 0.03

_KSEP = " ::kernel:: "
SLOWER, FASTER, SAME = "slower", "faster", "within noise"
#: the verdict of a move beyond the noise but within the threshold: measured, yet too small to gate
BELOW = "below the threshold"
#: the verdict of a reference implementation's range that moved beyond noise while nothing it runs on changed
DRIFT = "reference drift"
VERDICTS = (SLOWER, FASTER, BELOW, SAME, DRIFT)
#: the verdicts of a range that did not move enough to count as faster or slower
UNMOVED = (BELOW, SAME)
#: the differences between two captures (:func:`compatibility` aspects) that change what a reference runs:
#: with none of them, a reference's move is drift (clocks, thermals, the machine), not the change under test
REFERENCE_CHANGES = ("GPU", "torch", "CUDA runtime", "driver")
#: timing sources, best first
SOURCES = ("nsys", "bench", "ncu")
SOURCE_TEXT = {"nsys": "Nsight Systems, every measured launch of each range",
               "bench": "benchmark CSVs, median / min / max of the repeats",
               "ncu": f"Nsight Compute gpu__time_duration, one launch per range: the noise is unknown, {UNKNOWN_NOISE:.0%} is "
                      "assumed (capture with Nsight Systems or the benchmark for a measured spread)"}

#: range fields that are bookkeeping, not identity; and the columns this module adds (never fields)
_NOT_KEY = {"range", "domain", "schema", "key", "label", "kernel", "launches", "range_base", "range_new", "source",
            "ncu_ms", "dram_mb", "dram_gbs", "l2_hit", "smem_kib", "lo", "hi", "n", "spread", "gbs", "case", "ratio",
            "change", "noise", "noise_known", "verdict", "_nkey"}

#: counter quantities compared where both sides have Nsight Compute data: column -> (header, unit, what makes it)
COUNTERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ncu_ms": ("ncu duration", "ms", ("seconds",)),
    "dram_mb": ("DRAM traffic", "MB", ("bytes_DRAM",)),
    "dram_gbs": ("DRAM bandwidth", "GB/s", ("bytes_DRAM", "seconds")),
    "l2_hit": ("L2 hit rate", "%", ("l2_hit_rate",)),
    "occupancy": ("achieved occupancy", "%", ("occupancy",)),
    "registers": ("registers / thread", "", ("registers",)),
    "smem_kib": ("shared memory / block", "KiB", ("smem_static", "smem_dynamic")),
}
#: timing quantities (every source)
TIMING: dict[str, tuple[str, str]] = {
    "ms": ("time", "ms"),
    "tflops": ("throughput", "TFLOP/s"),
    "gbs": ("effective bandwidth", "GB/s"),
}


# --------------------------------------------------------------------------- threshold, keys, labels


def is_reference(name: object) -> bool:
    """Whether implementation ``name`` is a yardstick, not code under test: a registered problem's reference or
    yardstick (:func:`nsightlab.problems.problem.is_yardstick`); an imported report's ``SDPA flash`` counts as
    the name it spells."""
    if name is None or (isinstance(name, float) and math.isnan(name)):
        return False
    return problems.is_yardstick(impl_key(name))


def reference_rows(frame: pd.DataFrame) -> pd.Series:
    """Per row of ``frame`` (ranges or kernels of a comparison): whether its implementation is a reference."""
    if "variant" not in frame or frame.empty:
        return pd.Series(False, index=frame.index)
    return frame["variant"].map(is_reference).astype(bool)


def with_drift(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the verdict of every reference row that moved beyond noise (slower or faster) made
    :data:`DRIFT`: the reference ran the same code on the same machine, so it measures drift, not the change."""
    if frame.empty or "verdict" not in frame:
        return frame
    moved = reference_rows(frame) & frame["verdict"].isin([SLOWER, FASTER])
    return frame.assign(verdict=frame["verdict"].where(~moved, DRIFT))


def parse_threshold(text: str | float) -> float:
    """'5%' -> 0.05; '0.05' -> 0.05; a bare number of 1 or more is read as percent ('5' -> 0.05)."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        t = str(text).strip()
        try:
            value = float(t.rstrip("%")) / 100 if t.endswith("%") else float(t)
        except ValueError:
            raise ValueError(f"threshold {text!r} is not a number (write 5% or 0.05)") from None
        if not t.endswith("%") and value >= 1:
            value /= 100
    if not (0 <= value < 10) or math.isnan(value):
        raise ValueError(f"threshold {text!r} is out of range (0% to 1000%)")
    return value


def _norm(v: Any) -> str | None:
    """One field value as matching text: 64.0 and 64 agree, True and 'true' agree, NaN/None/'' is absent."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return str(int(v)) if float(v).is_integer() else repr(float(v))
    s = str(v)
    if s.lower() in ("true", "false"):
        return s.lower()
    return s or None


def key_fields(frame: pd.DataFrame) -> list[str]:
    """The columns that identify a range: its decoded fields (implementation, pass, shape, dtype,
    options, ...) without the raw name, domain and schema."""
    return [c for c in identity_columns(frame) if c not in _NOT_KEY and not c.startswith(("base_", "new_"))]


def match_keys(frame: pd.DataFrame) -> pd.Series:
    """The matching key of every row: its decoded fields (sorted ``name=value`` pairs) where a range
    schema decoded the name, else the raw name (foreign captures: generic decoding is a guess)."""
    fields = key_fields(frame)
    schema = frame["schema"] if "schema" in frame else pd.Series("", index=frame.index)
    out = []
    for (_, r), sch in zip(frame.iterrows(), schema, strict=True):
        if sch and isinstance(sch, str) and fields:
            parts = sorted(f"{c}={n}" for c in fields if (n := _norm(r[c])) is not None)
            out.append("|".join(parts))
        else:
            out.append("range=" + str(r["range"]))
    return pd.Series(out, index=frame.index, dtype=object)


def _ordered(fields: Iterable[str], columns: Iterable[str], sort: bool = False) -> list[str]:
    """``fields`` in the order the problem of a frame with ``columns`` names them (``sort``: sorts rows by them;
    :meth:`nsightlab.problems.problem.Problem.name_order`, :meth:`~nsightlab.problems.problem.Problem.sort_order`),
    fields it does not order by name, before its sweep axis."""
    fields = list(fields)
    problem = problems.for_fields(columns)
    order_of = problem.sort_order() if sort else problem.name_order()
    order = {c: i for i, c in enumerate(order_of)}
    last = order.get(problem.sweep_axis, len(order_of))
    return sorted(fields, key=lambda c: (order.get(c, last - 0.5), c))


def names(frame: pd.DataFrame) -> pd.DataFrame:
    """``label`` (implementation and pass, then only the fields that vary within ``frame``:
    ``flash_mma backward D=128 N=4096``) and ``case`` (the same without implementation and pass) per
    row; options only where they tell two rows apart; foreign ranges: the raw name."""
    fields = [c for c in key_fields(frame) if c not in ("variant", "pass", "options", *option_columns(frame))]
    varying = [c for c in fields if frame[c].map(_norm).nunique(dropna=True) > 1]
    if "config" in varying:  # a benchmark configuration's name spells the fields it determines
        varying = [c for c in varying if c in ("suite", "config") or not _determined(frame, ["suite", "config"], c)]
    varying = _ordered(varying, frame.columns)
    rows = []
    for _, r in frame.iterrows():
        if not (isinstance(r.get("schema"), str) and r.get("schema")):
            rows.append((None, "", str(r["range"])))
            continue
        head = " ".join(str(r[c]) for c in ("variant", "pass") if c in r and _norm(r[c]) is not None)
        case = []
        for c in varying:
            n = _norm(r[c])
            if n is not None:
                case.append(f"{n}:" if c == "suite" else str(r[c]) if c == "config" else f"{c}={n}")
        rows.append((head, " ".join(case), _norm(r.get("options")) or ""))
    out = pd.DataFrame(rows, columns=["head", "case", "opts"], index=frame.index)
    # options where the same implementation, pass and fields ran with several settings (an option study)
    study = out.groupby(["head", "case"], dropna=False)["opts"].transform("nunique") > 1
    out["case"] = np.where(study & (out["opts"] != ""), (out["case"] + " [" + out["opts"] + "]").str.strip(), out["case"])
    foreign = out["head"].isna()
    # a benchmark suite's name leads ("convention: sdpa_math forward D64-N2048-full")
    suite = out["case"].str.extract(r"^(\S+:)\s*(.*)$")
    lead = suite[0].fillna("")
    rest = suite[1].where(suite[0].notna(), out["case"])
    label = (lead + " " + out["head"].fillna("") + " " + rest).str.replace(r"\s+", " ", regex=True).str.strip()
    out["label"] = np.where(foreign, out["opts"], label)
    out["case"] = np.where(foreign, out["opts"], out["case"].where(out["case"] != "", label))
    return out[["label", "case"]]


def _determined(frame: pd.DataFrame, by: Sequence[str], col: str) -> bool:
    """Whether ``by`` (the columns of it ``frame`` has) fixes the value of ``col`` in every row."""
    by = [c for c in by if c in frame]
    keyed = frame[[*by, col]].astype(str)
    return bool(by) and int(keyed.groupby(by, dropna=False)[col].nunique().max()) <= 1


def labels(frame: pd.DataFrame) -> pd.Series:
    """The ``label`` of :func:`names`."""
    return names(frame)["label"]


def sort_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in reading order: implementation, pass, then the fields in their problem's sort order."""
    if frame.empty:
        return frame
    cols = [c for c in ("variant", "pass") if c in frame]
    cols += _ordered([c for c in key_fields(frame) if c not in ("variant", "pass", "options") and c in frame], frame.columns, sort=True)
    cols += [c for c in ("label", "kernel") if c in frame]
    tmp = frame.copy()
    keys = []
    for i, c in enumerate(cols):
        num = pd.to_numeric(tmp[c], errors="coerce")
        k = f"_s{i}"
        tmp[k] = num if num.notna().sum() >= tmp[c].notna().sum() and num.notna().any() else tmp[c].astype(str)
        keys.append(k)
    return tmp.sort_values(keys, kind="stable", na_position="first").drop(columns=keys).reset_index(drop=True)


# --------------------------------------------------------------------------- loading a capture


@dataclass
class Side:
    """What one capture holds for a comparison, every frame keyed (``key``) and still carrying the
    raw range name (``range``) and decoded fields."""

    path: Path
    label: str
    manifest: dict
    #: per range instance (nsys) or benchmark row: ``key``, ``range``, fields, ``ms``
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: per range instance and kernel (nsys) or range and kernel (ncu): ``key``, ``kernel``, ``ms``
    kernel_samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: Nsight Compute per range / per (range, kernel): counters, keyed
    ncu_ranges: pd.DataFrame | None = None
    ncu_kernels: pd.DataFrame | None = None
    #: FLOPs and compulsory bytes per key (work model, else counted)
    work: pd.DataFrame | None = None
    #: Nsight Compute per launch (:func:`nsightlab.analysis.counters.kernel_work`): peaks for the roofline
    ncu_work: pd.DataFrame | None = None
    #: sources that were present but did not load, with why
    problems: list[str] = field(default_factory=list)

    @property
    def sources(self) -> list[str]:
        return [s for s in SOURCES if s in self.samples]

    @property
    def gpu(self) -> str:
        return str((self.manifest.get("gpu") or {}).get("name") or "?")


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["key"] = match_keys(out)
    return out


def _ncu_tables(work: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per range and per (range, kernel): the summed counters of :func:`per_range`, plus time-weighted
    achieved occupancy and the registers and shared memory of the range's main kernel."""
    work = work.copy()
    work.attrs = {}  # pandas deep-copies attrs on every operation: the recipe bookkeeping is not needed here
    rng = per_range(work, by_kernel_if_no_ranges=True)
    rng.attrs = {}
    w = work
    if not (w["range"].fillna("").astype(str) != "").any():
        w["range"] = "kernel " + w["kernel"].astype(str)
        w["variant"] = w["kernel"].astype(str)
    w = w[w["range"].fillna("").astype(str) != ""].copy()
    fields = [c for c in rng.columns if c in w.columns and c in ("range", "schema", *identity_columns(rng))]
    hit_w = w["lts_sectors"] if w["lts_sectors"].notna().all() else w["seconds"]
    w["_hit"] = w["l2_hit_rate"] * hit_w
    w["_hit_w"] = hit_w.where(w["l2_hit_rate"].notna())
    w["_occ"] = w["occupancy"] * w["seconds"]
    w["_occ_w"] = w["seconds"].where(w["occupancy"].notna())
    g = w.groupby(["range", "kernel"], sort=False)
    kern = g[["seconds", "bytes_DRAM", "flop", "_hit", "_hit_w", "_occ", "_occ_w"]].sum(min_count=1)
    kern["launches"] = g.size()
    kern["registers"] = g["registers"].max()
    kern["smem_bytes"] = g["smem_bytes"].max()
    kern = kern.reset_index()
    first = w.drop_duplicates("range").set_index("range")[[c for c in fields if c != "range"]]
    kern = kern.merge(first, left_on="range", right_index=True, how="left")
    kern["l2_hit_rate"] = kern.pop("_hit") / kern.pop("_hit_w")
    kern["occupancy"] = kern.pop("_occ") / kern.pop("_occ_w")
    kern = kern[[*fields, "kernel", *[c for c in kern.columns if c not in fields and c != "kernel"]]]
    occ = w.groupby("range", sort=False)[["_occ", "_occ_w"]].sum(min_count=1)
    rng["occupancy"] = rng["range"].map(occ["_occ"] / occ["_occ_w"])
    main = kern.set_index(["range", "kernel"])
    idx = pd.MultiIndex.from_arrays([rng["range"], rng["main_kernel"]])
    rng["registers"] = main["registers"].reindex(idx).to_numpy()
    rng["smem_bytes"] = main["smem_bytes"].reindex(idx).to_numpy()
    for t in (rng, kern):
        t["ncu_ms"] = t["seconds"] * 1e3
        t["dram_mb"] = t["bytes_DRAM"] / 1e6
        t["dram_gbs"] = t["bytes_DRAM"] / t["seconds"] / 1e9
        t["l2_hit"] = t["l2_hit_rate"]
        t["smem_kib"] = t["smem_bytes"] / 1024
    return _keyed(rng), _keyed(kern)


@functools.lru_cache(maxsize=16)
def _load_cached(path: str, stamp: float, check: bool) -> Side:
    p = Path(path)
    man = validate(p, open_reports=False) if check else load_manifest(p)
    side = Side(p, f"{p.parent.name}/{p.name}", man)
    for files, read in ((ncu_files, _read_ncu), (nsys_files, _read_nsys), (bench_files, _read_bench)):
        if files(p):
            read(side)
    side.work = _work_per_key(side, cases(man))
    if not side.samples and not side.problems:
        side.problems.append("no Nsight Compute report, Nsight Systems export or benchmark CSV")
    return side


def _read_ncu(side: Side) -> None:
    """Nsight Compute: per-launch work, per-range and per-kernel counters, one timing sample per range."""
    try:
        work = kernel_work(load_ncu(side.path, side.manifest))
    except (NotApplicable, ProfileError) as exc:
        side.problems.append(f"Nsight Compute data not used: {exc}")
        return
    side.ncu_work = work
    side.ncu_ranges, side.ncu_kernels = _ncu_tables(work)
    s = side.ncu_ranges[["key", "range", "schema", *key_fields(side.ncu_ranges), "ncu_ms"]].copy()
    side.samples["ncu"] = s.rename(columns={"ncu_ms": "ms"})
    side.kernel_samples["ncu"] = side.ncu_kernels[["key", "range", "kernel", "ncu_ms"]].rename(columns={"ncu_ms": "ms"})


def _read_nsys(side: Side) -> None:
    """Nsight Systems: every measured launch of each range, and of each kernel within it."""
    try:
        t = load_nsys(side.path, side.manifest)
        rt = range_timing(t["kernels"], t["ranges"])
    except (NotApplicable, ProfileError) as exc:
        side.problems.append(f"Nsight Systems data not used: {exc}")
        return
    side.samples["nsys"] = _keyed(rt.rename(columns={"gpu_ms": "ms"}))
    k = t["kernels"]
    k = k[k["range_id"] >= 0]
    ks = k.groupby(["range_id", "kernel"], sort=False)["ms"].sum().reset_index()
    side.kernel_samples["nsys"] = ks.merge(side.samples["nsys"][["range_id", "key", "range"]], on="range_id", how="inner")


#: the timing statistics of a benchmark CSV row (the store's contract, :func:`load_bench`) -> their names here
BENCH_TIMING = {"ms": "ms", "ms_min": "_lo", "ms_max": "_hi", "reps": "_n", "tflops": "_tflops", "gbps": "_gbs"}


def _read_bench(side: Side) -> None:
    df, _ = load_bench(side.path)
    schemas = capture_schemas(side.manifest)
    if not schemas:
        side.problems.append("benchmark CSVs not used: the capture declares no range schema naming the fields of "
                             "their rows")
        return
    side.samples["bench"] = bench_samples(df, schemas)


def bench_samples(df: pd.DataFrame, schemas: Sequence[RangeSchema]) -> pd.DataFrame:
    """Benchmark rows (:func:`nsightlab.store.captures.load_bench`) as keyed samples. What identifies a
    row is the suite, the fields the capture's range schemas name (the implementation as ``variant``)
    and the options; ``config`` (a row's name) labels it. The row's own median / min / max / repeats
    stand for its launches; a row that did not run (``status`` not ok) has no time."""
    b = df.rename(columns={"impl": "variant"})
    fields = [c for c in dict.fromkeys(c for s in schemas for c in s.columns) if c in b]
    b["options"] = b["options"].fillna("").astype(str)
    b["range"] = b["suite"] + "/" + b["config"] + "/" + b["variant"] + "/" + b["pass"] + \
        np.where(b["options"] != "", "/" + b["options"], "")
    b["schema"], b["domain"] = "bench", ""
    for col in BENCH_TIMING:
        if col not in b:
            b[col] = np.nan
    b.loc[b["status"] != "ok", "ms"] = np.nan
    identity = ["suite", *fields, "options"]
    out = b[["range", "domain", "schema", "suite", "config", *fields, "options", "status", *BENCH_TIMING]]
    out = out.rename(columns=BENCH_TIMING)
    out.attrs = {}
    # a benchmark runs each implementation at its default options, so they join the key only where one
    # side ran the same row with several settings (then they tell the rows apart): a kernel whose
    # defaults or option names changed between two runs is still compared with itself
    shape = identity[:-1]
    study = bool(out.duplicated(subset=shape).any())
    out["key"] = ["|".join(sorted(f"{c}={n}" for c in (identity if study else shape) if (n := _norm(r[c])) is not None))
                  for r in out.to_dict("records")]
    return out


def _work_per_key(side: Side, declared: pd.DataFrame) -> pd.DataFrame | None:
    """FLOPs and compulsory bytes per key: the work model's where the capture declares one, else the
    FLOPs Nsight Compute counted."""
    rows = []
    if len(declared):
        for name in ("nsys", "ncu"):
            if name in side.samples:
                s = side.samples[name].drop_duplicates("key")[["key", "range"]]
                m = s.merge(declared[["range", "model_flop", "model_bytes"]], on="range", how="left")
                rows.append(m.rename(columns={"model_flop": "flop", "model_bytes": "bytes"}))
    if side.ncu_ranges is not None:
        c = side.ncu_ranges[["key", "flop"]].assign(bytes=np.nan)
        rows.append(c[c["flop"] > 0])
    if not rows:
        return None
    w = pd.concat(rows, ignore_index=True)
    w = w[w["flop"].notna()].drop_duplicates("key")
    return w[["key", "flop", "bytes"]].reset_index(drop=True)


def load(capture: str | os.PathLike, profiles: str | os.PathLike = PROFILES, *, check: bool = True) -> Side:
    """Load a capture for comparison (cached per folder and manifest time). ``check``: refuse a
    capture whose files fail validation (sizes, checksums): ProfileError saying which."""
    p = resolve(capture, profiles)
    try:
        stamp = (p / "manifest.json").stat().st_mtime if (p / "manifest.json").exists() else 0.0  # none: the loader says so
        return _load_cached(str(p), stamp, check)
    except ProfileError as exc:
        raise ProfileError(f"refusing to compare {p}: {exc}") from None


# --------------------------------------------------------------------------- what differs between the captures


def _ver(text: object) -> str:
    m = re.search(r"(\d+\.\d+(?:\.\d+)*(?:\.\d+)?)", str(text or ""))
    return m.group(1) if m else str(text or "")


def compatibility(base: dict, new: dict) -> list[dict[str, str]]:
    """What differs between two capture manifests that bears on comparing them: GPU, data types,
    Nsight versions, metric sets, clock control, replay modes, tools, driver / CUDA / torch, commit.
    One row per difference: ``aspect``, ``base``, ``new``, ``consequence`` (plain words)."""
    rows: list[dict[str, str]] = []

    def add(aspect: str, a: object, b: object, consequence: str) -> None:
        rows.append({"aspect": aspect, "base": str(a), "new": str(b), "consequence": consequence})

    ga, gb = base.get("gpu") or {}, new.get("gpu") or {}
    if ga.get("name") != gb.get("name"):
        add("GPU", ga.get("name"), gb.get("name"), "different GPUs: every change includes the hardware's (bandwidth, "
            "clocks, L2 size); a GPU-to-GPU comparison, not a code change")
    da = sorted({str(c.get("dtype")) for c in base.get("cases") or [] if isinstance(c, dict) and c.get("dtype")})
    db = sorted({str(c.get("dtype")) for c in new.get("cases") or [] if isinstance(c, dict) and c.get("dtype")})
    if da and db and da != db:
        add("data type", ", ".join(da), ", ".join(db), "ranges of different dtypes do not match (dtype is a key field)")
    _ncu_differences(base.get("ncu") or {}, new.get("ncu") or {}, add)
    _nsys_differences(base.get("nsys") or {}, new.get("nsys") or {}, add)
    ta, tb = sorted(base.get("tools") or []), sorted(new.get("tools") or [])
    if ta != tb:
        add("tools", ", ".join(ta) or "none", ", ".join(tb) or "none", "only what both captured is compared")
    ea, eb = base.get("environment") or {}, new.get("environment") or {}
    for k, name in (("torch", "torch"), ("cuda_runtime", "CUDA runtime")):
        if ea.get(k) and eb.get(k) and ea.get(k) != eb.get(k):
            add(name, ea.get(k), eb.get(k), "library code (SDPA backends, cuDNN) may differ")
    drv_a = (ga.get("nvidia_smi") or {}).get("driver_version")
    drv_b = (gb.get("nvidia_smi") or {}).get("driver_version")
    if drv_a and drv_b and drv_a != drv_b:
        add("driver", drv_a, drv_b, "driver differences can move timings")
    ca, cb = str(base.get("git_commit") or ""), str(new.get("git_commit") or "")
    if ca and cb and ca != cb:
        add("commit", short_commit(ca), short_commit(cb), "the code differs (expected for a before/after comparison)")
    return rows


def _ncu_differences(na: dict, nb: dict, add: Callable[[str, object, object, str], None]) -> None:
    """The Nsight Compute side of :func:`compatibility`: version, metric set, clock control, replay mode."""
    if not (na and nb):
        if na or nb:
            add("Nsight Compute", "yes" if na else "no", "yes" if nb else "no", "one side has no Nsight Compute data: "
                "counters are not compared")
        return
    if _ver(na.get("version")) != _ver(nb.get("version")):
        add("Nsight Compute version", _ver(na.get("version")), _ver(nb.get("version")),
            "metrics may be defined or collected differently; counters marked")
    ma, mb = set(na.get("metrics") or []), set(nb.get("metrics") or [])
    if ma != mb and ma and mb:
        qa, qb = available(ma), available(mb)
        lost = sorted({col for col, (_, _, needs) in COUNTERS.items() for q in needs
                       if q != "smem_dynamic" and bool(qa.get(q)) != bool(qb.get(q))})
        only_a, only_b = sorted(ma - mb), sorted(mb - ma)
        desc = (f"{len(only_a)} metric(s) only in base ({', '.join(only_a[:3])}{', ...' if len(only_a) > 3 else ''}); "
                f"{len(only_b)} only in new ({', '.join(only_b[:3])}{', ...' if len(only_b) > 3 else ''})")
        add("metric set", f"{len(ma)} metrics", f"{len(mb)} metrics",
            desc + ("; not compared: " + ", ".join(COUNTERS[c][0] for c in lost) if lost else
                    "; every compared quantity can still be made on both sides (possibly by different recipes)"))
    if str(na.get("clock_control")) != str(nb.get("clock_control")):
        add("clock control", na.get("clock_control"), nb.get("clock_control"),
            "Nsight Compute durations and rates were taken at different clocks: ncu duration and DRAM bandwidth marked")
    if str(na.get("replay_mode", "kernel")) != str(nb.get("replay_mode", "kernel")):
        add("replay mode", na.get("replay_mode", "kernel"), nb.get("replay_mode", "kernel"),
            "kernel replay restores memory before each pass (caches start cold or warm differently): L2 hit rate, "
            "DRAM traffic and ncu duration marked")


def _nsys_differences(sa: dict, sb: dict, add: Callable[[str, object, object, str], None]) -> None:
    """The Nsight Systems side of :func:`compatibility`: version, measured launches per range."""
    if not (sa and sb):
        return
    if _ver(sa.get("version")) != _ver(sb.get("version")):
        add("Nsight Systems version", _ver(sa.get("version")), _ver(sb.get("version")), "timings from different tool versions")
    if sa.get("iters") != sb.get("iters"):
        add("measured launches per range", sa.get("iters"), sb.get("iters"), "the noise estimates rest on different counts")


def _marks(compat: list[dict[str, str]], base: Side, new: Side) -> dict[str, str]:
    """Counter columns that are shown but not like for like (replay mode, clock control), or not
    compared at all (a side lacks the metrics), with the reason."""
    marks: dict[str, str] = {}
    aspects = {r["aspect"]: r for r in compat}
    if "replay mode" in aspects:
        r = aspects["replay mode"]
        for c in ("l2_hit", "dram_mb", "ncu_ms", "dram_gbs"):
            marks[c] = f"replay modes differ ({r['base']} vs {r['new']})"
    if "clock control" in aspects:
        r = aspects["clock control"]
        for c in ("ncu_ms", "dram_gbs"):
            marks[c] = (marks[c] + "; " if c in marks else "") + f"clock control differs ({r['base']} vs {r['new']})"
    if base.ncu_ranges is not None and new.ncu_ranges is not None:
        for c in COUNTERS:
            lack = [s.label for s in (base, new) if c not in s.ncu_ranges or s.ncu_ranges[c].isna().all()]
            if lack:
                metric = needed_metrics(COUNTERS[c][2][0])[0]
                marks[c] = f"not compared: {' and '.join(lack)} lack{'s' if len(lack) == 1 else ''} {metric}"
    return marks


# --------------------------------------------------------------------------- the comparison itself


def timing_stats(samples: pd.DataFrame) -> pd.DataFrame:
    """Per key: ``ms`` (median), ``lo``/``hi`` (min/max), ``n`` (launches), ``spread`` ((hi−lo)/median,
    NaN for a single launch). Benchmark rows carry their own median / min / max / repeats."""
    if samples.empty:
        return pd.DataFrame(columns=["key", "ms", "lo", "hi", "n", "spread"])
    if {"_lo", "_hi", "_n"} <= set(samples.columns):  # one row per key already (benchmark CSVs)
        out = samples[["key", "ms", "_lo", "_hi", "_n"]].drop_duplicates("key").copy()
        out.columns = ["key", "ms", "lo", "hi", "n"]
    else:
        g = samples.groupby("key", sort=False)["ms"]
        out = pd.DataFrame({"ms": g.median(), "lo": g.min(), "hi": g.max(), "n": g.count()}).reset_index()
    out["n"] = pd.to_numeric(out["n"], errors="coerce")
    out["spread"] = np.where(out["n"] > 1, (out["hi"] - out["lo"]) / out["ms"], np.nan)
    return out


def noise(spread_base: Any, spread_new: Any, floor: float = NOISE_FLOOR, unknown: float = UNKNOWN_NOISE) -> Any:
    """The noise of new/base: both spreads in quadrature, at least ``floor``; ``unknown`` (at least)
    where either side has no spread (a single launch)."""
    a = np.asarray(spread_base, dtype=float)
    b = np.asarray(spread_new, dtype=float)
    both = np.hypot(np.nan_to_num(a), np.nan_to_num(b))
    known = np.isfinite(a) & np.isfinite(b)
    out = np.where(known, np.maximum(floor, both), np.maximum(unknown, both))
    return out if out.ndim else float(out)


def verdict(ratio: Any, noise_: Any, threshold: float) -> Any:
    """'slower' when new/base > 1 + max(threshold, noise), 'faster' when < 1 / (1 + that); else 'below the
    threshold' where it moved beyond the noise (a change measured, too small to count), else 'within noise';
    NaN ratios are 'within noise' (nothing to judge)."""
    r = np.asarray(ratio, dtype=float)
    nz = 1 + np.asarray(noise_, dtype=float)
    bar = np.maximum(1 + threshold, nz)
    beyond_noise = (r > nz) | (r < 1 / nz)
    out = np.where(r > bar, SLOWER, np.where(r < 1 / bar, FASTER, np.where(beyond_noise, BELOW, SAME)))
    return out if out.ndim else str(out)


def delta_rows(base: pd.DataFrame, new: pd.DataFrame, threshold: float, on: Sequence[str] = ("key",),
               floor: float = NOISE_FLOOR, unknown: float = UNKNOWN_NOISE) -> pd.DataFrame:
    """Join two :func:`timing_stats` frames on ``on`` and judge each row: ``base_ms``, ``new_ms``,
    ``ratio`` (new/base), ``change`` (ratio − 1), the spreads, ``noise``, ``noise_known`` and ``verdict``."""
    on = list(on)
    cols = ["ms", "lo", "hi", "n", "spread"]
    b = base[[*on, *cols]].rename(columns={c: f"base_{c}" for c in cols})
    n = new[[*on, *cols]].rename(columns={c: f"new_{c}" for c in cols})
    out = b.merge(n, on=on, how="inner")
    out = out[out["base_ms"].notna() & out["new_ms"].notna() & (out["base_ms"] > 0)].reset_index(drop=True)
    out["ratio"] = out["new_ms"] / out["base_ms"]
    out["change"] = out["ratio"] - 1
    out["noise"] = noise(out["base_spread"], out["new_spread"], floor, unknown) if len(out) else []
    out["noise_known"] = out["base_spread"].notna() & out["new_spread"].notna()
    out["verdict"] = verdict(out["ratio"], out["noise"], threshold) if len(out) else []
    return out


@dataclass
class Comparison:
    base: Side
    new: Side
    threshold: float
    source: str
    #: matched ranges: fields, ``label``, timing deltas and verdict, throughput, counters (``base_*``, ``new_*``)
    ranges: pd.DataFrame
    #: matched (range, kernel) pairs, the same columns
    kernels: pd.DataFrame
    #: ranges on one side only (or without a time on one side): ``side``, ``key``, ``range``, ``label``, ``why``
    unmatched: pd.DataFrame
    compat: list[dict[str, str]]
    marks: dict[str, str]
    notes: list[str]
    only: str = ""
    #: ranges whose base time is below this are judged but do not gate (launch overhead territory)
    min_ms: float = 0.0
    #: the references' moves are drift (:data:`DRIFT`): nothing they run on differs between the captures
    drift: bool = False

    @property
    def references(self) -> pd.DataFrame:
        """The matched ranges of reference implementations (:func:`is_reference`)."""
        return self.ranges[reference_rows(self.ranges)]

    @property
    def under_test(self) -> pd.DataFrame:
        """The matched ranges of the implementations under test (every one but the references)."""
        return self.ranges[~reference_rows(self.ranges)]

    @property
    def regressions(self) -> pd.DataFrame:
        """Matched ranges slower beyond threshold and noise (and at least ``min_ms`` in base): what gates."""
        r = self.ranges[(self.ranges["verdict"] == SLOWER) & (self.ranges["base_ms"] >= self.min_ms)]
        return r.sort_values("change", ascending=False)

    @property
    def exit_status(self) -> int:
        return 1 if len(self.regressions) else 0

    def counts(self) -> dict[str, int]:
        v = self.ranges["verdict"].value_counts()
        return {k: int(v.get(k, 0)) for k in VERDICTS}

    def biggest(self, n: int = 3, judged: bool = True, references: bool = False) -> pd.DataFrame:
        """The ``n`` largest moves by |log(new/base)| of the implementations under test (and of the
        references, with ``references``): among the rows judged faster or slower (``judged``), else
        among all."""
        r = self.ranges if references else self.under_test
        r = r[r["verdict"].isin([SLOWER, FASTER])] if judged else r
        if r.empty:
            return r
        r = r.assign(_m=np.abs(np.log(r["ratio"])))
        return r.sort_values(["_m", "label"], ascending=[False, True]).head(n).drop(columns=["_m"])

    def summary(self) -> str:
        """One line: what was compared, how many faster / slower / below the threshold / within noise, the biggest
        moves."""
        c = self.counts()
        parts = [f"{self.base.label} -> {self.new.label}: {len(self.ranges)} ranges matched ({self.source})",
                 f"{c[FASTER]} faster, {c[SLOWER]} slower, " + (f"{c[BELOW]} below the threshold, " if c[BELOW] else "")
                 + f"{c[SAME]} within noise (threshold {self.threshold:.0%})"
                 + (f", {c[DRIFT]} reference drift" if c[DRIFT] else "")]
        if self.min_ms > 0:
            parts.append(f"{len(self.regressions)} slower at {self.min_ms:g} ms or more (what gates)")
        ob = int((self.unmatched["side"] == "base").sum()) if len(self.unmatched) else 0
        on = int((self.unmatched["side"] == "new").sum()) if len(self.unmatched) else 0
        if ob or on:
            parts.append(f"{ob} only in base, {on} only in new")
        big = self.biggest(3)
        if len(big):
            parts.append("biggest moves: " + ", ".join(f"{r.label} {r.change:+.1%}" for r in big.itertuples()))
        elif len(self.under_test):
            r = next(self.biggest(1, judged=False).itertuples())
            parts.append(f"no range moved beyond its noise and the threshold (largest change: {r.label} {r.change:+.1%})")
        return "; ".join(parts)

    def regression_lines(self) -> list[str]:
        """One line per regression: what, by how much, against which noise and threshold, the times."""
        out = []
        for r in self.regressions.itertuples():
            nz = f"noise ±{r.noise:.1%}" + ("" if r.noise_known else " assumed")
            out.append(f"SLOWER {r.change:+.1%} ({nz}, threshold {self.threshold:.0%}) {r.label}: "
                       f"{r.base_ms:.4g} -> {r.new_ms:.4g} ms  [{r.range_new}]")
        return out

    def facts(self) -> dict[str, Any]:
        """What the comparison found, as plain data (a page's sidecar, a CI job's record)."""
        return {"base": self.base.label, "new": self.new.label, "summary": self.summary(),
                "exit_status": self.exit_status, "threshold": self.threshold, "timing": self.source, "counts": self.counts(), "matched": len(self.ranges),
                "only_base": int((self.unmatched["side"] == "base").sum()) if len(self.unmatched) else 0,
                "only_new": int((self.unmatched["side"] == "new").sum()) if len(self.unmatched) else 0,
                "regressions": [r.label for r in self.regressions.itertuples()],
                "differences": [r["aspect"] for r in self.compat]}


def _filter(frame: pd.DataFrame | None, only: str) -> pd.DataFrame | None:
    if frame is None or not only:
        return frame
    return frame[frame["range"].astype(str).str.contains(only, regex=True)]


def match_pairs(base_keys: pd.DataFrame, new_keys: pd.DataFrame) -> dict[str, str]:
    """new key -> base key: equal decoded fields, then (for what is left) equal raw names."""
    bk, nk = set(base_keys["key"]), set(new_keys["key"])
    pairs = {k: k for k in nk & bk}
    left_b = base_keys[~base_keys["key"].isin(pairs.values())].drop_duplicates("key")
    left_n = new_keys[~new_keys["key"].isin(pairs)].drop_duplicates("key")
    by_name = dict(zip(left_b["range"].astype(str), left_b["key"], strict=True))
    for name, k in zip(left_n["range"].astype(str), left_n["key"], strict=True):
        if name in by_name and by_name[name] not in pairs.values():
            pairs[k] = by_name[name]
    return pairs


def _work_columns(out: pd.DataFrame, side: Side, prefix: str, key_col: str) -> None:
    if side.work is None or out.empty:
        out[f"{prefix}_tflops"] = np.nan
        out[f"{prefix}_gbs"] = out.get(f"{prefix}_gbs", np.nan)
        return
    w = side.work.set_index("key")
    flop = out[key_col].map(w["flop"])
    byt = out[key_col].map(w["bytes"])
    sec = out[f"{prefix}_ms"] / 1e3
    out[f"{prefix}_tflops"] = flop / sec / 1e12
    if f"{prefix}_gbs" not in out or out[f"{prefix}_gbs"].isna().all():
        out[f"{prefix}_gbs"] = byt / sec / 1e9


def compare(base: Side, new: Side, threshold: float | str = DEFAULT_THRESHOLD, only: str = "", *,
            floor: float = NOISE_FLOOR, unknown: float = UNKNOWN_NOISE, min_ms: float = 0.0) -> Comparison:
    """Compare two loaded captures (:func:`load`). ``only``: a regex the raw range names must match;
    ``min_ms``: ranges faster than this in base are judged but do not gate."""
    thr = parse_threshold(threshold) if isinstance(threshold, str) else float(threshold)
    if only:
        try:
            re.compile(only)
        except re.error as exc:
            raise ValueError(f"--only {only!r} is not a regular expression ({exc})") from None
    compat = compatibility(base.manifest, new.manifest)
    common = [s for s in SOURCES if s in base.samples and s in new.samples]
    notes = [*(f"base: {p}" for p in base.problems), *(f"new: {p}" for p in new.problems)]
    if not common:
        raise NotApplicable(f"nothing to compare: base has {', '.join(base.sources) or 'no timing data'}, "
                            f"new has {', '.join(new.sources) or 'no timing data'}")
    source = common[0]
    bs, ns = _filter(base.samples[source], only), _filter(new.samples[source], only)
    pairs = match_pairs(bs, ns)  # new key -> base key
    ns = ns.assign(key=ns["key"].map(lambda k: pairs.get(k, "new-only:" + k)))
    bstat, nstat = timing_stats(bs), timing_stats(ns)
    rows = delta_rows(bstat, nstat, thr, floor=floor, unknown=unknown)
    ranges = pd.concat([_identity(rows["key"], bs, ns).reset_index(), rows.drop(columns="key")], axis=1)
    ranges["source"] = source
    _throughput_columns(ranges, source, base, new, bs, ns, pairs)
    marks = _marks(compat, base, new)
    if base.ncu_ranges is not None and new.ncu_ranges is not None:
        nr = new.ncu_ranges.assign(key=new.ncu_ranges["key"].map(lambda k: pairs.get(k, k)))
        for pre, t in (("base", base.ncu_ranges), ("new", nr)):
            t = t.drop_duplicates("key").set_index("key")
            for c in COUNTERS:
                compared = c in t and not marks.get(c, "").startswith("not compared")
                ranges[f"{pre}_{c}"] = ranges["key"].map(t[c]) if compared else np.nan
    ranges = sort_rows(ranges)
    unmatched = _unmatched(bs, ns, bstat, nstat, set(ranges["key"]))
    kernels = _kernel_rows(base, new, source, pairs, thr, floor, unknown, only, ranges, marks)
    drift = not {r["aspect"] for r in compat} & set(REFERENCE_CHANGES)
    if drift:
        ranges, kernels = with_drift(ranges), with_drift(kernels)
    return Comparison(base, new, thr, source, ranges, kernels, unmatched, compat, marks, notes, only, float(min_ms),
                      drift)


def _identity(keys: pd.Series, bs: pd.DataFrame, ns: pd.DataFrame) -> pd.DataFrame:
    """Per matched key: its fields from the new side (base for what new lacks), the raw names of both
    sides, its ``label`` and ``case`` (:func:`names`)."""
    first_n = ns.drop_duplicates("key").set_index("key")
    first_b = bs.drop_duplicates("key").set_index("key")
    fields = [c for c in dict.fromkeys([*key_fields(first_n.reset_index()), *key_fields(first_b.reset_index())])]
    ident = pd.DataFrame(index=keys)
    for c in ["schema", *fields]:
        vals = first_n.reindex(keys)[c] if c in first_n else pd.Series(np.nan, index=keys)
        if c in first_b:
            vals = vals.where(vals.notna(), first_b.reindex(keys)[c])
        ident[c] = vals.to_numpy()
    ident["range_base"] = first_b.reindex(keys)["range"].to_numpy()
    ident["range_new"] = first_n.reindex(keys)["range"].to_numpy()
    ident["range"] = ident["range_new"].where(ident["range_new"].notna(), ident["range_base"])
    nm = names(ident[["range", "schema", *fields]]) if len(ident) else pd.DataFrame(columns=["label", "case"])
    ident["label"], ident["case"] = nm["label"].to_numpy(), nm["case"].to_numpy()
    return ident


def _throughput_columns(ranges: pd.DataFrame, source: str, base: Side, new: Side, bs: pd.DataFrame, ns: pd.DataFrame,
                        pairs: dict[str, str]) -> None:
    """``base_tflops``, ``new_tflops``, ``base_gbs``, ``new_gbs``: the benchmark's own where it timed the
    ranges, else the work per key (:attr:`Side.work`) over the time."""
    if source == "bench":
        for pre, st in (("base", bs), ("new", ns)):
            t = st.drop_duplicates("key").set_index("key")
            ranges[f"{pre}_tflops"] = ranges["key"].map(t["_tflops"])
            ranges[f"{pre}_gbs"] = ranges["key"].map(t["_gbs"])
        return
    _work_columns(ranges, base, "base", "key")
    new_key = {v: k for k, v in pairs.items()}
    ranges["_nkey"] = ranges["key"].map(lambda k: new_key.get(k, k))
    _work_columns(ranges, new, "new", "_nkey")
    del ranges["_nkey"]


def _unmatched(bs: pd.DataFrame, ns: pd.DataFrame, bstat: pd.DataFrame, nstat: pd.DataFrame,
               matched: set[str]) -> pd.DataFrame:
    """Ranges on one side only: no match, or no time on one side (a skipped benchmark row), with why;
    a benchmark row skipped on both sides is not worth listing."""
    un = []
    for side_name, st, stats, other in (("base", bs, bstat, nstat), ("new", ns, nstat, bstat)):
        times = stats.set_index("key")["ms"]
        for r in st.drop_duplicates("key").to_dict("records"):
            k = r["key"]
            if k in matched:
                continue
            if side_name == "new" and k.startswith("new-only:"):
                why = "no range with these fields (or this name) in base"
            elif side_name == "base" and k not in set(other["key"]):
                why = "no range with these fields (or this name) in new"
            elif not np.isfinite(times.get(k, np.nan)):
                why = f"not timed here ({r.get('status', 'no time')})"
            else:
                why = f"not timed in {'new' if side_name == 'base' else 'base'}"
            un.append({"side": side_name, "key": k, "range": r["range"], "why": why, "variant": r.get("variant"),
                       "pass": r.get("pass")})
    unmatched = pd.DataFrame(un, columns=["side", "key", "range", "why", "variant", "pass"])
    if unmatched.empty:
        unmatched["label"] = []
        return unmatched
    dup = unmatched[unmatched["why"].str.startswith("not timed here")]
    both = set(dup[dup["side"] == "base"]["key"]) & set(dup[dup["side"] == "new"]["key"])
    unmatched = unmatched[~unmatched["key"].isin(both)].reset_index(drop=True)
    unmatched["label"] = unmatched["range"].astype(str)
    return unmatched


def _kernel_rows(base: Side, new: Side, source: str, pairs: dict[str, str], thr: float, floor: float, unknown: float,
                 only: str, ranges: pd.DataFrame, marks: dict[str, str]) -> pd.DataFrame:
    ksrc = source if source in base.kernel_samples and source in new.kernel_samples else (
        "ncu" if "ncu" in base.kernel_samples and "ncu" in new.kernel_samples else None)
    cols = ["key", "kernel", "label", "verdict"]
    if ksrc is None or ranges.empty:
        return pd.DataFrame(columns=cols)
    bk, nk = _filter(base.kernel_samples[ksrc], only), _filter(new.kernel_samples[ksrc], only)
    nk = nk.assign(key=nk["key"].map(lambda k: pairs.get(k, "new-only:" + k)))
    bstat = timing_stats(bk.assign(key=bk["key"] + _KSEP + bk["kernel"].astype(str)))
    nstat = timing_stats(nk.assign(key=nk["key"] + _KSEP + nk["kernel"].astype(str)))
    rows = delta_rows(bstat, nstat, thr, floor=floor, unknown=unknown)
    if rows.empty:
        return pd.DataFrame(columns=cols)
    split = rows["key"].str.split(_KSEP, n=1, expand=True)
    rows.insert(0, "kernel", split[1])
    rows["key"] = split[0]
    lab = ranges.set_index("key")["label"]
    rows.insert(0, "label", rows["key"].map(lab))
    rows.insert(1, "case", rows["key"].map(ranges.set_index("key")["case"]))
    rows = rows[rows["label"].notna()]
    for c in ("variant", "pass"):
        if c in ranges:
            rows[c] = rows["key"].map(ranges.set_index("key")[c])
    rows["source"] = ksrc
    if base.ncu_kernels is not None and new.ncu_kernels is not None:
        nkk = new.ncu_kernels.assign(key=new.ncu_kernels["key"].map(lambda k: pairs.get(k, k)))
        for pre, t in (("base", base.ncu_kernels), ("new", nkk)):
            t = t.drop_duplicates(["key", "kernel"]).set_index(["key", "kernel"])
            idx = pd.MultiIndex.from_arrays([rows["key"], rows["kernel"]])
            for c in COUNTERS:
                ok = c in t and not marks.get(c, "").startswith("not compared")
                rows[f"{pre}_{c}"] = t[c].reindex(idx).to_numpy() if ok else np.nan
            # counted FLOPs over the kernel's time (the timing source's)
            flop = t["flop"].reindex(idx).to_numpy() if "flop" in t else np.nan
            rows[f"{pre}_tflops"] = np.where(np.asarray(flop, dtype=float) > 0, flop / (rows[f"{pre}_ms"] * 1e-3) / 1e12, np.nan)
    order = {k: i for i, k in enumerate(ranges["key"])}
    rows = rows.assign(_o=rows["key"].map(order)).sort_values(["_o", "kernel"], kind="stable")
    return rows.drop(columns="_o").reset_index(drop=True)


def compare_captures(base: str | os.PathLike, new: str | os.PathLike, threshold: float | str = DEFAULT_THRESHOLD,
                     only: str = "", profiles: str | os.PathLike = PROFILES, check: bool = True,
                     min_ms: float = 0.0) -> Comparison:
    """:func:`load` both captures and :func:`compare` them."""
    return compare(load(base, profiles, check=check), load(new, profiles, check=check), threshold, only, min_ms=min_ms)


# --------------------------------------------------------------------------- what a page shows of it


def distribution_rows(cmp: Comparison, n: int = 30) -> pd.DataFrame:
    """Up to ``n`` ranges: the moves furthest beyond their noise (|log(new/base)| / log(1 + noise)),
    those that gate first."""
    r = cmp.ranges
    if r.empty:
        return r
    r = r.assign(_g=r["key"].isin(cmp.regressions["key"]), _m=np.abs(np.log(r["ratio"])) / np.log1p(r["noise"]))
    r = r.sort_values(["_g", "_m", "label"], ascending=[False, False, True]).head(n)
    return r.drop(columns=["_g", "_m"]).reset_index(drop=True)


def kernels(cmp: Comparison) -> pd.DataFrame:
    """The per-kernel rows, or NotApplicable saying why there are none."""
    if len(cmp.kernels):
        return cmp.kernels
    if cmp.source == "bench":
        raise NotApplicable("the benchmark CSVs time whole calls, not kernels: there is no per-kernel comparison")
    raise NotApplicable("no kernel of a matched range was timed on both sides")


def roofline_points(cmp: Comparison, level: str = "DRAM") -> pd.DataFrame:
    """One row per matched range with a base and a new roofline point at ``level``: intensity (FLOP /
    bytes at that level) and FLOP/s over the ncu duration, where the FLOPs are the work model's (useful)
    if the side's cases carry one, else the counted ones (:func:`nsightlab.analysis.roofline.roofline_points`);
    ``basis`` says which."""
    if cmp.base.ncu_ranges is None or cmp.new.ncu_ranges is None:
        raise NotApplicable("the overlaid roofline needs Nsight Compute data on both sides")
    pts = {}
    for pre, side in (("base", cmp.base), ("new", cmp.new)):
        try:
            p = rf.roofline_points(attach_model(side.ncu_ranges, cases(side.manifest) if side.manifest else None))
        except NotApplicable as exc:
            raise NotApplicable(f"{side.label}: {exc}") from None
        p = p[p["level"] == level].drop(columns="key", errors="ignore")
        p = p.merge(side.ncu_ranges[["range", "key"]].drop_duplicates("range"), on="range")
        pts[pre] = p.drop_duplicates("key").set_index("key")
    r = cmp.ranges
    if r.empty:
        raise NotApplicable("no matched range")
    nkey = {v: k for k, v in match_pairs(cmp.base.ncu_ranges, cmp.new.ncu_ranges).items()}
    out = r[["key", "label", *[c for c in ("variant", "pass") if c in r], "verdict", "change"]].copy()
    for pre in ("base", "new"):
        keys = out["key"] if pre == "base" else out["key"].map(lambda k: nkey.get(k, k))
        t = pts[pre]
        out[f"{pre}_x"] = keys.map(t["intensity"]).to_numpy()
        out[f"{pre}_y"] = keys.map(t["flop_per_s"]).to_numpy()
        out[f"{pre}_basis"] = keys.map(t["basis"]).to_numpy() if "basis" in t else "counted"
    out = out.dropna(subset=["base_x", "base_y", "new_x", "new_y"])
    if out.empty:
        raise NotApplicable(f"no matched range has a {level} roofline point on both sides")
    return out.reset_index(drop=True)
