"""A manifest.json that is valid JSON but not a manifest (``[]``, ``null``, ``42``, a ``files`` table whose
entries are not objects, a field of the wrong type) is refused by the one loader
(nsightlab.store.captures.load_manifest) in one line naming the file, the field and what is accepted; every
command reports that capture and goes on with the others: ``store list``, ``store validate``, ``compare``
(exit 2) and ``report`` (the good captures still render, the index names the broken one)."""

import json
import shutil
from pathlib import Path

import pytest

from nsightlab.cli import compare as compare_cmd
from nsightlab.cli import store as store_cmd
from nsightlab.cli.report import main as report_main
from nsightlab.core.errors import ProfileError
from nsightlab.store import captures as store

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "profiles" / "nvidia-h200" / "gemm-example"

#: manifest.json text -> what the one line must say (besides the file's path)
BROKEN = {
    "[]": ("the manifest is an array, not an object", "accepted: a JSON object"),
    "null": ("the manifest is null, not an object", "accepted: a JSON object"),
    "42": ("the manifest is an integer, not an object", "accepted: a JSON object"),
    '{"files": ["ncu.log"]}': ("field 'files' is an array", "accepted: an object"),
    '{"files": {"ncu.log": 12}}': ("files['ncu.log'] is an integer", 'accepted: an object {"bytes"'),
    '{"files": {"ncu.log": {"bytes": "12", "sha256": "ab"}}}': ("files['ncu.log'].bytes is a string",
                                                                "accepted: an integer"),
    '{"gpu": "NVIDIA H200", "files": {}}': ("field 'gpu' is a string", "accepted: an object or null"),
    '{"cases": [1, 2]}': ("cases[0] is an integer", "accepted: an object per entry"),
}


def _broken(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(text + "\n")
    (folder / "ncu.log").write_text("x")
    return folder


@pytest.mark.parametrize("text", list(BROKEN))
def test_the_loader_refuses_json_that_is_not_a_manifest_in_one_line(tmp_path, text):
    cap = _broken(tmp_path / "bad", text)
    with pytest.raises(ProfileError) as exc:
        store.load_manifest(cap)
    msg = str(exc.value)
    assert msg.startswith(str(cap / "manifest.json") + ": ") and "\n" not in msg, msg
    for words in BROKEN[text]:
        assert words in msg, msg
    with pytest.raises(ProfileError):  # validate reads through the same loader
        store.validate(cap, open_reports=False)


def test_every_committed_manifest_passes_the_check():
    for man in sorted((ROOT / "profiles").glob("*/*/manifest.json")):
        assert store.check_manifest(json.loads(man.read_text()), man)


@pytest.fixture
def profiles(tmp_path) -> Path:
    """g/array (manifest ``[]``), g/files (``files`` entries that are not objects) and a good capture."""
    root = tmp_path / "profiles"
    _broken(root / "g" / "array", "[]")
    _broken(root / "g" / "files", '{"schema": 2, "files": {"ncu.log": "x"}}')
    shutil.copytree(GOOD, root / "g" / "gemm-example")
    return root


@pytest.mark.parametrize("command", ["list", "validate"])
def test_store_list_and_validate_report_the_broken_captures_and_go_on(profiles, command, capsys):
    assert store_cmd.main([command, str(profiles), "--no-open"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3, out
    array, files, good = out
    assert "g/array" in array and "INVALID" in array and "the manifest is an array, not an object" in array
    assert "g/files" in files and "INVALID" in files and "files['ncu.log'] is a string" in files
    assert "INVALID" not in good and "g/gemm-example" in good
    assert good.startswith("ok ") if command == "validate" else "16 files" in good


def test_compare_with_a_broken_manifest_exits_2_with_one_line(profiles, capsys):
    assert compare_cmd.main([str(profiles / "g" / "array"), str(profiles / "g" / "gemm-example")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nsightlab compare: error: refusing to compare ") and "Traceback" not in err, err
    assert "manifest.json: the manifest is an array, not an object; accepted:" in err
    assert compare_cmd.main([str(profiles / "g" / "gemm-example"), str(profiles / "g" / "files")]) == 2
    assert "files['ncu.log'] is a string" in capsys.readouterr().err


def test_report_renders_the_good_captures_and_names_the_broken_ones(profiles, tmp_path, capsys):
    reports = tmp_path / "reports"
    assert report_main(["--profiles", str(profiles), "--reports", str(reports), "--only", "device"]) == 1
    err = capsys.readouterr().err
    assert "FAILED g/array: " in err and "the manifest is an array, not an object" in err and "Traceback" not in err
    assert (reports / "g" / "gemm-example" / "device.html").exists()
    index = (reports / "index.html").read_text()
    assert "g/gemm-example/device.html" in index
    assert "g/array" in index and "the manifest is an array, not an object" in index
    assert "g/files" in index and "files[&#x27;ncu.log&#x27;] is a string" in index
