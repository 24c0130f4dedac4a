"""nsightlab.analysis.comparison and its page and command line (nsightlab.render.compare): the verdict on
synthetic frames with known deltas and noise, the committed captures against themselves and against the
other GPU (what the data shows: memory-bound work runs slower on the H100, latency-bound work does not
move), mismatched metric sets, tools and ranges reported rather than crashed on, refused captures, the
command line's exit statuses, benchmark rows keyed by the capture's own range schema, and the comparison
pages a profiles folder declares (comparisons.toml). The declared pages are rendered by the report tests."""

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsightlab.analysis import comparison as C
from nsightlab.cli import compare as compare_cmd
from nsightlab.core.errors import NotApplicable, ProfileError
from nsightlab.core.ranges import RangeSchema
from nsightlab.render import compare as page
from nsightlab.store import find, read
from nsightlab.store.captures import find_file

ROOT = Path(__file__).resolve().parent.parent
H200, H100 = "nvidia-h200", "nvidia-h100-80gb-hbm3"


# --------------------------------------------------------------------------- synthetic frames


def _samples(rows: list[tuple[str, str, int, list[float]]]) -> pd.DataFrame:
    """(variant, pass, N, [ms per launch]) -> an nsys-like frame of range instances, keyed."""
    out = []
    for variant, pass_, n, times in rows:
        name = f"t:{variant}:{pass_}:N={n}"
        out += [{"range": name, "domain": "", "variant": variant, "pass": pass_, "N": n, "schema": "t", "ms": t}
                for t in times]
    df = pd.DataFrame(out)
    df["key"] = C.match_keys(df)
    return df


def _side(label: str, rows, ncu: dict[str, dict[str, float]] | None = None, manifest: dict | None = None) -> C.Side:
    s = C.Side(Path("/nowhere") / label, label, manifest or {"gpu": {"name": "GPU"}})
    s.samples["nsys"] = _samples(rows)
    if ncu is not None:
        first = s.samples["nsys"].drop_duplicates("key").set_index("range")
        s.ncu_ranges = pd.DataFrame([{"range": r, "key": first.loc[r, "key"], **v} for r, v in ncu.items()])
    return s


def _spread(center: float, rel: float, n: int = 5) -> list[float]:
    """n launches whose (max - min) / median is ``rel``."""
    return list(center * (1 + np.linspace(-rel / 2, rel / 2, n)))


@pytest.mark.parametrize("ratio, spread, threshold, expected", [
    (1.10, 0.005, 0.05, C.SLOWER),        # 10% slower, tight launches
    (1 / 1.10, 0.005, 0.05, C.FASTER),    # 10% faster
    (1.03, 0.005, 0.05, C.BELOW),         # beyond the noise, under the threshold
    (1.008, 0.005, 0.05, C.SAME),         # within the noise (at its 1% floor)
    (1.10, 0.30, 0.05, C.SAME),           # 10% slower but 30% spread on both sides: noise ~42%
    (1.50, 0.30, 0.05, C.SLOWER),         # beyond that noise
    (1.005, 0.001, 0.0, C.SAME),          # zero threshold: the 1% noise floor still holds
    (1.02, 0.001, 0.0, C.SLOWER),
])
def test_known_deltas_and_noise_land_in_the_right_verdict(ratio, spread, threshold, expected):
    base = _side("a/x", [("k", "forward", 1024, _spread(2.0, spread))])
    new = _side("b/x", [("k", "forward", 1024, _spread(2.0 * ratio, spread))])
    cmp = C.compare(base, new, threshold)
    (row,) = cmp.ranges.itertuples()
    assert row.verdict == expected
    assert row.ratio == pytest.approx(ratio)
    assert row.noise == pytest.approx(max(C.NOISE_FLOOR, np.hypot(spread, spread)))
    assert cmp.exit_status == (1 if expected == C.SLOWER else 0)
    assert len(cmp.regression_lines()) == (expected == C.SLOWER)


def test_noise_and_verdict_functions():
    # a single launch: noise unknown, the default is assumed
    assert C.noise(np.nan, 0.002) == C.UNKNOWN_NOISE
    assert C.noise(0.2, 0.1) == pytest.approx(np.hypot(0.2, 0.1))
    assert C.verdict(1.025, C.UNKNOWN_NOISE, 0.02) == C.SAME  # beyond the threshold, not beyond the noise
    assert C.verdict(1.04, C.UNKNOWN_NOISE, 0.02) == C.SLOWER
    assert C.verdict(1 / 1.04, C.UNKNOWN_NOISE, 0.02) == C.FASTER
    # symmetric in log space: 5% slower and 1/1.05 faster are the same distance from 1
    assert list(C.verdict(np.array([1.0501, 1 / 1.0501, 1.0499, 1 / 1.0499, 1.0]), 0.0, 0.05)) == [
        C.SLOWER, C.FASTER, C.BELOW, C.BELOW, C.SAME]
    for text, value in (("5%", 0.05), ("0.05", 0.05), ("5", 0.05), ("12.5%", 0.125), ("0", 0.0)):
        assert C.parse_threshold(text) == pytest.approx(value)
    for bad in ("five", "-3%", "nan"):
        with pytest.raises(ValueError, match="threshold"):
            C.parse_threshold(bad)


def test_synthetic_comparison_reports_regressions_and_one_sided_ranges():
    base = _side("gpu/before", [("fast", "forward", 1024, _spread(1.0, 0.004)),
                                ("slow", "forward", 1024, _spread(4.0, 0.004)),
                                ("gone", "forward", 1024, _spread(1.0, 0.004))])
    new = _side("gpu/after", [("fast", "forward", 1024, _spread(0.8, 0.004)),
                              ("slow", "forward", 1024, _spread(4.8, 0.004)),
                              ("added", "backward", 2048, _spread(1.0, 0.004))])
    cmp = C.compare(base, new, "5%")
    assert dict(zip(cmp.ranges["variant"], cmp.ranges["verdict"], strict=True)) == {"fast": C.FASTER, "slow": C.SLOWER}
    assert cmp.exit_status == 1
    (line,) = cmp.regression_lines()
    assert line.startswith("SLOWER +20.0%") and "slow forward" in line and "4 -> 4.8 ms" in line
    only = {(r.side, r.range) for r in cmp.unmatched.itertuples()}
    assert only == {("base", "t:gone:forward:N=1024"), ("new", "t:added:backward:N=2048")}
    s = cmp.summary()
    assert "2 ranges matched" in s and "1 faster, 1 slower" in s and "1 only in base, 1 only in new" in s
    # --min-ms: short ranges are judged but do not gate
    assert C.compare(base, new, "5%", min_ms=5.0).exit_status == 0
    # --only: a regex over the raw names
    assert list(C.compare(base, new, "5%", only=":fast:").ranges["variant"]) == ["fast"]
    with pytest.raises(ValueError, match="regular expression"):
        C.compare(base, new, only="(")


def test_ranges_match_by_decoded_fields_not_by_name():
    """A renamed range (another prefix, fields in another order) is the same case."""
    base = _side("gpu/a", [("k", "forward", 1024, [1.0, 1.0, 1.0])])
    new = _side("gpu/b", [("k", "forward", 1024, [1.0, 1.0, 1.0])])
    new.samples["nsys"]["range"] = "other:k:forward:N=1024"
    new.samples["nsys"]["schema"] = "other"
    cmp = C.compare(base, new)
    assert len(cmp.ranges) == 1 and cmp.unmatched.empty
    assert cmp.ranges.loc[0, "range_base"] != cmp.ranges.loc[0, "range_new"]


def test_mismatched_metric_sets_are_reported_not_crashed_on():
    counters = {"ncu_ms": 1.0, "dram_mb": 10.0, "dram_gbs": 10.0, "l2_hit": 80.0, "occupancy": 50.0, "registers": 64.0,
                "smem_kib": 16.0}
    rows = [("k", "forward", 1024, _spread(1.0, 0.004))]
    metrics = ["gpu__time_duration.sum", "dram__bytes.sum", "lts__t_sector_hit_rate.pct", "launch__registers_per_thread"]
    base = _side("gpu/a", rows, {"t:k:forward:N=1024": counters},
                 {"gpu": {"name": "GPU"}, "ncu": {"version": "2025.3.1", "metrics": metrics, "clock_control": "base",
                                                  "replay_mode": "kernel"}})
    new = _side("gpu/b", rows, {"t:k:forward:N=1024": {**counters, "l2_hit": np.nan}},
                {"gpu": {"name": "GPU"}, "ncu": {"version": "2024.1.0", "metrics": metrics[:2] + metrics[3:],
                                                 "clock_control": "none", "replay_mode": "application"}})
    cmp = C.compare(base, new)
    aspects = {r["aspect"]: r for r in cmp.compat}
    assert {"metric set", "Nsight Compute version", "clock control", "replay mode"} <= set(aspects)
    assert "L2 hit rate" in aspects["metric set"]["consequence"] and "lts__t_sector_hit_rate.pct" in aspects["metric set"]["consequence"]
    assert cmp.marks["l2_hit"].startswith("not compared") and "gpu/b" in cmp.marks["l2_hit"]
    assert "replay modes differ" in cmp.marks["dram_mb"] and "clock control differs" in cmp.marks["ncu_ms"]
    table = page.delta_table(cmp.ranges, cmp.marks)
    assert not any(c.startswith("L2 hit rate") for c in table.columns)  # not compared: left out, and said so
    assert "DRAM traffic [MB] †" in table.columns  # compared, but not like for like: marked
    assert table.loc[0, "registers / thread"] == "64 → 64"
    assert any("L2 hit rate: not compared" in c for c in page.caveats(cmp))
    # the verdict still stands on the timing, which is comparable
    assert cmp.ranges.loc[0, "verdict"] == C.SAME and cmp.exit_status == 0


def test_nothing_in_common_is_a_clear_error():
    a = _side("gpu/a", [("k", "forward", 1, [1.0])])
    b = C.Side(Path("/nowhere"), "gpu/b", {})
    b.samples["bench"] = a.samples["nsys"]
    with pytest.raises(NotApplicable, match="nothing to compare: base has nsys, new has bench"):
        C.compare(a, b)


# --------------------------------------------------------------------------- the committed captures


def test_same_capture_against_itself_is_no_regression(capsys):
    assert compare_cmd.main([f"{H200}/seqlen", f"{H200}/seqlen"]) == 0
    out = capsys.readouterr().out
    assert "224 ranges matched (nsys); 0 faster, 0 slower, 224 within noise" in out
    assert "SLOWER" not in out and "differs:" not in out
    cmp = C.compare_captures(f"{H200}/seqlen", f"{H200}/seqlen")
    assert (cmp.ranges["ratio"] == 1).all() and cmp.unmatched.empty
    assert (cmp.ranges["base_n"] == 5).all()  # nsys: five measured launches per range
    assert (cmp.kernels["verdict"] == C.SAME).all() and len(cmp.kernels) > len(cmp.ranges)
    bench = C.compare_captures(f"{H100}/bench-mma-fwd-always-rescale", f"{H100}/bench-mma-fwd-always-rescale")
    assert bench.exit_status == 0 and set(bench.ranges["verdict"]) == {C.SAME} and len(bench.ranges) == 773


def test_h200_base_h100_new_flags_the_memory_bound_rows(capsys):
    """H200 (4.8 TB/s HBM3e) as base, H100 (3.35 TB/s) as new: what moves is what leans on memory."""
    assert compare_cmd.main([f"{H200}/seqlen", f"{H100}/seqlen"]) == 1
    out = capsys.readouterr().out
    cmp = C.compare_captures(f"{H200}/seqlen", f"{H100}/seqlen")
    r = cmp.ranges.set_index("label")
    # the range that pulls the most DRAM bandwidth in the seqlen sweep (tiled forward materializes the
    # N x N scores in fp32) is slower on the H100 ...
    hungriest = cmp.ranges.loc[cmp.ranges["base_dram_gbs"].idxmax()]
    assert hungriest["label"] == "tiled forward H=1 D=64 N=8192" and hungriest["verdict"] == C.SLOWER
    assert "SLOWER" in out and "tiled forward H=1 D=64 N=8192" in out
    # the two captures are of different commits (H200 1ebba72, H100 060d1a6): ranges whose names changed with
    # the code (flash_mma's backward options, flash_fa1's new block_size) match nothing, and are listed so
    assert "only in base" in out and not any(r.index.str.startswith(("flash_mma backward", "flash_fa1")))
    # memory-light ranges of unchanged code (naive with 8 heads: < 2% of DRAM bandwidth) move less than the threshold
    # (some beyond the noise: the two GPUs' clocks differ)
    quiet = cmp.ranges[(cmp.ranges["variant"] == "naive") & (cmp.ranges["H"] == 8)]
    assert len(quiet) == 16 and (quiet["base_dram_gbs"] < 0.02 * 4.8e3).all() and quiet["verdict"].isin(C.UNMOVED).all()
    below = quiet[quiet["verdict"] == C.BELOW]
    assert (quiet["change"].abs() < 0.05).all() and ((below["ratio"] > 1 + below["noise"]) | (below["ratio"] < 1 / (1 + below["noise"]))).all()
    # per kernel: the streaming helper (a cast that only reads and writes) is slower at the largest N
    k = cmp.kernels[(cmp.kernels["kernel"] == "cast_from_f32_kernel") & (cmp.kernels["base_ms"] > 0.02)]
    assert (k.loc[k["label"] == "flash_simt backward H=8 D=128 N=8192", "verdict"] == C.SLOWER).all()
    slower = cmp.ranges[cmp.ranges["verdict"] == C.SLOWER]  # the summary leads with the largest
    assert cmp.regressions["label"].iloc[0] == slower.loc[slower["ratio"].idxmax(), "label"]

    # the benchmark: every sdpa_math forward (it materializes the scores in DRAM) of 1 ms or more is slower,
    # as are tiled's forwards at D=64 from N=1024; the CUDA-core flash kernels are not
    # (bench-mma-fwd-always-rescale: both GPUs' runs of the same code, 3b30d4b)
    assert compare_cmd.main([f"{H200}/bench-mma-fwd-always-rescale", f"{H100}/bench-mma-fwd-always-rescale"]) == 1
    out = capsys.readouterr().out
    b = C.compare_captures(f"{H200}/bench-mma-fwd-always-rescale", f"{H100}/bench-mma-fwd-always-rescale").ranges
    long = b[b["base_ms"] >= 1]
    math_fwd = long[(long["variant"] == "sdpa_math") & (long["pass"] == "forward")]
    assert len(math_fwd) >= 20 and (math_fwd["verdict"] == C.SLOWER).all()
    assert "SLOWER +15.5% (noise ±1.2%, threshold 5%) convention: sdpa_math forward D64-N2048-full dtype=float16" in out
    tiled = long[(long["variant"] == "tiled") & (long["pass"] == "forward") & (long["suite"] == "convention")
                 & (long["D"] == 64) & (long["N"] >= 1024)]
    assert len(tiled) == 6 and (tiled["verdict"] == C.SLOWER).all()
    cuda_core = long[long["variant"].isin(["flash_simt", "flash_fa1"])]
    assert len(cuda_core) > 50 and cuda_core["verdict"].isin(C.UNMOVED).all()  # none faster or slower


def test_different_metric_sets_and_missing_ranges_on_committed_captures(capsys):
    """The seqlen study (31 metrics) against an imported --set full report of one of its ranges."""
    assert compare_cmd.main([f"{H200}/seqlen", f"{H200}/flash-mma-bwd-8warp-full"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"differs: metric set: 31 metrics vs \d{4} metrics", out)
    assert "only in base (223)" in out and "1 ranges matched (ncu)" in out
    assert "noise is unknown" in out  # Nsight Compute timing: one launch, said so
    cmp = C.compare_captures(f"{H200}/seqlen", f"{H200}/flash-mma-bwd-8warp-full")
    assert list(cmp.ranges["label"]) == ["flash_mma backward"]
    assert not cmp.ranges["noise_known"].any() and cmp.ranges.loc[0, "noise"] == C.UNKNOWN_NOISE
    assert (cmp.unmatched["side"] == "base").all() and len(cmp.unmatched) == 223
    # tools differ (nsys on one side only): the comparison falls back to what both have
    mixed = C.compare_captures(f"{H200}/seqlen", f"{H200}/blocksize")
    assert mixed.source == "ncu" and "tools" in {r["aspect"] for r in mixed.compat}
    assert "replay mode" in {r["aspect"] for r in mixed.compat} and "l2_hit" in mixed.marks


def test_foreign_captures_match_by_raw_name():
    cmp = C.compare_captures(f"{H200}/foreign-example", f"{H200}/foreign-example")
    assert cmp.source == "nsys" and len(cmp.ranges) == 4 and cmp.exit_status == 0
    assert all(k.startswith("range=") for k in cmp.ranges["key"])
    assert "gemm:fwd M=2048 N=2048 K=2048" in set(cmp.ranges["label"])


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert compare_cmd.main(["no-such-gpu/seqlen", f"{H200}/seqlen"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nsightlab compare: error: no-such-gpu/seqlen: neither a capture folder nor a label") and f"{H200}/seqlen" in err
    assert compare_cmd.main([f"{H200}/bench", f"{H200}/bench", "--threshold", "lots"]) == 2
    assert "threshold" in capsys.readouterr().err
    assert compare_cmd.main([f"{H200}/bench", f"{H200}/bench", "--only", "("]) == 2
    assert "regular expression" in capsys.readouterr().err
    assert compare_cmd.main([f"{H200}/bench", f"{H200}/blocksize"]) == 2  # benchmark CSVs against ncu only
    assert "nothing to compare" in capsys.readouterr().err
    # a capture that fails validation is refused
    bad = tmp_path / "gpu" / "blocksize"
    shutil.copytree(ROOT / "profiles" / H200 / "blocksize", bad)
    with open(find_file(bad, "ncu_raw.csv"), "r+b") as f:  # stored as ncu_raw.csv.xz
        f.truncate(1000)
    assert compare_cmd.main([str(bad), f"{H200}/blocksize"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nsightlab compare: error: refusing to compare") and "ncu_raw.csv" in err and "\n" not in err


# --------------------------------------------------------------------------- benchmark rows and declared pages


def test_benchmark_rows_are_keyed_by_the_captures_own_schema():
    """Whatever fields a problem names (here a GEMM's M, N, K), a benchmark row's identity is the schema's
    fields, the suite and the options; the row's name (config) labels it; what the CSV adds (error metrics,
    memory) is left out; a row that did not run has no time."""
    schema = RangeSchema("gemm", ("variant", "pass"), fields={"M": "int", "N": "int", "K": "int", "dtype": "str"})
    df = pd.DataFrame({"suite": "s", "config": ["small", "small", "big"], "M": [64, 64, 4096], "N": 64, "K": 64,
                       "dtype": "float16", "impl": ["cublas", "mine", "mine"], "kind": "kernel", "pass": "forward",
                       "options": "", "status": ["ok", "ok", "skipped"], "ms": [1.0, 2.0, 3.0],
                       "ms_min": [0.9, 1.9, 2.9], "ms_max": [1.1, 2.1, 3.1], "reps": 10, "tflops": 1.0,
                       "max_abs": 1e-3})
    b = C.bench_samples(df, [schema])
    assert list(b["key"]) == ["K=64|M=64|N=64|dtype=float16|pass=forward|suite=s|variant=cublas",
                              "K=64|M=64|N=64|dtype=float16|pass=forward|suite=s|variant=mine",
                              "K=64|M=4096|N=64|dtype=float16|pass=forward|suite=s|variant=mine"]
    assert "max_abs" not in b and "kind" not in b and np.isnan(b.loc[2, "ms"])
    stats = C.timing_stats(b)
    assert list(stats["spread"].round(3))[:2] == [0.2, 0.1] and np.isnan(stats.loc[2, "spread"])  # (max - min) / median
    # the configuration's name spells M (each name has one M), so the label does not repeat it
    assert list(C.labels(b)) == ["cublas forward small", "mine forward small", "mine forward big"]


def test_declared_comparisons_and_their_errors(tmp_path):
    assert page.declared_comparisons(tmp_path) == []  # no comparisons.toml: none
    toml = tmp_path / "comparisons.toml"
    toml.write_text('[[comparison]]\nname = "a-to-b"\ntitle = "A → B"\nbase = "gpu/a"\nnew = "gpu/b"\nmin_ms = 1\n')
    (d,) = page.declared_comparisons(tmp_path)
    assert (d.name, d.base, d.new, d.threshold, d.min_ms) == ("a-to-b", "gpu/a", "gpu/b", "5%", 1.0)
    toml.write_text(toml.read_text() + '[[why]]\nname = "k-before-after"\ntitle = "W"\nbase = "gpu/a"\nnew = "gpu/b"\n'
                    'a = "mine"\ncase = "N=4096"\nkernel = "combine"\n')
    c, w = page.declared_comparisons(tmp_path)
    assert c == d and w == page.DeclaredWhy("k-before-after", "W", "gpu/a", "gpu/b", "mine", "", "N=4096", "combine")
    for text, words in (('[[comparison]]\nname = "x"\ntitle = "t"\nbase = "a"\n', "comparison 1 lacks new"),
                        ('[[comparison]]\nname = "x"\ntitle = "t"\nbase = "a"\nnew = "b"\ncolour = 1\n',
                         "unknown key 'colour'"),
                        ('[[comparison]]\nname = "x y"\ntitle = "t"\nbase = "a"\nnew = "b"\n', "name 'x y' must be"),
                        ('[[comparison]]\nname = "x"\ntitle = "t"\nbase = "a"\nnew = "b"\nthreshold = "lots"\n',
                         "threshold 'lots' is not a number"),
                        ('[[comparison]]\nname = "x"\ntitle = "t"\nbase = "a"\nnew = "b"\nonly = "("\n',
                         "comparison 1 (x): missing )"),
                        ('comparison = [1]\n', "it takes only [[comparison]] and [[why]] tables"),
                        ("[comparisons]\n", "it takes only [[comparison]] and [[why]] tables"),
                        ("why = 1\n", "it takes only [[comparison]] and [[why]] tables"),
                        ('[[why]]\nname = "w"\ntitle = "t"\nbase = "a"\n', "why 1 lacks new"),
                        ('[[why]]\nname = "w"\ntitle = "t"\nbase = "a"\nnew = "b"\nthreshold = "5%"\n',
                         "why 1 has unknown key 'threshold'"),
                        ('[[why]]\nname = "w"\ntitle = "t"\nbase = "a"\nnew = "b"\ncase = 3\n', "case must be a string"),
                        ('[[why]]\nname = "w"\ntitle = "t"\nbase = "a"\nnew = "b"\nkernel = 3\n', "kernel must be a string"),
                        ('[[why]]\nname = "w"\ntitle = "t"\nbase = "a"\nnew = "b"\nkernel = "("\n',
                         "why 1 (w): kernel '(' is not a regular expression"),
                        ('[[comparison]]\nname = "x"\ntitle = "t"\nbase = "a"\nnew = "b"\n'
                         '[[why]]\nname = "x"\ntitle = "t"\nbase = "a"\nnew = "b"\n', "name 'x' must be unique"),
                        ("[[comparison]\n", "not valid TOML")):
        toml.write_text(text)
        with pytest.raises(ProfileError) as exc:
            page.declared_comparisons(tmp_path)
        assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
        assert "each [[comparison]] takes" in str(exc.value) or "must be unique" in str(exc.value)


def test_the_committed_comparisons_name_captures_that_exist():
    declared = page.declared_comparisons(ROOT / "profiles")
    assert {"h100-to-h200-seqlen", "h100-to-h200-blocksize", "h100-to-h200-bench"} <= {d.name for d in declared}
    for d in declared:
        if isinstance(d, page.DeclaredWhy):  # a bottleneck page across two captures: both hold a deep report
            assert all(find.deep_report(read.resolve(x, ROOT / "profiles"))[0].exists() for x in (d.base, d.new)), d
        else:
            assert C.load(d.base).samples and C.load(d.new).samples, d
    assert any(isinstance(d, page.DeclaredWhy) for d in declared)


def test_reference_drift_is_reported_apart_and_the_headline_leads_with_the_code_under_test():
    """sdpa_cudnn (a reference: library code) 0.57x as fast below 0.1 ms between two captures of one GPU and
    library is drift, not a regression; the headline names flash_mma's change, the largest under test."""
    gpu = {"gpu": {"name": "GPU"}, "environment": {"torch": "2.9"}}
    base = _side("gpu/before", [("flash_mma", "forward", 1024, _spread(2.0, 0.004)),
                                ("flash_fa1", "forward", 1024, _spread(5.0, 0.004)),
                                ("sdpa_cudnn", "forward", 1024, _spread(0.057, 0.004))], manifest=gpu)
    new = _side("gpu/after", [("flash_mma", "forward", 1024, _spread(1.6, 0.004)),
                              ("flash_fa1", "forward", 1024, _spread(5.05, 0.004)),
                              ("sdpa_cudnn", "forward", 1024, _spread(0.1, 0.004))], manifest=gpu)
    cmp = C.compare(base, new, "5%")
    verdicts = dict(zip(cmp.ranges["variant"], cmp.ranges["verdict"], strict=True))
    assert verdicts == {"flash_mma": C.FASTER, "flash_fa1": C.SAME, "sdpa_cudnn": C.DRIFT}
    assert cmp.drift and cmp.exit_status == 0 and cmp.regressions.empty
    assert cmp.counts() == {C.SLOWER: 0, C.FASTER: 1, C.BELOW: 0, C.SAME: 1, C.DRIFT: 1}
    assert C.is_reference("sdpa_cudnn") and C.is_reference("SDPA flash") and not C.is_reference("flash_mma")
    head = page.headline(cmp)
    assert "**Largest change** of an implementation under test: **flash_mma forward -20.0%**" in head
    assert "Largest slowdowns" not in head and "Largest speed-ups: flash_mma" in head
    drift = next(p for p in head.split("\n\n") if p.startswith("**Reference drift**"))
    assert "sdpa_cudnn" in drift and "+75.4%" in drift and "neither gate nor lead" in drift
    assert head.index("flash_mma") < head.index("sdpa_cudnn")
    assert "biggest moves: flash_mma forward -20.0%" in cmp.summary() and "1 reference drift" in cmp.summary()
    assert set(page.verdicts_by(cmp, "impl").columns) >= {C.DRIFT}
    # another GPU (or library): the references are part of what is compared, and gate
    other = _side("gpu2/after", [(v, p, n, t) for v, p, n, t in
                                 [("flash_mma", "forward", 1024, _spread(1.6, 0.004)),
                                  ("flash_fa1", "forward", 1024, _spread(5.05, 0.004)),
                                  ("sdpa_cudnn", "forward", 1024, _spread(0.1, 0.004))]],
                  manifest={"gpu": {"name": "Other GPU"}, "environment": {"torch": "2.9"}})
    cross = C.compare(base, other, "5%")
    assert not cross.drift and cross.exit_status == 1 and list(cross.regressions["variant"]) == ["sdpa_cudnn"]
    head = page.headline(cross)
    assert "**Largest change** of an implementation under test: **flash_mma" in head and "**References** (sdpa_cudnn" in head
