"""A reshard's drop is said, as a plain sharded epoch's is: the documents of the rest that
``drop`` leaves out are counted on the last new rank and written in the log there."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, reshard
from openwebtext.stream import count_documents


def _options(world: int, rank: int) -> dict[str, Any]:
    return dict(seed=3, shuffle_buffer=30, workers=0, rank=rank, world_size=world, even="drop")


def test_the_drop_of_a_reshard_is_warned_on_the_rank_that_counts_it(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=1, splits=((0.0005, 2357),)))
    states = []
    for rank, point in enumerate((0, 5, 9, 13)):
        with Loader(path, **_options(4, rank)).iter() as it:
            for _ in range(point):
                next(it)
            states.append(it.state_dict())
    drops = 0
    for world in (3, 7):
        new = reshard(states, world)
        for rank in range(world):
            caplog.clear()
            loader = Loader(path, **_options(world, rank))
            with (
                caplog.at_level(logging.WARNING, logger="openwebtext"),
                loader.iter(state=new[rank]) as it,
            ):
                list(it)
                dropped = it.stats.dropped_documents
            said = [r.getMessage() for r in caplog.records if "resharded" in r.getMessage()]
            drops += dropped
            if dropped:
                assert len(said) == 1 and f"{dropped} documents of its rest left out" in said[0]
            else:
                assert said == []
    assert drops > 0  # some new world left documents out
