"""Option studies: the same case run with different options (block size, tile shape, ...).

Ranges that share every decoded field but their options form one study; the options that differ
within it label its rows. Per range the *main kernel* is the one with the largest share of the
range's time (a range may launch helpers: casts, reductions), never one picked by name.
"""

from __future__ import annotations

import pandas as pd

from ..core.text import plural
from .counters import NotApplicable, identity_columns, matching, option_columns, require

STATS = ("occupancy", "registers", "smem_bytes", "threads_per_block", "blocks_per_grid")


def main_kernels(work: pd.DataFrame) -> pd.DataFrame:
    """Per range and kernel name: time, share of the range's time, launches and launch statistics;
    ``main`` marks each range's largest share (ties: by kernel name)."""
    w = work[work["range"].fillna("").astype(str) != ""]
    if w.empty:
        raise NotApplicable("no kernel launch ran inside an NVTX range")
    stats = [c for c in STATS if c in w]
    g = w.groupby(["range", "kernel"], sort=False)
    out = g["seconds"].sum().rename("seconds").reset_index()
    out["launches"] = g.size().to_numpy()
    for c in stats:
        out[c] = g[c].max().to_numpy() if c != "occupancy" else g[c].mean().to_numpy()
    out["share"] = out["seconds"] / out.groupby("range")["seconds"].transform("sum")
    order = out.sort_values(["range", "share", "kernel"], ascending=[True, False, True])
    out["main"] = out.index.isin(order.drop_duplicates("range").index)
    return out


def _parse_options(text: object) -> dict[str, str]:
    return dict(item.split("=", 1) for item in str(text or "").split(";") if "=" in item)


def _fmt(v: object) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _per_range(w: pd.DataFrame, fields: list[str]) -> pd.DataFrame:
    """One row per range of launches ``w``: its ``fields`` (the first launch's) and ``seconds`` (summed)."""
    return w.groupby("range", sort=False).agg(**{c: (c, "first") for c in fields},
                                              seconds=("seconds", "sum")).reset_index()


def _impl_pass(g: pd.DataFrame) -> tuple:
    return tuple(str(g[c].iloc[0]) for c in ("variant", "pass") if c in g)


def option_study(work: pd.DataFrame) -> pd.DataFrame:
    """One row per range of every study (ranges equal in every field but their options, with at
    least two option settings): ``study`` (the shared fields), ``option`` (the options that vary
    within the study), ``ms`` (the range's GPU time), the main kernel with its time, share and launch
    statistics. NotApplicable if no two ranges differ in their options alone."""
    require(work, "seconds", what="the option study")
    mk = main_kernels(work)
    main = mk[mk["main"]].drop(columns="main").rename(columns={"kernel": "main_kernel", "seconds": "main_seconds",
                                                               "share": "main_share"})
    w = work[work["range"].fillna("").astype(str) != ""]
    if "options" not in w or not (w["options"].fillna("").astype(str) != "").any():
        raise NotApplicable("no option study: no range name carries options (key=value pairs beyond the "
                            "schema's fields)")
    fields = [c for c in identity_columns(w) if c != "options"]
    opts = option_columns(w)
    shared = [c for c in fields if c not in opts]
    per = _per_range(w, [*fields, "options"]).merge(main, on="range", how="left")
    groups = []
    for _, g in per.groupby(shared, dropna=False, sort=True) if shared else [((), per)]:
        if g["options"].nunique() < 2:
            continue
        parsed = [_parse_options(o) for o in g["options"]]
        keys = dict.fromkeys(k for p in parsed for k in p)
        groups.append((g, parsed, [k for k in keys if len({p.get(k) for p in parsed}) > 1]))
    # a setting is labelled by the options that vary in any study of its implementation and pass, so that one
    # setting reads the same in every study (pipeline=tma;tail=auto beside the study where tail varies too)
    varying: dict[tuple, dict[str, None]] = {}
    for g, _, keys in groups:
        varying.setdefault(_impl_pass(g), {}).update(dict.fromkeys(keys))
    rows = []
    for g, parsed, _ in groups:
        g = g.copy()
        g["option"] = [";".join(f"{k}={p.get(k, '-')}" for k in varying[_impl_pass(g)]) for p in parsed]
        rows.append(g)
    if not rows:
        raise NotApplicable("no option study: no two ranges share every field but their options "
                            "(a study needs one case run with at least two option settings)")
    out = pd.concat(rows, ignore_index=True)
    # a study is named by the shared fields that tell studies apart (N=1024, D=64), not by those all share
    named = [c for c in shared if c not in ("variant", "pass") and out[c].nunique(dropna=True) > 1] or \
        [c for c in shared if c not in ("variant", "pass")]
    out["study"] = [", ".join(f"{c}={_fmt(r[c])}" for c in named if pd.notna(r[c])) or "all"
                    for _, r in out.iterrows()]
    out["ms"] = out.pop("seconds") * 1e3
    out["main_ms"] = out.pop("main_seconds") * 1e3
    out["relative_time"] = out["ms"] / out.groupby(["variant", "pass", "study"], dropna=False)["ms"].transform("min")
    lead = ["range", "variant", "pass", "study", "option", "ms", "relative_time", "main_kernel", "main_ms",
            "main_share"]
    lead = [c for c in lead if c in out]
    return out[lead + [c for c in out.columns if c not in lead]]


def findings(study: pd.DataFrame) -> list[str]:
    """The option page's findings: per implementation and pass, the setting fastest in the most
    studies and how much slower the worst setting is."""
    out = []
    rank = {"forward": 0, "backward": 1}
    groups = sorted(study.groupby(["variant", "pass"], sort=False),
                    key=lambda kv: (list(dict.fromkeys(study["variant"])).index(kv[0][0]), rank.get(kv[0][1], 2)))
    for (variant, pass_), g in groups:
        best = g.loc[g.groupby("study")["ms"].idxmin(), "option"].value_counts()
        worst = g["relative_time"].max()
        wslot = g.loc[g["relative_time"].idxmax()]
        out.append(f"**{variant}** {pass_}: {best.index[0]} is fastest in {best.iloc[0]} of {g['study'].nunique()} "
                   f"studies; the slowest setting ({wslot['option']}, {wslot['study']}) takes {worst:.1f}× its "
                   "study's best.")
    return out


def beside_others(work: pd.DataFrame, study: pd.DataFrame) -> pd.DataFrame:
    """The other implementations that ran a study's case (every field equal but the implementation and
    its options), so that a ladder of settings reads against them: one row per study and other
    implementation, with ``other_ms`` (its GPU time), the study's ``best_option`` and ``best_ms``, and
    ``speed`` = other_ms / best_ms (> 1: the study's best setting is faster). Empty if no other
    implementation ran a study's case."""
    cols = ["variant", "pass", "study", "other", "other_ms", "best_option", "best_ms", "speed"]
    w = work[work["range"].fillna("").astype(str) != ""]
    if study is None or study.empty or w.empty:
        return pd.DataFrame(columns=cols)
    opts = set(option_columns(w)) | set(option_columns(study))
    case = [c for c in identity_columns(w) if c not in ("options", "variant") and c not in opts]
    per = _per_range(w, ["variant", *case])
    rows = []
    for (variant, pass_, name), g in study.groupby(["variant", "pass", "study"], sort=False, dropna=False):
        first = g.iloc[0]
        same = matching(per[per["variant"].astype(str) != str(variant)], {c: first.get(c) for c in case})
        best = g.loc[g["ms"].idxmin()]
        for other, o in same.groupby("variant", sort=False):
            ms = float(o["seconds"].min()) * 1e3  # one range per case; the fastest if an option study of its own
            rows.append({"variant": variant, "pass": pass_, "study": name, "other": str(other), "other_ms": ms,
                         "best_option": best["option"], "best_ms": float(best["ms"]), "speed": ms / float(best["ms"])})
    return pd.DataFrame(rows, columns=cols)


def ladder_findings(others: pd.DataFrame) -> list[str]:
    """Per implementation, pass and other implementation: how its best settings compare, the range of
    ``speed`` over its studies."""
    out = []
    for (variant, pass_, other), g in others.groupby(["variant", "pass", "other"], sort=False):
        lo, hi = g["speed"].min(), g["speed"].max()
        span = f"{lo:.2f}×" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}×"
        out.append(f"**{variant}** {pass_}, its best setting in each study: {span} {other}'s speed "
                   f"(> 1: faster; {plural(len(g), 'study', 'studies')}).")
    return out
