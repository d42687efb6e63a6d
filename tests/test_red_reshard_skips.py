"""Resharding after skips (``on_error="skip"``): the documents the old ranks handed out before
their states and those the new ranks hand out after the reshard are the epoch's documents,
each once, whatever was skipped and wherever it lies (a bad document at the start, middle or
end of a share, two in one unit, every document of a unit, a unit skipped whole), shuffled or
not, under ``even`` None, drop and pad, resharded once or twice; and no state the library made
is refused (each new rank also resumes exactly from a state taken inside its rest).

A property over a grid of cases, against an oracle built from the plan's shares
(``plan.EpochShares``, the definition of a share): the epoch's documents are the document
*slots* of the old shares (a skipped document holds one) less the skipped ones; ``drop``
leaves out at most what the new ranks' stats count as dropped, and every document handed out
more than once is counted as repeated (``pad``'s wrap, an evened-out rank going round its share
again after skips, old or new); evened out, the new ranks hand out as many each.

Before the fix the reshard cut the rest of the epoch in slots while a new rank read a piece
until that many documents were handed out (one more per skip: a document handed out twice),
and placed a piece's start in slots but used it as an index among a block's kept documents
(``StateError: bad state: position in_block=5 lies past the end of its block of 4
documents`` on a state the library made).
"""

from __future__ import annotations

import collections
import gzip
import itertools
import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from openwebtext import Corpus, CorpusError, Loader, reshard
from openwebtext.index import Counts
from openwebtext.plan import plan, share_bounds, share_losses
from openwebtext.stream.counts import count_documents
from support import check_each, check_once_under_even, kept_of_shares

SEED = 5

#: The corpus: JSON lines files and their documents; ``g`` is gzipped (a unit skipped whole
#: when it is corrupt).
LINES = {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5, "g": 6}


class Case(NamedTuple):
    old: int
    new: int
    stops: str
    bad: str
    shuffle: bool
    even: str | None
    again: int | None = None  # resharded again, from states inside the rest, to this many ranks
    buffer: int = 8


def _docs(name: str) -> list[str]:
    return [f"{name}{k}" for k in range(LINES[name])]


class Layout(NamedTuple):
    folder: Path
    corpus: Corpus
    counts: tuple[int, ...]  # per unit (the corpus's order), as counted
    docs: list[list[str]]  # per unit: its documents' slots, in order
    bad: frozenset[str]


def _unit_names(folder: Path) -> list[str]:
    return [Path(u.path).name.split(".")[0] for u in Corpus.open(folder, on_error="skip").units]


def _sequence(counts: tuple[int, ...], docs: list[list[str]], shuffle: bool) -> list[str]:
    """The epoch's document sequence: units in the plan's order, each one's slots in order."""
    order = plan(len(counts), shuffle=shuffle, seed=SEED, epoch=0)
    return [d for u in order for d in docs[u][: counts[u]]]


def _bad_of(kind: str, old: int, even: str | None, sequence: list[str]) -> set[str]:
    """The documents of ``kind`` (where the skips lie, by the old shares' bounds)."""
    rule = even if old > 1 else None
    bounds = [share_bounds(len(sequence), r, old, rule) for r in range(old)]
    at = {
        "share-start": [bounds[-1][0]],
        "share-middle": [(bounds[0][0] + bounds[0][1]) // 2],
        "share-end": [bounds[0][1] - 1, bounds[-1][1] - 1],
        "two-in-a-unit": [len(sequence) // 2, len(sequence) // 2 + 1],
        "many": list(range(1, len(sequence), 4)),
    }.get(kind, [])
    bad = {sequence[min(p, len(sequence) - 1)] for p in at}
    if kind == "unit-all-bad":  # every document of the unit in the middle of the sequence
        bad = {d for d in _docs(sequence[len(sequence) // 2][0])}
    return bad


def _layout(root: Path, case: Case) -> Layout:
    """The corpus of ``case``: its bad lines written as bad JSON, ``g`` corrupt for the
    ``corrupt`` kinds (counted as 0 documents, or as its 6 of before: a stale count, as when
    a read fails only in the stream)."""
    folder = root / f"corpus-{sum(1 for _ in root.iterdir())}"
    folder.mkdir()
    for name in LINES:
        path = folder / (f"{name}.jsonl.gz" if name == "g" else f"{name}.jsonl")
        path.write_bytes(_content(name, set()))
    names = _unit_names(folder)
    docs = [_docs(n) for n in names]
    counts = [LINES[n] for n in names]
    corrupt = case.bad.startswith("corrupt")
    if case.bad == "corrupt-counted":
        counts[names.index("g")] = 0
    sequence = _sequence(tuple(counts), docs, case.shuffle)
    bad = _bad_of(case.bad, case.old, case.even, sequence)
    for name in LINES:
        path = folder / (f"{name}.jsonl.gz" if name == "g" else f"{name}.jsonl")
        if name == "g" and corrupt:
            path.write_bytes(b"\x1f\x8b\x08\x00" + b"not a gzip stream at all" * 4)
        else:
            path.write_bytes(_content(name, bad))
    if corrupt:
        bad |= set(_docs("g"))
    corpus = Corpus.open(folder, on_error="skip").with_counts(Counts(tuple(counts)))
    return Layout(folder, corpus, tuple(counts), docs, frozenset(bad))


def _content(name: str, bad: set[str]) -> bytes:
    lines = [b"{not json" if d in bad else json.dumps({"text": d}).encode() for d in _docs(name)]
    data = b"\n".join(lines) + b"\n"
    return gzip.compress(data) if name == "g" else data


def _epoch(layout: Layout, case: Case) -> collections.Counter[str]:
    """The oracle: the kept documents of the old shares' slots."""
    return kept_of_shares(layout.counts, layout.docs, layout.bad, case.old, shuffle=case.shuffle,
                          seed=SEED, even=case.even)  # fmt: skip


def _options(case: Case, rank: int, world: int) -> dict[str, Any]:
    return {"rank": rank, "world_size": world, "even": case.even, "shuffle": case.shuffle,
            "shuffle_buffer": case.buffer, "seed": SEED, "workers": 0,
            "on_error": "skip"}  # fmt: skip


def _run(layout: Layout, options: dict[str, Any], state: Any = None, at: int | None = None
         ) -> tuple[list[str], Any, Any, Any]:  # fmt: skip
    """All the documents of a rank, its state after ``at`` of them (None: none taken), its
    state at the end, its stats."""
    taken = None
    with Loader(layout.corpus, **options).iter(state=state) as it:
        out: list[str] = []
        if at == 0:
            taken = json.loads(json.dumps(it.state_dict()))
        try:
            for doc in it:
                out.append(doc.text)
                if len(out) == at:
                    taken = json.loads(json.dumps(it.state_dict()))
        except CorpusError as exc:  # an evened-out share all of whose documents were skipped
            assert "read no document in a whole pass" in str(exc) and not out, exc
            assert options["even"] is not None, exc
            return out, taken, None, it.stats
        return out, taken, json.loads(json.dumps(it.state_dict())), it.stats


def _stop(kind: str, rank: int, length: int) -> int | None:
    """Where old rank ``rank`` of ``length`` documents takes its state (None: at its end,
    finished: the next epoch's start)."""
    if kind == "start":
        return 0
    if kind == "end":
        return None
    cycle = [0, length // 2, length, None, 1, max(0, length - 1), length // 3]
    return cycle[(rank + (kind == "mixed-2")) % len(cycle)]


def _new_world(layout: Layout, case: Case, states: list[Any], world: int, inside: bool
               ) -> tuple[list[list[str]], list[Any], list[Any]]:  # fmt: skip
    """Every new rank's documents and its stats; ``inside``: and its state inside its rest,
    each checked to resume exactly (its documents before it, the state)."""
    shares, stats, middles = [], [], []
    for r, state in enumerate(reshard(states, world, even=case.even)):
        options = _options(case, r, world)
        whole, _, _, stat = _run(layout, options, state)
        shares.append(whole)
        stats.append(stat)
        if not inside:
            continue
        at = max(min(1, len(whole)), (len(whole) * (r + 1)) // (world + 1))
        again, middle, _, _ = _run(layout, options, state, at)
        assert again == whole
        resumed, _, _, _ = _run(layout, options, middle)
        assert whole[:at] + resumed == whole, (r, at)
        middles.append((whole[:at], middle))
    return shares, stats, middles


def _repeats(case: Case, layout: Layout, state: Any, rank: int) -> int:
    """What an old rank's state counts as repeated, less ``pad``'s documents of the next
    share, which the oracle's slots hold twice (counted when its epoch ended, or else by the
    new ranks' last)."""
    counters = state["counters"]
    repeated = counters.get("repeated_documents", 0)
    if case.old > 1 and case.even is not None:
        repeated -= share_losses(sum(layout.counts), rank, case.old, case.even)[1]
    return int(repeated)


def _check(case: Case, epoch: collections.Counter[str], handed: list[str], dropped: int,
           repeated: int, shares: list[list[str]], layout: Layout) -> None:  # fmt: skip
    check_once_under_even(epoch, collections.Counter(handed), case.even, dropped, repeated)
    if case.even is None:
        return
    # Even: the same number each (but a share all of whose documents were skipped: it stopped).
    if len(shares) > 1 and all(shares):
        assert len({len(s) for s in shares}) == 1, [len(s) for s in shares]


def check_case(root: Path, case: Case, inside: bool) -> None:
    """The invariant for ``case``; ``inside``: also from states inside the new ranks' rests,
    resumed and resharded again (``case.again``)."""
    layout = _layout(root, case)
    epoch = _epoch(layout, case)
    handed, states, repeated = [], [], 0
    for r in range(case.old):
        options = _options(case, r, case.old)
        whole, _, end, _ = _run(layout, options)
        stop = _stop(case.stops, r, len(whole))
        _, state, _, _ = _run(layout, options, None, stop)
        state = end if stop is None else state
        handed += whole if stop is None else whole[:stop]
        states.append(state)
        repeated += _repeats(case, layout, state, r)
    shares, stats, middles = _new_world(layout, case, states, case.new, inside)
    new_dropped = sum(s.dropped_documents for s in stats)
    new_repeated = sum(s.repeated_documents for s in stats)
    _check(case, epoch, handed + [d for s in shares for d in s], new_dropped,
           repeated + new_repeated, shares, layout)
    if not inside or case.again is None:
        return
    # Resharded again, from each new rank's state inside its rest.
    before = [d for head, _ in middles for d in head]
    middle_states = [state for _, state in middles]
    counted = [state["counters"] for state in middle_states]
    dropped = sum(c.get("dropped_documents", 0) for c in counted)
    if not middle_states[-1]["reshard"].get("counted", True):  # (its rest had not begun: what
        dropped += stats[-1].dropped_documents  # its cut left out, no state counts; not skips')
    shares2, stats2, _ = _new_world(layout, case, middle_states, case.again, False)
    _check(case, epoch, handed + before + [d for s in shares2 for d in s],
           dropped + sum(s.dropped_documents for s in stats2),
           repeated + sum(c.get("repeated_documents", 0) for c in counted)
           + sum(s.repeated_documents for s in stats2), shares2, layout)  # fmt: skip


BADS = ("none", "share-start", "share-middle", "share-end", "two-in-a-unit", "many",
        "unit-all-bad", "corrupt-counted", "corrupt-stale")  # fmt: skip
WORLDS = ((2, 3), (3, 2), (1, 3), (4, 3), (3, 5), (2, 1), (5, 2), (3, 4))
STOPS = ("start", "mixed", "mixed-2", "end")


def _grid() -> list[Case]:
    """Every (bad, shuffle, even) with a few (old, new, stops, block size) each, turning
    through them, and a new world size to reshard to again."""
    cases = []
    combos = itertools.cycle(itertools.product(WORLDS, STOPS))
    buffers = itertools.cycle((8, 4, 13))
    for k, (bad, shuffle, even) in enumerate(
        itertools.product(BADS, (False, True), (None, "drop", "pad"))
    ):
        for j in range(4):
            (old, new), stops = next(combos)
            again = (2, 3, 1, 4)[(k + j) % 4]
            cases.append(Case(old, new, stops, bad, shuffle, even, again, next(buffers)))
    return cases


GRID = _grid()


def _check_all(root: Path, cases: list[Case], inside: bool) -> None:
    check_each(cases, lambda case: check_case(root, case, inside))


@pytest.mark.parametrize("bad", BADS)
def test_old_ranks_and_new_ranks_hand_out_the_epoch_once(tmp_path: Path, bad: str) -> None:
    """Old ranks stopped anywhere (at their start, inside their share, at its end, finished),
    resharded: the new ranks hand out the rest, each document once."""
    _check_all(tmp_path, [c for c in GRID if c.bad == bad], inside=False)


@pytest.mark.parametrize("even", [None, "drop", "pad"])
def test_states_inside_a_rest_resume_exactly_and_reshard_again(
    tmp_path: Path, even: str | None
) -> None:
    """A new rank's state taken inside its rest, after skipped documents too, resumes
    exactly, and the states of all new ranks reshard again: the epoch once all the same."""
    _check_all(tmp_path, [c for c in GRID if c.even == even], inside=True)


@pytest.mark.parametrize(("bad", "stops"), [({"a4"}, (0, 0)), ({"b1", "b2"}, (4, 0))])
def test_the_red_team_s_reproducer(tmp_path: Path, bad: set[str], stops: tuple[int, int]) -> None:
    """The red team's cases, 2 -> 3 ranks under even=None: one bad line, both old ranks at
    their start (a document was handed out twice); two bad lines in one file, old rank 0 after
    4 documents (``StateError`` on the library's own state). Each document once."""
    case = Case(2, 3, "start", "none", False, None)
    layout = _layout(tmp_path, case)
    for name in {d[0] for d in bad}:
        (layout.folder / f"{name}.jsonl").write_bytes(_content(name, bad))
    corpus = Corpus.open(layout.folder, on_error="skip").with_counts(Counts(layout.counts))
    layout = layout._replace(corpus=corpus, bad=frozenset(bad))
    handed, states = [], []
    for r, stop in enumerate(stops):
        whole, state, _, _ = _run(layout, _options(case, r, 2), None, stop)
        handed += whole[:stop]
        states.append(state)
    shares, _, _ = _new_world(layout, case, states, 3, False)
    _check(case, _epoch(layout, case), handed + [d for s in shares for d in s], 0, 0, shares,
           layout)


def test_a_run_s_blocks_do_not_change_when_a_counts_file_appears(tmp_path: Path) -> None:
    """A world-1 run under skip, with a member skipped for a limit that is not a shaping option
    (``max_member_bytes``), cut its blocks by the documents read until a counts file appeared
    (``owt index``), then by the counts: a state taken before resumed into other blocks, a
    document twice and another lost. A run that needs no counts cuts by what it reads."""
    folder = tmp_path / "c"
    folder.mkdir()
    for name, n in {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5, "h": 3, "i": 9}.items():
        lines = [json.dumps({"text": f"{name}{k} " + "x" * (k * 7 % 13)}) for k in range(n)]
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    big = b"".join(json.dumps({"text": f"g{k} " + "y" * 300}).encode() + b"\n" for k in range(6))
    (folder / "g.jsonl.gz").write_bytes(gzip.compress(big, mtime=0))
    opts = {"seed": 3, "shuffle_buffer": 8, "workers": 0, "on_error": "skip",
            "max_member_bytes": 1000, "epochs": 1}  # fmt: skip

    def run(state: Any = None, at: int | None = None) -> tuple[list[str], Any]:
        out, taken = [], None
        with Loader(Corpus.open(folder, on_error="skip"), **opts).iter(state=state) as it:
            for d in it:
                out.append(d.text.split()[0])
                if len(out) == at:
                    taken = json.loads(json.dumps(it.state_dict()))
        return out, taken

    full = run()[0]
    states = {at: run(at=at)[1] for at in range(1, len(full), 3)}
    corpus = Corpus.open(folder, on_error="skip")
    corpus.save_counts(count_documents(corpus, workers=0, on_error="skip"))
    for at, state in states.items():
        assert full[:at] + run(state)[0] == full, at


@pytest.mark.parametrize("even", ["pad", "drop"])
def test_a_state_of_an_evened_out_share_with_skips_resumes_exactly(
    tmp_path: Path, even: str
) -> None:
    """World 2, rank 1, skips: a state inside the pass that repeats the share's documents was
    taken and resumed into other blocks (the pass's end depends on where it began, which the
    state did not say): other documents, silently; then refused (``position.block``). The
    state now says where the pass ends (``position.pass_end``): every state resumes exactly
    (``test_repeat_pass_resume`` has the property over a grid)."""
    folder = tmp_path / "c"
    folder.mkdir()
    bad = {"a2", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "e5", "i3", "h0"}
    for name, n in {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5, "g": 6, "h": 3, "i": 9}.items():
        lines = [b"{not json" if f"{name}{k}" in bad else
                 json.dumps({"text": f"{name}{k} " + "x" * (k * 7 % 13)}).encode()
                 for k in range(n)]  # fmt: skip
        (folder / f"{name}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    opts = {"seed": 3, "shuffle_buffer": 8, "workers": 0, "epochs": 2, "world_size": 2,
            "rank": 1, "even": even, "on_error": "skip"}  # fmt: skip

    def run(state: Any = None) -> tuple[list[str], list[Any]]:
        out, states = [], []
        with Loader(Corpus.open(folder, on_error="skip"), **opts).iter(state=state) as it:
            states.append(json.loads(json.dumps(it.state_dict())))
            for d in it:
                out.append(d.text.split()[0])
                states.append(json.loads(json.dumps(it.state_dict())))
        return out, states

    full, states = run()
    assert any("pass_end" in state["position"] for state in states)
    for at, state in enumerate(states):
        assert run(state)[0] == full[at:], at
