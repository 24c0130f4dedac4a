"""Importing reports captured anywhere: a synthetic foreign nsys export, the committed H100 ncu
report as if someone else had taken it, and every kind of broken input, end to end (no GPU)."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nsightlab.cli import import_ as import_cmd
from nsightlab.cli import store as store_cmd
from nsightlab.core import tools
from nsightlab.core.errors import ProfileError
from nsightlab.core.files import copy_content, file_table, sha256
from nsightlab.parse import ncu, ncu_session, nsys, range_columns
from nsightlab.store import captures as store
from nsightlab.store import importer
from tests.foreign import BROKEN, DEFAULT, EXPECTED, GEMM, GPU_NAME, MUL, MYLIB, SDPA, make_foreign_sqlite

ROOT = Path(__file__).resolve().parent.parent
BLOCKSIZE = ROOT / "profiles" / "nvidia-h100-80gb-hbm3" / "blocksize"
SLUG = "nvidia-h100-80gb-hbm3"


@pytest.fixture(scope="module")
def ncu_rep(tmp_path_factory) -> Path:
    """The committed H100 blocksize report, uncompressed under a name nobody in this project uses."""
    dest = tmp_path_factory.mktemp("foreign") / "their_run.ncu-rep"
    with open(dest, "wb") as out:
        copy_content(store.find_file(BLOCKSIZE, "ncu.ncu-rep"), out)
    return dest


def _packed(src: Path, dest: Path) -> Path:
    """``src`` compressed into ``dest`` (.gz or .xz by its name), fast rather than small."""
    opener = gzip.open(dest, "wb", compresslevel=1) if dest.suffix == ".gz" else lzma.open(dest, "wb", preset=0)
    with open(src, "rb") as fh, opener as out:
        shutil.copyfileobj(fh, out)
    return dest


@pytest.fixture(scope="module")
def ncu_gz(ncu_rep) -> Path:
    """The same report gzipped, as captures were stored before xz."""
    return _packed(ncu_rep, ncu_rep.with_name("gzipped.ncu-rep.gz"))


@pytest.fixture(scope="module")
def ncu_xz(ncu_rep) -> Path:
    return _packed(ncu_rep, ncu_rep.with_name("packed.ncu-rep.xz"))


@pytest.fixture
def sqlite(tmp_path) -> Path:
    return make_foreign_sqlite(tmp_path / "their timeline.sqlite")


def _no_leftovers(profiles: Path) -> None:
    """A failed import leaves no temporary folder (and no capture) behind."""
    if profiles.exists():
        assert not [p for p in profiles.rglob("*") if p.name.startswith(".tmp-import")], list(profiles.rglob("*"))
        assert not list(profiles.glob("*/*/manifest.json"))


def _fails(argv: list[str], capsys, *needles: str) -> str:
    assert import_cmd.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("nsightlab import: error: ") and err.count("\n") == 1, err
    for n in needles:
        assert n in err, err
    return err


# --------------------------------------------------------------------------- the synthetic foreign export


def test_foreign_sqlite_join_innermost_range_on_launching_thread(tmp_path):
    t = nsys.nsys_tables(make_foreign_sqlite(tmp_path / "f.sqlite"))
    k = t["kernels"].set_index("correlationId")
    assert sorted(k.index) == sorted(EXPECTED)
    for cid, (rng, dom) in EXPECTED.items():
        assert (k.at[cid, "range"], k.at[cid, "domain"]) == (rng, dom), cid
    outside = [cid for cid, (rng, _) in EXPECTED.items() if not rng]
    assert (k.loc[outside, "range_id"] == -1).all()
    assert k.loc[outside, "variant"].isna().all()
    assert (k.loc[[c for c in EXPECTED if c not in outside], "range_id"] >= 0).all()
    # names decode generically: key=value tokens become columns, the rest is the label
    gemm = k[k["range"] == GEMM]
    assert set(gemm["variant"]) == {"gemm:fwd"} and (gemm["M"] == 4096).all()
    mul = k[k["range"] == MUL]
    assert set(mul["variant"]) == {"elementwise mul"} and (mul["N"] == 1048576).all()
    sdpa = k[k["range"] == SDPA]
    assert set(sdpa["variant"]) == {"sdpa flash"} and (sdpa["B"] == 4).all() and set(sdpa["domain"]) == {MYLIB}
    assert set(k.loc[k["range"] == BROKEN, "variant"]) == {BROKEN}
    r = t["ranges"]
    assert len(r) == 5 and set(r.loc[r["range"] == SDPA, "domain"]) == {MYLIB}
    assert set(r.loc[r["range"] != SDPA, "domain"]) == {DEFAULT}
    assert t["gpu"].at[0, "name"] == GPU_NAME


def test_import_foreign_sqlite(tmp_path, sqlite):
    profiles = tmp_path / "profiles"
    dest = importer.import_reports([sqlite], profiles)
    assert dest == (profiles / SLUG / "their-timeline").resolve()
    man = store.validate(dest)  # checksums, and every report opens
    assert [c.label for c in store.list_captures(profiles)] == [f"{SLUG}/their-timeline"]
    assert man["schema"] == 2 and man["origin"] == "imported"
    assert man["name"] == man["suite"] == "their-timeline"
    assert man["tools"] == ["nsys"] and "parameters" not in man  # no schema-1 copy of the tools
    assert man["git_commit"] is None and man["range_schemas"] == [] and man["cases"] == []
    assert man["ncu"] == {} and store.cases(man).empty
    assert len(man["created"]) == 15 and man["created"][8] == "-"
    g = man["gpu"]
    assert (g["name"], g["compute_capability"], g["sm_count"], g["l2_bytes"]) == (GPU_NAME, "9.0", 132, 52428800)
    assert g["clock_rate_khz"] == 1980000 and g["memory_bandwidth_bytes_per_s"] == 3352320000000
    assert g["source"]["l2_bytes"].startswith("nsys TARGET_INFO_GPU.l2CacheSize")
    env = man["environment"]
    assert (env["driver"], env["cuda"], env["host"]) == ("580.159.04", "13.0", "their-box")
    assert "SECRET" not in (dest / "manifest.json").read_text()  # the process environment is not copied
    n = man["nsys"]
    assert (n["version"], n["kernels"], n["ranges"], n["kernels_outside_ranges"]) == ("2025.3.2.0", 9, 5, 3)
    assert n["files"] == ["nsys.sqlite"] and n["domains"] == [DEFAULT, MYLIB]
    assert man["imported_from"] == [{"name": sqlite.name, "bytes": sqlite.stat().st_size, "sha256": sha256(sqlite),
                                     "stored_as": "nsys.sqlite"}]
    assert sha256(dest / "nsys.sqlite") == sha256(sqlite)
    assert man["files"] == file_table(dest) and set(man["files"]) == {"nsys.sqlite"}
    assert man["commands"][0]["step"] == "import" and "nsightlab.import" in man["commands"][0]["argv"]
    # the parsers read the stored copy exactly as the original
    k = nsys.nsys_tables(dest / "nsys.sqlite")["kernels"].set_index("correlationId")
    assert {c: (k.at[c, "range"], k.at[c, "domain"]) for c in EXPECTED} == EXPECTED


def test_import_says_what_it_imported_in_proper_plurals(tmp_path, sqlite, capsys):
    assert import_cmd.main([str(sqlite), "--profiles", str(tmp_path / "p"), "--name", "one"]) == 0
    out = capsys.readouterr().out
    assert f"imported 1 report from {GPU_NAME} into " in out and out.rstrip().endswith("(nsys; 1 file)"), out
    assert "(s)" not in out and "1 files" not in out


def test_import_replaces_an_earlier_capture_only_when_asked_and_complete(tmp_path, sqlite):
    profiles = tmp_path / "p"
    first = importer.import_reports([sqlite], profiles, name="run")
    created = store.load_manifest(first)["imported_from"]
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database")
    with pytest.raises(ProfileError, match="not a readable SQLite file"):
        importer.import_reports([bad], profiles, name="run", replace=True)
    assert store.load_manifest(first)["imported_from"] == created  # untouched
    two = make_foreign_sqlite(tmp_path / "second.sqlite")
    with pytest.raises(ProfileError, match=r"run already exists; nothing was replaced .*--replace"):
        importer.import_reports([sqlite, two], profiles, name="run")
    assert store.load_manifest(first)["imported_from"] == created  # not asked: untouched
    again = importer.import_reports([sqlite, two], profiles, name="run", replace=True)
    assert again == first
    man = store.validate(again)
    assert man["nsys"]["files"] == ["nsys.sqlite", "nsys-2.sqlite"] and man["nsys"]["kernels"] == 18
    assert [e["stored_as"] for e in man["imported_from"]] == ["nsys.sqlite", "nsys-2.sqlite"]
    assert sorted(p.name for p in (profiles / SLUG).iterdir()) == ["run"]


def test_versioned_kernel_tables_highest_wins(tmp_path):
    v10 = make_foreign_sqlite(tmp_path / "v10.sqlite", kernel_table="CUPTI_ACTIVITY_KIND_KERNEL_V10",
                              extra_kernel_table="CUPTI_ACTIVITY_KIND_KERNEL_V9")
    k = nsys.nsys_tables(v10)["kernels"]
    assert "decoy_kernel" not in set(k["kernel"]) and len(k) == len(EXPECTED)
    # V10 wins even when it is the smaller table (not V9 by string order)
    v9 = make_foreign_sqlite(tmp_path / "v9.sqlite", kernel_table="CUPTI_ACTIVITY_KIND_KERNEL_V9",
                             extra_kernel_table="CUPTI_ACTIVITY_KIND_KERNEL_V10")
    assert list(nsys.nsys_tables(v9)["kernels"]["kernel"]) == ["decoy_kernel"]
    man = store.validate(importer.import_reports([v10], tmp_path / "p"))
    assert man["nsys"]["kernels"] == len(EXPECTED)


def test_multi_process_export_keeps_each_kernel_once(tmp_path):
    k = nsys.nsys_tables(make_foreign_sqlite(tmp_path / "mp.sqlite", second_process=True))["kernels"]
    assert len(k) == len(EXPECTED) + 2
    mine = k[k["kernel"] != "other_process_kernel"].set_index("correlationId")
    assert {c: (mine.at[c, "range"], mine.at[c, "domain"]) for c in EXPECTED} == EXPECTED
    assert set(k.loc[k["kernel"] == "other_process_kernel", "range"]) == {""}


def test_nested_range_with_the_same_start_is_innermost(tmp_path):
    k = nsys.nsys_tables(make_foreign_sqlite(tmp_path / "eq.sqlite", same_start=True))["kernels"]
    k = k.set_index("correlationId")
    assert (k.at[2, "range"], k.at[3, "range"], k.at[4, "range"]) == (MUL, MUL, GEMM)


# --------------------------------------------------------------------------- a real ncu report, imported as a foreign one


def test_import_real_ncu_report(tmp_path, ncu_rep):
    dest = importer.import_reports([ncu_rep], tmp_path / "profiles")
    assert dest.parent.name == SLUG and dest.name == "their_run"
    man = store.validate(dest)
    assert man["tools"] == ["ncu"] and man["nsys"] == {}
    dev = ncu.ncu_device(ncu_rep)
    g = man["gpu"]
    assert (g["name"], g["compute_capability"], g["sm_count"]) == ("NVIDIA H100 80GB HBM3", "9.0", 132)
    assert g["l2_bytes"] == dev["l2_cache_size"] == 52428800
    assert g["total_memory_bytes"] == dev["total_memory"] and g["clock_rate_khz"] == dev["clock_rate"]
    assert g["memory_bandwidth_bytes_per_s"] == 2 * dev["memory_clock_rate"] * 1000 * dev["global_memory_bus_width"] // 8
    assert g["source"]["l2_bytes"].startswith("ncu device__attribute_l2_cache_size")
    n = man["ncu"]
    assert n["metrics"] == sorted(n["metrics"]) and "gpu__time_duration.sum" in n["metrics"]
    assert not any(m.startswith("device__") for m in n["metrics"])
    assert n["kernels_profiled"] == 104 and n["kernels_outside_ranges"] == 0 and n["max_passes_per_kernel"] == 5
    # what the report itself says about its session (ncu-report's get_version() is the reader's version)
    assert n["version"].startswith("2025.3.1") and n["reader"].startswith("ncu-report")
    assert (n["clock_control"], n["replay_mode"], n["cache_control"]) == ("none", "kernel", "all")
    assert "--nvtx-include" in n["command"]
    assert man["environment"]["cuda"] == "13.0"
    # 8.6 MB: stored xz-compressed by store.compact, byte-identical once decompressed
    assert set(man["files"]) == {"ncu.ncu-rep.xz"} and n["files"] == ["ncu.ncu-rep"]
    assert man["compacted"]["ncu.ncu-rep.xz"]["sha256"] == man["imported_from"][0]["sha256"] == sha256(ncu_rep)
    assert man["compacted"]["ncu.ncu-rep.xz"]["bytes"] == ncu_rep.stat().st_size
    # the parsed frame keeps the raw range names, exactly as Nsight's own CSV export prints them
    frame = ncu.ncu_frame(dest / "ncu.ncu-rep.xz", metrics=["gpu__time_duration.sum"])
    csv = ncu.ncu_csv_frame(store.find_file(BLOCKSIZE, "ncu_raw.csv"))
    assert list(frame["range"]) == list(csv["range"])
    assert frame["range"].str.startswith("fk:").all()
    assert set(frame["range"]) <= {c["range"] for c in store.load_manifest(BLOCKSIZE)["cases"]}


def test_ncu_csv_range_and_domain_agree_with_the_report_row_by_row(ncu_rep):
    rep = ncu.ncu_frame(ncu_rep, metrics=["gpu__time_duration.sum"])
    csv = ncu.ncu_csv_frame(store.find_file(BLOCKSIZE, "ncu_raw.csv"))
    assert len(rep) == len(csv) == 104
    mine = list(zip(rep["range"].tolist(), rep["domain"].tolist(), strict=True))
    theirs = list(zip(csv["range"].tolist(), csv["domain"].tolist(), strict=True))
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        assert a == b, f"launch {i}: report {a} vs csv {b}"
    assert set(rep["domain"]) == {range_columns.DEFAULT_DOMAIN}


def test_import_ncu_and_nsys_together(tmp_path, ncu_gz, ncu_rep, sqlite):
    dest = importer.import_reports([ncu_gz, ncu_rep, sqlite], tmp_path / "p", name="both")
    man = store.validate(dest)
    assert man["tools"] == ["ncu", "nsys"]
    # a gzipped report is stored as .xz, and the manifest names it so wherever it named the .gz
    assert man["ncu"]["files"] == ["ncu.ncu-rep.xz", "ncu-2.ncu-rep"] and man["ncu"]["kernels_profiled"] == 208
    assert [e["stored_as"] for e in man["imported_from"]] == ["ncu.ncu-rep.xz", "ncu-2.ncu-rep", "nsys.sqlite"]
    assert man["imported_from"][0]["name"] == ncu_gz.name and man["imported_from"][0]["sha256"] == sha256(ncu_gz)
    assert man["compacted"]["ncu.ncu-rep.xz"] == {"from": "ncu.ncu-rep", "bytes": ncu_rep.stat().st_size,
                                                  "sha256": sha256(ncu_rep)}
    assert set(man["files"]) == {"ncu.ncu-rep.xz", "ncu-2.ncu-rep.xz", "nsys.sqlite"}
    assert man["gpu"]["source"]["sm_count"].startswith("ncu ")  # ncu first, nsys fills the gaps
    assert man["gpu"]["chip"] == "GH100" and man["environment"]["driver"] == "580.159.04"


def test_an_xz_report_is_stored_as_it_is(tmp_path, ncu_xz):
    dest = importer.import_reports([ncu_xz], tmp_path / "p", name="packed")
    man = store.validate(dest)
    assert set(man["files"]) == {"ncu.ncu-rep.xz"} and "compacted" not in man
    assert man["imported_from"][0]["stored_as"] == "ncu.ncu-rep.xz" and sha256(dest / "ncu.ncu-rep.xz") == sha256(ncu_xz)


def _gzipped_capture(profiles: Path, sqlite: Path, recorded_sha256: str | None = None) -> Path:
    """A capture stored the way compaction used to store it: its export gzipped, the uncompressed
    checksum (``recorded_sha256``, else the true one) under ``compacted``, the file named by its .gz."""
    dest = importer.import_reports([sqlite], profiles, name="old")
    content = sha256(dest / "nsys.sqlite")
    _packed(dest / "nsys.sqlite", dest / "nsys.sqlite.gz")
    (dest / "nsys.sqlite").unlink()
    man = store.load_manifest(dest)
    man["compacted"] = {"nsys.sqlite.gz": {"from": "nsys.sqlite", "bytes": 1, "sha256": recorded_sha256 or content}}
    man["imported_from"][0]["stored_as"] = "nsys.sqlite.gz"
    man["files"] = file_table(dest)
    (dest / "manifest.json").write_text(json.dumps(man))
    return dest


def test_store_compact_turns_gzip_into_xz(tmp_path, sqlite, capsys):
    """``nsightlab store compact`` rewrites a gzipped export as .xz, with a manifest that validates."""
    dest = _gzipped_capture(tmp_path / "p", sqlite)
    content = store.load_manifest(dest)["compacted"]["nsys.sqlite.gz"]["sha256"]
    assert store_cmd.main(["compact", str(tmp_path / "p")]) == 0
    assert capsys.readouterr().out == f"compact  {SLUG}/old: nsys.sqlite.xz\n"
    man = store.validate(dest)
    assert set(man["files"]) == {"nsys.sqlite.xz"} and man["imported_from"][0]["stored_as"] == "nsys.sqlite.xz"
    assert man["compacted"] == {"nsys.sqlite.xz": {"from": "nsys.sqlite", "bytes": sqlite.stat().st_size,
                                                   "sha256": content}}
    assert store_cmd.main(["compact", str(tmp_path / "p")]) == 0 and capsys.readouterr().out == f"ok       {SLUG}/old\n"


def test_store_compact_refuses_content_that_is_not_what_the_manifest_recorded(tmp_path, sqlite, capsys):
    dest = _gzipped_capture(tmp_path / "p", sqlite, recorded_sha256="0" * 64)
    assert store_cmd.main(["compact", str(tmp_path / "p")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID  ") and "does not match the SHA-256 the manifest records for nsys.sqlite" in out
    assert set(p.name for p in dest.iterdir()) == {"manifest.json", "nsys.sqlite.gz"}


def test_gpu_mismatch_is_refused(tmp_path, ncu_rep, capsys):
    h200 = make_foreign_sqlite(tmp_path / "h200.sqlite", gpu_name="NVIDIA H200")
    profiles = tmp_path / "p"
    _fails([str(ncu_rep), str(h200), "--profiles", str(profiles)], capsys, "different GPUs", "'NVIDIA H100 80GB HBM3'",
           "'NVIDIA H200'", "h200.sqlite", "their_run.ncu-rep")
    _no_leftovers(profiles)


# --------------------------------------------------------------------------- .nsys-rep


def test_nsys_rep_without_nsys_says_to_export_it(tmp_path, sqlite, monkeypatch, capsys):
    rep = tmp_path / "timeline.nsys-rep"
    rep.write_bytes(b"not really a report")

    def missing(explicit=None, **_):
        raise tools.ToolError("nsys not found: looked at $NSYS, PATH")

    monkeypatch.setattr(tools, "find_nsys", missing)
    _fails([str(rep), "--profiles", str(tmp_path / "p")], capsys, "timeline.nsys-rep", "nsys export --type sqlite",
           "then import the .sqlite")
    _no_leftovers(tmp_path / "p")


def _fake_nsys(tmp_path: Path, source: Path, status: int = 0) -> Path:
    """An executable that behaves like 'nsys export --type sqlite --output OUT IN': copies ``source``."""
    exe = tmp_path / "nsys"
    exe.write_text(f"#!{sys.executable}\nimport shutil, sys\na = sys.argv[1:]\n"
                   "assert a[:3] == ['export', '--type', 'sqlite'], a\n"
                   f"if {status}:\n    print('fatal: cannot read report', file=sys.stderr); sys.exit({status})\n"
                   f"shutil.copyfile({str(source)!r}, a[a.index('--output') + 1])\n")
    exe.chmod(0o755)
    return exe


def test_nsys_rep_is_exported_with_nsys(tmp_path, sqlite):
    rep = tmp_path / "timeline.nsys-rep"
    rep.write_bytes(b"an nsys report")
    dest = importer.import_reports([rep], tmp_path / "p", nsys=_fake_nsys(tmp_path, sqlite))
    man = store.validate(dest)
    assert dest.name == "timeline" and set(man["files"]) == {"nsys.nsys-rep", "nsys.sqlite"}
    assert man["nsys"]["files"] == ["nsys.sqlite"] and man["nsys"]["nsys_reps"] == ["nsys.nsys-rep"]
    assert man["imported_from"][0]["stored_as"] == "nsys.nsys-rep"
    assert [c["step"] for c in man["commands"]] == ["import", "nsys export"]
    assert man["commands"][1]["argv"][1:4] == ["export", "--type", "sqlite"]


def test_nsys_export_failure_is_reported(tmp_path, sqlite):
    rep = tmp_path / "timeline.nsys-rep"
    rep.write_bytes(b"an nsys report")
    with pytest.raises(ProfileError, match="nsys export --type sqlite' failed .status 3.: fatal: cannot read report"):
        importer.import_reports([rep], tmp_path / "p", nsys=_fake_nsys(tmp_path, sqlite, status=3))
    _no_leftovers(tmp_path / "p")


# --------------------------------------------------------------------------- broken input, end to end


def _blocksize_raw_csv() -> bytes:  # the committed export, xz-compacted
    return lzma.decompress(store.find_file(BLOCKSIZE, "ncu_raw.csv").read_bytes())


def _cut(src: Path | bytes, dest: Path, keep: float | int) -> Path:
    data = src if isinstance(src, bytes) else src.read_bytes()
    dest.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    return dest


@pytest.mark.parametrize("case, needle", [
    ("half", "holds no profiled kernel"),      # ncu-report reads a report cut short as one with no launches
    ("last_bytes", "truncated or corrupt"),    # cut inside the last launch: an action without name
    ("empty", "empty file"),
    ("junk", "holds no profiled kernel"),
    ("gzip_cut", "corrupt or truncated gzip"),
    ("xz_cut", "corrupt or truncated xz"),
])
def test_broken_ncu_report(tmp_path, ncu_rep, ncu_gz, ncu_xz, capsys, case, needle):
    path = {"half": lambda: _cut(ncu_rep, tmp_path / "half.ncu-rep", 0.5),
            "last_bytes": lambda: _cut(ncu_rep, tmp_path / "cut.ncu-rep", ncu_rep.stat().st_size - 100),
            "empty": lambda: _cut(ncu_rep, tmp_path / "empty.ncu-rep", 0),
            "junk": lambda: (tmp_path / "junk.ncu-rep").write_bytes(b"\0junk" * 100) and tmp_path / "junk.ncu-rep",
            "gzip_cut": lambda: _cut(ncu_gz, tmp_path / "cut.ncu-rep.gz", 0.5),
            "xz_cut": lambda: _cut(ncu_xz, tmp_path / "cut.ncu-rep.xz", 0.5)}[case]()
    profiles = tmp_path / "p"
    _fails([str(path), "--profiles", str(profiles)], capsys, path.name, needle)
    _no_leftovers(profiles)


@pytest.mark.parametrize("case, needle", [
    ("no_string_ids", "no StringIds table"),
    ("not_sqlite", "not a readable SQLite file"),
    ("empty", "no CUPTI_ACTIVITY_KIND_KERNEL table"),
    ("no_kernels", "holds no profiled kernel"),
])
def test_broken_sqlite(tmp_path, capsys, case, needle):
    path = tmp_path / f"{case}.sqlite"
    if case == "no_string_ids":
        make_foreign_sqlite(path, string_ids=False)
    elif case == "not_sqlite":
        path.write_text("ID,Kernel Name\n1,gemm\n" * 50)
    elif case == "empty":
        path.write_bytes(b"")
    else:
        make_foreign_sqlite(path, kernels=False)
    profiles = tmp_path / "p"
    _fails([str(path), "--profiles", str(profiles)], capsys, path.name, needle)
    _no_leftovers(profiles)


def test_ncu_csv_cut_inside_a_row(tmp_path):
    data = _blocksize_raw_csv()
    lines = data.split(b"\n")
    for cut in (len(data) // 2, len(b"\n".join(lines[:5])) + 40):  # mid-file; inside a data row's range cell
        path = _cut(data, tmp_path / "cut.csv", cut)
        with pytest.raises(ProfileError, match="cut short|unexpected end of data"):
            ncu.ncu_csv_frame(path)
    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(ProfileError, match="not an 'ncu --csv --page raw' export"):
        ncu.ncu_csv_frame(tmp_path / "empty.csv")


def test_ncu_csv_cut_inside_the_last_field(tmp_path):
    data = _blocksize_raw_csv()
    path = _cut(data, tmp_path / "cut.csv", len(data) - 4)  # '..."0.0000' with no closing quote
    with pytest.raises(ProfileError):
        ncu.ncu_csv_frame(path)


# --------------------------------------------------------------------------- the command line


def test_command_line_errors(tmp_path, sqlite, capsys):
    p = ["--profiles", str(tmp_path / "p")]
    _fails([str(tmp_path / "missing.ncu-rep"), *p], capsys, "missing.ncu-rep: no such file")
    (tmp_path / "notes.txt").write_text("x")
    _fails([str(tmp_path / "notes.txt"), *p], capsys, "notes.txt", "accepted: .ncu-rep, .ncu-rep.xz, .ncu-rep.gz, .sqlite",
           ".nsys-rep")
    for bad in ("../up", "a/b", "_hidden", ".dot", "with space", "x" * 101):
        _fails([str(sqlite), "--name", bad, *p], capsys, repr(bad), "letters, digits")
    _no_leftovers(tmp_path / "p")
    assert importer.default_name("My Run (2).ncu-rep.gz") == "My-Run-2-"
    assert importer.default_name("_x.sqlite") == "x" and importer.default_name(".sqlite") == "imported"


def test_python_dash_m_nsightlab_import(tmp_path, sqlite):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "nsightlab.import", str(sqlite), "--profiles", str(tmp_path / "p"),
                          "--name", "cli"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"{SLUG}/cli" in out.stdout
    man = json.loads((tmp_path / "p" / SLUG / "cli" / "manifest.json").read_text())
    assert man["commands"][0]["argv"][:3] == ["python", "-m", "nsightlab.import"]
    assert man["commands"][0]["argv"][3:] == [str(sqlite), "--profiles", str(tmp_path / "p"), "--name", "cli"]
    bad = subprocess.run([sys.executable, "-m", "nsightlab.import", str(tmp_path / "nope.sqlite")], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert bad.returncode == 2 and "nope.sqlite: no such file" in bad.stderr


def test_session_reader_never_raises(tmp_path):
    for data in (b"", b"NVR\0", b"NVR\0\x02\x00\x00\x00\x08\x07\xff\xff\xff\x7f", b"garbage" * 10):
        (tmp_path / "x.ncu-rep").write_bytes(data)
        assert ncu_session.ncu_session(tmp_path / "x.ncu-rep") == {}
    assert ncu_session.ncu_settings(None)["clock_control"] is None
    s = ncu_session.ncu_settings("ncu --set full --replay-mode=application -o x ./app")
    assert (s["clock_control"], s["replay_mode"], s["set"]) == ("base", "application", "full")  # base: ncu's default


def test_a_folder_of_reports_is_read_in_parallel_the_same_as_one_by_one(tmp_path, ncu_rep, capsys):
    """`nsightlab import FOLDER -j N`: every report in the folder (below it too; hidden files left out), read in Dask
    worker processes, gives the capture that reading them one by one gives; a bad one names itself."""
    folder = tmp_path / "runs"
    (folder / "more").mkdir(parents=True)
    for i in range(3):
        make_foreign_sqlite(folder / f"t{i}.sqlite")
    shutil.copyfile(ncu_rep, folder / "more" / "k.ncu-rep")
    (folder / ".hidden.sqlite").write_text("not a database")
    (folder / "notes.txt").write_text("not a report")
    assert [p.name for p in importer.reports_in(folder)] == ["k.ncu-rep", "t0.sqlite", "t1.sqlite", "t2.sqlite"]
    one = store.validate(importer.import_reports([folder], tmp_path / "a", jobs=1))
    many_path = importer.import_reports([folder], tmp_path / "b", jobs=3)
    many = store.validate(many_path)
    assert many_path.name == "runs"  # a folder's name names the capture
    for key in ("ncu", "nsys", "imported_from", "files", "gpu", "cases"):
        assert one[key] == many[key], key
    (folder / "t1.sqlite").write_text("broken")
    with pytest.raises(ProfileError, match="t1.sqlite"):
        importer.import_reports([folder], tmp_path / "c", jobs=2)
    (tmp_path / "empty").mkdir()
    assert import_cmd.main([str(tmp_path / "empty"), "--profiles", str(tmp_path / "d")]) == 2
    assert "a folder with no report in it" in capsys.readouterr().err
