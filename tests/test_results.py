"""docs/results.md is what flash_kernels.results renders from the committed captures, and nsightlab report writes
the documents plug-ins register (nsightlab.render.documents)."""

import re
from pathlib import Path

import pytest

from flash_kernels import results
from nsightlab.render import documents

ROOT = Path(__file__).resolve().parent.parent


def test_docs_results_is_rendered_from_the_committed_captures():
    """A committed capture that changes without docs/results.md changing with it fails here: make report."""
    page = (ROOT / "docs" / "results.md").read_bytes()
    fresh = results.render(ROOT / "profiles").encode("utf-8")
    assert fresh == page, "docs/results.md differs from the captures: run `make report` and commit docs/results.md"
    text = fresh.decode()
    assert not re.search(r"^\(no ", text, re.M), "a table whose source files are missing printed a note instead of rows"
    tables = [t for t in text.split("\n### ")[1:] if "\n| " in t]
    assert len(tables) >= 15
    assert all("\nSource: " in t for t in tables), "every table names the files it comes from"


def test_the_results_page_is_a_document_of_the_repositorys_profiles():
    docs = documents.for_profiles(ROOT / "profiles")
    assert [d.name for d in docs] == ["results"]
    assert Path(docs[0].path) == ROOT / "docs" / "results.md"
    assert documents.for_profiles(ROOT / "tests") == []


def test_documents_are_written_atomically_once_and_a_failure_is_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(documents, "_DOCUMENTS", {})
    calls = []

    def render(profiles):
        calls.append(profiles)
        return f"from {profiles.name}\n"

    out = tmp_path / "docs" / "page.md"
    documents.register(documents.Document("page", out, render, tmp_path / "profiles"))
    assert documents.write_documents(tmp_path / "profiles") == []
    assert out.read_text() == "from profiles\n" and "written" in capsys.readouterr().out
    mtime = out.stat().st_mtime_ns
    assert documents.write_documents(tmp_path / "profiles") == []
    assert out.stat().st_mtime_ns == mtime and "(unchanged)" in capsys.readouterr().out
    assert documents.write_documents(tmp_path / "elsewhere") == [] and len(calls) == 2

    def broken(profiles):
        raise FileNotFoundError("no bench capture")

    documents.register(documents.Document("page", out, broken, tmp_path / "profiles"))
    assert documents.write_documents(tmp_path / "profiles") == [("document page", "FileNotFoundError: no bench capture")]
    assert out.read_text() == "from profiles\n"
    assert not list(out.parent.glob(".*.tmp"))


def test_a_span_against_a_mark_never_rounds_a_miss_up_to_it():
    import pandas as pd

    assert results._span(pd.Series([0.9612, 0.9981]), mark=1.0) == "0.96–0.998"
    assert results._span(pd.Series([0.9612, 0.9981])) == "0.96–1.00"  # no mark: two decimals
    assert results._span(pd.Series([1.0, 1.2]), mark=1.0) == "1.00–1.20"


@pytest.mark.parametrize(("r", "target", "cell"), [(0.96, 0.90, "0.96"), (0.90, 0.90, "0.90"), (0.895, 0.90, "0.895"),
                                                   (1.0498, 1.05, "1.0498"), (0.895, float("nan"), "0.90")])
def test_a_ratio_prints_with_as_many_digits_as_tell_whether_it_meets_its_target(r, target, cell):
    assert results._ratio_cell(r, target) == cell


H200 = ROOT / "profiles" / "nvidia-h200"


def _marks(gpu: Path) -> dict[str, dict[str, str]]:
    lines = [line for line in results.anchors_table(gpu).splitlines()[2:]]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return {c[0]: {"measured": c[1], "met": c[2], "why": c[3]} for c in cells}


def test_the_marks_table_is_computed_from_the_fp8_suite_and_the_bench_capture():
    import pandas as pd

    marks = _marks(H200)
    df = pd.read_csv(results.fp8_suite_file(H200))
    vt = df[(df["impl"] == results.FP8_VT) & (df["status"] == "ok") & (df["N"] >= 8192)]
    for D in (128, 256):  # the capture measured both head dims
        for causal, mark in results.FP8_TFLOPS_MARK.items():
            t = vt[(vt["causal"] == causal) & (vt["D"] == D)]["tflops"]
            row = marks[f"FP8 forward ≥ {mark:.0f} TFLOP/s, D={D}, N ≥ 8k, {'causal' if causal else 'not causal'} "
                        "(V's transpose counted)"]
            assert len(t) == 2 and row["measured"] == f"{t.min():.0f}–{t.max():.0f} TFLOP/s"
            assert row["met"] == f"{int((t >= mark).sum())} of {len(t)}"
    assert "FP8 forward at D=256" not in marks  # a refusal's row, only where the suite found the head dim refused
    d128 = marks["FP8 forward ≥ 1000 TFLOP/s, D=128, N ≥ 8k, not causal (V's transpose counted)"]["why"]
    assert "flash_wgmma_fp8 takes" in d128 and "tensor pipe is busy" in d128 and d128.endswith(", at D=128.")
    assert "From the deep tier of the fp8 capture" in d128  # and, where the rows ran another build, that they did
    d256 = marks["FP8 forward ≥ 1000 TFLOP/s, D=256, N ≥ 8k, not causal (V's transpose counted)"]["why"]
    e = df[(df["impl"] == results.FP8_KERNEL) & (df["status"] == "ok") & (df["D"] == 256) & ~df["causal"]
           & (df["N"] >= 8192)]["rel_l2"]
    # met (V centred at D = 256): a met mark carries its rows' error only where it passes the error note's 2 %
    assert e.max() <= results.ERROR_NOTE and d256 == "—"
    loud = pd.DataFrame([{"impl": results.FP8_KERNEL, "status": "ok", "D": 256, "causal": False, "N": n, "rel_l2": x}
                         for n, x in ((8192, 0.057), (16384, 0.111))])
    assert results._fp8_error_mark(loud, 256, False).startswith("met, but the FP8 error at D=256 is 5.7–11.1 %")
    conv = pd.read_csv(H200 / "bench" / "convention.csv.xz")
    conv = conv[(conv["status"] == "ok") & (conv["pass"] == "backward") & (conv["D"] == 128) & (conv["N"] >= 2048)]
    ms = conv.pivot_table(index=["dtype", "causal", "N"], columns="impl", values="ms")
    ratio = ms["sdpa_cudnn"] / ms["flash_wgmma"]
    row = marks["flash_wgmma backward ≥ 1.00× sdpa_cudnn (D=128, N ≥ 2048)"]
    # each bound with the digits it takes to tell whether it meets the mark (0.998 is not 1.00)
    assert row["measured"] == f"{results._ratio_cell(ratio.min(), 1.0)}–{results._ratio_cell(ratio.max(), 1.0)}×"
    assert row["met"] == f"{int((ratio >= 1.0).sum())} of {len(ratio)}"
    # a missed backward mark says by how much and why, from the deep capture that holds both sides (nsightlab why's
    # verdict), naming that capture and its case
    assert row["why"].startswith(f"short by {100 * (1 - ratio.min()):.0f} % at worst; flash_wgmma takes ")
    assert "x the time of sdpa_cudnn" in row["why"]
    assert "From the deep tier of the backward-n8192-deep capture" in row["why"] and row["why"].endswith(
        "at N = 8192, D = 128.")


def test_why_sentence_says_when_a_capture_has_no_deep_report(tmp_path):
    (tmp_path / "cap").mkdir()
    text = results.why_sentence(tmp_path / "cap", "flash_wgmma", "sdpa_cudnn")
    assert text.startswith("(cap's deep report could not be read here: ")


def test_the_fp8_suite_table_gives_the_kernels_share_of_the_peak_and_says_what_the_path_refuses(tmp_path):
    import json

    import pandas as pd

    gpu = tmp_path / "profiles" / "gpu"
    loose = tmp_path / "profiles" / results.LOOSE / "gpu"
    loose.mkdir(parents=True)
    rows = []
    for impl, ms in (("flash_wgmma_fp8", 1.0), ("flash_wgmma_fp8_vt", 1.1), ("flash_wgmma_fp8_call", 1.2),
                     ("flash_wgmma", 1.32), ("sdpa_cudnn", 1.21), ("sdpa_flash", 2.4)):
        rows.append({"D": 128, "causal": False, "N": 8192, "impl": impl, "pass": "forward", "status": "ok", "ms": ms,
                     "tflops": 1000.0 / ms, "rel_l2": 3e-3 if "fp8" in impl else 2e-4})
    rows.append({"D": 256, "causal": False, "N": 8192, "impl": "flash_wgmma_fp8", "pass": "forward",
                 "status": "skipped: attention_fp8 supports head dim (64, 128)"})
    pd.DataFrame(rows).to_csv(loose / "fp8.csv", index=False)
    (loose / "fp8.manifest.json").write_text(json.dumps({"environment": {"gpu": {"sm_count": 132}}}))
    table = results.fp8_suite_table(gpu)
    assert "| 128 | no | 1000 (51 %) | 1.10 | 1.20 | 1.10 | 3.0e-03 / 2.0e-04 |" in table  # 1000 of 1979 TFLOP/s
    assert table.endswith("Head dim 256: the FP8 path refuses it (attention_fp8 supports head dim (64, 128)).")


def test_a_suite_the_bench_capture_holds_is_read_from_there_before_the_file_kept_apart(tmp_path):
    import json

    gpu = tmp_path / "profiles" / "gpu"
    loose = tmp_path / "profiles" / results.LOOSE / "gpu"
    for folder, name in ((loose, "flash_wgmma_d256.csv"), (loose, "fp8.csv")):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x\n")
    assert results.d256_file(gpu) == loose / "flash_wgmma_d256.csv"
    assert results.fp8_suite_file(gpu) == loose / "fp8.csv"
    for folder, name in ((gpu / "bench", "d256.csv.xz"), (gpu / "bench-fp8", "fp8.csv.xz")):
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"")
    assert results.d256_file(gpu) == gpu / "bench" / "d256.csv.xz"
    assert results.fp8_suite_file(gpu) == gpu / "bench-fp8" / "fp8.csv.xz"
    (gpu / "bench-d256").mkdir()  # the capture of the d256 suite alone: where the manifests do not tell, it wins
    (gpu / "bench-d256" / "d256.csv.xz").write_bytes(b"")
    assert results.d256_file(gpu) == gpu / "bench-d256" / "d256.csv.xz"
    # where they do, the one taken last
    for folder, created in ((gpu / "bench-d256", "20261128-120000"), (gpu / "bench", "20261129-120000")):
        (folder / "manifest.json").write_text(json.dumps({"created": created}))
    assert results.d256_file(gpu) == gpu / "bench" / "d256.csv.xz"
    (gpu / "bench-d256" / "manifest.json").write_text(json.dumps({"created": "20261130-120000"}))
    assert results.d256_file(gpu) == gpu / "bench-d256" / "d256.csv.xz"


def _d256_csv(path: Path, backward: bool) -> None:
    import pandas as pd

    rows = []
    for pass_ in ("forward", "backward") if backward else ("forward",):
        for N in (1024, 8192):
            for impl, ms in (("flash_wgmma", 1.0), ("sdpa_cudnn", 1.1 if pass_ == "forward" else 0.6),
                             ("sdpa_flash", 2.0 if pass_ == "forward" else 1.0)):
                rows.append({"pass": pass_, "impl": impl, "dtype": "float16", "causal": False, "N": N, "ms": ms,
                             "tflops": 500.0 / ms, "status": "ok"})
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)


def test_the_d256_table_shows_each_pass_it_times_and_only_the_forward_against_its_target(tmp_path):
    gpu = tmp_path / "profiles" / "gpu"
    _d256_csv(gpu / "bench-d256" / "d256.csv", backward=True)
    lines = results.d256_table(gpu).splitlines()
    fwd = next(x for x in lines if "| forward |" in x and "cuDNN" in x)
    bwd = next(x for x in lines if "| backward |" in x and "cuDNN" in x)
    assert "| 1.10 | 1.10 | 500–500 | 2 of 2 |" in fwd  # cuDNN's 1.1 ms over 1.0: met
    assert "| 0.60 | 0.60 | 500–500 | — |" in bwd     # no target for the backward's speed
    _d256_csv(gpu / "bench-d256" / "d256.csv", backward=False)
    assert "| backward |" not in results.d256_table(gpu)


def test_the_d256_why_names_its_deep_capture_and_comes_only_where_its_case_misses(tmp_path, monkeypatch):
    """The forward's why is the deep capture's case (fp16, not causal, N = 4096): given only where that row misses;
    each why names the deep capture's build and, where the bench rows ran another, says so."""
    import json

    import pandas as pd

    gpu = tmp_path / "profiles" / "gpu"
    csv = gpu / "bench-d256" / "d256.csv"
    csv.parent.mkdir(parents=True)
    deep = gpu / results.D256_WHY[0]
    deep.mkdir()

    def deep_cases(*ns: int) -> None:  # the deep capture's flash_wgmma fp16, not causal forward cases at these N
        (deep / "manifest.json").write_text(json.dumps({"git_commit": "aaaaaaa1", "cases": [
            {"range": f"fk:flash_wgmma:forward:N={n}", "impl": "flash_wgmma", "pass": "forward", "dtype": "float16",
             "shape": {"B": 16384 // n, "H": 8, "N": n, "D": 256, "dtype": "float16", "causal": False}}
            for n in ns]}))

    deep_cases(4096)
    asked: list[str] = []
    monkeypatch.setattr(results, "why_sentence", lambda *a, **k: asked.append(a[3] if len(a) > 3 else "") or "WHY")

    def write(cudnn_fwd_ms: float, commit: str) -> dict[str, str]:
        rows = [{"pass": p, "impl": impl, "dtype": "float16", "causal": False, "N": 4096, "status": "ok",
                 "ms": ms, "tflops": 100.0}
                for p in ("forward", "backward")
                for impl, ms in (("flash_wgmma", 1.0), ("sdpa_cudnn", cudnn_fwd_ms if p == "forward" else 0.7),
                                 ("sdpa_flash", 2.0))]
        pd.DataFrame(rows).to_csv(csv, index=False)
        (csv.parent / "d256.manifest.json").write_text(json.dumps({"environment": {"git_commit": commit}}))
        marks = _marks(gpu)
        return {k: marks[k]["why"] for k in marks if "D=256" in k and "FP8" not in k}

    whys = write(0.9, "bbbbbbb2")  # missed at N = 4096: the deep case explains it
    fwd = next(v for k, v in whys.items() if k.startswith("Forward"))
    bwd = next(v for k, v in whys.items() if k.startswith("Backward"))
    note = ("at N = 4096, from the deep tier of the d256-deep capture, of a build other than these rows' (the two "
            "manifests name the commits): WHY")
    assert fwd.endswith(note) and bwd.endswith(note)
    whys = write(1.1, "aaaaaaa1")  # met at N = 4096; the same build as the deep capture
    fwd = next(v for k, v in whys.items() if k.startswith("Forward"))
    bwd = next(v for k, v in whys.items() if k.startswith("Backward"))
    assert fwd == "—" and bwd.endswith("at N = 4096, from the deep tier of the d256-deep capture: WHY")
    # missed only where no deep capture looked (N = 512): the row says so instead of borrowing the N = 4096 why
    rows = pd.read_csv(csv)
    short = rows[rows["N"] == 4096].assign(N=512)
    short.loc[(short["impl"] == "sdpa_cudnn") & (short["pass"] == "forward"), "ms"] = 0.9
    pd.concat([rows, short]).to_csv(csv, index=False)
    fwd = _marks(gpu)["Forward at D=256 ≥ 1.0× cuDNN"]["why"]
    assert "missed (in fp16 or bf16) at not causal: N = 512" in fwd and "WHY" not in fwd
    assert fwd.endswith("no deep capture profiles these shapes (d256-deep profiles fp16, not causal, N = 4096, "
                        "which meets it): `nsightlab capture --impl flash_wgmma --impl sdpa_cudnn -B 32 -H 8 -N 512 "
                        "-D 256 --dtype float16 --causal no --pass forward --deep . --deep-only` would")
    # once the deep capture profiles N = 512 too, that case explains the miss
    deep_cases(4096, 512)
    asked.clear()
    fwd = _marks(gpu)["Forward at D=256 ≥ 1.0× cuDNN"]["why"]
    assert "at N = 512, from the deep tier of the d256-deep capture" in fwd and fwd.endswith("WHY")
    assert "N=512,D=256,pass=forward" in asked


def test_deep_source_says_whether_the_two_builds_differ_in_code_or_only_in_comments(tmp_path, monkeypatch):
    import json

    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "manifest.json").write_text(json.dumps({"git_commit": "aaaaaaa1"}))
    rows = tmp_path / "bench" / "x.csv"
    rows.parent.mkdir()
    rows.write_text("")
    (rows.parent / "x.manifest.json").write_text(json.dumps({"environment": {"git_commit": "bbbbbbb2"}}))
    tail = " (the two manifests name the commits)"

    def case(changed, comments):
        monkeypatch.setattr(results, "changed_between", lambda *a: changed)
        monkeypatch.setattr(results, "comment_only", lambda *a: comments)
        return results.deep_source(deep, rows).removeprefix("the deep tier of the deep capture, ").removesuffix(tail)

    assert case(None, []) == "of a build other than these rows'"  # git lacks a commit
    assert case([], []) == "of another commit than these rows', with the same kernel sources"
    assert case(["c/a.cu"], ["c/a.cu"]) == ("of another commit than these rows', whose kernel sources differ only "
                                             "in comments, in a.cu")
    assert case(["c/b.cuh", "c/a.cu", "c/c.h"], ["c/c.h"]) == (
        "of a build other than these rows', whose kernel sources differ in a.cu and b.cuh, and only in comments in c.h")
    assert case([f"c/{n}.cu" for n in "abcd"], []) == "of a build other than these rows', whose kernel sources differ in 4 files"
    (rows.parent / "x.manifest.json").write_text(json.dumps({"environment": {"git_commit": "aaaaaaa1"}}))
    assert results.deep_source(deep, rows) == "the deep tier of the deep capture"  # the same build


def _fp8_rows(spec):
    """fp8 suite rows from {(D, causal, N): {impl: ms}} (TFLOP/s: 1000 / ms, so a row's numbers are easy to check)."""
    rows = []
    for (D, causal, N), times in spec.items():
        for impl, ms in times.items():
            rows.append({"D": D, "causal": causal, "N": N, "impl": impl, "pass": "forward", "status": "ok", "ms": ms,
                         "tflops": 1000.0 / ms, "rel_l2": 1e-3})
    return rows


def test_the_targets_say_by_how_much_a_miss_misses_and_which_rows(tmp_path):
    import pandas as pd

    gpu = tmp_path / "profiles" / "gpu"
    loose = tmp_path / "profiles" / results.LOOSE / "gpu"
    loose.mkdir(parents=True)
    fp16 = {"flash_wgmma": 1.0, "sdpa_cudnn": 1.1}
    spec = {(128, False, 8192): {**fp16, results.FP8_VT: 1.25},      # 800 TFLOP/s: 20 % short of 1000
            (128, False, 16384): {**fp16, results.FP8_VT: 0.9},      # 1111: met
            (128, True, 8192): {**fp16, results.FP8_VT: 0.8},        # 1250 causal: met
            (64, False, 2048): {**fp16, results.FP8_VT: 1.25},       # 0.8x fp16
            (64, True, 4096): {**fp16, results.FP8_VT: 1.1}}         # 0.91x fp16
    pd.DataFrame(_fp8_rows(spec)).to_csv(loose / "fp8.csv", index=False)
    marks = _marks(gpu)
    full = marks["FP8 forward ≥ 1000 TFLOP/s, D=128, N ≥ 8k, not causal (V's transpose counted)"]
    assert full["measured"] == "800–1111 TFLOP/s" and full["met"] == "1 of 2"
    assert full["why"].startswith("short by 20 % at worst")
    causal = marks["FP8 forward ≥ 900 TFLOP/s, D=128, N ≥ 8k, causal (V's transpose counted)"]
    assert causal["met"] == "1 of 1" and causal["why"] == "—"
    fp16_mark = marks["FP8 forward ≥ our fp16 forward at every N ≥ 2048 (V's transpose counted)"]
    assert fp16_mark["met"] == "2 of 5" and fp16_mark["measured"] == "0.80–1.25×"
    assert fp16_mark["why"] == "the worst: D=64, N=2048, not causal; every row at D=64 misses (0.80–0.91×)"
    # a partial run without D=128 rows gives no FP8-rate rows, not an error
    pd.DataFrame(_fp8_rows({(64, False, 2048): {**fp16, results.FP8_VT: 1.25}})).to_csv(loose / "fp8.csv", index=False)
    assert not any(k.startswith("FP8 forward ≥ 1000") for k in _marks(gpu))


def test_an_fp8_cell_whose_repeats_spread_widely_is_named_under_the_table(tmp_path):
    import pandas as pd

    gpu = tmp_path / "profiles" / "gpu"
    loose = tmp_path / "profiles" / results.LOOSE / "gpu"
    loose.mkdir(parents=True)
    rows = _fp8_rows({(128, False, 8192): {results.FP8_KERNEL: 1.0, results.FP8_VT: 1.1, results.FP8_CALL: 1.2},
                      (128, False, 16384): {results.FP8_KERNEL: 2.0, results.FP8_VT: 2.1, results.FP8_CALL: 2.2}})
    for r in rows:  # 2 % around the median at 8k; 9 % at 16k
        r["ms_min"], r["ms_max"] = (r["ms"] * 0.99, r["ms"] * 1.01) if r["N"] == 8192 else (r["ms"] * 0.95, r["ms"] * 1.04)
    pd.DataFrame(rows).to_csv(loose / "fp8.csv", index=False)
    table = results.fp8_suite_table(gpu)
    assert table.endswith("spread more than 5 % (fastest to slowest, over the median) at D=128 N=16384 not causal "
                          "(9 %): read those cells with that margin.")


def test_a_head_dim_where_fp8_always_misses_gets_its_exp_bound_and_what_to_try(tmp_path):
    import json

    import pandas as pd

    gpu = tmp_path / "profiles" / "gpu"
    loose = tmp_path / "profiles" / results.LOOSE / "gpu"
    loose.mkdir(parents=True)
    (gpu / "bench").mkdir(parents=True)
    (gpu / "bench" / "ceilings.json").write_text(json.dumps({"ceilings": {
        "mufu_ex2": {"softmax_bound_flop_per_s": {"forward, D=64": 1.0e15}}, "wgmma_fp16": {"flop_per_s": 8.0e14}}}))
    rows = _fp8_rows({(64, False, 4096): {"flash_wgmma": 1.0, results.FP8_VT: 1.25}})
    for r in rows:
        r["options"] = "wg_tile=192x128;pipeline=tma-ws-x" if r["impl"] == "flash_wgmma" else "rotate=True"
    pd.DataFrame(rows).to_csv(loose / "fp8.csv", index=False)
    why = _marks(gpu)["FP8 forward ≥ our fp16 forward at every N ≥ 2048 (V's transpose counted)"]["why"]
    assert "every row at D=64 misses (0.80×): the measured exp2 rate bounds the forward at D=64 at 1,000 TFLOP/s, " \
           "1.25× the fp16 wgmma ceiling measured beside it (800)" in why
    assert "the fp16 forward there runs 192x128 tiles, tma-ws-x" in why and why.endswith("--option pingpong=1")
    # once the ping-pong is measured at that head dim, the row says what it did instead (medians over the rounds)
    pp = [{"round": rnd, "impl": results.FP8_KERNEL, "status": "ok", "D": 64, "causal": False, "N": n,
           "options": f"rotate=True;pingpong={on}", "ms": ms}
          for rnd, n, on, ms in (("a", 4096, 0, 1.0), ("a", 4096, 1, 1.10), ("b", 4096, 0, 1.0), ("b", 4096, 1, 1.02),
                                 ("c", 4096, 0, 1.0), ("c", 4096, 1, 1.04), ("a", 8192, 0, 2.0), ("a", 8192, 1, 1.9))]
    pd.DataFrame(pp).to_csv(loose / "fp8_pingpong.csv", index=False)
    assert results.pingpong_ratio(gpu, 64).round(3).to_dict() == {(False, 4096): 1.04, (False, 8192): 0.95}
    assert results.pingpong_ratio(gpu, 128) is None
    why = _marks(gpu)["FP8 forward ≥ our fp16 forward at every N ≥ 2048 (V's transpose counted)"]["why"]
    assert "its ping-pong, measured there (fp8_pingpong.csv: the kernel alone, pingpong=0 and 1 alternating over 2 " \
           "shapes), takes 0.95–1.04× the time without it (1 of 2 faster), so the default stays" in why
    pd.DataFrame([r for r in pp if r["N"] == 8192]).to_csv(loose / "fp8_pingpong.csv", index=False)
    why = _marks(gpu)["FP8 forward ≥ our fp16 forward at every N ≥ 2048 (V's transpose counted)"]["why"]
    assert "(1 of 1 faster): faster at every shape, so D = 64 could join fp8.PINGPONG_HEAD_DIMS" in why


def test_the_fp8_tables_need_no_torch():
    """The report's environment has no torch (make report): the FP8 tables, their error note included, are read
    from the committed CSVs with torch made unimportable."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from pathlib import Path\n"
            "from flash_kernels import results\n"
            "gpu = Path(sys.argv[1])\n"
            "print(results.fp8_suite_table(gpu))\n"
            "print(results.anchors_table(gpu))\n"
            "print(results._o_sum('', 256), results._o_sum('o_sum=fp32', 256))\n")
    out = subprocess.run([sys.executable, "-c", code, str(H200)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "V is centred (center_v: given, or by default where O is summed in the tensor cores' accumulator" \
        in out.stdout and "at D=256 with O summed in the tensor cores' accumulator: " in out.stdout
    assert out.stdout.rstrip().endswith("the tensor cores' accumulator fp32 registers")
    assert "From the deep tier of the fp8 capture" in out.stdout  # the FP8 marks' why, without torch


def test_the_fp8_table_says_which_whole_calls_quantized_with_torch():
    """The whole call's column explained where its rows say they quantized with torch operations (quant=torch);
    rows that do not say (captures from before the bench recorded it) get no line."""
    import pandas as pd

    df = pd.DataFrame([{"impl": results.FP8_CALL, "D": D, "options": f"rotate=True;{q}"}
                       for D, q in ((64, "quant=fused"), (256, "quant=torch"), (128, ""), (256, "quant=torch"))])
    assert results._torch_quantized_dims(df) == [256]
    assert results._torch_quantized_dims(df[df["D"] != 256]) == []


def test_the_fp8_table_says_where_its_fp16_run_drifts_from_the_bench_capture(tmp_path):
    """The fp8 suite's FP8-to-fp16 ratios are against its own run's flash_wgmma; where that run's fp16 forward
    differs from the bench capture's at the same shapes by more than FP16_DRIFT_NOTE, the table says by how much,
    per head dim and mask, saying whether the two ran the same code; a suite that agrees gets no line."""
    import pandas as pd

    fp8_csv = results.fp8_suite_file(H200)
    m = results.fp16_drift(H200, fp8_csv)
    a, b = pd.read_csv(fp8_csv), pd.read_csv(H200 / "bench" / "convention.csv.xz")
    a = a[(a["impl"] == "flash_wgmma") & (a["status"] == "ok")].set_index(["D", "causal", "N"])["ms"]
    b = b[(b["impl"] == "flash_wgmma") & (b["status"] == "ok") & (b["pass"] == "forward") & (b["dtype"] == "float16")]
    b = b.set_index(["D", "causal", "N"])["ms"]
    assert len(m) == 20
    for r in m.itertuples():
        assert abs(r.ratio - a.loc[(r.D, r.causal, r.N)] / b.loc[(r.D, r.causal, r.N)]) < 1e-12
    # the same suite with its fp16 forward at D = 128 made 1.07x the bench capture's there: said, per mask
    key = ["B", "H", "N", "D", "causal", "impl", "pass", "dtype"]
    conv = pd.read_csv(H200 / "bench" / "convention.csv.xz").set_index(key)["ms"]
    for drift, name in ((1.07, "drifted.csv"), (1.0, "same.csv")):
        suite = pd.read_csv(fp8_csv)
        hit = suite.set_index(key).index.isin(conv.index)
        suite.loc[hit, "ms"] = conv.loc[suite.set_index(key).index[hit]].to_numpy()
        suite.loc[hit & (suite["D"] == 128).to_numpy(), "ms"] *= drift
        suite.to_csv(tmp_path / name, index=False)
    note = results.fp16_drift_note(H200, tmp_path / "drifted.csv")
    assert "D=128 not causal: 1.07×; D=128 causal: 1.07× its time there" in note and "D=64" not in note
    assert "the two ran different commits, which their manifests name" in note  # no commit id in a document
    assert results.fp16_drift_note(H200, tmp_path / "same.csv") == ""


def test_the_fp8_table_says_where_the_error_passes_its_note_and_where_v_is_centred():
    import pandas as pd

    rows = []
    for D, err, opts in ((128, 0.012, "o_sum=fp32"), (256, 0.057, "o_sum=tensor"), (64, 0.004, "o_sum=tensor;center_v=1")):
        rows += [{"D": D, "N": 8192, "causal": False, "impl": results.FP8_KERNEL, "status": "ok", "rel_l2": err,
                  "options": opts}]
    df = pd.DataFrame(rows)
    note = results._fp8_error_note(df)
    assert "The FP8 error passes 2 % at D=256, where O is summed in the tensor cores' accumulator: 5.7 % at N=8192; " \
           "at D=64, 128 (O summed in fp32 registers and the tensor cores' accumulator) it stays at or under 1.2 %." \
           in note
    centred = results._fp8_centred_note(df)
    assert centred.endswith("The error (rel. L2) at D=64 with O summed in the tensor cores' accumulator: 0.40 %.")
    both = pd.concat([df, pd.DataFrame([{**rows[0], "rel_l2": 0.01, "options": "o_sum=fp32;center_v=1"},
                                        {**rows[0], "D": 64, "rel_l2": 0.002, "options": "center_v=1;o_sum=tensor"}])])
    assert results._fp8_centred_note(both).endswith(
        "at D=128 with O summed in fp32 registers: 1.00 %; at D=64 with O summed in the tensor cores' accumulator: "
        "0.20–0.40 %.")
    assert results._fp8_centred_note(df[df["D"] != 64]) == ""


def test_a_d256_csv_kept_apart_is_cited_with_its_own_manifest(tmp_path):
    profiles = tmp_path / "profiles"
    _d256_csv(profiles / results.LOOSE / "gpu" / "flash_wgmma_d256.csv", backward=True)
    (profiles / "gpu").mkdir()
    out = results.render(profiles)
    assert ("Source: `profiles/_bench/gpu/flash_wgmma_d256.csv`, `profiles/_bench/gpu/flash_wgmma_d256.manifest.json`."
            in out)
