"""Benchmark results (the CSVs a capture's bench step writes): tidy frames in, tidy frames out.

Nothing here names an implementation: the one to track, the reference and the targets are the
caller's (a notebook's parameters); without a reference, the implementation fastest in the most
configurations is used.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

KEY = ["suite", "config", "B", "H", "N", "D", "causal", "dtype", "pass"]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


def pick_reference(df: pd.DataFrame) -> str:
    """The implementation with the least time in the most configurations (ties: by name)."""
    ok = ok_rows(df)
    if ok.empty:
        raise ValueError("no successful benchmark rows")
    best = ok.loc[ok.groupby(KEY)["ms"].idxmin(), "impl"].value_counts()
    return str(sorted(best[best == best.max()].index)[0])


def implementations(df: pd.DataFrame) -> pd.DataFrame:
    """What the CSVs say about each implementation: kind, passes, dtypes, options seen, rows that
    ran and rows skipped (in the order the CSVs list them)."""
    rows = []
    for impl, g in df.groupby("impl", sort=False):
        opts = sorted({o for o in g["options"].astype(str) if o})
        rows.append({"implementation": impl, "kind": ", ".join(dict.fromkeys(g["kind"].astype(str))),
                     "passes": ", ".join(dict.fromkeys(g["pass"])), "dtypes": ", ".join(dict.fromkeys(g["dtype"])),
                     "options": "; ".join(opts[:4]) + (" ..." if len(opts) > 4 else ""),
                     "rows ok": int((g["status"] == "ok").sum()), "rows skipped": int((g["status"] != "ok").sum())})
    return pd.DataFrame(rows)


def ratio_to(df: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Each implementation's throughput over ``reference``'s in the same run and config (1.0 = equal)."""
    ok = ok_rows(df)
    ref = ok[ok["impl"] == reference][KEY + ["tflops"]].rename(columns={"tflops": "ref_tflops"})
    out = ok.merge(ref, on=KEY, how="inner")
    out["ratio"] = out["tflops"] / out["ref_tflops"]
    return out


def parse_targets(text: str) -> dict[str, float]:
    """``"forward:0.8,backward:0.6"`` (or ``=``) -> {"forward": 0.8, "backward": 0.6} (empty: none)."""
    out = {}
    for item in filter(None, (s.strip() for s in str(text or "").split(","))):
        key, _, val = item.replace("=", ":").partition(":")
        out[key.strip()] = float(val)
    return out


def target_table(df: pd.DataFrame, impl: str, reference: str, targets: Mapping[str, float], min_n: int = 2048,
                 suite: str | None = None) -> pd.DataFrame:
    """Rows of ``suite`` (all suites: None) with N >= min_n: impl and reference TFLOP/s, ratio, the
    pass's target and whether it is met."""
    sel = df if suite is None else df[df["suite"] == suite]
    r = ratio_to(sel, reference)
    r = r[(r["impl"] == impl) & (r["N"] >= min_n)]
    r = r.assign(target=r["pass"].map(dict(targets)))
    r["met"] = r["ratio"] >= r["target"]
    cols = ["pass", "D", "causal", "N", "B", "H", "tflops", "ref_tflops", "ratio", "target", "met"]
    return r[cols].sort_values(["pass", "D", "causal", "N"]).reset_index(drop=True)


def speedup_table(df: pd.DataFrame, suite: str, pass_: str, dtype: str, baseline: str) -> pd.DataFrame:
    """config x impl table of time(baseline) / time(impl)."""
    ok = ok_rows(df)
    ok = ok[(ok["suite"] == suite) & (ok["pass"] == pass_) & (ok["dtype"] == dtype)]
    piv = ok.pivot_table(index="config", columns="impl", values="ms", aggfunc="first")
    if baseline not in piv:
        return piv.iloc[0:0]
    order = ok.drop_duplicates("config")["config"]
    return piv.rdiv(piv[baseline], axis=0).reindex(order)  # baseline ms / impl ms


def accuracy_table(df: pd.DataFrame) -> pd.DataFrame:
    """Worst error metrics per implementation, pass and dtype (against the fp64 reference)."""
    ok = ok_rows(df)
    cols = [c for c in ["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"] if c in ok]
    return ok.groupby(["impl", "pass", "dtype"], sort=False)[cols].max().reset_index()


def sweeps_n(df: pd.DataFrame, suite: str) -> bool:
    """Whether a suite varies N enough (3+ values for one implementation and pass) for lines against N."""
    s = ok_rows(df[df["suite"] == suite])
    return bool(len(s)) and int(s.groupby(["impl", "pass", "dtype", "D", "causal"])["N"].nunique().max()) >= 3


def flop_source(manifests: Mapping[str, dict]) -> str:
    """The page's FLOP-source line: the benchmark computed ``tflops`` itself."""
    mods = set()
    for m in manifests.values():
        cmd = [str(c) for c in m.get("command") or []]
        mods.add(cmd[cmd.index("-m") + 1] if "-m" in cmd and cmd.index("-m") + 1 < len(cmd) else "the benchmark")
    return (f"the benchmark CSVs' `tflops` column, computed by {', '.join(sorted(mods)) or 'the benchmark'} from its "
            "own FLOP convention")
