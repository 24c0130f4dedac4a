"""Counted work per kernel launch: FLOPs by pipe, bytes per memory level, clocks and peaks.

Nsight Compute names the same quantity in several ways. This project's captures collect totals
(``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum``, ``dram__bytes.sum``); a report taken with
Nsight's roofline sections or ``--set full`` holds rates instead: ``X.sum.per_cycle_elapsed``,
``X.sum.per_second``, ``derived__*`` FLOP-per-cycle and byte-per-second forms, and the clocks as
``unit__cycles_elapsed.avg.per_second``. Every quantity here has a list of :class:`Recipe`s, tried
in order per launch; the first whose metrics are all there gives the value:

- a total ``X``                     = ``X``
- ``X.per_cycle_elapsed``           x the unit's elapsed cycles (``unit__cycles_elapsed.avg``, or
                                      ``unit__cycles_elapsed.avg.per_second`` x the duration)
- ``X.per_second``                  x the duration (``gpu__time_duration.sum``)
- ``derived__..._xK`` FLOP/cycle    x elapsed cycles / K (the instruction count)

A metric a capture lacks never becomes 0: each FLOP term sums only the counters present for that
launch (``flop_counters`` names them), and a quantity no recipe can make stays NaN, with the metrics
that would have given it in ``df.attrs["missing"]``; :func:`require` turns that into a
:class:`NotApplicable` whose message names them. :func:`derivations` lists every recipe (the page
shows which one each quantity came from).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core import metrics as M
from ..core.errors import NotApplicable
from ..core.metrics import TENSOR_DENSE_PEAK
from ..core.text import plural

# --------------------------------------------------------------------------- recipes


@dataclass(frozen=True)
class Recipe:
    """A quantity as a product of metrics (``@name``: another quantity) times ``factor``, divided
    by the product of ``per``; or, with ``add``, the sum of ``terms``."""

    terms: tuple[str, ...]
    factor: float = 1.0
    per: tuple[str, ...] = ()
    add: bool = False

    @property
    def needs(self) -> tuple[str, ...]:
        return (*self.terms, *self.per)

    @property
    def text(self) -> str:
        op = " + " if self.add else " × "
        s = op.join(self.terms)
        if self.factor != 1.0:
            s += f" × {self.factor:g}"
        if self.per:
            s += " / " + " / ".join(self.per)
        return s


def _total(metric: str, unit: str, factor: float = 1.0, alt: Iterable[str] = ()) -> list[Recipe]:
    """A ``.sum`` counter, and its rate forms (per elapsed cycle of ``unit``, per second)."""
    out = [Recipe((metric,), factor)]
    out += [Recipe((a,), factor) for a in alt]
    out.append(Recipe((metric + ".per_cycle_elapsed", f"@cycles_{unit}"), factor))
    out.append(Recipe((metric + ".per_second", "@seconds"), factor))
    return out


_SASS = M.SASS_INST
#: FLOPs per counted instruction (thread level), as Nsight's roofline sections weigh them
FLOP_WEIGHT = {"ffma": 2, "fadd": 1, "fmul": 1, "hfma": 4, "hadd": 2, "hmul": 2, "dfma": 2, "dadd": 1, "dmul": 1}
#: the FLOP terms: counted units and their weight; tensor path counters count operations already
FLOP_TERMS: dict[str, tuple[tuple[str, float], ...]] = {
    "fp32": (("ffma", 2), ("fadd", 1), ("fmul", 1)),
    "fp16": (("hfma", 4), ("hadd", 2), ("hmul", 2)),
    "fp64": (("dfma", 2), ("dadd", 1), ("dmul", 1)),
    "tensor": (("tensor_fp16", 1), ("tensor_bf16", 1), ("tensor_tf32", 1), ("tensor_fp64", 1)),
}
_TENSOR = M.TENSOR_PATH


#: Nsight Compute's ``sm__ops_path_tensor_src_fp16`` counts the tensor path's operations, 2 per multiply-add
#: (dense products count exactly their 2·M·N·K), and its ``.peak_sustained`` is the path's rate with 2:4
#: structured sparsity (8,192 per SM per cycle on Hopper): the dense FP16 rate is half of it (4,096 FLOP per
#: SM per cycle, NVIDIA's published dense rate: H100 SXM 989.4 TFLOP/s = 4,096 × 132 SMs × 1.83 GHz).
TENSOR_DENSE_FACTOR = 0.5

#: launch statistics under names no range field is likely to take (``block_size`` is a common option)
LAUNCH_NAMES = {"block_size": "threads_per_block", "grid_size": "blocks_per_grid"}


def _recipes() -> dict[str, list[Recipe]]:
    q: dict[str, list[Recipe]] = {}
    q["seconds"] = [Recipe((M.LAUNCH["duration"],), 1e-9), Recipe((M.UNIT_CYCLES.format(unit="sm"),), per=(M.CLOCKS["sm"],))]
    for unit in ("sm", "smsp", "dram", "lts", "l1tex"):
        q[f"hz_{unit}"] = [Recipe((M.UNIT_CLOCK.format(unit=unit),)),
                           Recipe((M.UNIT_CYCLES.format(unit=unit),), per=("@seconds",))]
        q[f"cycles_{unit}"] = [Recipe((M.UNIT_CYCLES.format(unit=unit),)),
                               Recipe((M.UNIT_CLOCK.format(unit=unit), "@seconds"))]
    for op, w in FLOP_WEIGHT.items():
        smsp, sm = _SASS.format(unit="smsp", op=op), _SASS.format(unit="sm", op=op)
        q[f"inst_{op}"] = [*_total(smsp, "smsp", alt=(sm,)),
                           Recipe((M.DERIVED_SASS_INST.format(unit="smsp", op=op, weight=w), "@cycles_smsp"), 1 / w)]
    for key, metric in _TENSOR.items():
        q[f"inst_{key}"] = _total(metric, "sm")
    t = M.TRAFFIC
    q["dram_read"] = _total(t["dram_read"], "dram")
    q["dram_write"] = _total(t["dram_write"], "dram")
    q["bytes_DRAM"] = [*_total(t["dram_bytes"], "dram"), Recipe(("@dram_read", "@dram_write"), add=True)]
    q["bytes_L2"] = [*_total(t["lts2xbar"], "lts", M.LTS2XBAR_BYTES),
                     Recipe((M.DERIVED_L2_BYTES + ".per_second", "@seconds"))]
    q["bytes_L1"] = [*_total(t["l1_writeback"], "l1tex", M.L1_WRITEBACK_BYTES),
                     Recipe((M.DERIVED_L1_BYTES + ".per_second", "@seconds"))]
    q["bytes_shared"] = _total(t["shared_wavefronts"], "l1tex", M.SHARED_WAVEFRONT_BYTES)
    q["lts_sectors"] = _total(t["lts_sectors"], "lts")
    q["l2_hit_rate"] = [Recipe((t["lts_hit_rate"],))]
    for key, metric in M.LAUNCH.items():
        if key != "duration":
            q[LAUNCH_NAMES.get(key, key)] = [Recipe((metric,))]
    p = M.PEAKS
    q["peak_fp32"] = [Recipe((p["ffma"], "@hz_sm"), 2), Recipe((M.DERIVED_SASS_INST.format(unit="sm", op="ffma", weight=2), "@hz_sm"))]
    q["peak_fp16"] = [Recipe((p["hfma"], "@hz_sm"), 4), Recipe((M.DERIVED_SASS_INST.format(unit="sm", op="hfma", weight=4), "@hz_sm"))]
    q["peak_fp64"] = [Recipe((M.DFMA_PEAK, "@hz_sm"), 2),
                      Recipe((M.DERIVED_SASS_INST.format(unit="sm", op="dfma", weight=2), "@hz_sm"))]
    # the tensor path's peak as Nsight Compute states it: its rate with 2:4 structured sparsity, twice the
    # dense rate (see TENSOR_DENSE_FACTOR); the _sparsity_off sub-counter, where a report has it, is dense already
    q["peak_tensor_path"] = [Recipe((p["tensor_fp16"], "@hz_sm")),
                             Recipe((M.TENSOR_PEAK_PER_SECOND,))]
    q["peak_tensor"] = [Recipe((TENSOR_DENSE_PEAK, "@hz_sm")),
                        Recipe((p["tensor_fp16"], "@hz_sm"), TENSOR_DENSE_FACTOR),
                        Recipe((M.TENSOR_PEAK_PER_SECOND,), TENSOR_DENSE_FACTOR)]
    q["sm_count"] = [Recipe((m,)) for m in M.SM_COUNT]
    q["peak_DRAM"] = [Recipe((p["dram_bytes"], "@hz_dram"))]
    q["peak_L2"] = [Recipe((p["lts2xbar"], "@hz_lts"), M.LTS2XBAR_BYTES),
                    Recipe((M.DERIVED_L2_BYTES + ".peak_sustained", "@hz_lts"))]
    q["peak_L1"] = [Recipe((p["l1_writeback"], "@hz_l1tex"), M.L1_WRITEBACK_BYTES),
                    Recipe((M.DERIVED_L1_BYTES + ".peak_sustained", "@hz_l1tex"))]
    return q


RECIPES: dict[str, list[Recipe]] = _recipes()
#: what each quantity means (the derivation table's first column)
MEANING = {
    "seconds": "kernel duration [s]", "inst_ffma": "FFMA thread instructions", "bytes_DRAM": "DRAM bytes",
    "bytes_L2": "L2 → SM bytes (lts2xbar)", "bytes_L1": "L1 LSU writeback bytes", "bytes_shared": "shared-memory bytes",
    "lts_sectors": "L2 sectors", "l2_hit_rate": "L2 sector hit rate [%]", "peak_fp32": "FP32 peak [FLOP/s]",
    "peak_fp16": "FP16 peak [FLOP/s]", "peak_tensor": "FP16 tensor peak, dense [FLOP/s]",
    "peak_tensor_path": "FP16 tensor path peak as Nsight states it (2:4 sparse rate) [FLOP/s]",
    "sm_count": "SMs", "peak_DRAM": "DRAM peak [B/s]",
    "peak_L2": "L2 → SM peak [B/s]", "peak_L1": "L1 peak [B/s]",
}


for _op in FLOP_WEIGHT:
    MEANING[f"inst_{_op}"] = f"{_op.upper()} thread instructions (×{FLOP_WEIGHT[_op]} FLOP)"
for _key in _TENSOR:
    MEANING[f"inst_{_key}"] = f"tensor-path operations, {_key.split('_')[1].upper()} sources (×1 FLOP)"
MEANING.update({"dram_read": "DRAM bytes read", "dram_write": "DRAM bytes written", "occupancy": "achieved occupancy [%]",
                "registers": "registers per thread", "smem_static": "static shared memory per block [B]",
                "smem_dynamic": "dynamic shared memory per block [B]", "threads_per_block": "threads per block",
                "blocks_per_grid": "blocks per grid", "peak_fp64": "FP64 peak [FLOP/s]"})
for _unit in ("sm", "smsp", "dram", "lts", "l1tex"):
    MEANING[f"hz_{_unit}"] = f"{_unit} clock [Hz]"
    MEANING[f"cycles_{_unit}"] = f"{_unit} cycles elapsed"


def derivations(work: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every recipe of every quantity, in the order tried; with ``work`` (a :func:`kernel_work`
    frame) the number of launches each recipe gave the value for."""
    used = (work.attrs.get("used", {}) if work is not None else {})
    rows = []
    for q, recipes in RECIPES.items():
        for r in recipes:
            rows.append({"quantity": q, "meaning": MEANING.get(q, ""), "recipe": r.text,
                         **({"launches": used.get(q, {}).get(r.text, 0)} if work is not None else {})})
    return pd.DataFrame(rows)


def _evaluate(df: pd.DataFrame) -> tuple[dict[str, pd.Series], dict[str, dict[str, int]]]:
    """Every quantity for every row: the first recipe whose inputs are present (not NaN) wins."""
    values: dict[str, pd.Series] = {}
    used: dict[str, dict[str, int]] = {}
    nan = pd.Series(np.nan, index=df.index, dtype=float)

    def get(name: str) -> pd.Series:
        if name.startswith("@"):
            return values.get(name[1:], nan)
        if name in df:
            return pd.to_numeric(df[name], errors="coerce").astype(float)
        return nan

    for q, recipes in RECIPES.items():
        out = nan.copy()
        used[q] = {}
        for r in recipes:
            if out.notna().all():
                break
            parts = [get(n) for n in r.needs]
            n = len(r.terms)
            if r.add:
                val = sum(parts[1:n], parts[0])
            else:
                val = parts[0] * r.factor
                for p in parts[1:n]:
                    val = val * p
            for p in parts[n:]:
                val = val / p
            fill = out.isna() & val.notna()
            if fill.any():
                out[fill] = val[fill]
                used[q][r.text] = int(fill.sum())
        values[q] = out
    return values, used


def available(metric_names: Iterable[str]) -> dict[str, str | None]:
    """For a list of collected metric names (a manifest's ``ncu.metrics``): each quantity's first
    recipe that those metrics can make, or None."""
    have = set(metric_names)
    got: dict[str, str | None] = {}
    for q, recipes in RECIPES.items():
        got[q] = None
        for r in recipes:
            if all((got.get(n[1:]) is not None) if n.startswith("@") else n in have for n in r.needs):
                got[q] = r.text
                break
    return got


def needed_metrics(quantity: str) -> list[str]:
    """The metric names any recipe of ``quantity`` reads (what to collect to get it)."""
    out: dict[str, None] = {}
    for r in RECIPES[quantity]:
        for n in r.needs:
            if not n.startswith("@"):
                out.setdefault(n, None)
    return list(out)


def _first_metric(quantity: str) -> str:
    """The plain total a capture of this project collects for ``quantity`` (for messages)."""
    r = RECIPES[quantity][0]
    return r.terms[0] if not r.terms[0].startswith("@") else quantity


# --------------------------------------------------------------------------- per launch

#: per-launch columns that are neither range fields nor metrics
LAUNCH_COLUMNS = ("kernel", "kernel_full", "launch", "start", "end", "ms", "tid", "correlationId", "launch_start",
                  "range_id", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "gridX", "gridY",
                  "gridZ", "blockX", "blockY", "blockZ", "streamId", "deviceId")


def range_columns(df: pd.DataFrame) -> list[str]:
    """The columns a parser decoded from the NVTX range name (``range``, ``domain``, ``variant``,
    ``pass``, ``schema``, ``options`` and every field): not a metric, not a launch attribute, not
    a column this package computes."""
    metrics = set(df.attrs.get("units") or ())  # ncu_frame: every metric it read
    printed = df.attrs.get("printed") or [{}]  # ncu_csv_frame: the metrics as printed
    metrics |= set(printed[0]) if printed else set()
    return [c for c in df.columns if "__" not in c and not c.startswith(("group:", "derived_", "model_", "trait_", "_"))
            and c not in LAUNCH_COLUMNS and c not in COMPUTED and c not in metrics]


#: the columns kernel_work / per_range and the analyses add (never range fields)
COMPUTED = frozenset([*RECIPES, *(f"flop_{t}" for t in FLOP_TERMS), "flop", "flop_counters", "smem_bytes", "kernels",
                      "main_kernel", "main_share", "wall_ms", "gpu_ms", "span_ms", "gap_ms", "max_gap_us", "iters",
                      "tflops", "flop_source", "flop_used", "compulsory", "working_set", "dram_over_compulsory",
                      "dram_over_l2", "working_set_over_l2", "intensity", "flop_per_s", "bytes", "level",
                      "counted_over_model", "flag", "explanation", "speedup", "reference", "reference_ms", "range_id",
                      "option", "study", "sweep", "main_ms", "launches", "share", "main", "impl", "status", "basis",
                      "counted_flop", "counted_flop_per_s", "cycles_sm", "hz_sm"])


def short_kernel_name(full: str) -> str:
    """``void ns::k<T, 4>(const T*, int)`` -> ``k`` (for frames that only carry the full name)."""
    s = re.sub(r"\(.*\)\s*$", "", str(full)).strip()
    depth, out = 0, []
    for ch in s:  # drop template arguments, nested ones included
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">"
    s = "".join(out).split()[-1] if "".join(out).split() else s
    return s.split("::")[-1]


def kernel_work(df: pd.DataFrame) -> pd.DataFrame:
    """Per kernel launch of a parsed Nsight Compute frame: counted FLOPs by pipe (``flop_fp32``,
    ``flop_fp16``, ``flop_fp64``, ``flop_tensor``, their sum ``flop`` and the counters used,
    ``flop_counters``), bytes per level (``bytes_DRAM``, ``bytes_L2``, ``bytes_L1``,
    ``bytes_shared``), L2 sectors and hit rate, ``seconds``, launch statistics, clocks (``hz_*``)
    and peaks (``peak_*``, per second at the clock the launch ran at). Quantities no recipe can make
    stay NaN; ``attrs["missing"]`` names them, ``attrs["used"]`` counts the recipes used."""
    if df is None or not len(df):
        raise NotApplicable("no kernel launches to analyse (the Nsight Compute frame is empty)")
    values, used = _evaluate(df)
    keep = range_columns(df)
    out = df[keep].copy()
    if "kernel" in df:
        out["kernel"] = df["kernel"].astype(str)
    elif "kernel_full" in df:
        out["kernel"] = df["kernel_full"].map(short_kernel_name)
    else:
        out["kernel"] = "?"
    out["launch"] = df["launch"] if "launch" in df else np.arange(len(df))
    for q, v in values.items():
        out[q] = v.to_numpy()
    counters = [[] for _ in range(len(df))]
    for term, parts in FLOP_TERMS.items():
        total = pd.Series(np.nan, index=df.index)
        for key, weight in parts:
            v = values[f"inst_{key}"]
            has = v.notna().to_numpy()
            total = total.where(~(total.isna() & v.notna()), 0.0) + (weight * v).fillna(0.0)
            for i in np.flatnonzero(has):
                counters[i].append(key)
        out[f"flop_{term}"] = total.to_numpy()
    terms = out[[f"flop_{t}" for t in FLOP_TERMS]]
    out["flop"] = terms.sum(axis=1, min_count=1)
    out["flop_counters"] = [" ".join(c) for c in counters]
    out["smem_bytes"] = out["smem_static"].fillna(0) + out["smem_dynamic"].fillna(0)
    out.loc[out["smem_static"].isna() & out["smem_dynamic"].isna(), "smem_bytes"] = np.nan
    out.attrs["used"] = used
    out.attrs["missing"] = {q: needed_metrics(q) for q, v in values.items() if v.isna().all()}
    out.attrs["missing"].pop("flop", None)
    if out["flop"].isna().all():
        out.attrs["missing"]["flop"] = [m for t in FLOP_TERMS.values() for k, _ in t for m in needed_metrics(f"inst_{k}")[:2]]
    out.attrs["source"] = df.attrs.get("source", "")
    return out


def missing_message(work: pd.DataFrame, quantities: Iterable[str]) -> str | None:
    """None if every quantity has a value for some launch, else "missing metrics: ..." naming
    what would give each missing one."""
    lacking = []
    for q in quantities:
        col = work[q] if q in work else None
        if col is None or pd.to_numeric(col, errors="coerce").isna().all():
            if q == "flop":
                names = ", ".join(_first_metric(f"inst_{k}") for t in FLOP_TERMS.values() for k, _ in t)
                lacking.append(f"FLOPs (none of the FLOP counters: {names}, or their .per_cycle_elapsed / "
                               "derived__ forms)")
            elif q in RECIPES:
                lacking.append(f"{MEANING.get(q, q)} ({' or '.join(r.text for r in RECIPES[q][:3])})")
            else:
                lacking.append(q)
    return "missing metrics: " + "; ".join(lacking) if lacking else None


def require(work: pd.DataFrame, *quantities: str, what: str = "this analysis") -> None:
    """Raise :class:`NotApplicable` naming the metrics that would give the quantities ``work`` lacks."""
    msg = missing_message(work, quantities)
    if msg:
        raise NotApplicable(f"{what} is not applicable: {msg}")


def flop_counter_summary(work: pd.DataFrame) -> str:
    """One line: which counters the counted FLOPs came from (over all launches)."""
    seen: dict[str, None] = {}
    for s in work.get("flop_counters", pd.Series(dtype=str)):
        for k in str(s).split():
            seen.setdefault(k, None)
    if not seen:
        return "no FLOP counter in this capture"

    def name(k: str) -> str:
        return k.upper().replace("TENSOR_", "tensor ")

    nonzero = [k for k in seen if f"inst_{k}" in work and (work[f"inst_{k}"].fillna(0) > 0).any()]
    return (f"hardware counters: {', '.join(name(k) for k in seen)} "
            f"(nonzero: {', '.join(name(k) for k in nonzero) or 'none'})")


# --------------------------------------------------------------------------- per range

_SUMS = ("flop", "flop_fp32", "flop_fp16", "flop_fp64", "flop_tensor", "bytes_DRAM", "bytes_L2", "bytes_L1",
         "bytes_shared", "dram_read", "dram_write", "lts_sectors", "_hit_sectors", "_hit_weight", "seconds", "cycles_sm")


def option_columns(df: pd.DataFrame) -> list[str]:
    """Columns that hold options (the keys of the ``options`` strings: ``a=1;b=x``)."""
    keys: dict[str, None] = {}
    for s in df.get("options", pd.Series(dtype=object)).dropna().unique():
        for item in str(s).split(";"):
            if "=" in item:
                keys.setdefault(item.split("=", 1)[0], None)
    return [k for k in keys if k in df]


def per_range(work: pd.DataFrame, *, by_kernel_if_no_ranges: bool = False) -> pd.DataFrame:
    """Sum the launches of each NVTX range (one measured case), keyed by the raw range name; the
    decoded fields ride along. ``kernels``: launches; ``main_kernel``/``main_share``: the kernel
    with the largest share of the range's time. Launches outside every range are left out
    (``attrs["outside"]`` counts them); if no launch ran inside a range, NotApplicable, or with
    ``by_kernel_if_no_ranges`` one group per kernel name (variant = the kernel name)."""
    w = work.copy()
    inside = w["range"].fillna("").astype(str) != ""
    if not inside.any():
        if not by_kernel_if_no_ranges:
            raise NotApplicable("no kernel launch ran inside an NVTX range (the capture has no ranges to group by)")
        w["range"] = "kernel " + w["kernel"].astype(str)
        w["variant"] = w["kernel"].astype(str)
        inside = pd.Series(True, index=w.index)
        grouped_by = "kernel name (no NVTX ranges)"
    else:
        grouped_by = "NVTX range"
    outside = int((~inside).sum())
    w = w[inside].copy()
    # the range's hit rate: the launches' rates weighted by their L2 sectors (Nsight's own definition);
    # reports without sector counts (the roofline sections have only their rates) weight by L2 bytes, else time
    weight = next(c for c in ("lts_sectors", "bytes_L2", "seconds") if w[c].notna().all() or c == "seconds")
    # each launch's duration in cycles of the SM clock it ran at: a range's clock is their time-weighted mean
    w["cycles_sm"] = w["seconds"] * w["hz_sm"] if "hz_sm" in w else np.nan
    w["_hit_sectors"] = w["l2_hit_rate"] / 100 * w[weight]
    w["_hit_weight"] = w[weight].where(w["l2_hit_rate"].notna())
    keys = ["range"]
    fields = [c for c in range_columns(w) if c != "range"]
    g = w.groupby(keys, sort=False, dropna=False)
    out = g[list(_SUMS)].sum(min_count=1).reset_index()
    first = g[fields].first().reset_index(drop=True) if fields else pd.DataFrame(index=out.index)
    out = pd.concat([out[["range"]], first, out.drop(columns="range")], axis=1)
    out["kernels"] = g.size().to_numpy()
    out["hz_sm"] = out.pop("cycles_sm") / out["seconds"]
    out["l2_hit_rate"] = 100 * out.pop("_hit_sectors") / out.pop("_hit_weight")
    t = w.groupby(["range", "kernel"], sort=False)["seconds"].sum().reset_index()
    t["share"] = t["seconds"] / t.groupby("range")["seconds"].transform("sum")
    main = t.sort_values(["range", "share", "kernel"], ascending=[True, False, True]).drop_duplicates("range")
    out = out.merge(main[["range", "kernel", "share"]].rename(columns={"kernel": "main_kernel", "share": "main_share"}),
                    on="range", how="left")
    cnt = w.groupby("range", sort=False)["flop_counters"].agg(lambda s: " ".join(dict.fromkeys(" ".join(s).split())))
    out["flop_counters"] = out["range"].map(cnt)
    for c in fields:  # integer fields (B, N, M=...) stay integers where every value is one
        col = out[c]
        if col.dtype == float and col.notna().all() and (col == col.round()).all():
            out[c] = col.astype(int)
    out.attrs = {**work.attrs, "outside": outside, "grouped_by": grouped_by, "l2_hit_rate_weight": weight}
    return out


# --------------------------------------------------------------------------- models

MODEL_COLUMNS = ("model_flop", "model_bytes", "model_working_set", "model_source")


def attach_model(frame: pd.DataFrame, cases: pd.DataFrame | None) -> pd.DataFrame:
    """``frame`` (keyed by ``range``) with the capture's cases (:func:`nsightlab.store.captures.cases`) left-
    merged on ``range``: ``model_*``, ``trait_*`` and any case column the frame lacks. Without
    cases, the model columns are added empty (NaN / "")."""
    out = frame.copy()
    if cases is not None and len(cases):
        extra = [c for c in cases.columns if c == "range" or c not in out.columns or c.startswith(("model_", "trait_"))]
        out = out.drop(columns=[c for c in extra if c != "range" and c in out.columns])
        out = out.merge(cases[extra].drop_duplicates("range"), on="range", how="left")
    for c in MODEL_COLUMNS:
        if c not in out:
            out[c] = "" if c == "model_source" else np.nan
    out["model_source"] = out["model_source"].fillna("")
    out.attrs = dict(frame.attrs)
    return out


def has_model(frame: pd.DataFrame, column: str = "model_flop") -> bool:
    return column in frame and pd.to_numeric(frame[column], errors="coerce").notna().any()


def identity_columns(df: pd.DataFrame, drop: Iterable[str] = ()) -> list[str]:
    """Range fields that identify a case, minus ``drop`` (and the bookkeeping ones)."""
    skip = {"range", "domain", "schema", *drop}
    return [c for c in range_columns(df) if c not in skip]


def matching(frame: pd.DataFrame, case: Mapping[str, Any]) -> pd.DataFrame:
    """The rows of ``frame`` equal to ``case`` in each of its fields (NaN matches NaN); none if ``frame``
    lacks one of them."""
    m = pd.Series(True, index=frame.index)
    for c, v in case.items():
        if c not in frame:
            return frame.iloc[0:0]
        m &= frame[c].isna() if pd.isna(v) else frame[c] == v
    return frame[m]


def sources_text(sources: pd.Series, unit: str = "case") -> str:
    """One line naming the model (or FLOP) sources of a page's rows, with how many rows use each. Sources
    are "; "-separated clauses; the clauses every source begins with are written once, then what each
    adds: "A; B" for 154 cases and "A; B; C" for 70 read "A; B, for 224 cases (70 of them add: C)"."""
    counts = sources[sources.astype(bool)].astype(str).value_counts()
    if counts.empty:
        return ""
    if len(counts) == 1:
        return f"{counts.index[0]} ({plural(counts.iloc[0], unit)})"
    parts = [s.split("; ") for s in counts.index]
    shared = 0
    while all(len(p) > shared for p in parts) and len({p[shared] for p in parts}) == 1:
        shared += 1
    if shared == 0:
        return "; ".join(f"{src} ({plural(n, unit)})" for src, n in counts.items())
    rest = [(("; ".join(p[shared:])), n) for p, n in zip(parts, counts, strict=True)]
    extra = [f"{n} of them add: {r}" for r, n in rest if r]
    return "; ".join(parts[0][:shared]) + f", for {plural(int(counts.sum()), unit)}" + (f" ({'; '.join(extra)})" if extra else "")
