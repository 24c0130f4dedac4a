"""Parsers against what Nsight itself said on the node (the oracles committed beside each capture)."""

import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsightlab.core.ranges import schemas_of
from nsightlab.parse import ncu, nsys
from nsightlab.problems import attention
from nsightlab.store.captures import ProfileError, find_file, load_manifest
from nsightlab.store.read import tools_of

ROOT = Path(__file__).resolve().parent.parent
FOREIGN_DATA = ROOT / "tests" / "data" / "foreign"
FOREIGN = ROOT / "profiles" / "nvidia-h200" / "foreign-example"


def _captures(tool: str) -> list[Path]:
    """Every committed capture folder whose manifest lists ``tool``, on every GPU."""
    out = []
    for man in sorted((ROOT / "profiles").glob("*/*/manifest.json")):
        if man.parent.parent.name.startswith("_"):
            continue
        m = load_manifest(man.parent)
        if tool in tools_of(m):
            out.append(man.parent)
    return out


def _oracle(cap: Path, name: str) -> Path | None:
    """Nsight's own export for a capture: beside it (captured here), or in tests/data (the foreign one)."""
    theirs = {"ncu_raw.csv": "foreign_raw.csv", "nsys_stats_nvtx_sum.csv": "foreign_stats_nvtx_sum.csv",
              "nsys_stats_cuda_gpu_kern_sum.csv": "foreign_stats_cuda_gpu_kern_sum.csv"}
    return find_file(cap, name) or (find_file(FOREIGN_DATA, theirs[name]) if cap == FOREIGN else None)


#: (capture, ncu report, Nsight's raw CSV of it): every committed capture that has both
NCU_PAIRS = [(c, find_file(c, "ncu.ncu-rep"), _oracle(c, "ncu_raw.csv")) for c in _captures("ncu")]
NCU_PAIRS = [p for p in NCU_PAIRS if p[1] is not None and p[2] is not None]
NSYS_CAPTURES = [c for c in _captures("nsys") if _oracle(c, "nsys_stats_nvtx_sum.csv") is not None]


def test_both_gpus_and_a_foreign_capture_are_checked():
    assert {p[0].parent.name for p in NCU_PAIRS} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}
    assert {p.parent.name for p in NSYS_CAPTURES} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}
    assert FOREIGN in [p[0] for p in NCU_PAIRS] and FOREIGN in NSYS_CAPTURES


@pytest.fixture(scope="module", params=NCU_PAIRS, ids=lambda p: f"{p[0].parent.name}/{p[0].name}")
def ncu_pair(request):
    cap, rep, csv = request.param
    schemas = schemas_of(load_manifest(cap))
    return cap, ncu.ncu_frame(rep, schemas=schemas), ncu.ncu_csv_frame(csv, schemas=schemas)


def _digits_equal(value: float, printed: str, unit: str) -> bool:
    """``value`` (base units, from ncu-report) printed in ``unit`` with the CSV's decimals is the CSV's string."""
    text = printed.replace(",", "")
    scale, _ = ncu.unit_scale(unit)
    decimals = len(text.split(".")[1]) if "." in text else 0
    # within half a unit of the last printed digit (ncu rounds half up, Python's format half-even)
    return abs(value / scale - float(text)) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9) + 1e-12 * abs(float(text))


def test_ncu_report_agrees_with_ncu_csv_to_the_digit(ncu_pair):
    cap, rep, csv = ncu_pair
    assert len(rep) == len(csv) > 0
    assert (rep["range"].to_numpy() == csv["range"].to_numpy()).all()
    assert (rep["domain"].to_numpy() == csv["domain"].to_numpy()).all()
    if cap != FOREIGN:
        assert (rep["range"] != "").all(), "every profiled launch lies in a measured range (ncu's NVTX filter)"
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
            if text.strip() in ("", "n/a", "no data"):
                assert v != v or v is None or text.strip() == "", f"launch {i} {m}: report {v} vs csv n/a"
                continue
            assert _digits_equal(float(v), text, unit), f"launch {i} {m}: report {v} vs csv {text} {unit}"
            checked += 1
    assert checked > 500


def test_ncu_rows_carry_range_columns(ncu_pair):
    cap, rep, _ = ncu_pair
    assert {"range", "domain", "variant", "pass", "kernel", "kernel_full", "launch"} <= set(rep.columns)
    assert rep.attrs["units"]["gpu__time_duration.sum"] in ("ns", "nsecond", "usecond", "msecond")
    if cap == FOREIGN:  # plain names of someone else's: kept raw, decoded generically, never fatal
        named = rep[rep["range"] != ""]
        assert set(named["range"]) == {"gemm:fwd M=2048 N=2048 K=2048", "elementwise mul n=4194304",
                                       "sdpa flash B=4 H=16 N=2048 D=64", "reduce: sum"}
        gemm = named[named["variant"] == "gemm:fwd"].iloc[0]
        assert (gemm["M"], gemm["N"], gemm["K"]) == (2048, 2048, 2048)
        assert set(named.loc[named["variant"] == "sdpa flash", "domain"]) == {"model"}
        assert (rep["range"] == "").sum() >= 1 and rep.loc[rep["range"] == "", "variant"].isna().all()
    else:  # decoded with the capture's own schema: its typed fields become columns
        schema = schemas_of(load_manifest(cap))[0]
        assert {*schema.fields, "options"} <= set(rep.columns) and set(rep["schema"]) == {schema.prefix}
        assert set(rep["pass"]) <= {"forward", "backward"}


def _stats(cap, name):
    return pd.read_csv(_oracle(cap, f"nsys_stats_{name}.csv"))


@pytest.fixture(scope="module", params=NSYS_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def nsys_capture(request):
    cap = request.param
    return cap, nsys.nsys_tables(find_file(cap, "nsys.sqlite"), schemas=schemas_of(load_manifest(cap)))


def test_nsys_kernels_agree_with_nsys_stats(nsys_capture):
    cap, t = nsys_capture
    mine = nsys.nsys_kernel_summary(t["kernels"])
    theirs = _stats(cap, "cuda_gpu_kern_sum").set_index("Name")
    assert len(mine) == len(theirs)
    for name, row in theirs.iterrows():
        assert mine.loc[name, "instances"] == row["Instances"]
        assert abs(mine.loc[name, "total_ns"] - row["Total Time (ns)"]) <= 1e-3 * row["Total Time (ns)"]


def test_nsys_ranges_agree_with_nsys_stats(nsys_capture):
    cap, t = nsys_capture
    mine = nsys.nsys_range_summary(t["ranges"])
    theirs = _stats(cap, "nvtx_sum")
    # nsys prints "<domain>:<name>" (the default domain is empty): every range of every domain
    theirs["range"] = theirs["Range"].str.split(":", n=1).str[1]
    theirs = theirs.set_index("range")
    assert len(mine) == len(theirs) >= len(load_manifest(cap).get("cases") or [None] * 4)
    for name, row in theirs.iterrows():
        assert mine.loc[name, "instances"] == row["Instances"]
        assert abs(mine.loc[name, "total_ns"] - row["Total Time (ns)"]) <= 1e-3 * row["Total Time (ns)"]


def test_every_range_gets_its_kernels_on_the_launching_thread(nsys_capture):
    cap, t = nsys_capture
    k = t["kernels"]
    joined = k[k["range_id"] >= 0]
    assert (joined["tid"].to_numpy() == t["ranges"].loc[joined["range_id"], "tid"].to_numpy()).all()
    assert (k.loc[k["range_id"] < 0, "range"] == "").all()
    if cap == FOREIGN:
        by_range = joined.groupby("range")["kernel"].apply(set).to_dict()
        assert any("nvjet" in n or "gemm" in n for n in by_range["gemm:fwd M=2048 N=2048 K=2048"])
        assert any("sdpa" in n or "flash" in n for n in by_range["sdpa flash B=4 H=16 N=2048 D=64"]), \
            "the innermost range wins over the enclosing 'attention block'"
        assert "attention block" not in by_range
        assert (k["range"] == "").sum() >= 1, "kernels outside every range are kept"
        return
    measured = t["ranges"][t["ranges"]["range"].str.startswith(tuple(s.prefix + ":" for s in schemas_of(load_manifest(cap))))]
    assert set(joined["range_id"]) == set(measured.index), "a measured range without kernels"
    bwd = joined[(joined["pass"] == "backward")]
    if (measured["range"].str.contains(":backward:")).any():  # a forward-only sweep (decode) has none
        assert len(bwd), "backward kernels (launched on autograd's thread) joined to their ranges"
    sdpa = bwd[bwd["variant"] == "sdpa_flash"]
    assert sdpa.empty or sdpa["kernel"].str.contains("bwd").any()


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
    t = nsys.nsys_tables(tmp_path / "a.sqlite", schemas=[attention.schema("fk")])
    k = t["kernels"].set_index("correlationId")
    assert k.loc[7, "variant"] == "naive" and k.loc[7, "N"] == 64
    assert k.loc[8, "range_id"] == -1  # launched on another thread inside the same time window: not joined
    assert k.loc[7, "kernel"] == "k" and k.loc[7, "kernel_full"] == "k_full"


def test_nsys_missing_table_is_a_clear_error(tmp_path):
    _mini_sqlite(tmp_path / "b.sqlite", drop="CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(ProfileError, match="no CUPTI_ACTIVITY_KIND_KERNEL table.*--trace=cuda,nvtx"):
        nsys.nsys_tables(tmp_path / "b.sqlite")
    _mini_sqlite(tmp_path / "d.sqlite", drop="NVTX_EVENTS")  # captured without --trace=nvtx: kernels, no ranges
    t = nsys.nsys_tables(tmp_path / "d.sqlite")
    assert len(t["kernels"]) == 2 and (t["kernels"]["range"] == "").all() and t["ranges"].empty
    (tmp_path / "c.sqlite").write_text("not a database")
    with pytest.raises(ProfileError, match="not a readable SQLite"):
        nsys.nsys_tables(tmp_path / "c.sqlite")
    with pytest.raises(ProfileError, match="no such"):
        nsys.nsys_tables(tmp_path / "none.sqlite")


def test_ncu_csv_rejects_other_csv(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProfileError, match="not an 'ncu --csv --page raw' export"):
        ncu.ncu_csv_frame(tmp_path / "x.csv")


def test_unit_scale():
    assert ncu.unit_scale("Mbyte") == (1e6, "byte")
    assert ncu.unit_scale("Kbyte/cycle") == (1e3, "byte/cycle")
    assert ncu.unit_scale("ms")[0] == 1e6 and ncu.unit_scale("usecond")[0] == 1e3
    assert ncu.unit_scale("Ghz") == (1e9, "hz")
    assert ncu.unit_scale("%") == (1.0, "%")
    assert ncu.unit_scale("%/Kbyte") == (1e3, "%/byte")
    assert np.isnan(ncu.parse_number("n/a")) and ncu.parse_number("1,081,344") == 1081344
    assert re.fullmatch(r"\d+", "12")


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def test_reading_reports_does_not_grow_the_reading_process(monkeypatch):
    """ncu-report keeps about 1.4 MB of every launch it decoded until its process ends (closing the report
    frees nothing): the readers run in a process of their own (nsightlab.parse.isolated), so reading the
    124-launch blocksize report and the 36-launch deep one twice leaves this process as it was. In process
    that was about 2 x (124 + 2 x 36) x 1.4 MB = 550 MB for good."""
    from nsightlab.parse import deep

    monkeypatch.setattr(deep, "_cache_file", lambda *args: None)  # every read reads the report, not the cache
    light = ROOT / "profiles" / "nvidia-h200" / "blocksize"
    rep, schemas = find_file(light, "ncu.ncu-rep"), schemas_of(load_manifest(light))
    deep_rep = find_file(ROOT / "profiles" / "nvidia-h200" / "bottleneck-deep", "deep.ncu-rep")
    ncu.ncu_frame(rep, metrics=["gpu__time_duration.sum"], schemas=schemas)  # imports and caches warmed
    before = _rss_mb()
    for _ in range(2):
        df = ncu.ncu_frame(rep, schemas=schemas)
        launches, values = deep.launches(deep_rep), deep.metric_values(deep_rep)
    grew = _rss_mb() - before
    assert len(df) == 124 and len(launches) == 36 and len(values) > 1000
    assert grew < 80, f"reading grew this process by {grew:.0f} MB"


def test_a_deep_read_is_served_again_from_the_cache_and_only_for_the_same_question(tmp_path, monkeypatch):
    """What a read of a deep report found is kept (nsightlab.parse.deep: the cache folder, $NSIGHTLAB_CACHE), and
    the same read again gives the same frames without opening the report; another set of parts, another report
    or a cut-short cache file reads the report."""
    from nsightlab.parse import deep

    monkeypatch.setenv("NSIGHTLAB_CACHE", str(tmp_path))
    folder = ROOT / "profiles" / "nvidia-h200" / "mma-fwd-d128-deep"
    rep, schemas = find_file(folder, "deep.ncu-rep"), schemas_of(load_manifest(folder))
    first = deep.read(rep, schemas)
    kept = list((tmp_path / "deep-frames").glob("*.pkl"))
    assert len(kept) == 1 and not list((tmp_path / "deep-frames").glob("tmp*"))
    reads = []
    real = deep.isolated.call
    monkeypatch.setattr(deep.isolated, "call", lambda *a, **k: reads.append(a) or real(*a, **k))
    again = deep.read(rep, schemas)
    assert reads == []
    for part in deep.PARTS:
        pd.testing.assert_frame_equal(first[part], again[part])
    assert again["launches"].attrs["source"] == str(rep)
    deep.read(rep, schemas, parts=("launches",))  # another question: the report is read
    assert len(reads) == 1
    kept[0].write_bytes(kept[0].read_bytes()[:100])  # cut short: read past, the report read, the cache mended
    mended = deep.read(rep, schemas)
    assert len(reads) == 2
    pd.testing.assert_frame_equal(first["values"], mended["values"])
    assert len(deep.read(rep, schemas)["sass"]) == len(first["sass"]) and len(reads) == 2


def test_the_reading_process_hands_back_results_and_errors_and_survives_a_crash():
    import os

    from nsightlab.parse import isolated

    assert isolated.call(divmod, 7, 2) == (3, 1)
    with pytest.raises(ValueError, match="invalid literal"):
        isolated.call(int, "x")  # the reader's own exception, raised here
    with pytest.raises(ProfileError, match="its process ended with status 3"):
        isolated.call(os._exit, 3)  # a reader that takes its process down (a crash inside Nsight's library)
    assert isolated.call(divmod, 9, 4) == (2, 1)  # the next read gets a fresh process



def test_a_capture_with_both_tiers_reads_the_light_tier_for_its_light_pages(tmp_path):
    """The deep tier profiles some cases a second time into deep.ncu-rep beside ncu.ncu-rep: the light pages
    (ranges, rooflines, options) read ncu.ncu-rep only, or a deep case's range would count every launch twice;
    a deep-only capture's report is its only one. The committed H100 backward capture has both."""
    from nsightlab.store.read import load_ncu, ncu_files

    for names, expected in ((["deep.ncu-rep.xz", "ncu.ncu-rep.xz"], ["ncu.ncu-rep.xz"]),
                            (["deep.ncu-rep.xz"], ["deep.ncu-rep.xz"]),
                            (["deep_raw.csv", "ncu_raw.csv"], ["ncu_raw.csv"])):
        d = tmp_path / "-".join(names)
        d.mkdir()
        for n in names:
            (d / n).write_bytes(b"")
        assert [p.name for p in ncu_files(d)] == expected, names
    cap = Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h100-80gb-hbm3" / "backward"
    df = load_ncu(cap, load_manifest(cap))
    launches = df.groupby("range")["launch"].nunique()
    assert (launches == 3).all(), launches[launches != 3]  # rowdot, the kernel, the dQ cast (cuDNN: its 3)
