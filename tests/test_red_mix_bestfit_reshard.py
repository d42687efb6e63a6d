"""Best-fit batches of a mixture resharded, counted document by document (red team): a window
that runs to the run's end or crosses a part's epochs hands out no document an extra time; the
new ranks' own turns start where old rank 0's were after its window; a state resharded twice
loses no document; and ``reshard`` names a damaged state whatever the others are."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

from openwebtext import Loader, Mixture, Schedule, StateError, reshard
from openwebtext.synth import write_corpus
from support import bestfit_doc_names
from tables_support import write_jsonl, write_parquet

Docs = collections.Counter[str]




def run(loader: Loader, kw: dict[str, Any], state: Any = None, n: int | None = None
        ) -> tuple[Docs, Any]:  # fmt: skip
    """The documents of ``n`` batches (None: to the end) and the state after them."""
    got: Docs = collections.Counter()
    with loader.batches(state=state, **kw) as it:
        for k, batch in enumerate(it, 1):
            got.update(bestfit_doc_names(batch))
            if n is not None and k >= n:
                break
        return got, json.loads(json.dumps(it.state_dict()))


def of(docs: Docs, prefix: str) -> Docs:
    return collections.Counter({d: c for d, c in docs.items() if d.startswith(prefix)})


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """a: 25 JSON lines, b: 30 parquet rows, each document named by its first word."""
    root = tmp_path_factory.mktemp("two")
    a = write_jsonl(root / "a.jsonl", [f"DOC-a{i} " + "x" * (20 + 7 * i) for i in range(25)])
    b = write_parquet(root / "b.parquet", [f"DOC-b{i} " + "y" * (30 + 11 * i) for i in range(30)])
    return {"a": str(a), "b": str(b)}


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """t: a tar corpus of 8 long documents (a small part, through its epochs fast), j: 25 JSON
    lines, p: 30 parquet rows (the part that decides the run's end)."""
    import random

    root = tmp_path_factory.mktemp("three")
    write_corpus(str(root / "tar"), subsets=1, members=2, docs=4, seed=3, workers=1)
    rnd = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]

    def text(name: str, n: int) -> str:
        return f"DOC-{name} " + " ".join(rnd.choice(words) for _ in range(n))

    j = write_jsonl(root / "j.jsonl", [text(f"j{i}", rnd.randint(3, 60)) for i in range(25)])
    p = write_parquet(root / "p.parquet", [text(f"p{i}", rnd.randint(5, 120)) for i in range(30)],
                      row_group=10)  # fmt: skip
    return {"t": str(root / "tar"), "j": str(j), "p": str(p)}


TWO_KW = {"seq_len": 2048, "batch_size": 1, "packing": "bestfit", "segments": True}


def two_loader(m: Mixture, rank: int = 0, world: int = 1) -> Loader:
    return Loader(m, workers=0, seed=0, tokenizer="bytes", epochs=2, even=None, rank=rank,
                  world_size=world)  # fmt: skip


@pytest.mark.parametrize("world", [1, 2, 3])
def test_a_window_to_the_runs_end_hands_out_no_epoch_past_it(
    two: dict[str, str], world: int
) -> None:
    """A best-fit window (4096 documents) that holds the rest of the run, crossing both parts'
    epoch ends, resharded 1 -> ``world`` after one batch: part b decides the end (its 2 epochs
    are the longest), and every b document is handed out exactly twice over the old rank and
    the new ones, as in the run not resharded; at 1 -> 1, both parts' documents are the
    uninterrupted run's. (Pinned: a part whose epochs a dealt window read ahead of its stream
    leaves epochs of no document behind it, and the run's end is checked at each of them, not
    only at the first: no new rank takes a turn of an epoch past the run's.)"""
    m = Mixture(two, {"a": 0.5, "b": 0.5})
    kw = {**TWO_KW, "window": 4096}
    whole, _ = run(two_loader(m), kw)
    assert set(of(whole, "DOC-b").values()) == {2} and len(of(whole, "DOC-b")) == 30
    first, state = run(two_loader(m), kw, n=1)
    new = reshard([state], world, even=None)
    got = first.copy()
    for rank in range(world):
        more, _ = run(two_loader(m, rank, world), kw, new[rank])
        got.update(more)
    assert of(got, "DOC-b") == of(whole, "DOC-b")
    if world == 1:
        assert got == whole


@pytest.mark.parametrize(("epochs", "window", "stop"), [(2, 100, 1), (2, 200, 2), (3, 200, 1)])
def test_own_turns_after_a_dealt_window_start_where_its_old_rank_would(
    three: dict[str, str], epochs: int, window: int, stop: int
) -> None:
    """A weight schedule (from document 40 on, part p alone) and a best-fit window holding the
    rest of the run, resharded 1 -> 1: the documents are the uninterrupted run's, each as many
    times. (Pinned: the new ranks' own turns start at old rank 0's position after the window
    of its own it had begun, the schedule's steps inside it applied, not at the window's start,
    which would run the schedule again from there and hand p out past its epochs.)"""
    m = Mixture(three, {"t": 0.3, "j": 0.3, "p": 0.4}, schedule=[(40, {"t": 0, "j": 0, "p": 1})])
    kw = {"schedule": Schedule([(0, 4096, 1), (4, 8192, 1), (9, 5000, 1)]),
          "packing": "bestfit", "segments": True, "window": window}  # fmt: skip

    def loader() -> Loader:
        return Loader(m, workers=0, seed=0, tokenizer="bytes", epochs=epochs, even=None)

    whole, _ = run(loader(), kw)
    assert set(of(whole, "DOC-p").values()) == {epochs}
    first, state = run(loader(), kw, n=stop)
    (new,) = reshard([state], 1, even=None)
    rest, _ = run(loader(), kw, new)
    assert first + rest == whole


@pytest.mark.parametrize(
    ("worlds", "stops"),
    [((3, 1, 4), ((1, 2, 3), (3,))), ((3, 1, 2), ((1, 2, 3), (3,))),
     ((3, 1, 1), ((1, 2, 3), (3,))), ((3, 1, 1), ((1, 2, 3), (2,)))],
)  # fmt: skip
def test_resharded_twice_no_document_is_lost(
    three: dict[str, str], worlds: tuple[int, ...], stops: tuple[tuple[int, ...], ...]
) -> None:
    """3 parts under a weight schedule and a shape schedule, best-fit windows of 8, resharded
    twice (3 -> 1 -> N): part p (positive weight to the end, 2 epochs) has each document handed
    out exactly twice over every rank of every world, small part t's as evenly (its weight 0
    from document 40 on: as many times each, or one more), and each rank of the last world counts
    (``stats.parts``) the documents of its batches plus those of the rows of its first dealt
    window handed out before. (Pinned: small part t's epoch whose rest only leaves out the
    documents a window crossing into it carried (``Reshard.dealt``) stays so when resharded
    again: those documents are in no share of the new level, so the window under way is read
    where it was, not one document early, and packed into the rows it was.)"""
    m = Mixture(three, {"t": 0.3, "j": 0.3, "p": 0.4},
                schedule=[(15, {"t": 0.5, "j": 0, "p": 0.5}), (40, {"t": 0, "j": 0, "p": 1})])
    kw = {"schedule": Schedule([(0, 4096, 1), (4, 8192, 1), (9, 5000, 1)]),
          "packing": "bestfit", "segments": True, "window": 8}  # fmt: skip
    handed: Docs = collections.Counter()
    states: list[Any] = [None] * worlds[0]
    for level, world in enumerate(worlds):
        last = level == len(worlds) - 1
        taken = []
        for rank in range(world):
            loader = Loader(m, workers=0, seed=0, tokenizer="bytes", epochs=2, rank=rank,
                            world_size=world, even=None)  # fmt: skip
            got, state = run(loader, kw, states[rank], None if last else stops[level][rank])
            handed.update(got)
            taken.append(state)
        if not last:
            states = reshard(taken, worlds[level + 1], even=None)
    p = of(handed, "DOC-p")
    assert len(p) == 30 and set(p.values()) == {2}, p
    t = sorted(n for name, n in handed.items() if not name.startswith("DOC-"))
    assert len(t) == 8 and t[-1] - t[0] <= 1, t  # none of t's lost, none handed out twice over


def test_twice_resharded_rank_counts_what_it_hands_out(three: dict[str, str]) -> None:
    """3 -> 1 -> 4 as above: the new rank 0, dealt the window its old rank had begun (one row
    of it handed out: t's three documents), counts of p and j exactly the documents its batches
    hold (those rows' documents were the old rank's; none is counted and left out)."""
    m = Mixture(three, {"t": 0.3, "j": 0.3, "p": 0.4},
                schedule=[(15, {"t": 0.5, "j": 0, "p": 0.5}), (40, {"t": 0, "j": 0, "p": 1})])
    kw = {"schedule": Schedule([(0, 4096, 1), (4, 8192, 1), (9, 5000, 1)]),
          "packing": "bestfit", "segments": True, "window": 8}  # fmt: skip
    states: list[Any] = [None] * 3
    for world, stops in ((3, (1, 2, 3)), (1, (3,))):
        taken = []
        for rank in range(world):
            loader = Loader(m, workers=0, seed=0, tokenizer="bytes", epochs=2, rank=rank,
                            world_size=world, even=None)  # fmt: skip
            taken.append(run(loader, kw, states[rank], stops[rank])[1])
        states = reshard(taken, 4 if world == 1 else 1, even=None)
    loader = Loader(m, workers=0, seed=0, tokenizer="bytes", epochs=2, rank=0, world_size=4,
                    even=None)  # fmt: skip
    got: Docs = collections.Counter()
    with loader.batches(state=states[0], **kw) as it:
        for batch in it:
            got.update(bestfit_doc_names(batch))
        counted = {name: s.documents for name, s in it.stats.parts.items()}
    assert counted["p"] == sum(of(got, "DOC-p").values())
    assert counted["j"] == sum(of(got, "DOC-j").values())


@pytest.fixture(scope="module")
def mixture_state(two: dict[str, str]) -> dict[str, Any]:
    """Rank 0 of 2's documents state of a mixture, after one document."""
    loader = Loader(Mixture(two), workers=0, seed=0, epochs=None, world_size=2, even=None)
    with loader.iter() as it:
        next(it)
        return json.loads(json.dumps(it.state_dict()))


@pytest.mark.parametrize("bad", [None, 5, "x", [1]])
@pytest.mark.parametrize("at", [0, 1])
def test_a_damaged_state_beside_a_mixtures_is_named(
    mixture_state: dict[str, Any], bad: Any, at: int
) -> None:
    """A state that is not a state at all, beside a mixture's, is named by its index and type,
    as beside a corpus's ("state 1 is str, not a state"), never called a corpus's state."""
    states: list[Any] = [mixture_state, mixture_state]
    states[at] = bad
    with pytest.raises(StateError, match=rf"^state {at} is {type(bad).__name__}, not a state$"):
        reshard(states, 2, even=None)


@pytest.mark.parametrize("bad", [{}, {"format": "zz"}, {"format": None, "position": 1}])
def test_a_state_of_no_format_beside_a_mixtures_names_its_field(
    mixture_state: dict[str, Any], bad: Any
) -> None:
    """A mapping of no state's format beside a mixture's state: ``field`` is ``format``, and
    the message names the state and what it found."""
    with pytest.raises(StateError, match=r"format: state 1's is not a state's") as caught:
        reshard([mixture_state, bad], 2, even=None)
    assert caught.value.field == "format"


@pytest.mark.parametrize("documents", [None, {}, 5])
def test_batches_of_damaged_documents_beside_a_mixtures_are_decoded(
    two: dict[str, str], documents: Any
) -> None:
    """A batches state whose documents are damaged, beside the batches state of a mixture, is
    refused by its field (``documents`` or ``documents.format``), as beside a corpus's."""
    loader = Loader(Mixture(two), workers=0, seed=0, tokenizer="bytes", world_size=2, even=None)
    with loader.batches(64, 1) as it:
        next(it)
        good = json.loads(json.dumps(it.state_dict()))
    with pytest.raises(StateError, match=r"^state 1: bad batches state: documents") as caught:
        reshard([good, {**good, "documents": documents}], 2, even=None)
    assert caught.value.field in ("documents", "documents.format")


def test_a_corpus_state_beside_a_mixtures_is_still_refused(
    two: dict[str, str], mixture_state: dict[str, Any]
) -> None:
    """A state of a single corpus beside a mixture's: the refusal that says so."""
    with Loader(two["a"], workers=0, seed=0, world_size=2, rank=1, even=None).iter() as it:
        next(it)
        corpus = json.loads(json.dumps(it.state_dict()))
    with pytest.raises(StateError, match="of a mixture and of a single corpus"):
        reshard([mixture_state, corpus], 2, even=None)

