"""Compare two captures: before/after a change, or one GPU against another, with a regression verdict.

    python -m nsightlab.compare BASE NEW [--threshold 5%] [--only REGEX] [--reports OUT]

BASE and NEW are capture folders or ``gpu/name`` labels of the store (``--profiles``, default
``profiles/``). Ranges are matched by their decoded fields (implementation, pass, shape, dtype,
options: a renamed or reordered range name still matches), foreign captures' ranges (no schema) by
their raw names; ranges on one side only are listed, never dropped.

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
noise*. The exit status is 1 when any matched range is slower (kernels are reported, ranges gate: a
kernel that slows while its range does not is no regression of the workload), 2 for bad input.

The comparison refuses captures that fail validation (checksums) and says when the two differ in
GPU, metric set, tool versions, clock control or replay mode; it compares what is comparable and
marks the rest (:attr:`Comparison.marks`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.counters import NotApplicable, identity_columns, kernel_work, per_range
from ..core.errors import ProfileError
from ..store.captures import gpu_slug, list_captures, load_bench, load_manifest, validate

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "compare.ipynb"

#: default regression threshold (relative change of the time)
DEFAULT_THRESHOLD = 0.05
#: the least noise assumed for a range timed over repeated launches (clock and thermal drift between
#: two captures that a few back-to-back launches do not show)
NOISE_FLOOR = 0.01
#: the noise assumed where a side has a single launch (Nsight Compute only): unknown, so this
UNKNOWN_NOISE = 0.03

_KSEP = " ::kernel:: "
SLOWER, FASTER, SAME = "slower", "faster", "within noise"
VERDICTS = (SLOWER, FASTER, SAME)
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


#: the order fields are named and sorted in (the usual sweep field, N, last); others by name, before N
_FIELD_ORDER = ("suite", "config", "dtype", "causal", "B", "H", "Hkv", "D", "Nk", "N")


#: the order rows are sorted in: shape fields before the sweep field N, the batch (which a constant-work sweep
#: varies against N) and a benchmark configuration's name after it
_SORT_ORDER = ("suite", "dtype", "D", "causal", "Hkv", "Nk", "N", "B", "H", "config")


def _ordered(fields: Iterable[str], order_of: Sequence[str] = _FIELD_ORDER) -> list[str]:
    order = {c: i for i, c in enumerate(order_of)}
    last = order.get("N", len(order_of))
    return sorted(fields, key=lambda c: (order.get(c, last - 0.5), c))


def names(frame: pd.DataFrame) -> pd.DataFrame:
    """``label`` (implementation and pass, then only the fields that vary within ``frame``:
    ``flash_mma backward D=128 N=4096``) and ``case`` (the same without implementation and pass) per
    row; options only where they tell two rows apart; foreign ranges: the raw name."""
    from ..analysis.counters import option_columns

    fields = [c for c in key_fields(frame) if c not in ("variant", "pass", "options", *option_columns(frame))]
    varying = [c for c in fields if frame[c].map(_norm).nunique(dropna=True) > 1]
    if "config" in varying:  # a benchmark configuration's name spells its shape
        varying = [c for c in varying if c not in ("B", "H", "Hkv", "N", "Nk", "D", "causal")]
    varying = _ordered(varying)
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


def labels(frame: pd.DataFrame) -> pd.Series:
    """The ``label`` of :func:`names`."""
    return names(frame)["label"]


def sort_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in reading order: implementation, pass, then the fields in :data:`_FIELD_ORDER` (N last)."""
    if frame.empty:
        return frame
    cols = [c for c in ("variant", "pass") if c in frame]
    cols += _ordered([c for c in key_fields(frame) if c not in ("variant", "pass", "options") and c in frame], _SORT_ORDER)
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


def resolve(capture: str | os.PathLike, profiles: str | os.PathLike = REPO / "profiles") -> Path:
    """A capture folder: ``capture`` itself if it is a folder (relative to the working directory, then
    the repository), else the store label ``gpu/name`` under ``profiles``. ProfileError listing the
    known labels otherwise."""
    p = Path(capture).expanduser()
    for cand in (p, REPO / p, Path(profiles) / p):
        if cand.is_dir():
            return cand.resolve()
    try:
        known = ", ".join(c.label for c in list_captures(Path(profiles)))
    except ProfileError:
        known = f"none ({profiles} does not exist)"
    raise ProfileError(f"{capture}: neither a capture folder nor a label under {profiles} (known: {known})")


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
    from ..analysis import timeline
    from . import page as nb

    p = Path(path)
    man = validate(p, open_reports=False) if check else load_manifest(p)
    label = f"{p.parent.name}/{p.name}"
    side = Side(p, label, man)
    cases = nb.capture_cases(man)
    if nb.ncu_files(p):
        try:
            work = kernel_work(nb.load_ncu(p, man))
            side.ncu_work = work
            side.ncu_ranges, side.ncu_kernels = _ncu_tables(work)
            s = side.ncu_ranges[["key", "range", "schema", *key_fields(side.ncu_ranges), "ncu_ms"]].copy()
            side.samples["ncu"] = s.rename(columns={"ncu_ms": "ms"})
            side.kernel_samples["ncu"] = side.ncu_kernels[["key", "range", "kernel", "ncu_ms"]].rename(columns={"ncu_ms": "ms"})
        except (NotApplicable, ProfileError) as exc:
            side.problems.append(f"Nsight Compute data not used: {exc}")
    if nb.nsys_files(p):
        try:
            t = nb.load_nsys(p, man)
            rt = timeline.range_timing(t["kernels"], t["ranges"])
            side.samples["nsys"] = _keyed(rt.rename(columns={"gpu_ms": "ms"}))
            k = t["kernels"]
            k = k[k["range_id"] >= 0]
            ks = k.groupby(["range_id", "kernel"], sort=False)["ms"].sum().reset_index()
            ks = ks.merge(side.samples["nsys"][["range_id", "key", "range"]], on="range_id", how="inner")
            side.kernel_samples["nsys"] = ks
        except (NotApplicable, ProfileError) as exc:
            side.problems.append(f"Nsight Systems data not used: {exc}")
    if nb.bench_files(p):
        df, _ = load_bench(p)
        b = df.rename(columns={"impl": "variant"}).copy()
        b["options"] = b["options"].fillna("").astype(str)
        b["range"] = b["suite"] + "/" + b["config"] + "/" + b["variant"] + "/" + b["pass"] + \
            np.where(b["options"] != "", "/" + b["options"], "")
        b["schema"] = "bench"
        b["domain"] = ""
        b["_lo"], b["_hi"], b["_n"] = b["ms_min"], b["ms_max"], b["reps"]
        b.loc[b["status"] != "ok", "ms"] = np.nan
        b["_tflops"] = b.pop("tflops")
        b["_gbs"] = b["gbps"] if "gbps" in b else np.nan
        b = b.drop(columns=["kind", "ms_min", "ms_max", "reps", "gbps", "peak_mem_mb", "max_abs", "mean_abs", "mse",
                            "max_rel", "rel_l2"], errors="ignore")
        b = b[[c for c in b.columns if not c.startswith("speed_vs_")]]
        keep = ["range", "domain", "schema", "suite", "config", "variant", "pass", "B", "H", "Hkv", "N", "Nk", "D", "dtype",
                "causal", "options"]
        b = b[[*keep, *[c for c in b.columns if c not in keep]]]
        b.attrs = {}
        bk = b.copy()
        # the configuration's name is a label of its shape, not part of it; a benchmark runs each
        # implementation at its default options, so they join the key only where one side ran the same
        # row with several settings (then they tell the rows apart): a kernel whose defaults or option
        # names changed between two runs is still compared with itself
        fields = [c for c in keep[3:] if c != "config"]
        shape = [c for c in fields if c != "options"]
        study = bool(bk.duplicated(subset=[c for c in shape if c in bk]).any())
        bk["key"] = ["|".join(sorted(f"{c}={n}" for c in (fields if study else shape) if (n := _norm(r[c])) is not None))
                     for _, r in b.iterrows()]
        side.samples["bench"] = bk
    # work per key: the model's FLOPs and compulsory bytes where the capture declares them, else counted FLOPs
    work_rows = []
    if len(cases):
        for name in ("nsys", "ncu"):
            if name in side.samples:
                s = side.samples[name].drop_duplicates("key")[["key", "range"]]
                m = s.merge(cases[["range", "model_flop", "model_bytes"]], on="range", how="left")
                work_rows.append(m.rename(columns={"model_flop": "flop", "model_bytes": "bytes"}))
    if side.ncu_ranges is not None:
        c = side.ncu_ranges[["key", "flop"]].assign(bytes=np.nan)
        work_rows.append(c[c["flop"] > 0])
    if work_rows:
        w = pd.concat(work_rows, ignore_index=True)
        w = w[w["flop"].notna()].drop_duplicates("key")
        side.work = w[["key", "flop", "bytes"]].reset_index(drop=True)
    if not side.samples and not side.problems:
        side.problems.append("no Nsight Compute report, Nsight Systems export or benchmark CSV")
    return side


def load(capture: str | os.PathLike, profiles: str | os.PathLike = REPO / "profiles", *, check: bool = True) -> Side:
    """Load a capture for comparison (cached per folder and manifest time). ``check``: refuse a
    capture whose files fail validation (sizes, checksums): ProfileError saying which."""
    p = resolve(capture, profiles)
    try:
        return _load_cached(str(p), (p / "manifest.json").stat().st_mtime, check)
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
    na, nb_ = base.get("ncu") or {}, new.get("ncu") or {}
    if na and nb_:
        if _ver(na.get("version")) != _ver(nb_.get("version")):
            add("Nsight Compute version", _ver(na.get("version")), _ver(nb_.get("version")),
                "metrics may be defined or collected differently; counters marked")
        ma, mb = set(na.get("metrics") or []), set(nb_.get("metrics") or [])
        if ma != mb and ma and mb:
            from ..analysis.counters import available

            qa, qb = available(ma), available(mb)
            lost = sorted({col for col, (_, _, needs) in COUNTERS.items() for q in needs
                           if q != "smem_dynamic" and bool(qa.get(q)) != bool(qb.get(q))})
            only_a, only_b = sorted(ma - mb), sorted(mb - ma)
            desc = (f"{len(only_a)} metric(s) only in base ({', '.join(only_a[:3])}{', ...' if len(only_a) > 3 else ''}); "
                    f"{len(only_b)} only in new ({', '.join(only_b[:3])}{', ...' if len(only_b) > 3 else ''})")
            add("metric set", f"{len(ma)} metrics", f"{len(mb)} metrics",
                desc + ("; not compared: " + ", ".join(COUNTERS[c][0] for c in lost) if lost else
                        "; every compared quantity can still be made on both sides (possibly by different recipes)"))
        if str(na.get("clock_control")) != str(nb_.get("clock_control")):
            add("clock control", na.get("clock_control"), nb_.get("clock_control"),
                "Nsight Compute durations and rates were taken at different clocks: ncu duration and DRAM bandwidth marked")
        if str(na.get("replay_mode", "kernel")) != str(nb_.get("replay_mode", "kernel")):
            add("replay mode", na.get("replay_mode", "kernel"), nb_.get("replay_mode", "kernel"),
                "kernel replay restores memory before each pass (caches start cold or warm differently): L2 hit rate, "
                "DRAM traffic and ncu duration marked")
    elif na or nb_:
        add("Nsight Compute", "yes" if na else "no", "yes" if nb_ else "no", "one side has no Nsight Compute data: "
            "counters are not compared")
    sa, sb = base.get("nsys") or {}, new.get("nsys") or {}
    if sa and sb:
        if _ver(sa.get("version")) != _ver(sb.get("version")):
            add("Nsight Systems version", _ver(sa.get("version")), _ver(sb.get("version")), "timings from different tool versions")
        if sa.get("iters") != sb.get("iters"):
            add("measured launches per range", sa.get("iters"), sb.get("iters"), "the noise estimates rest on different counts")
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
        add("commit", ca[:12], cb[:12], "the code differs (expected for a before/after comparison)")
    return rows


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
                from ..analysis.counters import needed_metrics

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
    """'slower' when new/base > 1 + max(threshold, noise), 'faster' when < 1 / (1 + that), else
    'within noise'; NaN ratios are 'within noise' (nothing to judge)."""
    r = np.asarray(ratio, dtype=float)
    bar = 1 + np.maximum(threshold, np.asarray(noise_, dtype=float))
    out = np.where(r > bar, SLOWER, np.where(r < 1 / bar, FASTER, SAME))
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

    def biggest(self, n: int = 3, judged: bool = True) -> pd.DataFrame:
        """The ``n`` largest moves by |log(new/base)|: among the rows judged faster or slower
        (``judged``), else among all."""
        r = self.ranges[self.ranges["verdict"] != SAME] if judged else self.ranges
        if r.empty:
            return r
        r = r.assign(_m=np.abs(np.log(r["ratio"])))
        return r.sort_values(["_m", "label"], ascending=[False, True]).head(n).drop(columns=["_m"])

    def summary(self) -> str:
        """One line: what was compared, how many faster / slower / within noise, the biggest moves."""
        c = self.counts()
        parts = [f"{self.base.label} -> {self.new.label}: {len(self.ranges)} ranges matched ({self.source})",
                 f"{c[FASTER]} faster, {c[SLOWER]} slower, {c[SAME]} within noise (threshold {self.threshold:.0%})"]
        if self.min_ms > 0:
            parts.append(f"{len(self.regressions)} slower at {self.min_ms:g} ms or more (what gates)")
        ob = int((self.unmatched["side"] == "base").sum()) if len(self.unmatched) else 0
        on = int((self.unmatched["side"] == "new").sum()) if len(self.unmatched) else 0
        if ob or on:
            parts.append(f"{ob} only in base, {on} only in new")
        big = self.biggest(3)
        if len(big):
            parts.append("biggest moves: " + ", ".join(f"{r.label} {r.change:+.1%}" for r in big.itertuples()))
        elif len(self.ranges):
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

    def sidecar(self, title: str, html_name: str) -> dict[str, Any]:
        return {"base": self.base.label, "new": self.new.label, "title": title, "html": html_name,
                "summary": self.summary(), "exit_status": self.exit_status, "threshold": self.threshold,
                "timing": self.source, "counts": self.counts(), "matched": len(self.ranges),
                "only_base": int((self.unmatched["side"] == "base").sum()) if len(self.unmatched) else 0,
                "only_new": int((self.unmatched["side"] == "new").sum()) if len(self.unmatched) else 0,
                "regressions": [r.label for r in self.regressions.itertuples()],
                "differences": [r["aspect"] for r in self.compat]}


def _filter(frame: pd.DataFrame | None, only: str) -> pd.DataFrame | None:
    if frame is None or not only:
        return frame
    return frame[frame["range"].astype(str).str.contains(only, regex=True)]


def _match(base_keys: pd.DataFrame, new_keys: pd.DataFrame) -> dict[str, str]:
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
    pairs = _match(bs, ns)  # new key -> base key
    ns = ns.assign(key=ns["key"].map(lambda k: pairs.get(k, "new-only:" + k)))
    bstat, nstat = timing_stats(bs), timing_stats(ns)
    rows = delta_rows(bstat, nstat, thr, floor=floor, unknown=unknown)
    # identity: fields from the new side (base for what new lacks), raw names from both
    first_n = ns.drop_duplicates("key").set_index("key")
    first_b = bs.drop_duplicates("key").set_index("key")
    fields = [c for c in dict.fromkeys([*key_fields(first_n.reset_index()), *key_fields(first_b.reset_index())])]
    ident = pd.DataFrame(index=rows["key"])
    for c in ["schema", *fields]:
        vals = first_n.reindex(rows["key"])[c] if c in first_n else pd.Series(np.nan, index=rows["key"])
        if c in first_b:
            vals = vals.where(vals.notna(), first_b.reindex(rows["key"])[c])
        ident[c] = vals.to_numpy()
    ident["range_base"] = first_b.reindex(rows["key"])["range"].to_numpy()
    ident["range_new"] = first_n.reindex(rows["key"])["range"].to_numpy()
    ident["range"] = ident["range_new"].where(ident["range_new"].notna(), ident["range_base"])
    nm = names(ident[["range", "schema", *fields]]) if len(ident) else pd.DataFrame(columns=["label", "case"])
    ident["label"], ident["case"] = nm["label"].to_numpy(), nm["case"].to_numpy()
    ranges = pd.concat([ident.reset_index(), rows.drop(columns="key")], axis=1)
    ranges["source"] = source
    if source == "bench":
        for pre, st in (("base", bs), ("new", ns)):
            t = st.drop_duplicates("key").set_index("key")
            ranges[f"{pre}_tflops"] = ranges["key"].map(t["_tflops"])
            ranges[f"{pre}_gbs"] = ranges["key"].map(t["_gbs"])
    else:
        _work_columns(ranges, base, "base", "key")
        new_key = {v: k for k, v in pairs.items()}
        ranges["_nkey"] = ranges["key"].map(lambda k: new_key.get(k, k))
        _work_columns(ranges, new, "new", "_nkey")
    # counters (Nsight Compute on both sides)
    marks = _marks(compat, base, new)
    has_ncu = base.ncu_ranges is not None and new.ncu_ranges is not None
    if has_ncu:
        nr = new.ncu_ranges.assign(key=new.ncu_ranges["key"].map(lambda k: pairs.get(k, k)))
        for pre, t in (("base", base.ncu_ranges), ("new", nr)):
            t = t.drop_duplicates("key").set_index("key")
            for c in COUNTERS:
                ranges[f"{pre}_{c}"] = ranges["key"].map(t[c]) if c in t and not marks.get(c, "").startswith("not compared") \
                    else np.nan
    ranges = ranges.drop(columns=[c for c in ("_nkey",) if c in ranges])
    ranges = sort_rows(ranges)
    # one side only: no match, or no time on one side (a skipped benchmark row)
    un = []
    matched = set(ranges["key"])
    for side_name, st, stats in (("base", bs, bstat), ("new", ns, nstat)):
        first = st.drop_duplicates("key")
        for r in first.to_dict("records"):
            k = r["key"]
            if k in matched:
                continue
            other = nstat if side_name == "base" else bstat
            t = stats.set_index("key")["ms"].get(k, np.nan)
            if side_name == "new" and k.startswith("new-only:"):
                why = "no range with these fields (or this name) in base"
            elif side_name == "base" and k not in set(other["key"]):
                why = "no range with these fields (or this name) in new"
            elif not np.isfinite(t):
                why = f"not timed here ({r.get('status', 'no time')})"
            else:
                why = f"not timed in {'new' if side_name == 'base' else 'base'}"
            un.append({"side": side_name, "key": k, "range": r["range"], "why": why, "variant": r.get("variant"),
                       "pass": r.get("pass")})
    unmatched = pd.DataFrame(un, columns=["side", "key", "range", "why", "variant", "pass"])
    # a benchmark row skipped on both sides is not worth listing
    if len(unmatched):
        dup = unmatched[unmatched["why"].str.startswith("not timed here")]
        both = set(dup[dup["side"] == "base"]["key"]) & set(dup[dup["side"] == "new"]["key"])
        unmatched = unmatched[~unmatched["key"].isin(both)].reset_index(drop=True)
        unmatched["label"] = unmatched["range"].astype(str)
    else:
        unmatched["label"] = []
    kernels = _kernel_rows(base, new, source, pairs, thr, floor, unknown, only, ranges, marks)
    return Comparison(base, new, thr, source, ranges, kernels, unmatched, compat, marks, notes, only, float(min_ms))


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
                     only: str = "", profiles: str | os.PathLike = REPO / "profiles", check: bool = True,
                     min_ms: float = 0.0) -> Comparison:
    """:func:`load` both captures and :func:`compare` them."""
    return compare(load(base, profiles, check=check), load(new, profiles, check=check), threshold, only, min_ms=min_ms)


# --------------------------------------------------------------------------- tables and figures for the page


def fmt_num(v: Any, digits: int = 3) -> str:
    """A number for people: 3 significant digits, thousands separated, '—' for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    v = float(v)
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    if mag >= digits - 1:
        return f"{v:,.0f}"
    return f"{v:,.{max(0, digits - 1 - mag)}f}"


def fmt_change(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:+.1%}"


def delta_table(rows: pd.DataFrame, marks: dict[str, str] | None = None, part: str = "all",
                what: str = "range", grouped: bool = True) -> pd.DataFrame:
    """The per-row table for the page: time base → new with change, noise and verdict, throughput,
    effective bandwidth, and the counters (``base → new``), units in the headers, numbers formatted.
    Columns marked (not like for like) carry a † in the header. ``part``: "timing" (time, verdict,
    throughput), "counters" (Nsight Compute) or "all". ``grouped``: the rows are one implementation
    and pass (a group of :func:`groups`), so ranges are named by their case alone."""
    marks = marks or {}
    out = pd.DataFrame(index=rows.index)
    if what == "range":
        out["range"] = rows["case"] if "case" in rows and grouped else rows["label"]
    else:
        out["kernel"] = rows["kernel"]
    if part in ("timing", "all"):
        out["base [ms]"] = rows["base_ms"].map(fmt_num)
        out["new [ms]"] = rows["new_ms"].map(fmt_num)
        out["change"] = rows["change"].map(fmt_change)
        out["noise"] = [("±" + f"{n:.1%}" + ("" if k else "*")) for n, k in zip(rows["noise"], rows["noise_known"], strict=True)]
        out["verdict"] = rows["verdict"]

    def pair(col: str) -> pd.Series | None:
        b, n = rows.get(f"base_{col}"), rows.get(f"new_{col}")
        if b is None or n is None or (b.isna().all() and n.isna().all()):
            return None
        f = (lambda v: "—" if pd.isna(v) else f"{v:.0f}") if col == "registers" else fmt_num
        return pd.Series([f"{f(x)} → {f(y)}" for x, y in zip(b, n, strict=True)], index=rows.index)

    for col, (name, unit) in (("tflops", TIMING["tflops"]), ("gbs", TIMING["gbs"])):
        s = pair(col)
        if s is not None and part in ("timing", "all"):
            out[f"{name} [{unit}]"] = s
    if part in ("counters", "all"):
        for col, (name, unit, _) in COUNTERS.items():
            if marks.get(col, "").startswith("not compared"):
                continue
            s = pair(col)
            if s is not None:
                out[f"{name}{f' [{unit}]' if unit else ''}{' †' if col in marks else ''}"] = s
    return out.reset_index(drop=True)


def groups(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Rows split by implementation and pass (the page's per-range tables), in label order."""
    if rows.empty:
        return []
    keys = [c for c in ("variant", "pass") if c in rows and rows[c].notna().any()]
    if not keys:
        return [("all ranges", rows)]
    out = []
    for k, g in rows.groupby([rows[c].fillna("—").astype(str) for c in keys], sort=True):
        name = " ".join(k) if isinstance(k, tuple) else str(k)
        out.append((name, g))
    return out


def open_groups(rows: pd.DataFrame, most: int = 4) -> set[str]:
    """The :func:`groups` a page shows unfolded: those with a range that is slower; if none, those with
    a range that is faster, when there are at most ``most`` of them (else the reader unfolds them)."""
    gs = groups(rows)
    slow = {n for n, g in gs if (g["verdict"] == SLOWER).any()}
    if slow:
        return slow
    fast = {n for n, g in gs if (g["verdict"] == FASTER).any()}
    return fast if len(fast) <= most else set()


def html_table(df: pd.DataFrame, name: str, verdict_col: str = "verdict", wrap: bool = False) -> str:
    """A formatted table as HTML with a fixed element id (same data, same bytes), verdicts coloured;
    numbers never wrap (``wrap``: text columns may)."""
    import hashlib

    uid = re.sub(r"[^A-Za-z0-9_-]+", "-", name) + "-" + hashlib.sha256(df.to_csv().encode()).hexdigest()[:8]
    colors = {SLOWER: "background-color:#fbe3e3;color:#8a1c1c", FASTER: "background-color:#e2f3e4;color:#1d5e2a"}
    sty = df.style.set_uuid(uid).hide(axis="index")
    if verdict_col in df:
        sty = sty.map(lambda v: colors.get(v, "color:#666"), subset=[verdict_col])
    td = "text-align:left;padding:2px 8px;vertical-align:top" if wrap else "text-align:right;padding:2px 8px;white-space:nowrap"
    sty = sty.set_table_styles([{"selector": "td", "props": td},
                                {"selector": "td:first-child", "props": "text-align:left"},
                                {"selector": "th", "props": "padding:2px 8px;text-align:center"}])
    return sty.to_html()


def details(summary: str, body: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>\n{body}\n</details>"


def headline(cmp: Comparison) -> str:
    """The page's opening paragraph (Markdown): counts, what gates, the biggest moves each way."""
    c = cmp.counts()
    n = len(cmp.ranges)
    lines = [f"**{n} ranges matched** ({SOURCE_TEXT[cmp.source]}): **{c[SLOWER]} slower**, **{c[FASTER]} faster**, "
             f"{c[SAME]} within noise, at a threshold of {cmp.threshold:.0%} on the time."]
    ob = int((cmp.unmatched["side"] == "base").sum()) if len(cmp.unmatched) else 0
    on = int((cmp.unmatched["side"] == "new").sum()) if len(cmp.unmatched) else 0
    if ob or on:
        lines.append(f"{ob} range(s) only in base and {on} only in new are listed at the end.")
    gate = cmp.regressions
    gate_text = (f"**Gate: fails** ({len(gate)} range(s) slower beyond threshold and noise: exit status 1 of "
                 if len(gate) else "**Gate: passes** (no range slower beyond threshold and noise: exit status 0 of ")
    lines.append(gate_text + "`python -m nsightlab.compare`)"
                 + (f"; ranges under {cmp.min_ms:g} ms in base do not gate" if cmp.min_ms else "") + ".")
    for what, sign, name in ((SLOWER, 1, "Largest slowdowns"), (FASTER, -1, "Largest speed-ups")):
        r = cmp.ranges[cmp.ranges["verdict"] == what]
        if len(r):
            r = r.assign(_m=sign * np.log(r["ratio"])).sort_values(["_m", "label"], ascending=[False, True]).head(5)
            moves = "; ".join(f"{x.label} {x.change:+.1%} ({fmt_num(x.base_ms)} → {fmt_num(x.new_ms)} ms)" for x in r.itertuples())
            lines.append(f"{name}: {moves}.")
    if not len(cmp.ranges[cmp.ranges["verdict"] != SAME]) and n:
        r = next(cmp.biggest(1, judged=False).itertuples())
        lines.append(f"Nothing moved beyond its noise and the threshold; the largest change is {r.label} {r.change:+.1%}.")
    return "\n\n".join(lines)


def summary_html(cmp: Comparison) -> str:
    """The one-line summary the command line prints, for the page (and the index)."""
    import html

    return f'<p class="compare-summary"><b>In one line</b> (as printed by the command line): {html.escape(cmp.summary())}</p>'


def verdicts_by(cmp: Comparison, by: str = "time") -> pd.DataFrame:
    """How many ranges are faster / slower / within noise, by base time (``time``: < 0.1 ms, 0.1–1 ms,
    1–10 ms, ≥ 10 ms) or by implementation and pass (``impl``)."""
    r = cmp.ranges
    if r.empty:
        return pd.DataFrame(columns=list(VERDICTS))
    if by == "time":
        edges = [0, 0.1, 1, 10, np.inf]
        names = ["< 0.1 ms", "0.1 – 1 ms", "1 – 10 ms", "≥ 10 ms"]
        g = pd.cut(r["base_ms"], edges, labels=names, right=False)
        key: Any = g
    else:
        cols = [c for c in ("variant", "pass") if c in r and r[c].notna().any()]
        key = [r[c].fillna("—").astype(str) for c in cols] if cols else pd.Series("all", index=r.index)
    t = pd.crosstab(key, r["verdict"]).reindex(columns=list(VERDICTS), fill_value=0)
    t["median change"] = r.groupby(key, observed=False)["change"].median().map(fmt_change)
    t.columns.name = None
    return t


def compat_table(cmp: Comparison) -> pd.DataFrame:
    """The differences between the two captures, for the page."""
    return pd.DataFrame(cmp.compat, columns=["aspect", "base", "new", "consequence"])


def caveats(cmp: Comparison) -> list[str]:
    """Plain sentences: the timing source, notes (a source not used, unknown noise) and marked columns."""
    out = [f"Timing: {SOURCE_TEXT[cmp.source]}."]
    out += [n[0].upper() + n[1:] + ("" if n.endswith(".") else ".") for n in cmp.notes]
    for col, why in cmp.marks.items():
        out.append(f"{COUNTERS[col][0]}{'' if why.startswith('not compared') else ' †'}: {why}.")
    if cmp.base.ncu_ranges is None or cmp.new.ncu_ranges is None:
        out.append("No counters compared: " + " and ".join(s.label for s in (cmp.base, cmp.new) if s.ncu_ranges is None)
                   + " holds no Nsight Compute data.")
    return out


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


def profiles_dir(text: str | os.PathLike) -> Path:
    """A profiles folder given relative to the working directory, else to the repository."""
    p = Path(text).expanduser()
    return p if p.is_dir() or p.is_absolute() else REPO / p


def _style(names: Iterable[str]) -> dict[str, dict[str, str]]:
    from .figures import style_for

    return style_for(sorted({str(n) for n in names if n is not None and str(n) != "nan"}))


def style(cmp: Comparison) -> dict[str, dict[str, str]]:
    """One colour and marker per implementation of the comparison, the same in every figure of the page."""
    names = [*cmp.ranges.get("variant", pd.Series(dtype=str)), *cmp.unmatched.get("variant", pd.Series(dtype=str))]
    return _style(names)


def change_figure(cmp: Comparison, title: str = "") -> Any:
    """Every matched range: new/base time (log axis, so 2× slower and 2× faster are equally far from 1)
    against its base time, coloured by implementation, ▲ slower / ▼ faster; bars: the noise; the
    grey band: the threshold."""
    import plotly.graph_objects as go

    from .figures import TEMPLATE, message

    r = cmp.ranges
    if r.empty:
        return message("no matched range", title)
    st = style(cmp)
    fig = go.Figure()
    for name, g in r.groupby(r.get("variant", pd.Series("range", index=r.index)).astype(str), sort=True):
        s = st.get(name, {"color": "#444", "symbol": "circle"})
        sym = [s["symbol"] if v == SAME else ("triangle-up" if v == SLOWER else "triangle-down") for v in g["verdict"]]
        fig.add_trace(go.Scatter(
            x=g["base_ms"], y=g["ratio"], mode="markers", name=name,
            marker={"color": s["color"], "symbol": sym, "size": [6 if v == SAME else 10 for v in g["verdict"]],
                    "line": {"width": 0}},
            error_y={"type": "data", "symmetric": False, "array": g["ratio"] * g["noise"],
                     "arrayminus": g["ratio"] * (1 - 1 / (1 + g["noise"])), "thickness": 0.8, "width": 0,
                     "color": s["color"]},
            hovertext=[f"{lab}<br>{b:.4g} → {n:.4g} ms ({c:+.1%}, noise ±{nz:.1%})<br>{v}"
                       for lab, b, n, c, nz, v in zip(g["label"], g["base_ms"], g["new_ms"], g["change"], g["noise"],
                                                      g["verdict"], strict=True)],
            hoverinfo="text"))
    fig.add_hrect(y0=1 / (1 + cmp.threshold), y1=1 + cmp.threshold, fillcolor="#888", opacity=0.12, line_width=0)
    fig.add_hline(y=1, line={"color": "#666", "width": 1})
    lo, hi = float(r["ratio"].min()), float(r["ratio"].max())
    span = max(1 / lo, hi, 1 + 2 * cmp.threshold) * 1.15
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 0.95, 1, 1.05, 1.1, 1.25, 1.5, 2, 3, 4) if 1 / span <= t <= span]
    fig.update_xaxes(type="log", title=f"base time [ms] ({cmp.base.label})")
    fig.update_yaxes(type="log", title="new time / base time (above 1: slower)", range=[-math.log10(span), math.log10(span)],
                     tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks])
    fig.update_layout(title=title, template=TEMPLATE, height=480, legend={"title": "implementation"})
    return fig


def roofline_points(cmp: Comparison, level: str = "DRAM") -> pd.DataFrame:
    """One row per matched range with a base and a new roofline point at ``level``: intensity (counted
    FLOP / bytes at that level) and FLOP/s (counted FLOP / ncu duration), as Nsight Compute measured them."""
    from ..analysis import roofline as rf

    if cmp.base.ncu_ranges is None or cmp.new.ncu_ranges is None:
        raise NotApplicable("the overlaid roofline needs Nsight Compute data on both sides")
    pts = {}
    for pre, side in (("base", cmp.base), ("new", cmp.new)):
        try:
            p = rf.roofline_points(side.ncu_ranges)
        except NotApplicable as exc:
            raise NotApplicable(f"{side.label}: {exc}") from None
        p = p[p["level"] == level].drop(columns="key", errors="ignore")
        p = p.merge(side.ncu_ranges[["range", "key"]].drop_duplicates("range"), on="range")
        pts[pre] = p.drop_duplicates("key").set_index("key")
    r = cmp.ranges
    if r.empty:
        raise NotApplicable("no matched range")
    nkey = {v: k for k, v in _match(cmp.base.ncu_ranges, cmp.new.ncu_ranges).items()}
    out = r[["key", "label", *[c for c in ("variant", "pass") if c in r], "verdict", "change"]].copy()
    for pre in ("base", "new"):
        keys = out["key"] if pre == "base" else out["key"].map(lambda k: nkey.get(k, k))
        t = pts[pre]
        out[f"{pre}_x"] = keys.map(t["intensity"]).to_numpy()
        out[f"{pre}_y"] = keys.map(t["flop_per_s"]).to_numpy()
    out = out.dropna(subset=["base_x", "base_y", "new_x", "new_y"])
    if out.empty:
        raise NotApplicable(f"no matched range has a {level} roofline point on both sides")
    return out.reset_index(drop=True)


def roofline_figure(cmp: Comparison, pts: pd.DataFrame, title: str, level: str = "DRAM") -> Any:
    """Both captures' rooflines overlaid: each side's ceilings (base dashed, new solid), base points
    hollow, new points filled, an arrow from each base point to its new point."""
    import plotly.graph_objects as go

    from ..analysis import roofline as rf
    from .figures import TEMPLATE, message

    if pts.empty:
        return message("no range to place", title)
    fig = go.Figure()
    lo = max(min(pts["base_x"].min(), pts["new_x"].min()) / 3, 1e-3)
    hi = max(pts["base_x"].max(), pts["new_x"].max()) * 3
    x = np.logspace(np.log10(lo), np.log10(hi), 120)
    for pre, side, dash in (("base", cmp.base, "dash"), ("new", cmp.new, "solid")):
        if side.ncu_work is None:
            continue
        try:
            ceil = rf.ceilings(side.ncu_work, side.manifest)
        except NotApplicable:
            continue
        comp = ceil[(ceil["kind"] == "compute") & ~ceil["name"].str.startswith("measured")]
        top = comp["value"].max() if len(comp) else np.inf
        top_name = comp.loc[comp["value"].idxmax(), "name"] if len(comp) else ""
        for _, m in ceil[ceil["kind"] == "memory"].iterrows():
            measured = m["name"].startswith("measured")
            if not (m["name"] == level or (measured and level == "DRAM")):
                continue
            what = f"{m['name']} {m['value'] / 1e12:.2f} TB/s" + ("" if measured else f", {top_name} {top / 1e12:,.0f} TFLOP/s")
            fig.add_trace(go.Scatter(x=x, y=np.minimum(top, m["value"] * x) / 1e12, mode="lines", hoverinfo="name",
                                     line={"dash": "dot" if measured else dash, "width": 1 if measured else 1.6,
                                           "color": "#999" if measured else "#444"},
                                     name=f"{pre} roof ({side.gpu}): {what}", legendgroup="ceilings"))
    var = pts["variant"].astype(str) if "variant" in pts else pd.Series("range", index=pts.index)
    st = style(cmp)
    for name, g in pts.groupby(var, sort=True):
        s = st.get(name, {"color": "#444", "symbol": "circle"})
        hover = [f"{lab}<br>base {bx:.3g} FLOP/B, {by / 1e12:.3g} TFLOP/s<br>new {nx:.3g} FLOP/B, {ny / 1e12:.3g} TFLOP/s"
                 f"<br>time {c:+.1%} ({v})" for lab, bx, by, nx, ny, c, v in
                 zip(g["label"], g["base_x"], g["base_y"], g["new_x"], g["new_y"], g["change"], g["verdict"], strict=True)]
        fig.add_trace(go.Scatter(x=g["base_x"], y=g["base_y"] / 1e12, mode="markers", name=f"{name} (base)", legendgroup=name,
                                 marker={"symbol": s["symbol"] + "-open", "size": 8, "color": s["color"]},
                                 hovertext=hover, hoverinfo="text"))
        fig.add_trace(go.Scatter(x=g["new_x"], y=g["new_y"] / 1e12, mode="markers", name=f"{name} (new)", legendgroup=name,
                                 marker={"symbol": s["symbol"], "size": 8, "color": s["color"]},
                                 hovertext=hover, hoverinfo="text"))
        for bx, by, nx, ny in zip(g["base_x"], g["base_y"], g["new_x"], g["new_y"], strict=True):
            if abs(math.log10(nx / bx)) < 0.01 and abs(math.log10(ny / by)) < 0.01:
                continue  # no visible move: an arrow would be a blot on the marker
            # on log axes plotly places annotations in log10 units
            fig.add_annotation(x=math.log10(nx), y=math.log10(ny / 1e12), ax=math.log10(bx), ay=math.log10(by / 1e12),
                               xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=2,
                               arrowsize=1, arrowwidth=1.2, arrowcolor=s["color"], opacity=0.8, text="")
    ys = np.concatenate([pts["base_y"].to_numpy(), pts["new_y"].to_numpy()]) / 1e12
    fig.update_xaxes(type="log", title=f"arithmetic intensity [FLOP / {level} byte]", range=[np.log10(lo), np.log10(hi)])
    fig.update_yaxes(type="log", title="performance [TFLOP/s] (counted FLOPs / ncu duration)",
                     range=[np.log10(ys.min() / 3), np.log10(ys.max() * 4)])
    fig.update_layout(title=title, template=TEMPLATE, height=650, legend={"font": {"size": 11}})
    return fig


def distribution_figure(cmp: Comparison, rows: pd.DataFrame, title: str) -> Any:
    """Timing distributions side by side, one row per range, base and new: every launch (Nsight
    Systems) as a box with its points, or min / median / max (benchmark), on a time axis relative to
    the base median (1 = the base's median time)."""
    import plotly.graph_objects as go

    from .figures import TEMPLATE, message

    if rows.empty:
        return message("no range to show", title)
    fig = go.Figure()
    src = cmp.source
    nkey = {}
    if src in ("nsys", "ncu"):
        pairs = _match(cmp.base.samples[src], cmp.new.samples[src])
        nkey = {v: k for k, v in pairs.items()}
    order = list(rows["label"])
    for pre, side, color in (("base", cmp.base, "#7f7f7f"), ("new", cmp.new, "#1f5fbf")):
        s = side.samples[src]
        ys, xs, q = [], [], {"lowerfence": [], "q1": [], "median": [], "q3": [], "upperfence": [], "y": []}
        for r in rows.itertuples():
            k = r.key if pre == "base" else nkey.get(r.key, r.key)
            g = s[s["key"] == k]
            if src == "bench":
                b = g.iloc[0]
                q["y"].append(r.label)
                for f, col in (("lowerfence", "_lo"), ("q1", "ms"), ("median", "ms"), ("q3", "ms"), ("upperfence", "_hi")):
                    q[f].append(b[col] / r.base_ms)
            else:
                ys += [r.label] * len(g)
                xs += list(g["ms"] / r.base_ms)
        name = f"{pre}: {side.label}"
        if src == "bench":
            fig.add_trace(go.Box(y=q["y"], lowerfence=q["lowerfence"], q1=q["q1"], median=q["median"], q3=q["q3"],
                                 upperfence=q["upperfence"], name=name, orientation="h", marker_color=color,
                                 line={"width": 1.5}))
        else:
            fig.add_trace(go.Box(x=xs, y=ys, name=name, orientation="h", marker={"color": color, "size": 4},
                                 boxpoints="all", jitter=0.3, pointpos=0, line={"width": 1}))
    fig.update_layout(boxmode="group", template=TEMPLATE, title=title, height=140 + 34 * len(rows),
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0})
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], automargin=True)
    fig.update_xaxes(title="time / base median (1 = base median; < 1: new is faster); grey band: the threshold")
    fig.add_vrect(x0=1 / (1 + cmp.threshold), x1=1 + cmp.threshold, fillcolor="#888", opacity=0.1, line_width=0)
    fig.add_vline(x=1, line={"color": "#444", "width": 1, "dash": "dot"})
    return fig


# --------------------------------------------------------------------------- rendering and the command line


def page_name(base: Side, new: Side) -> str:
    """``h100-to-h200-seqlen`` (GPU to GPU, same capture name) or ``h200-seqlen-to-seqlen-v2``."""

    def short(gpu_folder: str) -> str:
        parts = [p for p in gpu_slug(gpu_folder).split("-") if p != "nvidia"]
        return parts[0] if parts else gpu_folder

    bg, bn = base.label.split("/", 1) if "/" in base.label else ("", base.label)
    ng, nn = new.label.split("/", 1) if "/" in new.label else ("", new.label)
    if bn == nn and bg != ng:
        return f"{short(bg)}-to-{short(ng)}-{bn}"
    if bg == ng:
        return f"{short(bg)}-{bn}-to-{nn}"
    return f"{short(bg)}-{bn}-to-{short(ng)}-{nn}"


def render(base: str, new: str, out_html: str | os.PathLike, threshold: str = "5%", only: str = "", title: str = "",
           plotlyjs: str = "../plotly.min.js", profiles: str | os.PathLike = REPO / "profiles") -> Path:
    """Render the compare notebook for ``base`` and ``new`` (folders or labels) into ``out_html``
    (papermill + nbconvert, atomic, byte-stable)."""
    from .report import render_notebook

    out = Path(out_html)
    params = {"base": str(base), "new": str(new), "threshold": str(threshold), "only": only, "title": title,
              "profiles": str(Path(profiles).resolve()), "plotlyjs": plotlyjs}
    render_notebook(NOTEBOOK, params, out)
    return out


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def publish(cmp: Comparison, out_dir: Path, name: str, title: str, render_page: bool = True) -> Path:
    """Render ``out_dir/<name>.html``, write its sidecar ``<name>.json`` and refresh ``out_dir/index.json``
    (every sidecar in the folder, by name)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = out_dir / f"{name}.html"
    if render_page:
        plotly_js = os.path.relpath(out_dir.parent / "plotly.min.js", out_dir) if (out_dir.parent / "plotly.min.js").exists() \
            else "inline"
        render(_rel(cmp.base.path), _rel(cmp.new.path), html_path, f"{cmp.threshold:.4g}", cmp.only, title, plotly_js)
    side = cmp.sidecar(title, html_path.name)
    side["base_path"], side["new_path"] = _rel(cmp.base.path), _rel(cmp.new.path)
    _write_json(out_dir / f"{name}.json", side)
    index = []
    for p in sorted(out_dir.glob("*.json")):
        if p.name == "index.json":
            continue
        try:
            d = json.loads(p.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(d, dict) and "summary" in d and "html" in d:
            index.append({"name": p.stem, "title": d.get("title", p.stem), "html": d["html"], "json": p.name,
                          "base": d.get("base"), "new": d.get("new"), "summary": d["summary"],
                          "exit_status": d.get("exit_status")})
    _write_json(out_dir / "index.json", {"comparisons": index})
    return html_path


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None, prog: str = "nsightlab compare") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit status: 0 no regression, 1 a matched range is slower than the threshold "
                                       "beyond its noise, 2 bad input")
    p.add_argument("base", help="the base capture: a folder, or a gpu/name label under --profiles")
    p.add_argument("new", help="the new capture, the same way")
    p.add_argument("--threshold", default="5%", help="regression threshold on the time (default 5%%; 0.05 works too)")
    p.add_argument("--only", default="", help="compare only ranges whose raw name matches this regular expression")
    p.add_argument("--min-ms", type=float, default=0.0, help="ranges faster than this in base (ms) are reported "
                                                             "but do not fail the run (default 0: every range gates)")
    p.add_argument("--profiles", default=str(REPO / "profiles"), help="where labels are looked up (default profiles/)")
    p.add_argument("--reports", default="", help="render the comparison page into this folder (<name>.html, a "
                                                 "<name>.json sidecar, index.json)")
    p.add_argument("--name", default="", help="the page's file name without .html (default from the labels, e.g. "
                                              "h100-to-h200-seqlen)")
    p.add_argument("--title", default="", help="the page's title (default: 'BASE → NEW')")
    p.add_argument("--kernels", action="store_true", help="also print every kernel that moved beyond its noise")
    a = p.parse_args(argv)
    try:
        thr = parse_threshold(a.threshold)
        cmp = compare_captures(a.base, a.new, thr, a.only, a.profiles, min_ms=a.min_ms)
    except (ProfileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NotApplicable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"base {cmp.base.label} ({cmp.base.gpu}, {cmp.base.path})")
    print(f"new  {cmp.new.label} ({cmp.new.gpu}, {cmp.new.path})")
    print(f"timing: {SOURCE_TEXT[cmp.source]}")
    for r in cmp.compat:
        print(f"differs: {r['aspect']}: {r['base']} vs {r['new']} -- {r['consequence']}")
    for n in cmp.notes:
        print(f"note: {n}")
    for col, why in cmp.marks.items():
        print(f"marked: {COUNTERS[col][0]}: {why}")
    if len(cmp.unmatched):
        for side in ("base", "new"):
            u = cmp.unmatched[cmp.unmatched["side"] == side]
            if len(u):
                shown = ", ".join(u["range"].astype(str).head(5))
                print(f"only in {side} ({len(u)}): {shown}{', ...' if len(u) > 5 else ''}")
    if a.kernels and len(cmp.kernels):
        for r in cmp.kernels[cmp.kernels["verdict"] != SAME].itertuples():
            print(f"kernel {r.verdict} {r.change:+.1%} (noise ±{r.noise:.1%}) {r.label} / {r.kernel}")
    print(cmp.summary())
    for line in cmp.regression_lines():
        print(line)
    if a.reports:
        title = a.title or f"{cmp.base.label} → {cmp.new.label}"
        try:
            path = publish(cmp, Path(a.reports), a.name or page_name(cmp.base, cmp.new), title)
        except Exception as exc:  # noqa: BLE001 - papermill / nbconvert raise their own kinds
            print(f"error: rendering the page failed: {exc}", file=sys.stderr)
            return 2
        print(f"page: {path}")
    return cmp.exit_status
