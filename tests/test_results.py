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


@pytest.mark.parametrize(("r", "target", "cell"), [(0.96, 0.90, "0.96"), (0.90, 0.90, "0.90"), (0.895, 0.90, "0.895"),
                                                   (1.0498, 1.05, "1.0498"), (0.895, float("nan"), "0.90")])
def test_a_ratio_prints_with_as_many_digits_as_tell_whether_it_meets_its_target(r, target, cell):
    assert results._ratio_cell(r, target) == cell
