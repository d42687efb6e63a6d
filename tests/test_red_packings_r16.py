"""Best-fit batches under a shape ``Schedule``, resharded (session 38's red team).

A window an old rank had begun, dealt to a new rank that goes on in the schedule from the
furthest old rank's batch, is read ahead behind another window; at two changes of ``seq_len``
before any of its rows went out, it was packed again twice, the first of them with no row out:
its state said ``Packed(rows=0)``, which the record refused (``rows`` had to be at least 1).
The state ``state_dict()`` wrote could not be loaded again (``Loader.batches``, ``reshard``,
``set_weights``): 5 of the old ranks' (a, b) batch pairs here, and 3 of 60 seeded lives of a
corpus or a mixture.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, Mixture, Schedule, StateError, reshard
from openwebtext.stream.sections import Scheduled

SCHEDULE = Schedule([(0, 24, 1), (4, 40, 1), (9, 16, 1), (15, 64, 1)])
SHAPE: dict[str, Any] = {"segments": True, "packing": "bestfit", "schedule": SCHEDULE, "window": 7}


def _part(root: Path, tag: str, files: int, seed: int, hi: int, base: int) -> Corpus:
    """``files`` JSON lines files of 3..``hi`` documents, each one byte (from ``base`` on)
    repeated 3..60 times."""
    rng, c = random.Random(seed), base
    root.mkdir(parents=True)
    for f in range(files):
        lines = []
        for _ in range(rng.randint(3, hi)):
            lines.append(json.dumps({"text": chr(c) * rng.randint(3, 60)}))
            c += 1
        (root / f"{tag}{f:02d}.jsonl").write_text("\n".join(lines) + "\n")
    return Corpus.open(root)


def _rows(it: Any, n: int) -> list[bytes]:
    return [row.tobytes() for _ in range(n) for row in next(it).tokens]


@pytest.mark.parametrize(("kind", "first", "second"), [("corpus", 1, 4), ("tokens", 6, 9)])
def test_a_state_packed_again_before_any_row_out_resumes_exactly(
    tmp_path: Path, kind: str, first: int, second: int
) -> None:
    """Old ranks 0 and 1 of 2 after ``first`` and ``second`` batches, resharded to one rank,
    7 batches on: its state holds a packing of no row, and resumes to the very rows."""
    a = _part(tmp_path / "A", "a", 6, 5, 8, 40)
    source: Any = a if kind == "corpus" else Mixture(
        {"A": a, "B": _part(tmp_path / "B", "b", 3, 6, 5, 120)}, {"A": 0.6, "B": 0.4}, by=kind
    )  # fmt: skip

    def loader(rank: int, world: int) -> Loader:
        return Loader(source, rank=rank, world_size=world, even=None, seed=0, epochs=3,
                      workers=0, tokenizer="bytes")  # fmt: skip

    states = []
    for rank, batches in ((0, first), (1, second)):
        with loader(rank, 2).batches(**SHAPE) as it:
            _rows(it, batches)
            states.append(json.loads(json.dumps(it.state_dict())))
    (new,) = reshard(states, 1)
    with loader(0, 1).batches(**SHAPE, state=new) as it:
        _rows(it, 7)
        state = json.loads(json.dumps(it.state_dict()))
        after = _rows(it, 5)
    assert 0 in [p["rows"] for p in state["schedule"]["packings"]]  # (what this is about)
    with loader(0, 1).batches(**SHAPE, state=state) as it:
        assert _rows(it, 5) == after


def test_a_window_s_first_packing_holds_rows(tmp_path: Path) -> None:
    """Only a packing after the first may hold no row (the window was begun at the first):
    the schedule's, and a dealt window's (a mixture's replay, a part's reshard section; the
    reviewer's find: those took an edited 0, and a replay's gave other rows)."""
    with pytest.raises(StateError, match=r"packings: the first's rows"):
        Scheduled.from_json({"changes": [{"batch": 4, "seq_len": 40, "batch_size": 1}], "at": 5,
                             "packings": [{"seq_len": 24, "rows": 0}]})  # fmt: skip
    parts = {"A": _part(tmp_path / "A", "a", 6, 5, 8, 40), "B": _part(tmp_path / "B", "b", 3, 6,
                                                                       5, 120)}  # fmt: skip
    mixture = Mixture(parts, {"A": 0.6, "B": 0.4})
    states = []
    for rank, batches in ((0, 6), (1, 9)):
        with Loader(mixture, rank=rank, world_size=2, even=None, seed=0, workers=0,
                    tokenizer="bytes").batches(**SHAPE) as it:  # fmt: skip
            _rows(it, batches)
            states.append(json.loads(json.dumps(it.state_dict())))
    (new,) = reshard(states, 1)
    docs = new["documents"]
    for where, packings in [("documents.replays[0]", docs["replays"][0]["packings"]),
                            ("documents.parts.A.reshard.windows[0]",
                             docs["parts"]["A"]["reshard"]["windows"][0]["packings"])]:  # fmt: skip
        rows, packings[0]["rows"] = packings[0]["rows"], 0
        with pytest.raises(StateError, match=rf"{re.escape(where)}\.packings: the first's rows"):
            Loader(mixture, even=None, seed=0, workers=0, tokenizer="bytes").batches(
                **SHAPE, state=new)
        packings[0]["rows"] = rows
