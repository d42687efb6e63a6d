"""Skip counts across resumes and reshards (red team, round 13).

- F5: a mixture's part reads its next document ahead (``mixed._Part.peek``); reading it may read
  a unit and skip a bad line of it past the last document the part handed out. The mixture's
  ``stats`` counted that skip, though the state (taken at the last document handed out) does
  not: a run resumed from the state reads the unit again and counts it again, so the stats a
  state was taken at said more than a run resumed from it starts with, and summing each resumed
  run's own counts over a life of resumes said more skips than the uninterrupted run (18 for 17).
  The document read ahead was counted as repeated too, when it was a repeat (under `pad`/`drop`
  after skips).
- F1 (documented: reliability.md, "a reshard's rests"): a new rank reading an old rank's cut
  block counts its skips again; its counters start at 0. Pinned: a resharded state's counters
  count each skip of the units its rank reads once, and a plain resume's life counts it once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, Mixture, reshard

SKIPS = (
    "skipped_documents",
    "skipped_members",
    "partial_members",
    "replaced_documents",
    "repeated_documents",
    "dropped_documents",
)


def _lines(folder: Path, files: dict[str, int], bad: set[str]) -> Corpus:
    """JSON lines files (file ``u`` holds documents ``u0``, ``u1``, …; those in ``bad`` are not
    JSON: skipped)."""
    folder.mkdir()
    for u, k in files.items():
        (folder / f"{u}.jsonl").write_text("".join(
            "{not json\n" if f"{u}{i}" in bad else json.dumps({"text": f"{u}{i}"}) + "\n"
            for i in range(k)))  # fmt: skip
    return Corpus.open(folder, on_error="skip")


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _id(document: Any) -> tuple[Any, ...]:
    return (document.source, document.member, document.name)


def _skips(stats: Any) -> tuple[int, ...]:
    return tuple(getattr(stats, k) for k in SKIPS)


def _life(loader: Any) -> None:
    """Resume after every document: the stats at each state are those a run resumed from it
    starts with, and the documents and the counts summed over the runs are the uninterrupted
    run's."""
    with loader().iter() as it:
        whole = [_id(d) for d in it]
        counts = it.stats
    state, got, summed = None, [], [0] * len(SKIPS)
    said: tuple[int, ...] | None = None
    while True:
        with loader().iter(state=state) as it:
            opened = _skips(it.stats)
            if said is not None:
                assert opened == said, (len(got), opened, said)  # the state's = the stats at it
            try:
                got.append(_id(next(it)))
            except StopIteration:
                break
            finally:
                said = _skips(it.stats)
                summed = [s + b - a for s, a, b in zip(summed, opened, said, strict=True)]
            state = _json(it.state_dict())
    assert got == whole
    assert tuple(summed) == _skips(counts) == said


def _mixture(tmp_path: Path, by: str, b_lines: int) -> Mixture:
    """Part ``A``: bad lines inside units and a unit of one bad line (``d``); ``B``: one."""
    a = _lines(tmp_path / "a", {"a": 3, "b": 3, "c": 2, "d": 1}, {"b0", "d0"})
    b = _lines(tmp_path / "b", {"x": b_lines, "y": b_lines}, {"y0"})
    return Mixture({"A": a, "B": b}, {"A": 0.5, "B": 0.5}, by=by)


@pytest.mark.parametrize(
    ("by", "even", "world", "b_lines"),
    [
        ("documents", None, 1, 2),
        ("tokens", None, 1, 2),
        ("tokens", "drop", 2, 2),
        ("tokens", "pad", 2, 2),
        ("documents", "pad", 3, 3),
        ("documents", "drop", 3, 3),
    ],
)
def test_a_mixture_resumed_at_every_document_counts_each_skip_once(
    tmp_path: Path, by: str, even: str | None, world: int, b_lines: int
) -> None:
    """F5: a part reads its next document ahead (by tokens: every part, to know its size; by
    documents: at an epoch's end); 2 epochs, every rank. The stats counted the skips reading
    it met, and the document itself as repeated when it was a repeat (world 3: ``B``'s ranks
    go round again after skips), which the state does not."""
    mixture = _mixture(tmp_path, by, b_lines)
    tokens = {"tokenizer": "bytes"} if by == "tokens" else {}
    for rank in range(world):
        options = dict(seed=0, epochs=2, on_error="skip", workers=0, shuffle=False, rank=rank,
                       world_size=world, even=even, **tokens)  # fmt: skip
        _life(lambda options=options: Loader(mixture, **options))


def test_a_corpus_resumed_at_every_document_counts_each_skip_once(tmp_path: Path) -> None:
    """The control (a corpus: a state inside a block says its skips apart, ``block_skips``)."""
    corpus = _lines(tmp_path / "c", {"a": 4, "b": 3, "c": 4}, {"a0", "b1", "c3"})
    _life(lambda: Loader(corpus, seed=0, epochs=2, on_error="skip", workers=0, shuffle=True,
                         shuffle_buffer=4))  # fmt: skip


def test_a_resharded_rank_counts_the_skips_of_the_units_it_reads(tmp_path: Path) -> None:
    """F1, as documented: 1 -> 1 reshards after every document; each new rank counts the skips
    of the units it reads (its counters start at 0), the old rank's cut block's among them:
    the bad first line is counted by every rank that reads its unit, never twice by one."""
    corpus = _lines(tmp_path / "c", {"a": 5, "b": 5}, {"a0"})

    def loader() -> Loader:
        return Loader(corpus, seed=0, epochs=1, even=None, on_error="skip", workers=0,
                      shuffle=False)  # fmt: skip

    state, got, each = None, [], []
    while True:
        with loader().iter(state=state) as it:
            try:
                got.append(next(it).text)
            except StopIteration:
                each.append(it.stats.skipped_documents)
                break
            each.append(it.stats.skipped_documents)
            state = _json(it.state_dict())
        (state,) = reshard([state], 1, even=None)
    assert got == [f"a{i}" for i in range(1, 5)] + [f"b{i}" for i in range(5)]
    assert each == [1] * 4 + [0] * 6  # (the ranks reading unit a: 1 each)
