"""A share of more units than a block holds documents: every unit is read once.

``Stream._pass`` fed the pool from a generator expression that read ``n`` (the share's units)
lazily, and the loop then rebound ``n`` to a block's size: past that many units the pool was
fed the wrong ones (30 members of 3 documents read as 3 members, 10 times each). OpenWebText
has ~20,600 units and blocks of a few thousand documents.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import Loader
from openwebtext.synth import write_corpus


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("many") / "c"
    write_corpus(path, subsets=1, members=30, docs=3, seed=0, workers=1, progress=False)
    return path


@pytest.mark.parametrize(
    "options",
    [{"shuffle": False}, {"seed": 0, "shuffle_buffer": 4}, {"seed": 1, "shuffle_buffer": 0}],
)
@pytest.mark.parametrize("workers", [0, 2])
def test_every_unit_is_read_once(many: Path, options: dict[str, object], workers: int) -> None:
    docs = list(Loader(many, workers=workers, **options))  # type: ignore[arg-type]
    assert len({d.member for d in docs}) == 30
    assert len({(d.member, d.name) for d in docs}) == len(docs) == 90


def test_even_shares_cut_inside_units_read_each_document_once(many: Path) -> None:
    """The trims of a share's first and last units were looked up by the same late ``n``."""
    shares = [
        [d.name for d in Loader(many, rank=r, world_size=4, seed=3, shuffle_buffer=4, workers=0)]
        for r in range(4)
    ]
    assert [len(s) for s in shares] == [22] * 4
    assert len({n for s in shares for n in s}) == 88
