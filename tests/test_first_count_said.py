"""The first sharded run of an uncounted corpus counts its documents first: a bar on a
terminal, one line otherwise (a notebook, a log file), never a silent wait."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from openwebtext import Loader


def test_the_count_is_said_without_a_terminal(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        Loader(path, workers=0, world_size=2, rank=0, even="drop").iter().close()
        said = [
            r.getMessage() for r in caplog.records if "counting the documents" in r.getMessage()
        ]
        assert len(said) == 1 and "6 members" in said[0]
        caplog.clear()
        Loader(path, workers=0, world_size=2, rank=1, even="drop").iter().close()  # cached now
        assert not [r for r in caplog.records if "counting the documents" in r.getMessage()]
