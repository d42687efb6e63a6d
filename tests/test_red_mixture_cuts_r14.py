"""A mixture's concat batches resharded again and again: a document cut across a checkpoint
goes on from the id after its last target, every time (none targeted twice, none lost).

Each life: a mixture of two tiny JSON lines corpora whose every document is one byte repeated
(so under tokenizer="bytes" an id names its document, and ``positions`` say which of its ids
it is), part A with damaged lines (skipped, each holding its slot); ranks that each take a
seeded number of batches (a seeded ``set_weights`` now and then), then a reshard to a seeded
world size, again and again; the last phase runs every rank to the end of the run (3 epochs).
Every piece of a document a row holds after its first is checked to begin at the id after
the last one a row before had targeted.

- item 1: a mixture's batches state said nothing of where the document its next batch starts
  in lies in its part (``cut_slots``/``cut_next``, a corpus's since session 36): past slots
  of skipped documents, the reshard cut the first of them instead (ids targeted twice).
- a state taken before the first batch of a run resumed inside such a document lost them.
- ``set_weights`` where the last batch ended on a document's first id (``offset`` 0: the id a
  target) chose the next document anew: that one was dropped, or its first id targeted twice.
- item 2: a part's share that began with no slot (its epoch's rest empty on that rank) before
  the next epoch's rest whose first document was cut never led the mixture (one id lost); a
  share that began with the slots of documents skipped before a cut's (what ``cut_slots``
  says) did not lead its stream either (one id lost).
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, Mixture, Schedule, StateError, reshard

EPOCHS = 3
SIZES = (1, 2, 3, 5, 7)


def _corpus(root: Path, tag: str, files: int, seed: int, bad: int, lo: int, hi: int,
            base: int) -> int:  # fmt: skip
    """``files`` files of ``lo..hi`` documents, each one ASCII byte (from ``base`` on) repeated
    3..60 times; ``bad`` lines damaged. Returns the bytes used."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    files_lines = []
    c = base
    for _ in range(files):
        lines = []
        for _ in range(rng.randint(lo, hi)):
            lines.append(json.dumps({"text": chr(c) * rng.randint(3, 60)}))
            c += 1
        files_lines.append(lines)
    for _ in range(bad):
        f = rng.randrange(files)
        k = rng.randrange(len(files_lines[f]))
        files_lines[f][k] = '{"text": 5}'
    for f, lines in enumerate(files_lines):
        (root / f"{tag}{f:02d}.jsonl").write_text("\n".join(lines) + "\n")
    return c - base


class _Pieces:
    """The pieces of documents rows hold: each after a document's first must begin at the id
    after the last one targeted before (``gone``: those that did not, as (id, first id
    targeted, ids awaited))."""

    def __init__(self) -> None:
        self.open: dict[int, list[int]] = collections.defaultdict(list)
        self.gone: list[tuple[str, int, list[int]]] = []

    def row(self, tokens: list[int], segments: list[int], positions: list[int]) -> None:
        i = 0
        while i < len(tokens):
            j = i
            while j < len(tokens) and segments[j] == segments[i]:
                j += 1
            ids = [t for t in tokens[i:j] if t != 256]
            if segments[i] > 0 and ids:
                first, last = positions[i] + (i == 0), positions[j - 1]  # (a row's first: input)
                if first <= last:
                    if first and not (i == 0 and positions[i] == 0):
                        if first in self.open[ids[0]]:
                            self.open[ids[0]].remove(first)
                        else:
                            self.gone.append((chr(ids[0]), first, sorted(self.open[ids[0]])))
                    self.open[ids[0]].append(last + 1)
            i = j


def _life(root: Path, seed: int, phases: int, bad: int, even: str | None = None,
          schedule: bool = False, alone: bool = False, by: str = "documents"
          ) -> list[tuple[str, int, list[int]]]:  # fmt: skip
    """Run the life; the pieces that did not go on where their document was cut (``alone``:
    of part A alone, a corpus, its weights never set; ``by``: the mixture's)."""
    rng = random.Random(seed)
    made = _corpus(root / "A", "a", 6, seed, bad, 3, 8, 40)
    _corpus(root / "B", "b", 3, seed + 1, 0, 2, 5, 40 + made + 1)
    parts = {name: Corpus.open(root / name, on_error="skip") for name in "AB"}
    weights, changes = {"A": 0.6, "B": 0.4}, [(20, {"A": 0.3, "B": 0.7})] if schedule else []
    source = parts["A"] if alone else Mixture(parts, weights, schedule=changes, by=by)
    shape: dict[str, Any] = (
        {"schedule": Schedule([(0, 24, 1), (4, 40, 2), (9, 16, 1), (15, 64, 1)])}
        if schedule else {"seq_len": 32, "batch_size": 1}
    )  # fmt: skip
    pieces = _Pieces()
    world = rng.choice(SIZES)
    states: list[Any] = [None] * world
    for phase in range(phases + 1):
        final = phase == phases
        new_states = []
        for r in range(world):
            steps = 10**9 if final else rng.randint(0, 6)
            loader = Loader(
                source,
                rank=r,
                world_size=world,
                even=even,
                seed=seed,
                epochs=EPOCHS,
                on_error="skip",
                workers=0,
                tokenizer="bytes",
            )
            with loader.batches(segments=True, packing="concat", state=states[r], **shape) as it:
                n = 0
                while n < steps:
                    if not final and not alone and rng.random() < 0.1:
                        w = rng.random()
                        it.set_weights({"A": w, "B": 1 - w})
                    b = next(it, None)
                    if b is None:
                        break
                    for k in range(b.tokens.shape[0]):
                        pieces.row(b.tokens[k].tolist(), b.segment_ids[k].tolist(),
                                   b.positions[k].tolist())  # fmt: skip
                    n += 1
                new_states.append(json.loads(json.dumps(it.state_dict())))
        if final:
            break
        world = rng.choice(SIZES)
        states = reshard(new_states, world, even=even)
    return pieces.gone


def _skipping(root: Path) -> Path:
    """Part A: Y, then a file of one damaged line (a block of none but a skipped slot), then X
    and Z; unshuffled, X lies one slot past the mark after Y."""
    a = root / "A"
    a.mkdir(parents=True)
    (a / "a0.jsonl").write_text(json.dumps({"text": "Y" * 5}) + "\n")
    (a / "a1.jsonl").write_text('{"text": 5}\n')
    (a / "a2.jsonl").write_text(
        "".join(json.dumps({"text": c}) + "\n" for c in ("X" * 40, "ZZZZZ"))
    )
    return a


def _two_parts(root: Path, a: Path) -> Mixture:
    b = root / "B"
    b.mkdir(parents=True)
    (b / "b.jsonl").write_text("".join(json.dumps({"text": c * 10}) + "\n" for c in "bcdefgh"))
    return Mixture({"A": Corpus.open(a, on_error="skip"), "B": Corpus.open(b, on_error="skip")},
                   {"A": 0.5, "B": 0.5})  # fmt: skip


def _loader(corpus: Any, **options: Any) -> Loader:
    return Loader(corpus, seed=0, epochs=1, shuffle=False, on_error="skip", workers=0,
                  tokenizer="bytes", **options)  # fmt: skip


def test_a_mixture_s_state_says_where_its_cut_document_lies_in_its_part(tmp_path: Path) -> None:
    """The next batch starts inside X, part A's, whose mark is before the skipped slot: the
    state says it lies one slot past (``cut_slots``, as a corpus's does), and a state edited to
    say otherwise is refused where X is read again."""
    loader = _loader(_two_parts(tmp_path, _skipping(tmp_path)))
    with loader.batches(seq_len=8, batch_size=1) as it:
        for _ in range(3):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))
    assert state["offset"] and state["documents"]["next"] == 0  # (inside X)
    assert state.get("cut_slots") == 1 and "cut_next" not in state
    with loader.batches(seq_len=8, batch_size=1, state=state) as again:
        next(again)
    edited = {k: v for k, v in state.items() if k != "cut_slots"}
    with (
        pytest.raises(StateError) as said,
        loader.batches(seq_len=8, batch_size=1, state=edited) as it,
    ):
        next(it)
    assert said.value.field == "cut_slots"


def test_a_state_taken_before_the_first_batch_keeps_its_cut_slots(tmp_path: Path) -> None:
    """A run resumed inside X, its state taken before any batch (nothing read yet): the same
    state, ``cut_slots`` too (it was left out, and a reshard of it cut the skipped slot)."""
    loader = _loader(_skipping(tmp_path))
    with loader.batches(seq_len=8, batch_size=1) as it:
        for _ in range(2):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))
    assert state["offset"] and state.get("cut_slots") == 1
    with loader.batches(seq_len=8, batch_size=1, state=state) as again:
        assert json.loads(json.dumps(again.state_dict())) == state


def test_set_weights_where_a_batch_ended_on_a_document_s_first_id(tmp_path: Path) -> None:
    """Each batch of 8 ids ends on the first id of the next document (a target): that one goes
    on in the next batch whatever the new weights (they choose from the document after it)."""
    for part, letters in (("A", "ABCDEFGH"), ("B", "bcdefghi")):
        (tmp_path / part).mkdir()
        (tmp_path / part / "x.jsonl").write_text(
            "".join(json.dumps({"text": c * 7}) + "\n" for c in letters)
        )
    mixture = Mixture({p: Corpus.open(tmp_path / p) for p in "AB"}, {"A": 0.5, "B": 0.5})
    with _loader(mixture).batches(seq_len=8, batch_size=1, segments=True) as it:
        first = next(it)
        assert first.tokens[0, -1] == ord("b") and first.positions[0, -1] == 0
        it.set_weights({"A": 1.0, "B": 0.0})
        after = next(it)
    assert after.tokens[0, 0] == ord("b") and after.positions[0, 0] == 0
    assert after.tokens[0, 1:7].tolist() == [ord("b")] * 6  # (its ids 1..6: targets, once)


@pytest.mark.parametrize(
    ("seed", "bad", "even", "schedule"),
    [
        (12, 3, None, False),  # item 1: '@' cut past skipped slots, 1 id targeted twice
        (4, 1, None, False),  # item 2: a part's empty share before a cut next epoch: 1 lost
        (4, 1, "drop", False),  # a part's cut in a repeat of its short share was carried
        (6, 1, None, True),  # under a schedule: cuts past skipped slots, ids twice and lost
    ],
)
def test_a_mixture_s_cut_documents_go_on_where_they_were_cut(
    tmp_path: Path, seed: int, bad: int, even: str | None, schedule: bool
) -> None:
    assert _life(tmp_path, seed, 25, bad, even, schedule) == []


@pytest.mark.parametrize(("seed", "bad", "even"), [(119, 2, None), (156, 2, None), (103, 3, "pad")])
def test_a_mixture_by_tokens_s_cut_documents_go_on_where_they_were_cut(
    tmp_path: Path, seed: int, bad: int, even: str | None
) -> None:
    """By tokens the mixture reads every part's next document before it chooses: a cut one
    past skipped slots no state names was read as one that does not lead, and when the
    mixture chose it first, its first id was never a target (lost). 7 of 60 seeded lives."""
    assert _life(tmp_path, seed, 12, bad, even, by="tokens") == []
