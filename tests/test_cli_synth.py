"""``owt synth --where``: the path of the built-in default corpus, the one commands given no
path read, printable before it exists (for the README's snippets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import synth
from openwebtext.cli import main


def test_where_prints_the_default_corpus_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path))
    assert main(["synth", "--where"]) == 0
    out, err = capsys.readouterr()
    where = Path(out.strip())
    assert where.parent == tmp_path and "not generated yet" in err
    # The corpus the commands read is the one --where names (no generating: it is "there").
    where.mkdir()
    (where / synth.COMPLETE_MARKER).touch()
    assert synth.default_corpus(progress=False) == where
    assert main(["synth", "--where"]) == 0
    out, err = capsys.readouterr()
    assert Path(out.strip()) == where and err == ""


def test_where_takes_no_output_folder_and_synth_needs_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["synth", "--where", str(tmp_path / "x")]) == 2  # (a command line refused)
    assert main(["synth"]) == 2
    err = capsys.readouterr().err
    assert "give it no OUT" in err and "give the output folder OUT" in err
