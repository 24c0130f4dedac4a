"""Bad inputs, as a new user types them: each gets one line (``nsightlab X: error: ...``, no traceback) and the
exit status its command's --help documents (0 done, 1 a step failed, 2 bad input); nothing existing is replaced
without --replace; and the committed profiles/ tree is byte-identical after the whole module.

Everything that writes works on small copies of committed captures in tmp_path."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsightlab import cli
from nsightlab.core import files
from nsightlab.core.errors import ProfileError
from nsightlab.run import capture as C
from nsightlab.run.sweep import find
from nsightlab.store.captures import validate

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
H200 = "nvidia-h200"
#: small committed captures: a GEMM (ncu + nsys, 0.2 MB) and a benchmark-only one (0.1 MB)
GEMM, BENCH = "gemm-example", "bench-mma-fwd-always-rescale"
#: the installed console script (``pip install -e .`` writes it beside the interpreter), not ``python -m``
SCRIPT = Path(sys.executable).parent / "nsightlab"
#: a folder name whose bytes are not UTF-8
NOT_UTF8 = os.fsdecode(b"caf\xe9-capture")


def _digests(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (links not followed), by path relative to it."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _committed_digests() -> dict[str, str]:
    """SHA-256 of the profiles/ files git tracks (files others add meanwhile are not this module's); every file
    under profiles/ where there is no git."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "profiles"], capture_output=True,
                                check=True, timeout=60).stdout.split(b"\0")
    except (OSError, subprocess.SubprocessError):
        return _digests(PROFILES)
    paths = [ROOT / os.fsdecode(p) for p in listed if p]
    return {str(p.relative_to(PROFILES)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def _hidden(root: Path) -> set[str]:
    """Temporary, failed and backup folders a command could leave (names starting with a dot)."""
    return {str(p.relative_to(root)) for p in root.rglob(".*")}


@pytest.fixture(scope="module", autouse=True)
def committed_profiles_unchanged():
    """The committed profiles/ tree: every tracked file's SHA-256, and no new hidden leftover, after the module."""
    before, hidden = _committed_digests(), _hidden(PROFILES)
    yield
    after = _committed_digests()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"profiles/ changed: {changed[:10]}"
    assert _hidden(PROFILES) <= hidden, sorted(_hidden(PROFILES) - hidden)


@pytest.fixture
def store(tmp_path) -> Path:
    """A profiles folder holding copies of two small committed captures."""
    root = tmp_path / "profiles"
    for name in (GEMM, BENCH):
        shutil.copytree(PROFILES / H200 / name, root / H200 / name)
    return root


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of this test's own: the user's cache is neither read nor filled nor cleared."""
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(files.CACHE_LIMIT_ENV, raising=False)


def _call(argv: list[str], capsys) -> tuple[int, str, str]:
    """``nsightlab ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def _one_line(err: str, command: str) -> str:
    """The one error line of ``nsightlab COMMAND`` in ``err`` (nothing else there, no traceback)."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nsightlab {command}: error: "), err
    return lines[0]


def _fails(argv: list[str], capsys, *words: str, status: int = 2) -> str:
    code, out, err = _call(argv, capsys)
    line = _one_line(err, argv[0])
    assert code == status, (code, err)
    for w in words:
        assert w in line, line
    return line


# --------------------------------------------------------------------------- nothing existing is replaced unasked


def test_every_command_that_writes_leaves_an_existing_capture_as_it_was(store, tmp_path, capsys):
    before = _digests(store)
    rep, sqlite = store / H200 / GEMM / "ncu.ncu-rep.xz", store / H200 / GEMM / "nsys.sqlite.xz"
    # import into an existing name: refused, whatever the report
    for report in (rep, sqlite):
        _fails(["import", str(report), "--profiles", str(store), "--name", GEMM], capsys,
               f"{H200}/{GEMM} already exists", "--replace")
    # capture into an existing name: refused before any GPU work (no ncu, no nsys, no GPU here)
    _fails(["capture", "--impl", "sdpa_flash", "-B", "1", "-H", "1", "-N", "128", "-D", "64", "--pass", "forward",
            "--name", GEMM, "--profiles", str(store), "--ncu", "/no/ncu"], capsys,
           f"{H200}/{GEMM} already exists", "nothing was captured or replaced", "--replace")
    _fails(["capture", "--sweep", str(ROOT / "examples" / "gemm" / "sweep.toml"), "--profiles", str(store)], capsys,
           "already exists")
    # store compact on compact captures, store validate: nothing to rewrite
    for verb in ("compact", "validate", "list"):
        code, out, err = _call(["store", verb, str(store), "--no-open"], capsys)
        assert code == 0 and err == "", err
    # report, twice into the same reports folder (the second finds the pages up to date)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "notes.txt").write_text("mine")
    for _ in range(2):
        code, out, err = _call(["report", "--profiles", str(store), "--reports", str(reports), "--only", "device"], capsys)
        assert code == 0 and "Traceback" not in err, err
    assert (reports / "notes.txt").read_text() == "mine" and (reports / H200 / BENCH / "device.html").exists()
    assert _digests(store) == before
    assert not _hidden(store)


def test_capture_refuses_before_looking_for_tools_or_a_gpu(store):
    sweep = find(str(ROOT / "examples" / "gemm" / "sweep.toml"))
    with pytest.raises(ProfileError, match=f"{H200}/{GEMM} already exists"):
        C.capture(sweep, store, ncu="/no/ncu", nsys="/no/nsys")  # a ToolError would mean it looked for ncu first
    # the placement check: this machine's GPUs where nvidia-smi names them, else every GPU folder
    assert C.existing_captures(store, GEMM, {"nvidia-a100"}) == []
    assert C.existing_captures(store, GEMM, None) == [store / H200 / GEMM]
    assert C.check_destination(store, GEMM, gpus={H200}, replace=True) == [store / H200 / GEMM]
    assert C.check_destination(store, "new-name", gpus={H200}) == []


def test_replace_swaps_in_the_new_capture_and_removes_the_backup(store, capsys):
    rep = store / H200 / GEMM / "ncu.ncu-rep.xz"
    other = store.parent / "their.ncu-rep.xz"
    shutil.copyfile(rep, other)
    code, out, err = _call(["import", str(other), "--profiles", str(store), "--name", GEMM, "--replace"], capsys)
    assert code == 0 and err == "", err
    man = validate(store / H200 / GEMM, open_reports=False)
    assert man["origin"] == "imported" and list(man["files"]) == ["ncu.ncu-rep.xz"]
    assert sorted(p.name for p in (store / H200).iterdir()) == sorted([GEMM, BENCH])  # no .replaced-* left


def test_place_keeps_the_old_folder_until_the_new_one_is_in(tmp_path):
    dest, new = tmp_path / "g" / "c", tmp_path / "new"
    dest.mkdir(parents=True)
    (dest / "old.txt").write_text("old")
    new.mkdir()
    (new / "new.txt").write_text("new")
    with pytest.raises(ProfileError, match="already exists; nothing was replaced"):
        files.place(new, dest)
    assert (dest / "old.txt").exists() and (new / "new.txt").exists()
    files.place(new, dest, replace=True)
    assert [p.name for p in dest.iterdir()] == ["new.txt"] and [p.name for p in dest.parent.iterdir()] == ["c"]
    assert files.backup_name(dest).name.startswith(f".replaced-c-{time.strftime('%Y%m%d')}")


# --------------------------------------------------------------------------- the console script finds the user's module


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed nsightlab script beside {sys.executable}")
def test_the_installed_script_imports_the_users_module_from_the_current_folder(tmp_path):
    work = tmp_path / "work"
    (work / "mypkg").mkdir(parents=True)
    (work / "mypkg" / "__init__.py").write_text("")
    (work / "mypkg" / "attn.py").write_text(
        "def my_attention(q, k, v, *, causal=False, scale=None):\n"
        "    import torch.nn.functional as F\n\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)\n")
    (work / "mine.toml").write_text('name = "mine"\n\n[[grid]]\nimpl = "mine=mypkg.attn:my_attention"\n'
                                    'pass = "forward"\nB = 1\nH = 2\nN = [128, 256]\nD = 64\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    for argv in (["--impl", "mine=mypkg.attn:my_attention", "-B", "1", "-H", "2", "-N", "128,256", "-D", "64",
                  "--pass", "forward", "--name", "mine"], ["--sweep", "mine.toml"]):
        done = subprocess.run([str(SCRIPT), "capture", *argv, "--list"], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        ranges = [line for line in done.stdout.splitlines() if ":mine:forward:" in line]
        assert len(ranges) == 2, done.stdout


# --------------------------------------------------------------------------- a comparison that matched nothing


def test_a_comparison_that_matched_nothing_or_too_little_fails(capsys):
    _fails(["compare", f"{H200}/seqlen", f"{H200}/seqlen", "--only", "zzz"], capsys,
           "0 range(s) matched", "--only 'zzz' matches none of base's")
    _fails(["compare", f"{H200}/seqlen", f"{H200}/triton-example"], capsys,
           "0 range(s) matched", "only in base", "only in new")
    _fails(["compare", f"{H200}/seqlen", f"{H200}/seqlen", "--min-matched", "100000"], capsys,
           "fewer than --min-matched 100000")
    for flag, value in (("--min-matched", "0"), ("--min-matched", "-3"), ("--min-ms", "-1")):
        _fails(["compare", f"{H200}/seqlen", f"{H200}/seqlen", flag, value], capsys, f"argument {flag}")


# --------------------------------------------------------------------------- folders and names


def test_reports_that_cannot_be_written(store, tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    _fails(["report", "--profiles", str(store), "--reports", str(a_file)], capsys, "is a file, not a folder")
    _fails(["report", "--profiles", str(store), "--reports", str(a_file / "sub")], capsys, "cannot be created")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        _fails(["report", "--profiles", str(store), "--reports", str(locked)], capsys, "not writable")


def test_a_capture_folder_whose_name_is_not_utf8_is_skipped_and_the_others_render(store, tmp_path, capsys):
    shutil.copytree(store / H200 / BENCH, store / H200 / NOT_UTF8)
    code, out, err = _call(["report", "--profiles", str(store), "--reports", str(tmp_path / "r"), "--only", "device"],
                           capsys)
    assert code == 1 and "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if "not UTF-8" in x]
    assert "caf\\xe9-capture: skipped" in line
    assert (tmp_path / "r" / H200 / BENCH / "device.html").exists()
    code, out, err = _call(["store", "list", str(store)], capsys)
    assert code == 1 and "caf\\xe9-capture" in _one_line(err, "store") and BENCH in out


def test_store_on_an_empty_folder_a_file_and_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("")
    for verb in ("list", "validate", "compact"):
        _fails(["store", verb, str(tmp_path / "empty")], capsys, "no capture under")
    _fails(["store", "list", str(tmp_path / "a-file")], capsys, "is a file, not a folder")
    _fails(["store", "list", str(tmp_path / "missing")], capsys, "does not exist")


@pytest.mark.parametrize("argv, words", [
    (["capture", "--impl", "sdpa_flash", "-N", "99999999999999999999", "-D", "64", "--list"], "at most 2147483647"),
    (["capture", "--impl", "sdpa_flash", "-N", "0", "-D", "64", "--list"], "-N takes positive integers"),
    (["capture", "--impl", "sdpa_flash", "-N", "128", "-D", "64", "-B", "-2", "--list"], "-B takes positive integers"),
    (["capture", "--suite", "seqlen", "--nsys-iters", "0", "--list"], "argument --nsys-iters"),
    (["capture", "--suite", "seqlen", "--nsys-iters", "99999999999", "--list"], "up to 2147483647"),
    (["report", "--jobs", "0"], "argument --jobs"),
    (["report", "--jobs", "-1"], "argument --jobs"),
    (["hang", "--sweep", "seqlen", "--only", "x", "--timeout", "0"], "argument --timeout"),
    (["hang", "--sweep", "seqlen", "--only", "x", "--timeout", "nan"], "argument --timeout"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_out_of_range_numbers_are_refused(argv, words, capsys):
    _fails(argv, capsys, words, "--help")


# --------------------------------------------------------------------------- the cache


def _entry(folder: Path, name: str, size: int, age: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"x" * size)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_the_cache_keeps_to_its_cap_least_recently_used_first(tmp_path, monkeypatch):
    cache = files.cache_dir()
    old = _entry(cache / ("a" * 24), "old.ncu-rep", 1000, 300)
    mid = _entry(cache / "deep-frames", "mid.pkl", 1000, 200)
    new = _entry(cache / ("b" * 24), "new.sqlite", 1000, 100)
    mine = _entry(cache, "not-the-caches.txt", 5000, 1000)  # a file the cache did not write: never touched
    assert files.trim_cache(2500) == [old]
    assert files.trim_cache(0, keep=new) == [mid] and new.exists() and mine.exists()
    assert not old.parent.exists() and (cache / "deep-frames").is_dir()
    monkeypatch.setenv(files.CACHE_LIMIT_ENV, "1.5K")
    assert files.cache_limit() == 1536
    monkeypatch.setenv(files.CACHE_LIMIT_ENV, "lots")
    with pytest.raises(ValueError, match="NSIGHTLAB_CACHE_LIMIT: 'lots' is not a size"):
        files.cache_limit()


def test_a_new_uncompressed_copy_trims_the_cache(tmp_path, monkeypatch):
    stale = _entry(files.cache_dir() / ("c" * 24), "stale.sqlite", 100_000, 1000)
    monkeypatch.setenv(files.CACHE_LIMIT_ENV, "1")
    copy = files.local_copy(PROFILES / H200 / GEMM / "nsys.sqlite.xz")
    assert copy.exists() and not stale.exists()  # the copy just made is kept, whatever the cap


def test_nsightlab_cache_info_and_clear(tmp_path, capsys, monkeypatch):
    cache = files.cache_dir()
    _entry(cache / ("d" * 24), "x.sqlite", 2048, 10)
    mine = _entry(cache, "not-the-caches.txt", 10, 10)
    code, out, err = _call(["cache", "info"], capsys)
    assert code == 0 and err == "" and str(cache) in out and "2.0 KiB in 1 file(s)" in out and "2.0 GiB" in out
    code, out, err = _call(["cache", "clear"], capsys)
    assert code == 0 and "1 file(s), 2.0 KiB" in out and files.cache_files() == [] and mine.exists()
    monkeypatch.setenv(files.CACHE_LIMIT_ENV, "lots")
    _fails(["cache", "info"], capsys, "NSIGHTLAB_CACHE_LIMIT")
    monkeypatch.setenv(files.CACHE_ENV, str(mine))
    _fails(["cache", "clear"], capsys, "is a file, not a folder")


# --------------------------------------------------------------------------- --help says every verb, default and status

@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_help_documents_its_exit_statuses(name, capsys):
    code, out, err = _call([name, "--help"], capsys)
    assert code == 0 and "exit status: 0 " in out and " 2 bad input" in out, out


def test_store_help_describes_its_verbs_and_report_help_its_defaults(capsys):
    out = _call(["store", "--help"], capsys)[1]
    for verb in ("list", "validate", "compact"):
        assert f"\n  {verb} " in out, out
    out = " ".join(_call(["report", "--help"], capsys)[1].split())
    for shown in ("(default: 2)", "(default: python3)", "(default: Nsight reports)", "profiles)"):
        assert shown in out, out
    out = " ".join(_call(["capture", "--help"], capsys)[1].split())
    assert "(default: forward,backward)" in out and "(default: custom)" in out
