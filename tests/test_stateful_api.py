"""Exact resume of the public API, as a Hypothesis state machine.

Two runs of one loader side by side: the reference, one iterator never interrupted, and the run
under test, which a training loop's operations interrupt: its state saved, closed, carried
through JSON and opened again (``iter(state=…)``, ``batches(…, state=…)``), a rollback to a
state saved earlier (or to a ``mark()``), a mixture's ``set_weights`` at the same point of both
runs. Whatever the sequence, the run under test hands out the reference's items, and ends where
it ends (docs/sharding.md, "Epochs and exact resume"; docs/packing.md; docs/mixtures.md,
"Weights that change"). The subjects: a corpus's documents (endless, two epochs, rank 1 of 2),
concat and best-fit batches (fixed shapes or a shape schedule; two epochs; rank 1 of 2; made
ahead on a thread), a mixture's documents, concat and best-fit batches. Then what the machine
found (``test_a_read_error_resumes``): a state of batches whose ``start()`` was cut short.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from openwebtext import Loader, Mixture, PackedBatch, UnexpectedError, ahead
from openwebtext.engine import inline
from openwebtext.synth import write_corpus

Draw = Callable[[st.SearchStrategy[Any]], Any]
Start = Callable[[dict[str, Any] | None], Any]

#: Shapes of batches: fixed ones, and a ramp whose changes fall inside a short run (batches
#: of ~8,000 ids: two epochs of the small corpus, ~69,000 ids each, end within ~20 batches).
SHAPES = {
    "fixed": [(0, 2000, 4)],
    "ramp": [(0, 256, 4), (3, 2000, 2), (6, 500, 9), (9, 8000, 1)],
}

#: Weights of a mixture's two parts: normalised, each at least 0.1.
WEIGHTS = st.integers(10, 90).map(lambda p: {"a": p / 100, "b": 1 - p / 100})


@dataclass(frozen=True)
class Corpora:
    big: Path  # 2 subsets x 3 members x 5 documents (30)
    small: Path  # 1 subset x 3 members x 4 documents (12): epochs end within a short run
    other: Path  # a mixture's second part: 1 subset x 2 members x 4 documents (8)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Corpora:
    root = tmp_path_factory.mktemp("stateful")
    made = Corpora(root / "big", root / "small", root / "other")
    write_corpus(made.big, subsets=2, members=3, docs=5, seed=0, workers=1)
    write_corpus(made.small, subsets=1, members=3, docs=4, seed=2, workers=1)
    write_corpus(made.other, subsets=1, members=2, docs=4, seed=1, workers=1)
    return made


def same(a: Any, b: Any) -> bool:
    """Two items equal: documents field by field, batches array by array (dtype and shape)."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, tuple):  # (a PackedBatch, a Document, a TokenDocument)
        return type(a) is type(b) and all(map(same, a, b))
    return bool(a == b)


def copy(item: Any) -> Any:
    """An item that outlives the next (best fit's batches are views of rows made again)."""
    if isinstance(item, np.ndarray):
        return item.copy()
    if isinstance(item, PackedBatch):
        return PackedBatch(*(None if x is None else x.copy() for x in item))
    return item


def take(running: Any, n: int) -> list[Any]:
    """Up to ``n`` items of ``running``: fewer where it ends."""
    items = []
    for _ in range(n):
        try:
            items.append(copy(next(running)))
        except StopIteration:
            break
    return items


@dataclass(frozen=True)
class Subject:
    """What both runs read: ``make(corpora, draw)`` draws the loader's options and returns how
    to start a run (from a state, or None: from the start); ``parts``: a mixture's names;
    ``tested``: how the run under test is wrapped (``ahead``: on a thread)."""

    make: Callable[[Corpora, Draw], Start]
    parts: tuple[str, ...] = ()
    documents: bool = True  # (a document iterator: it has ``mark()``)
    tested: Callable[[Any], Any] = field(default=lambda running: running)


def loader_of(corpus: Path | Mixture, draw: Draw, **options: Any) -> Loader:
    return Loader(corpus, seed=draw(st.sampled_from([0, 7])), workers=0,
                  shuffle_buffer=draw(st.sampled_from([1, 5, 4096])), **options)  # fmt: skip


def packed(loader: Loader, packing: str, draw: Draw) -> Start:
    """How to start ``loader``'s batches of ``packing``, their shapes and window drawn."""
    shapes = SHAPES[draw(st.sampled_from(sorted(SHAPES)))]
    segments = draw(st.booleans())
    window = draw(st.sampled_from([2, 5])) if packing == "bestfit" else None
    return lambda state: loader.batches(schedule=shapes, segments=segments, packing=packing,
                                        window=window, state=state)  # fmt: skip


def documents(which: str, **options: Any) -> Subject:
    def make(corpora: Corpora, draw: Draw) -> Start:
        loader = loader_of(getattr(corpora, which), draw, **options)
        return lambda state: loader.iter(state=state)

    return Subject(make)


def batches(which: str, packing: str, **options: Any) -> Subject:
    def make(corpora: Corpora, draw: Draw) -> Start:
        loader = loader_of(getattr(corpora, which), draw, tokenizer="bytes", **options)
        return packed(loader, packing, draw)

    return Subject(make, documents=False)


def mixture(packing: str | None, mix: dict[str, Any] | None = None, **options: Any) -> Subject:
    """A mixture of the small corpus ("a") and the other ("b"), weights drawn."""

    def make(corpora: Corpora, draw: Draw) -> Start:
        first = draw(st.sampled_from([0.3, 0.5, 0.8]))
        parts = {"a": corpora.small, "b": corpora.other}
        mixed = Mixture(parts, {"a": first, "b": 1 - first}, **(mix or {}))
        loader = loader_of(mixed, draw, **{"tokenizer": packing and "bytes", **options})
        if packing is None:
            return lambda state: loader.iter(state=state)
        return packed(loader, packing, draw)

    return Subject(make, parts=("a", "b"), documents=packing is None)


class Resume(RuleBasedStateMachine):
    """The reference run and the run under test of one subject, in step."""

    def __init__(self, subject: Subject, corpora: Corpora) -> None:
        super().__init__()
        self.subject, self.corpora = subject, corpora
        self.reference: Any = None
        self.tested: Any = None
        self.handed = 0  # (items each run has handed out)
        self.ended = False

    @initialize(data=st.data())
    def open_runs(self, data: st.DataObject) -> None:
        self.start = self.subject.make(self.corpora, data.draw)
        self.reference = self.start(None)
        self.tested = self.subject.tested(self.start(None))

    def reopen(self, state: dict[str, Any], started: bool = False) -> None:
        """The run under test closed, and started again from ``state`` as a checkpoint holds
        it (through JSON); batches ``started``: their workers started before the first."""
        self.tested.close()
        running = self.start(json.loads(json.dumps(state)))
        self.tested = self.subject.tested(running.start() if started else running)

    def check(self, got: list[Any], n: int, what: str = "the run under test") -> None:
        """``got``, up to ``n`` items of ``what``, are the reference's next ones."""
        expected = take(self.reference, n)
        assert len(got) == len(expected), (
            f"after {self.handed} items: {what} handed out {len(got)} of {n}, "
            f"the reference {len(expected)}"
        )
        for k, (e, g) in enumerate(zip(expected, got, strict=True)):
            assert same(e, g), f"item {self.handed + k} of {what} differs from the reference's"
        self.handed += len(got)
        self.ended = self.ended or len(got) < n

    @rule(n=st.integers(1, 5))
    def take_items(self, n: int) -> None:
        self.check(take(self.tested, n), n)

    @rule(closed_first=st.booleans(), started=st.booleans())
    def resume(self, closed_first: bool, started: bool) -> None:
        """The state saved (perhaps after a ``close()``: it stays at the last item), and the
        run started again from it."""
        if closed_first:  # (started batches closed before their first documents were read too)
            self.tested.close()
        self.reopen(self.tested.state_dict(), started=started and not self.subject.documents)

    @precondition(lambda self: bool(self.subject.parts) and not self.ended)
    @rule(weights=WEIGHTS)
    def set_weights(self, weights: dict[str, float]) -> None:
        self.reference.set_weights(weights)
        self.tested.set_weights(weights)

    @rule(k=st.integers(1, 5), at=st.integers(0, 5), weights=st.none() | WEIGHTS,
          marked=st.booleans())  # fmt: skip
    def rollback(self, k: int, at: int, weights: dict[str, float] | None, marked: bool) -> None:
        """A state saved (of a document iterator: perhaps a ``mark()``, its state asked for
        after), ``k`` items taken (``set_weights`` after ``at`` of them, for a mixture), the
        state restored: the same ``k`` items again, and the reference's."""
        at = min(at, k)
        change = weights if self.subject.parts and not self.ended else None
        marked = marked and self.subject.documents
        saved = self.tested.mark() if marked else self.tested.state_dict()

        def run(running: Any) -> list[Any]:
            items = take(running, at)
            if change is not None and len(items) == at:
                running.set_weights(change)
            return items + take(running, k - at if len(items) == at else 0)

        first = run(self.tested)
        self.reopen(self.tested.state_dict(saved) if marked else saved)
        again = run(self.tested)
        assert len(again) == len(first) and all(map(same, first, again)), (
            f"after {self.handed} items: the {len(again)} items after a rollback are not the "
            f"{len(first)} handed out from the same state before it"
        )
        expected = run(self.reference)
        assert len(expected) == len(again) and all(map(same, expected, again)), (
            f"after {self.handed} items: the run rolled back differs from the reference"
        )
        self.handed += len(again)
        self.ended = self.ended or len(again) < k

    def teardown(self) -> None:
        for running in (self.reference, self.tested):
            if running is not None:
                running.close()


def made_ahead(subject: Subject) -> Subject:
    """``subject`` with its run under test made ahead on a thread (``ahead``), started."""
    return Subject(subject.make, subject.parts, documents=False,
                   tested=lambda batches: ahead(batches, depth=2).start())  # fmt: skip


SUBJECTS = {
    "documents": documents("big", epochs=None),
    "documents-2-epochs": documents("small", epochs=2),
    "documents-rank-1-of-2": documents("small", epochs=None, rank=1, world_size=2),
    "concat": batches("small", "concat", epochs=None),
    "concat-2-epochs": batches("small", "concat", epochs=2),
    "bestfit": batches("small", "bestfit", epochs=None),
    "bestfit-2-epochs": batches("small", "bestfit", epochs=2),
    "bestfit-rank-1-of-2": batches("big", "bestfit", epochs=None, rank=1, world_size=2),
    "bestfit-ahead": made_ahead(batches("small", "bestfit", epochs=2)),
    "mixture-documents": mixture(None, epochs=None),
    "mixture-documents-1-epoch": mixture(None, epochs=1),
    "mixture-concat": mixture("concat", epochs=None),
    "mixture-bestfit": mixture("bestfit", epochs=None),
    "mixture-bestfit-ahead": made_ahead(mixture("bestfit", epochs=None)),
}

#: The slower subjects (~1 s an example): a mixture's batches read again at every weight change.
SLOW = {"mixture-concat", "mixture-bestfit", "mixture-bestfit-ahead"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in SUBJECTS]
)
def test_resume_is_exact(name: str, corpora: Corpora) -> None:
    """Every sequence of takes, resumes, rollbacks and weight changes hands out the items of
    the run never interrupted."""
    run_state_machine_as_test(
        lambda: Resume(SUBJECTS[name], corpora),
        settings=settings(
            max_examples=15 if name in SLOW else 25,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


class LateResume(Resume):
    """A wrong resume: the run opened from the state skips its first item."""

    @rule()
    def resume(self) -> None:  # type: ignore[override]
        super().resume(closed_first=False, started=False)
        take(self.tested, 1)


def test_the_machine_sees_a_wrong_resume(corpora: Corpora) -> None:
    """The machine can fail: a resume that starts one document late is found."""
    with pytest.raises(AssertionError, match="differs from the reference"):
        run_state_machine_as_test(
            lambda: LateResume(SUBJECTS["documents"], corpora),
            settings=settings(
                max_examples=50, stateful_step_count=15, deadline=None, report_multiple_bugs=False
            ),
        )


def failing_read(monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    """Reads in this process (``workers=0``) fail once, at the ``at``-th unit: an I/O error
    that a run resumed from the state after it does not meet again."""
    read, seen = inline.read_unit, []

    def read_unit(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        if len(seen) == at:
            raise OSError("a transient read error")
        return read(*args, **kwargs)

    monkeypatch.setattr(inline, "read_unit", read_unit)


@pytest.mark.parametrize("started", [False, True])
@pytest.mark.parametrize("where", ["a corpus at an epoch's end", "a mixture at its start"])
def test_a_read_error_resumes(
    where: str, started: bool, corpora: Corpora, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read error in the first batch after a state (``started``: while ``start()`` reads its
    documents) leaves the state where it was: the run resumed from it hands out the batches
    that follow the state. Started, the state was where the reading thread had got to inside
    the read (``readahead.Primed.mark`` fell back to the stream's own mark, which a mixture's
    run moves document by document and a corpus's moves to the next epoch's start), and the
    library refused it."""
    state: dict[str, Any] | None = None
    if where == "a mixture at its start":  # (b's first unit is the 4th read: one of a's before)
        shapes, at = SHAPES["fixed"], 4
        mixed = Mixture({"a": corpora.small, "b": corpora.other}, {"a": 0.8, "b": 0.2})
        loader = Loader(mixed, seed=0, workers=0, tokenizer="bytes", epochs=None)
    else:  # (40 batches: the 4th epoch's last; the read after it, the 5th epoch's first unit)
        shapes, at = SHAPES["ramp"], 1
        loader = Loader(corpora.small, seed=7, shuffle_buffer=1, workers=0, tokenizer="bytes",
                        epochs=None)  # fmt: skip
        with loader.batches(schedule=shapes) as batches:
            take(batches, 40)
            state = batches.state_dict()
    with loader.batches(schedule=shapes, state=state) as batches:
        expected = take(batches, 3)
    failing_read(monkeypatch, at)
    batches = loader.batches(schedule=shapes, state=state)
    if started:
        batches.start()
    with pytest.raises(UnexpectedError, match="transient"):
        next(batches)
    saved = json.loads(json.dumps(batches.state_dict()))
    batches.close()
    monkeypatch.undo()
    with loader.batches(schedule=shapes, state=saved) as resumed:
        got = take(resumed, 3)
    assert len(got) == 3 and all(map(same, expected, got))
