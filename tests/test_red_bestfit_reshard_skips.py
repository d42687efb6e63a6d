"""Best-fit batches resharded after skips (``on_error="skip"``), counted document by document:
the documents the old ranks handed out in their batches before their states and those the new
ranks hand out after the reshard are the epoch's, each kept document once (``even=None``; under
``drop``/``pad`` within what the stats count as dropped or repeated), wherever the skipped
documents lie (at the start, middle or end of a share, inside the window an old rank had begun,
many), shuffled or not, at world sizes 1->2, 2->3, 3->2, 2->1, 4->3; and no state the library
made is refused (a new rank's state inside its rest resumes exactly).

A property over a grid of cases against an oracle built from the plan's shares
(``plan.EpochShares``): the epoch's documents are the old shares' document *slots* (a skipped
document holds one) less the skipped ones. Each document is named by its first word and fits a
row, so a batch's documents are read off its segment ids.

Before the fix a best-fit window was ``window`` documents *handed out*, while a reshard deals
the window an old rank had begun as ``window`` document *slots* of its rest (it cannot know
where skips lie): with a skip inside it, the new rank packed a window of one document fewer,
into other rows, and skipped the rows the old rank had handed out of its own packing (a
document handed out twice, another never).
"""

from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from openwebtext import Corpus, CorpusError, Loader, reshard
from openwebtext.index import Counts
from openwebtext.plan import plan, share_bounds, share_losses
from support import bestfit_doc_names, check_each, check_once_under_even, kept_of_shares

SEED = 3

#: The corpus: JSON lines files and their documents (a unit each).
LINES = {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5}

Docs = collections.Counter[str]


class Case(NamedTuple):
    old: int
    new: int
    bad: str
    shuffle: bool
    even: str | None
    stops: int  # which cycle of batch counts the old ranks stop at
    window: int = 3
    batch_size: int = 1
    seq_len: int = 24
    buffer: int = 8
    bad_line: bytes = b'{"text": 5}'


def _text(name: str, k: int) -> str:
    """Document ``k`` of file ``name``: its name, then a few bytes (it fits a row)."""
    return f"{name}{k} " + "x" * ((7 * k + 5 * ord(name)) % 18 + 4)


def _docs(name: str) -> list[str]:
    return [f"{name}{k}" for k in range(LINES[name])]


class Layout(NamedTuple):
    corpus: Corpus
    counts: tuple[int, ...]  # per unit (the corpus's order), as counted: every line a slot
    docs: list[list[str]]  # per unit: its documents' slots, in order
    bad: frozenset[str]


def _write(folder: Path, bad: set[str], line: bytes) -> None:
    for name in LINES:
        lines = [line if d in bad else json.dumps({"text": _text(name, k)}).encode()
                 for k, d in enumerate(_docs(name))]  # fmt: skip
        (folder / f"{name}.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def _bad_of(case: Case, sequence: list[str]) -> set[str]:
    """The documents that are bad in ``case``, placed by the old shares' bounds."""
    rule = case.even if case.old > 1 else None
    bounds = [share_bounds(len(sequence), r, case.old, rule) for r in range(case.old)]
    first, last = bounds[0], bounds[-1]
    w = case.window
    at = {
        "none": [],
        "share-start": [last[0], first[0]],
        "share-middle": [(first[0] + first[1]) // 2],
        "share-end": [first[1] - 1, last[1] - 1],
        # inside the first and second windows of every share (those old ranks begin)
        "in-window": [b[0] + k for b in bounds for k in (w // 2, w + w // 2)],
        "window-edge": [b[0] + k for b in bounds for k in (w - 1, w)],
        "many": list(range(1, len(sequence), 3)),
    }[case.bad]
    return {sequence[min(p, len(sequence) - 1)] for p in at}


def _layout(root: Path, case: Case) -> Layout:
    folder = root / f"corpus-{sum(1 for _ in root.iterdir())}"
    folder.mkdir()
    _write(folder, set(), case.bad_line)
    names = [Path(u.path).name.split(".")[0] for u in Corpus.open(folder, on_error="skip").units]
    docs = [_docs(n) for n in names]
    counts = tuple(LINES[n] for n in names)
    order = plan(len(counts), shuffle=case.shuffle, seed=SEED, epoch=0)
    sequence = [d for u in order for d in docs[u]]
    bad = _bad_of(case, sequence)
    _write(folder, bad, case.bad_line)
    corpus = Corpus.open(folder, on_error="skip").with_counts(Counts(counts))
    return Layout(corpus, counts, docs, frozenset(bad))


def _epoch(layout: Layout, case: Case) -> Docs:
    """The oracle: the kept documents of the old shares' slots."""
    return kept_of_shares(layout.counts, layout.docs, layout.bad, case.old, shuffle=case.shuffle,
                          seed=SEED, even=case.even)  # fmt: skip




def _loader(layout: Layout, case: Case, rank: int, world: int) -> Loader:
    return Loader(layout.corpus, rank=rank, world_size=world, even=case.even,
                  shuffle=case.shuffle, shuffle_buffer=case.buffer, seed=SEED, workers=0,
                  on_error="skip", tokenizer="bytes")  # fmt: skip


def _run(loader: Loader, case: Case, state: Any = None, at: int | None = None
         ) -> tuple[list[list[str]], Any, Any]:  # fmt: skip
    """Every batch's documents to the end, the state after ``at`` batches (None: none taken),
    the stats."""
    kw = {"seq_len": case.seq_len, "batch_size": case.batch_size, "packing": "bestfit",
          "window": case.window, "segments": True}  # fmt: skip
    taken, out = None, []
    with loader.batches(state=state, **kw) as it:
        if at == 0:
            taken = json.loads(json.dumps(it.state_dict()))
        try:
            for batch in it:
                out.append(bestfit_doc_names(batch))
                if len(out) == at:
                    taken = json.loads(json.dumps(it.state_dict()))
        except CorpusError as exc:  # an evened-out share all of whose documents were skipped
            assert "read no document in a whole pass" in str(exc) and not out, exc
            assert case.even is not None, exc
        if at is not None and at >= len(out) and taken is None:  # at its end (finished)
            taken = json.loads(json.dumps(it.state_dict()))
        return out, taken, it.stats


def _stop(case: Case, rank: int, batches: int) -> int:
    cycle = [1, 0, batches // 2, 2, batches, max(0, batches - 1), 3, 4, batches // 3, 5]
    return min(batches, cycle[(rank + case.stops) % len(cycle)])


def _repeats(case: Case, layout: Layout, state: Any, rank: int) -> int:
    """What an old rank's state counts as repeated, less ``pad``'s documents of the next
    share, which the oracle's slots hold twice (counted when its epoch ended, or else by the
    new ranks' last)."""
    documents = state["documents"]
    repeated = documents["counters"].get("repeated_documents", 0)
    if case.old > 1 and case.even is not None:
        repeated -= share_losses(sum(layout.counts), rank, case.old, case.even)[1]
    return int(repeated)


def check_case(root: Path, case: Case) -> None:
    """The invariant for ``case``, its old ranks stopped at a few batch counts in turn."""
    layout = _layout(root, case)
    epoch = _epoch(layout, case)
    for turn in range(3):
        _check_stops(layout, case._replace(stops=case.stops + 3 * turn), epoch)


def _check_stops(layout: Layout, case: Case, epoch: Docs) -> None:
    """The invariant for ``case``'s stops."""
    handed: list[str] = []
    states, repeated = [], 0
    for r in range(case.old):
        loader = _loader(layout, case, r, case.old)
        whole, _, _ = _run(loader, case)
        stop = _stop(case, r, len(whole))
        again, state, _ = _run(loader, case, None, stop)
        assert again == whole
        handed += [d for batch in whole[:stop] for d in batch]
        states.append(state)
        repeated += _repeats(case, layout, state, r)
    dropped = 0
    for r, state in enumerate(reshard(states, case.new, even=case.even)):
        loader = _loader(layout, case, r, case.new)
        whole, _, stats = _run(loader, case, state)
        handed += [d for batch in whole for d in batch]
        dropped += stats.dropped_documents
        repeated += stats.repeated_documents
        if whole and (r + case.stops) % 2:  # its state inside its rest resumes exactly
            at = max(1, len(whole) // 2)
            again, middle, _ = _run(loader, case, state, at)
            assert again == whole
            resumed, _, _ = _run(loader, case, middle)
            assert whole[:at] + resumed == whole, (r, at)
    _check(case, epoch, collections.Counter(handed), dropped, repeated)


def _check(case: Case, epoch: Docs, got: Docs, dropped: int, repeated: int) -> None:
    assert set(got) <= set(epoch), sorted(set(got) - set(epoch))  # nothing skipped or foreign
    missing, extra = epoch - got, got - epoch
    if case.batch_size > 1:  # rows short of a batch at a run's end are dropped: few documents
        most = (case.old + case.new) * (case.batch_size - 1) * 8
        assert not extra if case.even is None else sum(extra.values()) <= repeated, extra
        assert sum(missing.values()) <= most + dropped, sorted(missing.elements())
        return
    check_once_under_even(epoch, got, case.even, dropped, repeated)


WORLDS = ((1, 2), (2, 3), (3, 2), (2, 1), (4, 3))
BADS = ("none", "share-start", "share-middle", "share-end", "in-window", "window-edge", "many")


def _grid() -> list[Case]:
    """Every (bad, shuffle, even), each with a few world sizes, stops and shapes in turn."""
    cases = []
    worlds = itertools.cycle(WORLDS)
    shapes = itertools.cycle([(3, 1, 24, 8), (4, 1, 30, 4), (2, 1, 24, 13), (3, 2, 24, 8),
                              (5, 1, 40, 8)])  # fmt: skip
    lines = itertools.cycle([b'{"text": 5}', b"{not json"])
    for k, (bad, shuffle, even) in enumerate(
        itertools.product(BADS, (False, True), (None, "drop", "pad"))
    ):
        for j in range(2):
            old, new = next(worlds)
            window, batch_size, seq_len, buffer = next(shapes)
            cases.append(Case(old, new, bad, shuffle, even, k + 3 * j, window, batch_size,
                              seq_len, buffer, next(lines)))  # fmt: skip
    return cases


GRID = _grid()


def _check_all(root: Path, cases: list[Case]) -> None:
    check_each(cases, lambda case: check_case(root, case))


@pytest.mark.parametrize("bad", BADS)
def test_old_and_new_ranks_hand_out_the_epoch_once(tmp_path: Path, bad: str) -> None:
    """Old ranks stopped after several batch counts, resharded: every kept document of the
    epoch is in the old ranks' batches before their states or the new ranks' after, once."""
    _check_all(tmp_path, [c for c in GRID if c.bad == bad])


@pytest.mark.parametrize("stops", [(1, 1), (2, 2), (3, 1), (4, 2), (3, 3)])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("seq_len", [24, 40])
def test_a_skip_inside_the_window_an_old_rank_had_begun(
    tmp_path: Path, stops: tuple[int, int], world: int, seq_len: int
) -> None:
    """2 -> ``world`` ranks under ``even=None``, windows of 3, in order: ``a1`` and ``a4``
    bad (unit ``a``'s slots end in two skipped ones), ``c6`` and ``d2`` in old rank 1's;
    each old rank stopped inside a window (``stops``: batches of one row). Each kept document
    once. (Before the fix old rank 0's window 1 was ``a5, b0, b1`` while the reshard dealt it
    as its 3 slots, ``a5`` and two skipped ones, and the new rank filled the window it packed
    with 3 documents, going on into the next window dealt: ``d0`` twice and ``a5`` never.)"""
    case = Case(2, world, "in-window", False, None, 0, seq_len=seq_len)
    layout = _layout(tmp_path, case)
    assert layout.bad == {"a1", "a4", "c6", "d2"}
    handed, states = [], []
    for r, stop in enumerate(stops):
        whole, state, _ = _run(_loader(layout, case, r, 2), case, None, stop)
        handed += [d for batch in whole[:stop] for d in batch]
        states.append(state)
    for r, new in enumerate(reshard(states, world, even=None)):
        rest, _, _ = _run(_loader(layout, case, r, world), case, new)
        handed += [d for batch in rest for d in batch]
    _check(case, _epoch(layout, case), collections.Counter(handed), 0, 0)


def test_a_window_into_a_repeating_pass(tmp_path: Path) -> None:
    """4 -> 3 under ``drop``, a skip at the start of old rank 0's share: its second window runs
    into the pass that repeats its share (``a1``) and its state is inside it, one row out."""
    case = Case(4, 3, "share-start", False, "drop", 7, 5, 1, 40, 8)
    layout = _layout(tmp_path, case)
    _check_stops(layout, case, _epoch(layout, case))
