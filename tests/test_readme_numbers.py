"""The README's result tables are what scripts/readme_numbers.py prints from the committed captures."""

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent
rn = load_script("readme_numbers")
README = (ROOT / "README.md").read_text()


def _rows(table: str) -> list[str]:
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| pass |")]


def test_readme_tables_come_from_the_committed_captures():
    h200, h100 = ROOT / "profiles" / "nvidia-h200", ROOT / "profiles" / "nvidia-h100-80gb-hbm3"
    tables = [rn.target_table(h200), rn.top_table(h200), rn.gqa_table(h200), rn.decode_table(h200),
              rn.one_config_table(h200), rn.capture_table(h200), rn.capture_table(h100), rn.tile_step_table(h200),
              rn.top_table(h100), rn.decode_table(h100), rn.one_config_table(h100), rn.fp8_table(h100)]
    empty = [t for t in tables if not _rows(t)]  # a table whose source is gone prints a note, not rows
    assert not empty, f"tables with no rows (their source files missing?): {empty}"
    missing = [row for t in tables for row in _rows(t) if row not in README]
    assert not missing, f"README rows not reproduced by scripts/readme_numbers.py: {missing[:5]}"
    assert len([r for t in tables for r in _rows(t)]) > 40


def test_the_script_runs_for_every_gpu(capsys):
    assert rn.main([]) == 0
    out = capsys.readouterr().out
    assert "## nvidia-h200" in out and "## nvidia-h100-80gb-hbm3" in out and "seqlen findings" in out


def test_a_ratio_prints_with_as_many_digits_as_tell_whether_it_meets_its_target():
    assert rn._ratio_cell(0.96, 0.90) == "0.96" and rn._ratio_cell(0.90, 0.90) == "0.90"
    assert rn._ratio_cell(0.895, 0.90) == "0.895"  # not "0.90", which would read as met
    assert rn._ratio_cell(1.0498, 1.05) == "1.0498"  # "1.05" and "1.050" both read as met
    assert rn._ratio_cell(0.895, float("nan")) == "0.90"  # no target: two decimals
