"""Performance analysis of benchmark results (tidy frames in, tidy frames out)."""

from __future__ import annotations

import pandas as pd

KEY = ["suite", "config", "B", "H", "N", "D", "causal", "dtype", "pass"]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


def ratio_to(df: pd.DataFrame, reference: str = "sdpa_flash") -> pd.DataFrame:
    """Each implementation's throughput over ``reference``'s in the same run and config (1.0 = equal)."""
    ok = ok_rows(df)
    ref = ok[ok["impl"] == reference][KEY + ["tflops"]].rename(columns={"tflops": "ref_tflops"})
    out = ok.merge(ref, on=KEY, how="inner")
    out["ratio"] = out["tflops"] / out["ref_tflops"]
    return out


def target_table(df: pd.DataFrame, impl: str = "flash_mma", reference: str = "sdpa_flash", min_n: int = 2048,
                 targets: dict[str, float] | None = None) -> pd.DataFrame:
    """Rows of the convention sweep with N >= min_n: impl and reference TFLOP/s, ratio, target, met."""
    targets = targets or {"forward": 0.80, "backward": 0.60}
    r = ratio_to(df[df["suite"] == "convention"], reference)
    r = r[(r["impl"] == impl) & (r["N"] >= min_n)]
    r = r.assign(target=r["pass"].map(targets))
    r["met"] = r["ratio"] >= r["target"]
    cols = ["pass", "D", "causal", "N", "B", "H", "tflops", "ref_tflops", "ratio", "target", "met"]
    return r[cols].sort_values(["pass", "D", "causal", "N"]).reset_index(drop=True)


def speedup_table(df: pd.DataFrame, suite: str, pass_: str, dtype: str, baseline: str = "sdpa_flash") -> pd.DataFrame:
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
    return (ok.groupby(["impl", "pass", "dtype"])[["max_abs", "mean_abs", "mse", "max_rel", "rel_l2"]].max()
            .reset_index())
