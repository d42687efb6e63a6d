"""The reference API behaves as the seed's ``openwebtext.py`` (a red-team differential against
it): the loader is its own iterator (``next(loader)``, a peek then a ``for``, ``zip(loader,
loader)``), any random generator the seed drew from is taken, ``take`` is a lazy generator
that takes ``None``, and ``num_workers`` is refused in its own words. Where it helps, the seed
itself runs beside ours (its order is unseeded: items are compared as multisets)."""

from __future__ import annotations

import copy
import gc
import importlib.util
import multiprocessing
import random
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from openwebtext import OpenWebTextLoader, WorkerError, shuffle, take
from openwebtext.synth import write_corpus
from support import child_pids

ROOT = Path(__file__).resolve().parents[1]
SEEDS = [ROOT.parent / "shared" / "seed", Path("/work/shared/seed")]
SEED_FILE = next((d / "openwebtext.py" for d in SEEDS if (d / "openwebtext.py").exists()), None)


@pytest.fixture(scope="module")
def subsets(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two subset tars of three members of five documents: 30 documents."""
    folder = tmp_path_factory.mktemp("parity") / "c"
    write_corpus(folder, subsets=2, members=3, docs=5, workers=1)
    return sorted(folder.glob("urlsf_subset*.tar"))


@pytest.fixture(scope="module")
def seed() -> Iterator[ModuleType | None]:
    """The seed's module, under another name, or None where it cannot run: not beside the
    repository, or workers not forked (its pool pickles its functions by reference, which
    only a forked worker finds). The comparisons with it are then left out."""
    if SEED_FILE is None or multiprocessing.get_start_method() != "fork":
        yield None
        return
    spec = importlib.util.spec_from_file_location("owt_seed_reference", SEED_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _names(items: list[Any]) -> Counter[tuple[str, str]]:
    return Counter(item[1] for item in items)


def _seed_read(seed: ModuleType, subsets: list[Path], read: Any, **kwargs: Any) -> Any:
    """``read(loader)`` of a seed loader (two workers), whose pool is shut down before the
    result returns."""
    loader = seed.OpenWebTextLoader(subsets, 2, **kwargs)
    try:
        return read(loader)
    finally:
        del loader
        gc.collect()


# -- 1: the loader is its own iterator ------------------------------------------------------


def test_the_loader_is_its_own_iterator(subsets: list[Path]) -> None:
    """``iter(loader)`` began a pass of its own, and ``next(loader)`` was a TypeError."""
    with OpenWebTextLoader(subsets, 2, random_state=1) as loader:
        assert iter(loader) is loader
        first = next(loader)
    assert first == next(iter(OpenWebTextLoader(subsets, 0, random_state=1)))
    assert next(OpenWebTextLoader(subsets, 0, random_state=1)) == first  # (no iter() first)


def test_a_peek_then_a_for_reads_every_document_once(
    subsets: list[Path], seed: ModuleType | None
) -> None:
    """The peeked document came again at the head of the ``for`` (31 of 30)."""
    with OpenWebTextLoader(subsets, 2, random_state=1) as loader:
        peeked = next(loader)
        ours = [peeked, *(item for item in loader)]
    assert len(ours) == 30 and len(_names(ours)) == 30

    def peek_then_for(loader: Any) -> list[Any]:
        it = iter(loader)  # (the seed's next() needs its iter() first)
        return [next(it), *(item for item in loader)]

    if seed is not None:
        assert sorted(ours) == sorted(_seed_read(seed, subsets, peek_then_for))


def test_zip_of_the_loader_with_itself_pairs_consecutive_documents(
    subsets: list[Path], seed: ModuleType | None
) -> None:
    """``zip(loader, loader)`` paired each document with itself (two passes)."""
    with OpenWebTextLoader(subsets, 2, random_state=1) as loader:
        pairs = list(zip(loader, loader, strict=True))
    in_order = list(OpenWebTextLoader(subsets, 0, random_state=1))
    assert [item for pair in pairs for item in pair] == in_order
    assert len(pairs) == 15
    if seed is None:
        return
    theirs = _seed_read(seed, subsets, lambda loader: list(zip(loader, loader, strict=True)))
    assert len(theirs) == 15
    assert all(a[1] != b[1] for a, b in theirs)
    assert sorted(item for pair in theirs for item in pair) == sorted(in_order)


def test_a_second_for_after_a_break_goes_on(subsets: list[Path]) -> None:
    with OpenWebTextLoader(subsets, 1, random_state=2) as loader:
        head = []
        for item in loader:
            head.append(item)
            if len(head) == 5:
                break
        rest = list(loader)
    assert head + rest == list(OpenWebTextLoader(subsets, 0, random_state=2))


def test_an_ended_pass_stays_ended(subsets: list[Path]) -> None:
    """Read to its end, ``next`` keeps raising ``StopIteration`` and ``iter()`` begins nothing
    anew (``shuffle`` calls ``iter`` on it again: main.py read the corpus twice); another pass
    is another loader, a copy's in the same seeded order."""
    loader = OpenWebTextLoader(subsets, 2, random_state=3)
    first = list(loader)
    assert len(first) == 30
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(loader)
    assert list(loader) == [] and list(shuffle(loader, 1024)) == []
    assert list(copy.copy(loader)) == first
    assert child_pids() == []
    assert len(list(shuffle(OpenWebTextLoader(subsets, 1), 1024))) == 30  # (main.py's chain)


def test_close_ends_the_pass(subsets: list[Path]) -> None:
    loader = OpenWebTextLoader(subsets, 2, random_state=4)
    whole = list(OpenWebTextLoader(subsets, 0, random_state=4))
    with loader:
        assert next(loader) == whole[0]
        assert len(child_pids()) == 2
    assert child_pids() == []
    with pytest.raises(StopIteration):
        next(loader)
    assert list(loader) == [] and list(copy.copy(loader)) == whole
    fresh = OpenWebTextLoader(subsets, 0)
    fresh.close()  # (before any pass)
    with pytest.raises(StopIteration):
        next(fresh)
    assert list(fresh) == []


def test_a_loader_dropped_mid_pass_stops_its_workers(subsets: list[Path]) -> None:
    loader = OpenWebTextLoader(subsets, 2)
    next(loader)
    assert len(child_pids()) == 2
    del loader
    gc.collect()
    assert child_pids() == [] and multiprocessing.active_children() == []


def test_an_error_from_the_stream_propagates(
    subsets: list[Path], worker_fault: Callable[..., Path]
) -> None:
    """A worker's error ends the pass with it; ``next`` then says the pass failed (never a
    silent end); another loader reads it all."""
    member = "openwebtext/urlsf_subset00-2_data.xz"
    worker_fault(member, "kill", times=1)
    loader = OpenWebTextLoader(subsets, 2)
    with pytest.raises(WorkerError, match=rf"exited with code -9 while reading .*{member}"):
        for _ in loader:
            pass
    assert child_pids() == []
    with pytest.raises(RuntimeError, match="failed inside an earlier next"):
        next(loader)
    assert len(list(copy.copy(loader))) == 30  # (the member read again: killed once only)


# -- 2: random_state objects the seed draws from ---------------------------------------------


@pytest.mark.parametrize(
    "make", [lambda: np.random, lambda: random.Random(0), lambda: random],
    ids=["np.random", "random.Random", "random"],
)  # fmt: skip
def test_random_generators_the_seed_took(subsets: list[Path], make: Any) -> None:
    """Only None, an int, a RandomState or a Generator were taken (a TypeError here)."""
    items = list(OpenWebTextLoader(subsets, 0, random_state=make()))
    assert sorted(items) == sorted(OpenWebTextLoader(subsets, 0))
    assert sorted(shuffle(range(50), 8, make())) == list(range(50))


def test_a_generator_s_draw_makes_the_seed(subsets: list[Path]) -> None:
    def seed_of(random_state: object) -> int:
        return OpenWebTextLoader(subsets, 0, random_state=random_state).seed

    assert seed_of(random.Random(7)) == random.Random(7).getrandbits(63)
    assert seed_of(random.Random(7)) == seed_of(random.Random(7))
    np.random.seed(7)
    drawn = seed_of(np.random)
    np.random.seed(7)
    assert drawn == np.random.randint(0, 2**31 - 1)
    # (RandomState and Generator draw as before: golden orders stay)
    assert seed_of(np.random.RandomState(5)) == np.random.RandomState(5).randint(0, 2**31 - 1)
    assert seed_of(np.random.default_rng(5)) == np.random.default_rng(5).integers(0, 2**63 - 1)
    assert list(shuffle(range(40), 4, random.Random(1))) == list(
        shuffle(range(40), 4, random.Random(1).getrandbits(63))
    )


@pytest.mark.parametrize("refused", ["five", object(), -1, 1.5, True])
def test_what_no_seed_is_drawn_from_is_refused(subsets: list[Path], refused: object) -> None:
    with pytest.raises(TypeError, match=r"integers\(\), getrandbits\(\) or randint\(\)"):
        OpenWebTextLoader(subsets, random_state=refused)
    with pytest.raises(TypeError, match="random_state"):
        shuffle(range(3), 2, refused)


def test_the_seed_reads_the_same_documents_with_random_random(
    subsets: list[Path], seed: ModuleType | None
) -> None:
    if seed is None:
        pytest.skip("the seed cannot run here (see the seed fixture)")
    theirs = _seed_read(seed, subsets, list, random_state=random.Random(0))
    ours = list(OpenWebTextLoader(subsets, 2, random_state=random.Random(0)))
    assert sorted(theirs) == sorted(ours) and len(ours) == 30


# -- 3: take is a lazy generator ---------------------------------------------------------------


class Counted:
    """An iterable that counts its ``iter()`` calls."""

    def __init__(self, n: int) -> None:
        self.n, self.iters = n, 0

    def __iter__(self) -> Iterator[int]:
        self.iters += 1
        return iter(range(self.n))


def test_take_is_a_generator_that_calls_iter_at_its_first_next(tmp_path: Path) -> None:
    """It was an ``islice``: ``iter(it)`` at the call (``take(loader, n)`` opened the corpus),
    and no ``close``."""
    counted = Counted(10)
    taken = take(counted, 3)
    assert counted.iters == 0
    assert next(taken) == 0 and counted.iters == 1
    taken.close()
    assert list(taken) == []
    missing = take(OpenWebTextLoader(str(tmp_path / "none"), 0), 2)  # (opened when read)
    with pytest.raises(Exception, match="none"):
        next(missing)


def test_take_of_none_is_everything(seed: ModuleType | None) -> None:
    assert list(take(range(10), None)) == list(range(10))
    if seed is not None:
        assert list(seed.take(range(10), None)) == list(range(10))
    assert list(take(iter(range(5)), None)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("size", [True, np.bool_(False), -1, 2.0, "3"])
def test_take_refuses_what_is_no_size_at_the_call(size: object) -> None:
    said = r"size must be an int >= 0 and at most \d+ \(or None: all\)"
    with pytest.raises(ValueError, match=said):
        take(Counted(3), size)  # type: ignore[arg-type]


# -- 4: num_workers said in its own words ----------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "error"),
    [(2.0, TypeError), ("2", TypeError), (None, TypeError), (True, TypeError),
     (-1, ValueError), (np.int64(-2), ValueError)],
)  # fmt: skip
def test_num_workers_is_refused_in_its_own_words(
    subsets: list[Path], workers: object, error: type[Exception]
) -> None:
    """It was Options' "workers must be >= 0, not 2.0" (a ValueError, for a float too)."""
    with pytest.raises(error, match=r"^num_workers must be an int >= 0 \(numpy's integers too\)"):
        OpenWebTextLoader(subsets, num_workers=workers)  # type: ignore[arg-type]
    assert OpenWebTextLoader(subsets, num_workers=np.int64(2)).num_workers == 2


# -- 5: the docs ------------------------------------------------------------------------------


def test_the_docs_say_the_reference_took_files_and_the_loader_is_an_iterator() -> None:
    """docs/cli.md said folders were taken "as the reference took them": its worker fails."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text[text.index("## The reference API") :]
    assert "as the reference took them" not in section
    assert "the reference took files" in section
    assert "its own iterator" in section
