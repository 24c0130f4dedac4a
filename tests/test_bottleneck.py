"""The bottleneck analysis against Nsight Compute's own CSV exports of the same reports (no GPU).

Oracles, all committed: the three deep captures (``profiles/nvidia-h200/{bottleneck,seqlen,backward-n8192}-deep``:
their ``deep.ncu-rep`` and ``ncu --import deep.ncu-rep --csv --page details --print-units base
--print-metric-name name`` / ``--page raw --csv --print-units base``), and the same exports (plus ``--page
source --csv --print-source sass``) of the three imported ``--set full`` reports under
``tests/data/nsight_exports`` (two of this project's kernels, and ``foreign-set-full``: a cuBLAS GEMM, an elementwise
multiply, SDPA and a reduction under NVTX ranges of their own naming), where the source page of
``backward-n8192-deep`` is too. Every launch of every report is held against them: the details page, the
columns of profile / stalls / pipes / occupancy_limits, and the per-instruction warp-state samples.

ncu prints a number with thousands separators and as many decimals as it chose (2, or 0 for integers);
a value matches when it prints the same at that precision (``_as_printed``): rounding, never a tolerance.

Where Nsight Compute's CLI (2025.3.1, which wrote the CSVs) and the ``ncu-report`` module that reads the
report disagree on what a section shows, the difference is listed below by name and checked to be the
only one; see ``NSIGHT_ONLY`` / ``REPORT_ONLY`` and ``SASS_SYNTAX_DIFFERS``.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nsightlab import cli
from nsightlab.analysis import advice as A
from nsightlab.analysis import bottleneck as B
from nsightlab.analysis import why
from nsightlab.cli import why as why_cmd
from nsightlab.core.errors import ProfileError
from nsightlab.core.files import local_copy
from nsightlab.core.metrics import BOTTLENECK_SECTIONS
from nsightlab.core.sources import source_key
from nsightlab.parse import deep as deep_parse
from nsightlab.store.captures import find_file, load_manifest
from nsightlab.store.read import capture_schemas

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "profiles" / "nvidia-h200"
EXPORTS = ROOT / "tests" / "data" / "nsight_exports"

#: report -> (capture folder, report name in it, details CSV, raw CSV, source CSV or None)
REPORTS: dict[str, tuple[Path, str, Path, Path, Path | None]] = {
    "bottleneck-deep": (H200 / "bottleneck-deep", "deep.ncu-rep", H200 / "bottleneck-deep" / "deep_details.csv.xz",
                        find_file(H200 / "bottleneck-deep", "deep_raw.csv"), None),
    "d256-deep": (H200 / "d256-deep", "deep.ncu-rep", H200 / "d256-deep" / "deep_details.csv.xz",
                  find_file(H200 / "d256-deep", "deep_raw.csv"), None),
    "backward-n8192-deep": (H200 / "backward-n8192-deep", "deep.ncu-rep", H200 / "backward-n8192-deep" / "deep_details.csv.xz",
                            find_file(H200 / "backward-n8192-deep", "deep_raw.csv"),
                            EXPORTS / "backward-n8192-deep.source-sass.csv.xz"),
    **{name: (H200 / name, "ncu.ncu-rep", EXPORTS / f"{name}.details.csv.xz", EXPORTS / f"{name}.raw.csv.xz",
              EXPORTS / f"{name}.source-sass.csv.xz")
       for name in ("flash-mma-bwd-8warp-full", "flash-wgmma-fwd-full", "foreign-set-full")},
}
WITH_SOURCE_PAGE = [name for name, spec in REPORTS.items() if spec[4] is not None]

#: details-page metrics the CLI prints that the report's section header (as ncu-report reads it) lacks.
#: On GH100 the CLI's MemoryWorkloadAnalysis shows L2 compression under the lrc__ilc names, the report
#: module under the lts__gcomp names (REPORT_ONLY); both spellings' values are in the report.
#: The CLI's PM Sampling header also shows the sampling interval, a profiler__ metric.
NSIGHT_ONLY: dict[str, set[str]] = {
    "Memory Workload Analysis": {"lrc__average_ilc_input_sector_success_rate.pct",
                                 "lrc__average_ilc_output_sector_compression_achieved_rate.pct",
                                 "lrc__ilc_input_sectors.sum"},
    "PM Sampling": {"profiler__pmsampler_interval_time"},
}
REPORT_ONLY: dict[str, set[str]] = {
    "Memory Workload Analysis": {"lts__average_gcomp_input_sector_success_rate.pct",
                                 "lts__average_gcomp_output_sector_compression_achieved_rate.ratio"},
}

#: the source page's short stall column names -> the report's sampled reasons (smsp__pcsamp_warps_issue_stalled_<reason>)
CSV_STALLS: dict[str, str] = {
    "barrier": "barrier", "branch_resolving": "branch_resolving", "dispatch": "dispatch_stall", "drain": "drain",
    "imc": "imc_miss", "lg": "lg_throttle", "long_sb": "long_scoreboard", "math": "math_pipe_throttle",
    "membar": "membar", "mio": "mio_throttle", "misc": "misc", "no_inst": "no_instructions",
    "not_selected": "not_selected", "selected": "selected", "short_sb": "short_scoreboard", "sleep": "sleeping",
    "tex": "tex_throttle", "wait": "wait",
}
#: sampled reasons the CLI's source page has no column for; their samples are the rest of "All Samples"
CSV_UNLISTED_STALLS = {"warpgroup_arrive"}
#: opcodes whose operands the CLI's disassembler and ncu-report's print in another order or spelling
#: (LDGSTS: shared destination first or last; HGMMA: ", gsb0" vs ".gsb0"; BRA: ncu-report writes the target's label,
#: "`(.L_x_0)", before its address; UTMALDG: the descriptor last or first); the opcode itself must agree
SASS_SYNTAX_DIFFERS = {"LDGSTS", "HGMMA", "BRA", "UTMALDG"}

_NUMBER = re.compile(r"^-?[\d,]+(?:\.(\d+))?$")


def _as_printed(value: object, printed: str) -> str:
    """``value`` as ncu printed ``printed``: a string as is; a number with thousands separators and the
    printed number of decimals."""
    if isinstance(value, str) or value is None:
        return "" if value is None else value
    m = _NUMBER.match(printed)
    decimals = len(m.group(1)) if m and m.group(1) else 0
    return f"{float(value):,.{decimals}f}"


def _text(path: Path) -> str:
    return local_copy(path).read_text()


@functools.cache
def _loaded(name: str) -> B.Deep:
    folder, report = REPORTS[name][:2]
    return B.load(find_file(folder, report), capture_schemas(load_manifest(folder)))


@pytest.fixture(scope="module", params=list(REPORTS))
def report(request: pytest.FixtureRequest) -> tuple[str, B.Deep]:
    return request.param, _loaded(request.param)


@pytest.fixture(scope="module")
def bottleneck_deep() -> B.Deep:
    return _loaded("bottleneck-deep")


# --------------------------------------------------------------------------- the details page

def _details_csv(name: str) -> pd.DataFrame:
    d = pd.read_csv(io.StringIO(_text(REPORTS[name][2])), dtype=str, keep_default_na=False)
    return d[d["Metric Name"] != ""]  # rule rows (a section's advice) carry no metric


def test_every_details_page_value_equals_nsights_csv(report):
    name, deep = report
    printed = _details_csv(name)
    assert list(printed["ID"].astype(int).unique()) == list(deep.launches["launch"])
    for launch in deep.launches["launch"]:
        ours = B.details(deep, launch)
        theirs = printed[printed["ID"].astype(int) == launch]
        assert set(theirs["Section Name"]) == set(ours["section_name"]), f"launch {launch}: sections differ"
        for section, rows in theirs.groupby("Section Name"):
            mine = ours[ours["section_name"] == section].set_index("metric")
            csv_metrics = set(rows["Metric Name"])
            assert csv_metrics - set(mine.index) <= NSIGHT_ONLY.get(section, set()), (launch, section)
            assert set(mine.index) - csv_metrics <= REPORT_ONLY.get(section, set()), (launch, section)
            for metric, unit, value in zip(rows["Metric Name"], rows["Metric Unit"], rows["Metric Value"], strict=True):
                if metric in mine.index:
                    assert (mine.at[metric, "unit"], _as_printed(mine.at[metric, "value"], value)) == (unit, value), \
                        f"launch {launch} {section} {metric}"
                elif not metric.startswith("profiler__"):  # profiler__ metrics are the profiler's, not the launch's
                    assert _as_printed(deep.value(launch, metric), value) == value, f"launch {launch} {metric}"


# --------------------------------------------------------------------------- the raw page

def _raw_csv(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """({metric: unit}, one {metric: printed value} per launch) of a raw page export."""
    header, units, *rows = list(csv.reader(io.StringIO(_text(REPORTS[name][3]))))
    assert len(set(header)) == len(header)
    return dict(zip(header, units, strict=True)), [dict(zip(header, r, strict=True)) for r in rows]


def _raw_columns(deep: B.Deep) -> list[tuple[int, str, str, object]]:
    """(launch, what, metric, our value) for every column of profile, stalls, pipes and occupancy_limits."""
    out = [(r["launch"], col, metric, r[col]) for r in B.profile(deep).to_dict("records")
           for col, metric in B.PROFILE_METRICS.items()]
    out += [(r.launch, f"stall {r.reason}", r.metric, r.cycles) for r in B.stalls(deep).itertuples()]
    out += [(r.launch, f"pipe {r.pipe}", r.metric, r.pct) for r in B.pipes(deep).itertuples()]
    out += [(r.launch, f"limit {r.limit}", B.LIMITS[r.limit], r.blocks) for r in B.occupancy_limits(deep).itertuples()]
    return out


def test_profile_stalls_pipes_and_limits_equal_nsights_raw_csv(report):
    name, deep = report
    units, rows = _raw_csv(name)
    assert len(rows) == len(deep.launches)
    unit_of = {m: u for m, u in zip(deep.values["metric"], deep.values["unit"], strict=True)}
    columns = _raw_columns(deep)
    assert len(columns) > 60 * len(rows)
    for launch, what, metric, value in columns:
        assert value is not None and not pd.isna(value), f"launch {launch}: no {what} ({metric})"
        assert unit_of[metric] == units[metric], f"{metric}: unit {unit_of[metric]!r}, Nsight's {units[metric]!r}"
        printed = rows[launch][metric]
        assert _as_printed(value, printed) == printed, f"launch {launch} {what} ({metric})"


def test_stalls_and_pipes_cover_every_stall_and_pipe_nsight_reports(report):
    name, deep = report
    units, _ = _raw_csv(name)
    stall = re.compile(B.STALL_METRIC.format(r"(\w+?)").replace(".", r"\.") + "$")
    csv_reasons = {m[1] for m in map(stall.match, units) if m}
    assert csv_reasons and csv_reasons <= set(B.STALLS), csv_reasons - set(B.STALLS)
    assert set(B.stalls(deep)["reason"]) == csv_reasons
    assert set(B.pipes(deep)["metric"]) == {m for m in units if B._PIPE.match(m)}


def test_profiles_derived_columns_come_from_the_same_metrics(report):
    _, deep = report
    prof, p, s = B.profile(deep).set_index("launch"), B.pipes(deep), B.stalls(deep)
    for launch, row in prof.iterrows():
        mine = p[p["launch"] == launch]
        assert row["top_pipe_pct"] == mine.loc[mine["kind"] == "instructions", "pct"].max()
        waits = s[(s["launch"] == launch) & (s["reason"] != "selected")]
        assert (row["top_stall"], row["top_stall_cycles"]) == tuple(waits.loc[waits["cycles"].idxmax(), ["reason", "cycles"]])
        assert math.isclose(s.loc[s["launch"] == launch, "share"].sum(), 1.0)
        limits = {k: deep.value(launch, m) for k, m in B.LIMITS.items()}
        low = min(v for v in limits.values() if v is not None)
        assert set(row["occupancy_limiter"].split(" = ")) == {k for k, v in limits.items() if v == low}


# --------------------------------------------------------------------------- the source page (hotspots)

def _source_blocks(path: Path) -> list[tuple[str, pd.DataFrame]]:
    """(kernel name, its table) per kernel of a ``--page source --csv`` export, in report order. Nsight Compute's
    CLI (2025.3.1) prints the block of a kernel whose report holds its CUDA source twice in a row, identical
    (``backward-n8192-deep``'s export; the imported reports' have one each): a block equal to the one before it
    is that repetition, not a launch."""
    blocks: list[tuple[str, list[list[str]]]] = []
    for row in csv.reader(io.StringIO(_text(path))):
        if row and row[0] == "Kernel Name":
            blocks.append((row[1], []))
        elif row:
            blocks[-1][1].append(row)
    blocks = [b for i, b in enumerate(blocks) if i == 0 or b != blocks[i - 1]]
    return [(kernel, pd.DataFrame(rows[1:], columns=rows[0])) for kernel, rows in blocks]


@pytest.mark.parametrize("name", WITH_SOURCE_PAGE)
def test_sass_samples_equal_nsights_source_page(name):
    deep = _loaded(name)
    blocks = _source_blocks(REPORTS[name][4])
    assert len(blocks) == len(deep.launches)
    for launch, (kernel, table) in enumerate(blocks):
        assert deep.launches.at[launch, "kernel"] in kernel
        stall_cols = [c for c in table.columns if c.startswith("stall_") and not c.endswith("(Not Issued)")]
        assert {c.removeprefix("stall_") for c in stall_cols} == set(CSV_STALLS), "map every stall column Nsight prints"
        ours = deep.sass[deep.sass["launch"] == launch].set_index("address")
        reasons = {c.removeprefix("stall_") for c in ours.columns if c.startswith("stall_")}
        assert reasons == set(CSV_STALLS.values()) | CSV_UNLISTED_STALLS
        num = table.drop(columns=["Address", "Source"]).apply(pd.to_numeric, errors="coerce")
        num.index = [int(a, 16) for a in table["Address"]]
        sampled = num[num["Warp Stall Sampling (All Samples)"] > 0]
        assert sorted(sampled.index) == list(ours.index)
        mine = ours.loc[sampled.index]
        assert list(mine["samples"]) == list(sampled["Warp Stall Sampling (All Samples)"])
        assert list(mine["samples_not_issued"]) == list(sampled["Warp Stall Sampling (Not-issued Samples)"])
        for short, reason in CSV_STALLS.items():
            assert list(mine[f"stall_{reason}"]) == list(sampled[f"stall_{short}"]), f"{short} -> {reason}"
        unlisted = mine[[f"stall_{r}" for r in CSV_UNLISTED_STALLS]].sum(axis=1)
        assert list(unlisted) == list(sampled["Warp Stall Sampling (All Samples)"] - sampled[stall_cols].sum(axis=1))
        assert list(mine[[f"stall_{r}" for r in reasons]].sum(axis=1)) == list(mine["samples"])
        _assert_same_sass(mine["sass"], table.set_index(num.index).loc[sampled.index, "Source"])


def _assert_same_sass(ours: pd.Series, printed: pd.Series) -> None:
    for address, mine, theirs in zip(ours.index, ours, printed.str.strip(), strict=True):
        opcode = mine.split()[0].split(".")[0]
        assert mine.split()[0] == theirs.split()[0], f"{address:#x}: {mine!r} vs Nsight's {theirs!r}"
        assert mine == theirs or opcode in SASS_SYNTAX_DIFFERS, f"{address:#x}: {mine!r} vs Nsight's {theirs!r}"


#: Nsight's source-page columns of the per-instruction memory counters -> nsightlab.parse.deep.access_counts' columns
ACCESS_CSV = {"L2 Theoretical Sectors Global": "global_sectors", "L2 Theoretical Sectors Global Ideal": "global_sectors_ideal",
              "L2 Theoretical Sectors Global Excessive": "global_sectors_excessive",
              "L1 Wavefronts Shared": "shared_wavefronts", "L1 Wavefronts Shared Ideal": "shared_wavefronts_ideal",
              "L1 Wavefronts Shared Excessive": "shared_wavefronts_excessive"}


def _source_columns(name: str) -> set[str]:
    """The columns of a source-page export (its second line: the first block's header)."""
    return set(next(csv.reader(io.StringIO(_text(REPORTS[name][4]).split("\n", 2)[1]))))


#: the source-page exports that print every access column: the deep tier's (its sections, not --set full) prints no
#: shared-wavefront columns although the report holds the counters
ACCESS_PAGES = [name for name in WITH_SOURCE_PAGE if set(ACCESS_CSV) <= _source_columns(name)]


@pytest.mark.parametrize("name", ACCESS_PAGES)
def test_access_counts_equal_nsights_source_page(name):
    """Every global or shared memory instruction's sectors and wavefronts (with their ideal and excess) are the
    numbers Nsight's source page prints for it, and no other instruction has a row."""
    deep = _loaded(name)
    assert set(deep.access.columns) >= {"launch", "address", "sass", "file", "line", *ACCESS_CSV.values()}
    rows = _per_instruction_equals_source_page(name, deep.access, ACCESS_CSV, lambda num: (
        num["L2 Theoretical Sectors Global"] > 0) | (num["L1 Wavefronts Shared"] > 0))
    assert rows > 50


def _per_instruction_equals_source_page(name: str, ours_all: pd.DataFrame, columns: dict[str, str], kept) -> int:
    """Hold a per-instruction frame of report ``name`` (``columns``: Nsight's source-page column -> ours) against the
    source page's CSV, launch by launch: the same instructions (those ``kept(numeric table)`` selects), the same
    values and SASS. Returns the rows checked."""
    checked = 0
    for launch, (_, table) in enumerate(_source_blocks(REPORTS[name][4])):
        num = table[list(columns)].apply(pd.to_numeric, errors="coerce").fillna(0.0)
        num.index = [int(a, 16) for a in table["Address"]]
        theirs = num[kept(num)]
        ours = ours_all[ours_all["launch"] == launch].set_index("address")
        assert list(ours.index) == sorted(theirs.index), f"launch {launch}"
        for col, mine in columns.items():
            assert list(ours[mine]) == list(theirs.loc[ours.index, col]), f"launch {launch} {col}"
        _assert_same_sass(ours["sass"], table.set_index(num.index).loc[ours.index, "Source"])
        checked += len(ours)
    return checked


#: Nsight's source-page columns of the per-instruction execution counts -> nsightlab.parse.deep.issue_counts' columns
ISSUE_CSV = {"Instructions Executed": "inst_executed", "Thread Instructions Executed": "thread_inst_executed",
             "Predicated-On Thread Instructions Executed": "thread_inst_executed_true"}


@pytest.mark.parametrize("name", WITH_SOURCE_PAGE)
def test_issue_counts_equal_nsights_source_page(name):
    """Every executed instruction's warp-level executions and thread instructions (all, predicated on) are the
    numbers Nsight's source page prints for it, and no instruction that never executed has a row."""
    rows = _per_instruction_equals_source_page(name, _loaded(name).issue, ISSUE_CSV, lambda num: num["Instructions Executed"] > 0)
    assert rows > 500


def test_predicated_off_counts_a_share_of_each_instructions_executions():
    """An instruction's executions count as issued for nothing in the share of its thread instructions that ran
    predicated off: all of them when none ran predicated on, none when all did, never from a zero thread count."""
    issue = pd.DataFrame({"launch": [0, 0, 0, 0], "file": ["k.cu"] * 4, "line": [1, 1, 2, 3], "sass": ["FSEL", "@P0 ISETP", "IADD3", "BRA"],
                          "inst_executed": [100.0, 100.0, 50.0, 10.0], "thread_inst_executed": [3200.0, 3200.0, 1600.0, 0.0],
                          "thread_inst_executed_true": [0.0, 800.0, 1600.0, 0.0]})
    got = B._predicated_off(issue)["issued_predicated_off"].tolist()
    assert got == [100.0, 75.0, 0.0, 0.0]
    row = pd.Series({"kernel": "k", "inst_executed": 260.0, "issued_predicated_off": 175.0, "threads_per_inst": 32.0,
                     "pred_on_threads_per_inst": 11.0})
    assert B.predicated_share(row) == pytest.approx(175 / 260)
    assert B.predicated_line("a", row).startswith("a (k): 67.3% of its executed warp instructions went to threads whose "
                                                   "predicate was false (11.0 predicated-on threads per executed instruction of 32.0")
    assert B.predicated_line("a", row.replace(175.0, 1.0)) is None  # under 2 %
    assert B.predicated_share(row.drop(["inst_executed", "issued_predicated_off"])) is None  # no source counters


def test_predicated_hotspots_find_the_masks_test_and_its_absence():
    """flash_wgmma's backward before bd431c9 (f9d774b, D = 64) tested the mask per element inside the exp loop, and
    ptxas predicated it: a quarter of the kernel's instructions ran on that line with their predicate false. The
    capture after step 2c (caf73dc) branches around it at D = 64 (under 2 % left) and still has it at D = 128."""
    @functools.cache
    def report(capture: str) -> B.Deep:
        return B.load(find_file(H100 / capture, "deep.ncu-rep"), capture_schemas(load_manifest(H100 / capture)))

    def backward(capture: str, case: str) -> tuple[B.Deep, int, str]:
        deep = report(capture)
        return deep, B.pick_launch(B.select_range(deep, "flash_wgmma", B.parse_case(case))), load_manifest(H100 / capture)["git_commit"]

    before, la, commit = backward("backward-deep-predicated-mask", "D=64,bwd_pipeline=tma-ws")
    hot = B.predicated_hotspots(before, la, n=3, repo=ROOT, commit=commit)
    assert [(f, int(ln)) for f, ln in zip(hot["file"], hot["line"], strict=True)][:2] == [
        ("flash_kernels/csrc/flash_wgmma_bwd.cu", 147), ("flash_kernels/csrc/flash_wgmma_bwd.cu", 146)]
    top = hot.iloc[0]
    assert top["source"].startswith("if (key >= Nk || q >= Nq || (causal && key > q)) p = 0.f;")
    assert (top["inst_executed"], round(top["issued_predicated_off"])) == (235929600, 175338067)
    assert 0.24 < top["share"] < 0.25 and top["sass"].startswith("FSEL x64, ISETP.GE.AND x64, PLOP3.LUT x64")
    row = B.profile(before).set_index("launch").loc[la]
    assert 0.28 < B.predicated_share(row) < 0.29 and row["pred_on_threads_per_inst"] < 23
    assert "the most at flash_kernels/csrc/flash_wgmma_bwd.cu:147: 24.1% of the kernel's instructions" in B.predicated_line("a", row, hot)

    after, lb, _ = backward("backward", "D=64,bwd_pipeline=tma-ws")
    row_b = B.profile(after).set_index("launch").loc[lb]
    assert B.predicated_share(row_b) < 0.02 and B.predicated_line("b", row_b) is None
    text = why_cmd.render("before", "after", before, before.launches[before.launches["launch"] == la], after,
                      after.launches[after.launches["launch"] == lb], 5, (la, lb), full=True)
    assert "Instructions issued with their threads predicated off" in text
    assert "flash_wgmma_bwd.cu:147  175,338,067 of 235,929,600 warp instructions predicated off (24.1% of the kernel's)" in text
    assert "after (flash_wgmma_ws_backward_kernel): 1.8% of its executed warp instructions predicated off (under 2%: not listed)" in text

    d128, lc, commit = backward("backward", "D=128,bwd_pipeline=tma-ws")
    hot = B.predicated_hotspots(d128, lc, n=1, repo=ROOT, commit=commit)
    assert (hot["file"].iloc[0], int(hot["line"].iloc[0]), hot["off_share"].iloc[0]) == ("flash_kernels/csrc/flash_wgmma_bwd.cu", 189, 1.0)
    assert 0.14 < hot["share"].iloc[0] < 0.15


def test_profiles_access_sums_are_nsights_excessive_totals(report):
    """The launch totals of the excess are what Nsight prints as derived__memory_*_excessive on the raw page."""
    name, deep = report
    _, rows = _raw_csv(name)
    prof = B.profile(deep)
    for launch, row in prof.set_index("launch").iterrows():
        for col, metric in (("global_sectors_excessive", "derived__memory_l2_theoretical_sectors_global_excessive"),
                            ("shared_wavefronts_excessive", "derived__memory_l1_wavefronts_shared_excessive")):
            printed = rows[launch][metric]
            assert _as_printed(row[col], printed) == printed, f"launch {launch} {col}"


H100 = ROOT / "profiles" / "nvidia-h100-80gb-hbm3"


def test_access_hotspots_find_the_half_sector_stores_and_their_absence():
    """The decode capture before 9d30f11 wrote each split's fp32 partials as two float4 stores per 8-float chunk
    (half of every 32-byte sector per instruction) after two float4 shared-memory reads that conflict; the capture
    after it writes 16-byte chunks. The page's account names those lines with Nsight's counts, then finds none."""
    def split_kernel(capture: str) -> tuple[B.Deep, int]:
        deep = B.load(find_file(H100 / capture, "deep.ncu-rep"), capture_schemas(load_manifest(H100 / capture)))
        sel = deep.launches[deep.launches["variant"] == "flash_decode"]
        return deep, B.pick_launch(sel, "^flash_decode_kernel")

    before, la = split_kernel("decode-before-producer")
    hot = B.access_hotspots(before, la, n=5, repo=ROOT, commit=load_manifest(H100 / "decode-before-producer")["git_commit"])
    assert [(f, int(ln)) for f, ln in zip(hot["file"], hot["line"], strict=True)] == [
        ("flash_kernels/csrc/decode.cuh", 195), ("flash_kernels/csrc/decode.cuh", 205), ("flash_kernels/csrc/decode.cuh", 206)]
    assert list(hot["shared_wavefronts_excessive"]) == [65536, 0, 0]
    assert list(hot["global_sectors_excessive"]) == [0, 32768, 32768] and list(hot["share"]) == [0.5, 0.25, 0.25]
    assert list(hot["sass"]) == ["LDS.128 x8", "STG.E.128", "STG.E.128"]
    assert hot["source"].iloc[1].startswith("dst[0] = make_float4(") and hot.attrs["source_from"] == "commit 33b95bd"
    row = B.profile(before).set_index("launch").loc[la]
    line = B.access_line("a", row, hot)
    assert line.startswith("a (flash_decode_kernel): global stores use 16.1 of each 32-byte sector's bytes; 65,536 L2 "
                           "sectors beyond the ideal (2% of its global sectors); 65,536 shared-memory wavefronts beyond "
                           "the ideal (3% of its shared wavefronts); the most (50%) at flash_kernels/csrc/decode.cuh:195")

    after, lb = split_kernel("decode")
    assert B.access_hotspots(after, lb, repo=ROOT).empty
    assert B.access_line("b", B.profile(after).set_index("launch").loc[lb]) is None
    text = why_cmd.render("before", "after", before, before.launches[before.launches["launch"] == la], after,
                      after.launches[after.launches["launch"] == lb], 5, (la, lb), full=True)
    assert "Memory accesses beyond the ideal" in text and "decode.cuh:205  STG.E.128: 32,768 L2 sectors" in text


def test_hotspots_rank_the_sampled_lines(bottleneck_deep):
    deep = bottleneck_deep
    launch = int(deep.sass["launch"].iloc[0])
    by_line = B.hotspots(deep, launch, n=5, repo=ROOT)
    samples = deep.sass[deep.sass["launch"] == launch]
    top = samples.groupby(["file", "line"])["samples"].sum().sort_values(ascending=False)
    assert list(by_line["samples"]) == list(top.head(5))
    assert math.isclose(by_line["share"].iloc[0], top.iloc[0] / samples["samples"].sum())
    assert by_line["file"].iloc[0].startswith("flash_kernels/csrc/") and by_line["source"].iloc[0]
    with pytest.raises(ValueError, match="by must be 'line' or 'sass'"):
        B.hotspots(deep, launch, by="file", repo=ROOT)



def test_hotspot_source_text_comes_from_the_captured_commit(tmp_path):
    """A line number is the capture's: its text is read from the file at the capture's commit, not from a
    working tree where an edit since has moved the line; without that commit, the working tree says so."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    src = tmp_path / "kernel.cu"
    src.write_text("int a;\nfloat p = exp2(s);  // the hot line\n")
    subprocess.run([*git, "add", "kernel.cu"], check=True)
    subprocess.run([*git, "commit", "-qm", "captured"], check=True)
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    src.write_text("int a;\n// a comment added after the capture\nfloat p = exp2(s);  // the hot line\n")
    top = pd.DataFrame({"file": ["/build/kernel.cu"], "line": [2], "samples": [10.0], "share": [1.0], "top_stalls": [""]})
    at_commit = B._with_source(top.copy(), tmp_path, "line", rev)
    assert at_commit["source"].iloc[0] == "float p = exp2(s);  // the hot line"
    assert at_commit["file"].iloc[0] == "kernel.cu" and at_commit.attrs["source_from"] == f"commit {rev}"
    dirty = B._with_source(top.copy(), tmp_path, "line", rev + "-dirty")
    assert "uncommitted changes" in dirty.attrs["source_from"] and dirty["source"].iloc[0].startswith("float p")
    for unknown in (None, "0000000"):  # no commit recorded, or one this repository lacks
        here = B._with_source(top.copy(), tmp_path, "line", unknown)
        assert here["source"].iloc[0] == "// a comment added after the capture" and here.attrs["source_from"] == "working tree"

# --------------------------------------------------------------------------- explaining a gap

FORWARD_D128 = B.parse_case("N=4096,D=128,causal=False,pass=forward")


def test_explain_splits_the_whole_gap_and_the_verdict_names_the_ratio(bottleneck_deep):
    deep = bottleneck_deep
    la = B.select_range(deep, "flash_mma", FORWARD_D128)
    lb = B.select_range(deep, "sdpa_flash", FORWARD_D128)
    a, b = int(la["launch"].iloc[0]), int(lb["launch"].iloc[0])
    ranked = B.explain(deep, a, deep, b)
    ta, tb = deep.value(a, "gpu__time_duration.sum"), deep.value(b, "gpu__time_duration.sum")
    assert math.isclose(ranked["ms"].sum(), (ta - tb) / 1e6, rel_tol=1e-9)
    assert math.isclose(ranked["share"].sum(), 1.0, rel_tol=1e-9)
    assert list(ranked["ms"].abs()) == sorted(ranked["ms"].abs(), reverse=True)
    assert ranked.attrs["ratio"] == ta / tb
    stalls = ranked.dropna(subset=["reason"]).set_index("reason")
    for reason, row in stalls.iterrows():
        assert (row["a"], row["b"]) == (deep.value(a, B.STALL_METRIC.format(reason)) or 0.0,
                                        deep.value(b, B.STALL_METRIC.format(reason)) or 0.0)
    text = B.verdict("flash_mma", "sdpa_flash", ranked, B.metric_gaps(deep, a, deep, b))
    assert text.startswith(f"flash_mma takes {ta / tb:.2f}x the time of sdpa_flash ({ta / 1e6:.3f} vs {tb / 1e6:.3f} ms)")
    assert "\n" not in text and "tensor pipe" in text


def _ranked(ratio: float, rows: list[tuple[str, float, float, float]]) -> pd.DataFrame:
    """A ranked table as explain() returns it: (term, a, b, share); time_b 1 ms."""
    gap = ratio - 1.0
    df = pd.DataFrame([{"term": t, "what": "", "a": a, "b": b, "share": sh, "ms": sh * gap} for t, a, b, sh in rows])
    df.attrs.update({"time_a_ms": ratio, "time_b_ms": 1.0, "ratio": ratio})
    return df


def test_the_verdict_gives_shares_of_a_clear_gap_and_milliseconds_where_terms_cancel():
    clear = B.verdict("x", "y", _ranked(1.5, [("instructions issued", 120.0, 100.0, 0.6), ("Stall Wait", 1.2, 0.7, 0.4)]))
    assert "(60% of the gap)" in clear and "(40% of the gap)" in clear and " ms)" not in clear.split(": ", 1)[1]
    # 1.02x with terms of 519% and -400% of the gap: the time each widening term adds, not its share
    close = B.verdict("x", "y", _ranked(1.02, [("Stall Wait", 1.49, 0.71, 5.19), ("instructions issued", 78.0, 116.0, -4.19)]))
    assert "partly cancel" in close and "(+0.104 ms)" in close and "%" not in close
    # within 5% and every term adds time: milliseconds, but nothing cancels; one term: "the one"
    both = B.verdict("x", "y", _ranked(1.03, [("Stall Wait", 1.2, 1.0, 0.6), ("Stall Barrier", 1.1, 1.0, 0.4)]))
    assert "cancel" not in both and "the two that add the most" in both and "(+0.018 ms)" in both
    one = B.verdict("x", "y", _ranked(1.0001, [("Stall Wait", 1.2, 1.0, 1.0)]))
    assert "the one that adds the most" in one and "(+0.1 us)" in one
    # a gap beyond 5% with a term larger than the whole gap: milliseconds too
    over = B.verdict("x", "y", _ranked(1.06, [("Stall Wait", 1.49, 0.71, 1.91), ("Stall Barrier", 1.4, 0.9, -0.91)]))
    assert "(+0.115 ms)" in over and "of the gap" not in over
    # faster: the ratio alone
    assert B.verdict("x", "y", _ranked(0.9, [("Stall Wait", 0.5, 0.7, 1.0)])) == "x takes 0.90x the time of y (0.900 vs 1.000 ms)."


def test_a_backward_range_lists_its_launches_longest_first(bottleneck_deep):
    sel = B.select_range(bottleneck_deep, "flash_mma", {**FORWARD_D128, "pass": "backward"})
    assert len(sel) > 1 and list(sel["time_ns"]) == sorted(sel["time_ns"], reverse=True)
    table = B.launch_table(bottleneck_deep, sel)
    assert math.isclose(table["share"].sum(), 1.0) and list(table["launch"]) == list(sel["launch"])


def test_a_report_without_the_sections_names_them_and_the_flags():
    light = find_file(H200 / "seqlen", "ncu.ncu-rep")
    held = set().union(*deep_parse.launches(light)["sections"])
    missing = [s for s in BOTTLENECK_SECTIONS if s not in held]
    assert "WarpStateStats" in missing
    assert deep_parse.issue_counts(light).empty  # it has inst_executed per instruction, but no source counters
    with pytest.raises(ProfileError) as exc:
        B.load(light)
    message = str(exc.value)
    assert "\n" not in message and f"sections {', '.join(sorted(missing))}, which this report lacks" in message
    assert "--section WarpStateStats" in message and "--set full" in message and "--deep REGEX" in message


@pytest.mark.parametrize(("variant", "case", "message"), [
    ("nope", FORWARD_D128, "no implementation 'nope' in deep.ncu-rep.xz; it holds: flash_mma, flash_wgmma, sdpa_cudnn, sdpa_flash"),
    ("flash_mma", {"Q": "1"}, "--case field(s) Q not in this report's range names; fields: "),
    ("flash_mma", {"pass": "forward"}, "flash_mma: 2 ranges match --case pass=forward; narrow it to one of: "),
    ("flash_mma", {"N": "7"}, "flash_mma: no range matches --case N=7; narrow it to one of: attn:flash_mma:"),
])
def test_select_range_errors_name_what_exists(bottleneck_deep, variant, case, message):
    with pytest.raises(ValueError) as exc:
        B.select_range(bottleneck_deep, variant, case)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("text", "fields"), [
    ("N=4096,D=128,causal=False,pass=forward", {"N": "4096", "D": "128", "causal": "False", "pass": "forward"}),
    (" N = 4096 , , D=64 ", {"N": "4096", "D": "64"}),
    ("", {}),
])
def test_parse_case(text, fields):
    assert B.parse_case(text) == fields


@pytest.mark.parametrize("text", ["N4096", "N=4096,D", "=128", "N=1, =2"])
def test_parse_case_rejects_malformed_input_in_one_line(text):
    with pytest.raises(ValueError, match=r"^--case takes field=value pairs separated by commas \(e\.g\. N=4096"):
        B.parse_case(text)


# --------------------------------------------------------------------------- the nsightlab why command

def _why(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nsightlab", "why", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize(("argv", "message"), [
    (["profiles/nvidia-h200/seqlen", "--a", "flash_mma", "--b", "sdpa_flash"],
     "needs the Nsight Compute sections ComputeWorkloadAnalysis, LaunchStats, Occupancy, SpeedOfLight, WarpStateStats"),
    (["profiles/nvidia-h200/flash-wgmma-fwd-full", "--a", "nope", "--b", "flash_wgmma"], "no implementation 'nope'"),
    (["profiles/nvidia-h200/flash-wgmma-fwd-full", "--a", "flash_wgmma", "--b", "x", "--case", "N"],
     "--case takes field=value pairs"),
    (["profiles/nvidia-h200/no-such-capture", "--a", "flash_mma", "--b", "sdpa_flash"], "no-such-capture"),
    (["profiles/nvidia-h200/flash-wgmma-fwd-full", "--a", "flash_wgmma"], "give --b"),
])
def test_why_bad_input_is_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["why", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "error:" in x]
    assert line.startswith("nsightlab why: error: ") and message in line


def test_python_m_nsightlab_why_exits_2_on_bad_input():
    done = _why("profiles/nvidia-h200/seqlen", "--a", "flash_mma", "--b", "sdpa_flash")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "error:" in x]
    assert "WarpStateStats" in line and "--set full" in line


def test_python_m_nsightlab_why_prints_the_verdict_and_the_ranked_table():
    a, b = _loaded("flash-wgmma-fwd-full"), _loaded("flash-mma-bwd-8warp-full")
    done = _why("profiles/nvidia-h200/flash-wgmma-fwd-full", "--a", "flash_wgmma", "--b", "flash_mma",
                "--b-capture", "profiles/nvidia-h200/flash-mma-bwd-8warp-full", "--top", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ranked = B.explain(a, 0, b, 0)
    assert lines[0] == B.verdict("flash_wgmma", "flash_mma", ranked, B.metric_gaps(a, 0, b, 0))
    start = next(i for i, x in enumerate(lines) if x.startswith("What explains the gap"))
    assert lines[start + 1].split()[:4] == ["term", "flash_wgmma", "flash_mma", "ms"]
    g = A.grouped(ranked)
    shown = g[(g["level"] == 0) | g.index.isin(g[g["level"] == 1].head(3).index)]
    table = lines[start + 2:start + 2 + len(shown)]
    assert [x.strip().split("  ")[0] for x in table] == list(shown["term"])
    ms = [float(next(w for w in x.split() if w[0] in "+-" and w[1:2].isdigit())) for x in table]
    assert ms == [round(v, 3) for v in shown["ms"]]
    assert lines[start + 2 + len(shown)].strip().startswith(f"... {len(g) - len(shown)} smaller parts")


def test_source_key_says_where_hotspot_text_will_come_from():
    """A page showing hotspots hashes this: it changes when the capture's commit becomes available."""
    import subprocess

    from nsightlab.store.read import REPO

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head:  # a checkout with its history (CI's clone); a tree without git reads the working tree
        assert source_key(REPO, head[:7]) == f"commit {head[:7]}"
        assert source_key(REPO, head[:7] + "-dirty") == f"commit {head[:7]}"
    assert source_key(REPO, "0123456789abcdef") == "working tree (commit 0123456789abcdef not at hand)"
    assert source_key(REPO, None) == source_key(REPO, "--all") == "working tree"


def test_changed_between_lists_the_files_two_commits_differ_in_under_the_paths_asked(tmp_path):
    import subprocess

    from nsightlab.core.sources import changed_between

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text("a\n")
    (tmp_path / "notes.md").write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    one = git("rev-parse", "HEAD")
    (tmp_path / "notes.md").write_text("y\n")
    git("commit", "-qam", "two")
    two = git("rev-parse", "HEAD")
    (tmp_path / "csrc" / "k.cu").write_text("b\n")
    git("commit", "-qam", "three")
    three = git("rev-parse", "HEAD")
    assert changed_between(tmp_path, one[:7], two[:7], ("csrc",)) == []  # only a file outside the paths changed
    assert changed_between(tmp_path, one, three + "-dirty", ("csrc",)) == ["csrc/k.cu"]
    assert changed_between(tmp_path, one, "0123456789abcdef", ("csrc",)) is None  # not at hand: unknown
    assert changed_between(tmp_path, None, one, ("csrc",)) is None and changed_between(tmp_path, "--all", one,
                                                                                     ("csrc",)) is None


def test_comment_only_tells_a_change_of_comments_from_a_change_of_code(tmp_path):
    import subprocess

    from nsightlab.core.sources import changed_between, comment_only

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    def commit(files: dict[str, str]) -> str:
        for name, text in files.items():
            (tmp_path / name).write_text(text)
        git("add", "-A")
        git("commit", "-qm", "x")
        return git("rev-parse", "HEAD")

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    code = '#include "k.cuh"\n// notes\n__global__ void k(float* x) {\n  x[0] = 1.f;  /* one */\n}\n'
    one = commit({"k.cu": code, "k.cuh": "#define N 4\n", "notes.md": "a\n"})
    two = commit({"k.cu": code.replace("// notes", "// notes, longer\n// and a line more").replace("/* one */", ""),
                  "notes.md": "b\n"})
    three = commit({"k.cu": code.replace("1.f", "2.f"), "k.cuh": "#define N 8  // eight\n"})
    files = changed_between(tmp_path, one, three, (".",))
    assert files == ["k.cu", "k.cuh", "notes.md"]
    assert comment_only(tmp_path, one, two, ["k.cu", "notes.md"]) == ["k.cu"]  # a .md file is never C-like
    assert comment_only(tmp_path, one, three, files) == []  # a literal and a #define changed: code
    assert comment_only(tmp_path, one, "0123456789abcdef", files) == []  # not at hand: nothing is known the same


def test_call_line_leads_where_a_range_launches_several_kernels():
    """A split kernel and its merge against one kernel: the whole calls' times come first (here they point the
    other way from the longest launches'), with the launches the rest of the comparison leaves out; one launch
    a side says nothing."""
    a = pd.DataFrame({"kernel": ["merge", "split"], "time_ns": [10_100.0, 28_900.0]})
    b = pd.DataFrame({"kernel": ["fprop", "reduce"], "time_ns": [31_100.0, 4_600.0]})
    line = B.call_line("ours", a, "theirs", b)
    assert line == ("The whole call: ours takes 1.09x the time of theirs (0.039 ms vs 0.036 ms, 2 and 2 launches); "
                    "the other launches of ours take 0.010 ms (merge 0.010 ms); the other launches of theirs take "
                    "0.005 ms (reduce 0.005 ms). What follows compares the longest launch of each.")
    one = pd.DataFrame({"kernel": ["k"], "time_ns": [1e4]})
    assert B.call_line("x", one, "y", one) is None
    assert "x takes 0.26x" in B.call_line("x", one, "ours", a) and "launches of x" not in B.call_line("x", one, "ours", a)


def test_a_kernel_pattern_picks_the_launch_compared():
    """pick_launch: the longest launch by default, else the longest whose name (or full signature) matches; a
    pattern that matches nothing names the range's kernels. call_line then names the compared kernels and counts
    the longest among the others."""
    sel = pd.DataFrame({"range": ["r"] * 3, "launch": [4, 5, 6], "kernel": ["split", "combine", "combine"],
                        "kernel_full": ["void split<128>()", "void combine<128>()", "void combine<64>()"],
                        "time_ns": [28_700.0, 6_100.0, 5_000.0]})
    assert B.pick_launch(sel) == 4 and B.pick_launch(sel, "comb") == 5 and B.pick_launch(sel, "<64>") == 6
    with pytest.raises(ValueError, match=r"matches no kernel of r; its kernels: split, combine"):
        B.pick_launch(sel, "reduce")
    with pytest.raises(ValueError, match="not a regular expression"):
        B.pick_launch(sel, "(")
    theirs = pd.DataFrame({"range": ["q"] * 2, "launch": [7, 8], "kernel": ["fprop", "reduce"],
                           "time_ns": [31_200.0, 4_600.0]})
    line = B.call_line("ours", sel, "theirs", theirs, (5, 8))
    assert line.endswith("the other launches of ours take 0.034 ms (split 0.029 ms, combine 0.005 ms); the other "
                         "launches of theirs take 0.031 ms (fprop 0.031 ms). What follows compares combine with reduce.")
    assert B.call_line("ours", sel, "theirs", theirs, (4, 7)).endswith("compares the longest launch of each.")


def test_compares_longest_says_whether_each_side_compares_its_longest_launch():
    """compares_longest: true where the launch compared on every side is the first of its range (longest first),
    false where any side's is another; no launches named: the longest of each. One side alone works too."""
    ours = pd.DataFrame({"range": ["r"] * 3, "launch": [4, 5, 6], "kernel": ["split", "combine", "combine"],
                         "time_ns": [28_700.0, 6_100.0, 5_000.0]})
    theirs = pd.DataFrame({"range": ["q"] * 2, "launch": [7, 8], "kernel": ["fprop", "reduce"],
                           "time_ns": [31_200.0, 4_600.0]})
    assert B.compares_longest((ours, theirs), (4, 7)) is True
    assert B.compares_longest((ours, theirs), (5, 7)) is False
    assert B.compares_longest((ours, theirs), (4, 8)) is False
    assert B.compares_longest((ours, theirs)) is True
    assert B.compares_longest([ours], [4]) is True and B.compares_longest([ours], [6]) is False
    with pytest.raises(ValueError):  # a launch for each side
        B.compares_longest((ours, theirs), (4,))


def test_python_m_nsightlab_why_compares_the_launches_a_kernel_pattern_picks():
    """flash_decode's merge kernel against cuDNN's reduction (not the longest launch of either side)."""
    done = _why("profiles/nvidia-h100-80gb-hbm3/decode", "--a", "flash_decode", "--b", "sdpa_cudnn",
                "--kernel", "combine|reduction", "--top", "3")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "What follows compares flash_decode_combine_kernel with lean_reduction_kernel." in out
    assert "What explains the gap (compared launch of each;" in out
    assert [x.split()[-3] for x in out.splitlines() if x.endswith("<- compared")] == ["flash_decode_combine_kernel",
                                                                                      "lean_reduction_kernel"]
    bad = _why("profiles/nvidia-h100-80gb-hbm3/decode", "--a", "flash_decode", "--b", "sdpa_cudnn", "--kernel", "nothing")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "kernel='nothing' matches no kernel of" in bad.stderr and "flash_decode_combine_kernel" in bad.stderr


# --------------------------------------------------------------------------- from accounting to action (advice)

def _rule_rows(name: str) -> list[tuple]:
    d = pd.read_csv(io.StringIO(_text(REPORTS[name][2])), dtype=str, keep_default_na=False)
    d = d[d["Rule Name"] != ""]
    return sorted(zip(d["ID"].astype(int), d["Section Name"], d["Rule Name"], d["Rule Type"], d["Rule Description"],
                      d["Estimated Speedup Type"], d["Estimated Speedup"], strict=True))


def test_rule_results_equal_nsights_details_page(report):
    """Every rule result Nsight Compute's CLI prints on the details page (section, rule, type, its message with the
    links written out, the estimated speedup as printed: 4 significant digits), and no other."""
    name, deep = report
    ours = sorted((int(r.launch), r.section, r.rule, r.type, r.message, r.speedup_type,
                   "" if pd.isna(r.speedup) else f"{r.speedup:.4g}") for r in deep.rules.itertuples())
    theirs = _rule_rows(name)
    assert theirs and ours == theirs


def test_rule_text_writes_links_as_the_cli_does():
    assert deep_parse.rule_text("see @section:WarpStateStats:Warp State Statistics@ and the @url:Guide:https://x.y/a#b@.") \
        == "see Warp State Statistics and the Guide (https://x.y/a#b)."
    assert deep_parse.rule_text("at @source:/a/b.cu:12:b.cu line 12@ or @sass:0x10:LDS@") == "at b.cu line 12 or LDS"


def _opcode_of(sass: str) -> str:
    return [w for w in sass.split() if not w.startswith("@")][0].split(".")[0]


@pytest.mark.parametrize("name", WITH_SOURCE_PAGE)
def test_instruction_mix_equals_nsights_source_page(name):
    """The executed warp instructions per opcode (the InstructionStats section's sass__inst_executed_per_opcode) are
    the source page's Instructions Executed summed by opcode, exactly; the categories add up to the same total,
    which is what the raw page prints for the metric."""
    deep = _loaded(name)
    _, raw = _raw_csv(name)
    for launch, (_, table) in enumerate(_source_blocks(REPORTS[name][4])):
        executed = pd.to_numeric(table["Instructions Executed"])
        theirs = executed.groupby(table["Source"].map(_opcode_of)).sum()
        theirs = theirs[theirs > 0].sort_index()
        mix = deep.mix[deep.mix["launch"] == launch]
        ours = mix[mix["level"] == "opcode"].set_index("name")["inst_executed"].sort_index()
        assert list(ours.index) == list(theirs.index) and list(ours) == list(theirs), f"launch {launch}"
        total = mix.loc[mix["level"] == "category", "inst_executed"].sum()
        assert total == ours.sum()
        assert _as_printed(total, raw[launch]["sass__inst_executed_per_opcode"]) == raw[launch]["sass__inst_executed_per_opcode"]


@pytest.mark.parametrize("name", WITH_SOURCE_PAGE)
def test_stall_lines_by_sass_are_the_source_pages_largest(name):
    """For every stall reason the source page has a column for, the instructions stall_lines ranks first carry
    exactly the source page's largest sample counts of that reason, at the same addresses."""
    deep = _loaded(name)
    checked = 0
    for launch, (_, table) in enumerate(_source_blocks(REPORTS[name][4])):
        num = table.drop(columns=["Address", "Source"]).apply(pd.to_numeric, errors="coerce")
        num.index = [int(a, 16) for a in table["Address"]]
        for short, sampled in CSV_STALLS.items():
            reason = {v: k for k, v in A.SAMPLED_AS.items()}.get(sampled, sampled)
            col = num[f"stall_{short}"]
            if reason not in B.STALLS or not col.sum():
                continue
            top = A.stall_lines(deep, launch, reason, 3, by="sass")
            assert list(top["samples"]) == sorted(col[col > 0], reverse=True)[:3], (launch, reason)
            assert [col.loc[a] for a in top["address"]] == list(top["samples"])
            assert math.isclose(top["share"].iloc[0], top["samples"].iloc[0] / col.sum())
            checked += 1
    assert checked >= 5


def _pair(name: str, a: str, b: str) -> tuple[B.Deep, int, int, pd.DataFrame]:
    deep = _loaded(name)
    _, sa, sb = why.pick_sides(deep, None, a, b, {})
    return deep, sa.launch, sb.launch, B.explain(deep, sa.launch, deep, sb.launch)


@pytest.mark.parametrize(("a", "b"), [("flash_wgmma", "sdpa_cudnn"), ("flash_mma", "sdpa_flash")])
def test_the_grouped_ranking_and_the_waterfall_add_up_to_the_gap(a, b):
    deep, la, lb, ranked = _pair("backward-n8192-deep", a, b)
    g = A.grouped(ranked)
    gap = ranked.attrs["time_a_ms"] - ranked.attrs["time_b_ms"]
    assert math.isclose(g.loc[g["level"] == 0, "ms"].sum(), gap, rel_tol=1e-9)
    interval = g.loc[g["term"] == A.ISSUE_INTERVAL, "ms"].iloc[0]
    assert math.isclose(g.loc[g["level"] == 1, "ms"].sum(), interval, rel_tol=1e-9)
    net = g.loc[g["term"] == A.WARPS_NET, "ms"].iloc[0]
    assert math.isclose(g.loc[g["level"] == 2, "ms"].sum(), net, rel_tol=1e-9, abs_tol=1e-12)
    assert sorted(g.loc[g["level"] == 2, "term"]) == sorted(["warps per scheduler (latency hiding)", "Stall Not Selected",
                                                              "Selected"])
    # every term of explain in exactly one leaf of the gathered ranking
    assert len(g[g["level"] > 0]) - 1 + 2 == len(ranked)
    w = A.waterfall(g)
    assert w["measure"].tolist()[0] == "absolute" and w["measure"].tolist()[-1] == "total"
    assert math.isclose(w["ms"].iloc[0] + w.loc[w["measure"] == "relative", "ms"].sum(), w["ms"].iloc[-1], rel_tol=1e-9)
    # the share of the gap is shown only where each factor widens a clear gap
    shown = g["share"].notna()
    assert not shown.any() or (g.loc[shown, "level"].eq(0).all() and g.loc[shown, "share"].between(0, 1).all())


def test_the_instruction_mix_accounts_for_the_instruction_difference():
    deep, la, lb, _ = _pair("backward-n8192-deep", "flash_mma", "sdpa_flash")
    mix = A.instruction_mix(deep, la, deep, lb)
    ta, tb = mix.attrs["total_a"], mix.attrs["total_b"]
    assert math.isclose(mix["diff"].sum(), ta - tb) and math.isclose(mix["of_b"].sum(), ta / tb - 1)
    assert math.isclose(mix["share"].sum(), 1.0)
    assert list(mix["diff"].abs()) == sorted(mix["diff"].abs(), reverse=True)
    text = A.mix_sentence("flash_mma", "sdpa_flash", mix)
    top = mix.sort_values("of_b", ascending=False).iloc[0]
    assert text.startswith(f"flash_mma executes {ta / tb:.2f}x the warp instructions of sdpa_flash")
    assert f"{top['name']} {top['of_b']:.2f}x" in text and f"({top['name']} " in text  # under what it does
    kinds = mix[mix["kind"] == top["kind"]]
    assert f"{kinds.loc[kinds['of_b'] > 0, 'of_b'].sum() + kinds.loc[kinds['of_b'] < 0, 'of_b'].sum():.2f}x {top['kind']} (" in text
    # the other way round, the side that executes more still leads
    assert A.mix_sentence("sdpa_flash", "flash_mma", A.instruction_mix(deep, lb, deep, la)).startswith(
        f"flash_mma executes {ta / tb:.2f}x")


def test_what_to_try_cites_the_counters_rules_and_lines_it_reads():
    from nsightlab.store.read import REPO
    deep, la, lb, ranked = _pair("backward-n8192-deep", "flash_wgmma", "sdpa_cudnn")
    commit = load_manifest(H200 / "backward-n8192-deep").get("git_commit")
    said = A.what_to_try(A.Launch("flash_wgmma", deep, la, commit), A.Launch("sdpa_cudnn", deep, lb, commit), ranked, REPO)
    assert len(said) >= 4
    for sentence in said:
        assert "__" in sentence or "rule" in sentence, sentence  # a metric's name or Nsight's rule
    stall = [s for s in said if "per issued instruction on Stall" in s]
    assert stall and all("flash_kernels/csrc/" in s for s in stall)
    top_rule = A.rules(deep, la).query("type == 'OPT'").iloc[0]
    assert any(s.startswith(f"Nsight Compute's {top_rule['name']} rule") and f"{top_rule['speedup']:.1f}%" in s for s in said)
    # the slower side is explained whichever side it is given as
    flipped = A.what_to_try(A.Launch("sdpa_cudnn", deep, lb, commit), A.Launch("flash_wgmma", deep, la, commit),
                            B.explain(deep, lb, deep, la), REPO)
    assert [s for s in flipped if "rule" not in s] == [s for s in said if "rule" not in s]


def test_a_scoreboard_stall_is_traced_to_the_memory_instruction_it_waits_on():
    """flash_mma's backward: the Long Scoreboard samples at the next stage's loads (line 106) are an LDC about to
    overwrite a register that a dQ reduction (REDG, line 236) just before it still holds; found in the report's own
    per-instruction counters, and named in what to try."""
    from nsightlab.store.read import REPO
    deep, la, lb, ranked = _pair("backward-n8192-deep", "flash_mma", "sdpa_flash")
    commit = load_manifest(H200 / "backward-n8192-deep").get("git_commit")
    top = A.stall_lines(deep, la, "long_scoreboard", 1, "sass", REPO, commit).iloc[0]
    src = A.scoreboard_source(deep, la, int(top["address"]), "long_scoreboard")
    assert src is not None and B._opcode(src["sass"]).startswith("REDG") and src["line"] == 236
    assert src["address"] < top["address"] and set(src["registers"]) <= A._registers(top["sass"])
    said = A.what_to_try(A.Launch("flash_mma", deep, la, commit), A.Launch("sdpa_flash", deep, lb, commit), ranked, REPO)
    (stall,) = [x for x in said if "on Stall Long Scoreboard" in x]
    assert f"`{str(top['sass']).strip()}`, is about to overwrite R" in stall
    assert "flash_kernels/csrc/flash_mma_bwd.cu:236" in stall and stall.endswith("so this wait is that REDG's.")
    # a reason that waits on no memory instruction, or an address the launch lacks, names none
    assert A.scoreboard_source(deep, la, int(top["address"]), "barrier") is None
    assert A.scoreboard_source(deep, la, -1, "long_scoreboard") is None


def test_a_barrier_stall_is_split_into_wgmma_waits_and_waits_at_a_bar():
    """flash_wgmma's D = 128 backward: its Stall Barrier samples are all at WARPGROUP.DEPBAR (waits for its own wgmma)
    or just after the consumers' named barrier (BAR.SYNC.DEFER_BLOCKING: the HGMMA behind it); on a synthetic
    launch, a sample further from the BAR than BAR_WINDOW is neither."""
    import types

    from nsightlab.store.read import REPO
    deep, la, lb, ranked = _pair("backward-n8192-deep", "flash_wgmma", "sdpa_cudnn")
    split = A.barrier_split(deep, la)
    assert split["wgmma"] > 0.5 and split["bar"] > 0.1 and split["wgmma"] + split["bar"] > 0.99
    commit = load_manifest(H200 / "backward-n8192-deep").get("git_commit")
    said = A.what_to_try(A.Launch("flash_wgmma", deep, la, commit), A.Launch("sdpa_cudnn", deep, lb, commit), ranked, REPO)
    (stall,) = [x for x in said if "on Stall Barrier" in x]
    assert f"Of all its Stall Barrier samples, {split['wgmma']:.0%} are at WARPGROUP.DEPBAR" in stall
    assert f"and {split['bar']:.0%} at the instructions just after a BAR" in stall
    code = ["BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", "WARPGROUP.ARRIVE", "HGMMA.64x64x16.F32 R1, gdesc[UR4], RZ",
            "WARPGROUP.DEPBAR.LE gsb0, 0x0", "FADD R1, R1, R2", "@P0 BRA 0x10"]
    issue = pd.DataFrame({"launch": 0, "address": [16 * k for k in range(6)], "sass": code})
    sass = issue.assign(stall_barrier=[0.0, 0.0, 6.0, 3.0, 0.0, 1.0])
    got = A.barrier_split(types.SimpleNamespace(issue=issue, sass=sass), 0)
    assert got == {"wgmma": 0.3, "bar": 0.6}
    assert A.barrier_split(types.SimpleNamespace(issue=issue, sass=sass.assign(stall_barrier=0.0)), 0) == {}


def test_scoreboard_source_reads_register_pairs_and_looks_back_only_so_far(monkeypatch):
    import types
    assert A._registers("LDG.E.64 R4, desc[UR6][R2.64+0x10]") == {2, 3, 4}
    assert A._registers("LDSM.16.M88.4 R8, [R12+UR4+0x400]") == {8, 12}
    assert A._registers("STS.128 [R3], R20.128") == {3, 20, 21, 22, 23} and A._registers("MOV R1, RZ") == {1}
    rows = [("LDG.E R5, desc[UR4][R2.64]", 0), *[("IADD3 R9, R9, 0x1, RZ", 16 * (k + 1)) for k in range(3)],
            ("FADD R7, R5, R6", 64)]
    issue = pd.DataFrame([{"launch": 0, "address": a, "sass": x, "file": "k.cu", "line": 7 + i, "inst_executed": 1}
                          for i, (x, a) in enumerate(rows)])
    deep = types.SimpleNamespace(issue=issue)
    got = A.scoreboard_source(deep, 0, 64, "long_scoreboard")
    assert got is not None and got["line"] == 7 and got["registers"] == [5]
    assert A.scoreboard_source(deep, 0, 64, "short_scoreboard") is None  # an LDG is not on the MIO path
    monkeypatch.setattr(A, "SCOREBOARD_LOOKBACK", 3)
    assert A.scoreboard_source(deep, 0, 64, "long_scoreboard") is None


def test_nsightlab_why_fits_a_screen_and_names_everything_whole():
    done = _why("nvidia-h200/backward-n8192-deep", "--a", "flash_wgmma", "--b", "sdpa_cudnn")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 40
    assert "What to try (from the counters and rules below):" in lines
    table = lines[next(i for i, x in enumerate(lines) if x.startswith("What explains the gap")) + 1]
    assert table.split()[:3] == ["term", "flash_wgmma", "sdpa_cudnn"]
    assert any(x.startswith("Nsight Compute's rules") for x in lines)
    assert any(x.startswith("Throughput: DRAM") and "TB/s" in x for x in lines)
    full = _why("nvidia-h200/backward-n8192-deep", "--a", "flash_wgmma", "--b", "sdpa_cudnn", "--full")
    assert full.returncode == 0 and len(full.stdout.splitlines()) > len(lines)
    kernel = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob"
    assert kernel in full.stdout  # the longest names whole
    assert "Where each stall term's samples are" in full.stdout


@pytest.mark.parametrize(("argv", "message"), [
    (["nvidia-h200/bottleneck-deep", "--a", "flash_wgmma", "--b", "sdpa_cudnn", "--case", "causal=0"],
     "differ in pass (backward, forward): add pass=... to --case"),
    (["nvidia-h200/bottleneck-deep", "--a", "flash_wgmma", "--b", "sdpa_cudnn", "--top", "0"], "--top"),
    (["nvidia-h200/bottleneck-deep", "--a", "flash_wgmma", "--b", "sdpa_cudnn", "--top", "-3"], "--top"),
])
def test_why_refuses_an_open_case_and_a_bad_count(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["why", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err


def test_why_on_a_loop_of_links_is_one_line(tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code = cli.main(["why", str(loop), "--a", "x", "--b", "y"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("nsightlab why: error: ")


def test_the_readmes_why_output_is_what_the_command_prints_today():
    """The README shows nsightlab why's output on a committed capture: it is the command's output now, line by line
    (where the capture's commit is not at hand, a shallow clone, the quoted source text is read from the working
    tree instead and only it may differ)."""
    from nsightlab.store.read import REPO
    text = (ROOT / "README.md").read_text()
    start = text.index("$ nsightlab why ")
    command, _, rest = text[start:].partition("\n")
    shown = rest[:rest.index("\n```")].splitlines()
    done = _why(*command.removeprefix("$ nsightlab why ").split())
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    commit = load_manifest(H200 / "backward-n8192-deep").get("git_commit")
    if not source_key(REPO, commit).startswith("commit"):
        shown, printed = ([re.sub(r"`[^`]*`", "`...`", x) for x in lines] for lines in (shown, printed))
    assert shown == printed
