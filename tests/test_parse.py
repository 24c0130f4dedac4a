"""Parsers against what Nsight itself said on the node (the oracles committed beside each capture)."""

import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsightlab import parse
from nsightlab.store import ProfileError, find_file, load_manifest

ROOT = Path(__file__).resolve().parent.parent
#: every committed capture with Nsight Compute counters, on every GPU
NCU_CAPTURES = sorted(p.parent for p in (ROOT / "profiles").glob("*/*/manifest.json")
                      if p.parent.name in ("seqlen", "blocksize") and not p.parent.parent.name.startswith("_"))
NSYS_CAPTURES = [p for p in NCU_CAPTURES if "nsys" in load_manifest(p)["parameters"]["tools"]]


def test_both_gpus_are_checked():
    assert {p.parent.name for p in NCU_CAPTURES} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}
    assert {p.parent.name for p in NSYS_CAPTURES} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}


@pytest.fixture(scope="module", params=NCU_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def ncu_pair(request):
    cap = request.param
    return parse.ncu_frame(find_file(cap, "ncu.ncu-rep")), parse.ncu_csv_frame(find_file(cap, "ncu_raw.csv"))


def _digits_equal(value: float, printed: str, unit: str) -> bool:
    """``value`` (base units, from ncu-report) printed in ``unit`` with the CSV's decimals is the CSV's string."""
    text = printed.replace(",", "")
    scale, _ = parse.unit_scale(unit)
    decimals = len(text.split(".")[1]) if "." in text else 0
    # within half a unit of the last printed digit (ncu rounds half up, Python's format half-even)
    return abs(value / scale - float(text)) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9) + 1e-12 * abs(float(text))


def test_ncu_report_agrees_with_ncu_csv_to_the_digit(ncu_pair):
    rep, csv = ncu_pair
    assert len(rep) == len(csv) > 0
    assert (rep["range"].to_numpy() == csv["range"].to_numpy()).all()
    assert rep["range"].notna().all(), "every profiled launch lies in a measured range"
    metrics = [c for c in rep.columns if "__" in c and c in csv.columns]
    assert len(metrics) >= 25
    checked = 0
    for i in range(len(rep)):
        printed = csv.attrs["printed"][i]
        for m in metrics:
            v = rep.at[i, m]
            if isinstance(v, str):
                continue
            text, unit = printed[m]
            assert _digits_equal(float(v), text, unit), f"launch {i} {m}: report {v} vs csv {text} {unit}"
            checked += 1
    assert checked > 1000


def test_ncu_rows_carry_range_columns(ncu_pair):
    rep, _ = ncu_pair
    assert {"variant", "pass", "B", "H", "N", "D", "dtype", "causal", "options", "kernel"} <= set(rep.columns)
    assert set(rep["pass"]) <= {"forward", "backward"}
    assert rep.attrs["units"]["gpu__time_duration.sum"] == "ns"


def _stats(cap, name):
    return pd.read_csv(cap / f"nsys_stats_{name}.csv")


@pytest.fixture(scope="module", params=NSYS_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def nsys_capture(request):
    return request.param, parse.nsys_tables(find_file(request.param, "nsys.sqlite"))


def test_nsys_kernels_agree_with_nsys_stats(nsys_capture):
    cap, t = nsys_capture
    mine = parse.nsys_kernel_summary(t["kernels"])
    theirs = _stats(cap, "cuda_gpu_kern_sum").set_index("Name")
    assert len(mine) == len(theirs)
    for name, row in theirs.iterrows():
        assert mine.loc[name, "instances"] == row["Instances"]
        assert abs(mine.loc[name, "total_ns"] - row["Total Time (ns)"]) <= 1e-3 * row["Total Time (ns)"]


def test_nsys_ranges_agree_with_nsys_stats(nsys_capture):
    cap, t = nsys_capture
    mine = parse.nsys_range_summary(t["ranges"])
    theirs = _stats(cap, "nvtx_sum")
    theirs["range"] = theirs["Range"].str.lstrip(":")
    theirs = theirs[theirs["range"].str.startswith("fk:")].set_index("range")
    assert len(mine) == len(theirs) > 100
    for name, row in theirs.iterrows():
        assert mine.loc[name, "instances"] == row["Instances"]
        assert abs(mine.loc[name, "total_ns"] - row["Total Time (ns)"]) <= 1e-3 * row["Total Time (ns)"]


def test_every_measured_range_has_its_kernels_joined(nsys_capture):
    _, t = nsys_capture
    k = t["kernels"]
    joined = k[k["range_id"] >= 0]
    assert set(joined["range_id"]) == set(t["ranges"].index), "a range without kernels"
    bwd = joined[(joined["variant"] == "sdpa_flash") & (joined["pass"] == "backward")]
    assert len(bwd) and bwd["kernel"].str.contains("bwd").any(), "SDPA backward kernels (autograd thread) joined"
    # no kernel joins a range on another thread
    assert (joined["tid"].to_numpy() == t["ranges"].loc[joined["range_id"], "tid"].to_numpy()).all()


def _mini_sqlite(path, kernel_table="CUPTI_ACTIVITY_KIND_KERNEL", drop=None):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "k_full"), (2, "k")])
    con.execute(f"CREATE TABLE {kernel_table} (start INT, end INT, correlationId INT, demangledName INT, shortName INT)")
    con.executemany(f"INSERT INTO {kernel_table} VALUES (?,?,?,?,?)", [(110, 150, 7, 1, 2), (500, 520, 8, 1, 2)])
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (correlationId INT, globalTid INT, start INT)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?)", [(7, 1, 105), (8, 2, 120)])
    con.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, textId INT, globalTid INT)")
    con.execute("INSERT INTO NVTX_EVENTS VALUES (100, 200, 59, 'fk:naive:forward:B=1,H=2,N=64,D=64,dtype=float16,causal=0',"
                " NULL, 1)")
    if drop:
        con.execute(f"DROP TABLE {drop}")
    con.commit()
    con.close()


def test_nsys_versioned_tables_and_thread_join(tmp_path):
    _mini_sqlite(tmp_path / "a.sqlite", kernel_table="CUPTI_ACTIVITY_KIND_KERNEL_V2")
    t = parse.nsys_tables(tmp_path / "a.sqlite")
    k = t["kernels"].set_index("correlationId")
    assert k.loc[7, "variant"] == "naive" and k.loc[7, "N"] == 64
    assert k.loc[8, "range_id"] == -1  # launched on another thread inside the same time window: not joined
    assert k.loc[7, "kernel"] == "k" and k.loc[7, "kernel_full"] == "k_full"


def test_nsys_missing_table_is_a_clear_error(tmp_path):
    _mini_sqlite(tmp_path / "b.sqlite", drop="NVTX_EVENTS")
    with pytest.raises(ProfileError, match="no NVTX_EVENTS table.*--trace=cuda,nvtx"):
        parse.nsys_tables(tmp_path / "b.sqlite")
    (tmp_path / "c.sqlite").write_text("not a database")
    with pytest.raises(ProfileError, match="not a readable SQLite"):
        parse.nsys_tables(tmp_path / "c.sqlite")
    with pytest.raises(ProfileError, match="no such"):
        parse.nsys_tables(tmp_path / "none.sqlite")


def test_ncu_csv_rejects_other_csv(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProfileError, match="not an 'ncu --csv --page raw' export"):
        parse.ncu_csv_frame(tmp_path / "x.csv")


def test_unit_scale():
    assert parse.unit_scale("Mbyte") == (1e6, "byte")
    assert parse.unit_scale("Kbyte/cycle") == (1e3, "byte/cycle")
    assert parse.unit_scale("ms")[0] == 1e6 and parse.unit_scale("usecond")[0] == 1e3
    assert parse.unit_scale("Ghz") == (1e9, "hz")
    assert parse.unit_scale("%") == (1.0, "%")
    assert np.isnan(parse.parse_number("n/a")) and parse.parse_number("1,081,344") == 1081344
    assert re.fullmatch(r"\d+", "12")
