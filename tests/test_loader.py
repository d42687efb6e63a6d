"""The loader: completeness, determinism, shutdown."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import openwebtext
from openwebtext import Corpus, Loader, Options, WorkerError
from openwebtext.engine import Loaded, PoolOptions
from openwebtext.engine.parent import WorkerPool
from openwebtext.plan import in_validation
from openwebtext.records import Unit
from openwebtext.stream import blocks
from support import child_pids, names


@pytest.mark.parametrize("workers", [1, 2, 5])
@pytest.mark.parametrize("shuffle", [True, False])
def test_every_document_exactly_once(
    small_corpus: Path, small_docs: dict[str, str], workers: int, shuffle: bool
) -> None:
    docs = list(Loader(small_corpus, workers=workers, shuffle=shuffle, shuffle_buffer=50))
    assert len(docs) == len(small_docs) == 120
    assert {d.name: d.text for d in docs} == small_docs


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_blocks_of_more_units_than_kept_slots(
    small_corpus: Path,
    small_docs: dict[str, str],
    workers: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past HOLD_UNITS units, a block copies its oldest units out of their slots: same stream."""
    # 100-document blocks are 5 members; 1 worker with prefetch 1 has 2 + 2 slots for 6 members,
    # so slots are reused while earlier units of the same block are still being handed out.
    loader = Loader(small_corpus, workers=workers, prefetch=1, seed=3, shuffle_buffer=100)
    expected = [(d.name, d.text) for d in loader]
    copied = []
    keep = blocks.Block._keep

    def spy(block: blocks.Block, pool: blocks.Slots) -> None:
        copied.append(len(block.spans) >= blocks.HOLD_UNITS)
        keep(block, pool)

    monkeypatch.setattr(blocks, "HOLD_UNITS", 2)
    monkeypatch.setattr(blocks.Block, "_keep", spy)
    got = [(d.name, d.text) for d in loader]
    assert got == expected
    assert dict(got) == small_docs
    assert any(copied) == (workers > 0)  # in-process units own their bytes: nothing to keep


def test_pool_fails_instead_of_waiting_when_every_slot_is_kept(small_corpus: Path) -> None:
    corpus = Corpus.open(small_corpus)
    options = PoolOptions(workers=1, prefetch=1, timeout=30.0, hold=1)
    with WorkerPool(corpus.units, options) as pool:
        counts = []
        for loaded in pool.run(range(len(corpus.units))):
            counts.append(len(loaded.names))
            pool.release(loaded.ticket)
        assert counts == [20] * 6
        assert pool.tasks.free == pool.slots == 3  # every slot came back
        with pytest.raises(WorkerError, match="keeps all 3 slots"):
            for _ in pool.run(range(len(corpus.units))):
                pass  # never released


def test_unshuffled_is_corpus_order(small_corpus: Path, small_docs: dict[str, str]) -> None:
    docs = list(Loader(small_corpus, workers=3, shuffle=False))
    assert names(docs) == list(small_docs)  # plain_read walks files and members in order
    first = docs[0]
    assert (first.subset, first.member, first.member_index, first.document_index) == (
        "urlsf_subset00",
        "urlsf_subset00-1_data.xz",
        0,
        0,
    )
    assert docs[-1].member == "urlsf_subset01-3_data.xz"
    assert (docs[-1].member_index, docs[-1].document_index) == (2, 19)


def test_order_depends_on_seed_not_workers(small_corpus: Path) -> None:
    loader = Loader(small_corpus, seed=7, shuffle_buffer=30)
    runs = [names(list(loader.replace(workers=w))) for w in (1, 2, 5)]
    assert runs[0] == runs[1] == runs[2]
    assert names(list(loader.replace(seed=8))) != runs[0]
    assert names(list(loader.replace(epoch=1))) != runs[0]
    assert sorted(names(list(loader.replace(seed=8)))) == sorted(runs[0])


def test_shuffle_mixes_members(small_corpus: Path) -> None:
    docs = list(Loader(small_corpus, seed=0, shuffle_buffer=60))
    first_block = docs[:60]
    assert len({d.member for d in first_block}) >= 3
    assert [d.document_index for d in first_block] != sorted(d.document_index for d in first_block)


def test_take(small_corpus: Path) -> None:
    full = names(list(Loader(small_corpus, seed=3)))
    with Loader(small_corpus, seed=3, take=25).iter() as it:
        got = names(list(it))
        assert it.stats.documents == 25
    assert got == full[:25]
    assert list(Loader(small_corpus, take=0)) == []


def test_stats_count_delivered_documents(small_corpus: Path, small_docs: dict[str, str]) -> None:
    with Loader(small_corpus, workers=2).iter() as it:
        for _ in range(10):
            next(it)
        assert it.stats.documents == 10
        rest = list(it)
        stats = it.stats
    assert stats.documents == 10 + len(rest) == 120
    assert stats.text_bytes == sum(len(t.encode()) for t in small_docs.values())
    assert stats.units == 6


def test_more_workers_than_members(tmp_path: Path) -> None:
    from openwebtext.synth import write_corpus

    write_corpus(tmp_path / "c", subsets=1, members=1, docs=5, seed=1, workers=1)
    docs = list(Loader(tmp_path / "c", workers=16))
    assert len(docs) == 5
    assert child_pids() == []


def test_early_break_leaves_no_process(small_corpus: Path) -> None:
    # shuffle_buffer=0: blocks are single units, so the workers are still busy at the break
    it = Loader(small_corpus, workers=3, shuffle_buffer=0, prefetch=1).iter()
    for _ in it:
        break
    assert child_pids() != []
    it.close()
    assert child_pids() == []


def test_context_manager_closes_on_consumer_exception(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=2, shuffle_buffer=0, prefetch=1)
    with pytest.raises(RuntimeError, match="consumer"), loader.iter() as it:
        next(it)
        assert child_pids() != []
        raise RuntimeError("consumer failed")
    assert child_pids() == []


def test_abandoned_iterator_is_cleaned_up(small_corpus: Path) -> None:
    import gc

    for doc in Loader(small_corpus, workers=2, shuffle_buffer=0, prefetch=1):
        assert doc.text
        assert child_pids() != []
        break
    gc.collect()
    assert child_pids() == []


def test_loader_is_immutable_and_picklable(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=2, seed=5)
    clone = pickle.loads(pickle.dumps(loader))
    assert clone.options == loader.options
    assert clone.corpus == loader.corpus
    with pytest.raises(AttributeError):
        loader.options.seed = 6  # type: ignore[misc]
    assert loader.replace(seed=6).options.seed == 6 and loader.options.seed == 5


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("workers", -1, "workers must be >= 0"),
        ("rank", 2, r"rank must be in 0\.\.1"),
        ("seed", -1, "seed must be an int >= 0"),
        ("on_error", "ignore", "on_error must be"),
        ("shuffle_buffer", -5, "shuffle_buffer must be >= 0"),
    ],
)
def test_bad_options_fail_when_built(field: str, value: object, message: str) -> None:
    kwargs = {field: value}
    if field == "rank":
        kwargs["world_size"] = 2
    with pytest.raises(ValueError, match=message):
        Options(**kwargs)  # type: ignore[arg-type]


def test_public_api_is_sorted_and_exported() -> None:
    assert openwebtext.__all__ == sorted(openwebtext.__all__)
    for name in openwebtext.__all__:
        assert hasattr(openwebtext, name), name


@pytest.mark.parametrize("workers", [0, 2])
def test_a_sparse_split_does_not_pin_whole_members(
    small_corpus: Path, small_docs: dict[str, str], workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit with few kept documents is copied out compactly: a block holds ~their bytes."""
    held: list[tuple[int, int]] = []
    add = blocks.Block.add

    def spy(block: blocks.Block, loaded: Loaded, unit: Unit, pool: blocks.Slots) -> None:
        add(block, loaded, unit, pool)
        views = {id(source[0]): source[0].nbytes for source in block.sources}
        held.append((sum(views.values()), sum(block.sizes)))

    monkeypatch.setattr(blocks.Block, "add", spy)
    loader = Loader(small_corpus, workers=workers, split="val", val_fraction=0.2, val_seed=7)
    got = {d.name: d.text for d in loader}
    assert got == {n: t for n, t in small_docs.items() if in_validation(n, 0.2, 7)}
    assert 0 < len(got) < 40
    assert held and all(kept_view <= 4 * kept_text for kept_view, kept_text in held)


def test_batches_refuse_a_dtype_too_small_for_the_ids(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, tokenizer="gpt2")
    said = r"dtype must be an integer dtype that holds every id \(up to 50256\), not '{}'"
    for packing in ("concat", "bestfit"):  # (best fit took any dtype: ids cut to its width)
        for dtype in (np.int16, np.uint8, np.float32, bool):
            with pytest.raises(ValueError, match=said.format(np.dtype(dtype).name)):
                loader.batches(8, 2, dtype=dtype, packing=packing)
        loader.batches(8, 2, dtype=np.uint16, packing=packing).close()
    with pytest.raises(ValueError, match=r"dtype must be an integer dtype .* not 'bogus'"):
        loader.batches(8, 2, dtype="bogus")


@pytest.mark.parametrize("pad_id", [1.5, True, -1, 2**16, 2**70, "x"])
def test_best_fit_refuses_a_pad_id_its_dtype_does_not_hold(small_corpus: Path, pad_id: Any) -> None:
    """Was taken as it stood (1.5 and True as 1, 2**16 wrapped to 0), or failed at the first
    batch from inside numpy."""
    loader = Loader(small_corpus, workers=0, tokenizer="bytes")
    with pytest.raises(ValueError, match=r"pad_id must be an int in 0\.\.65535 \(what dtype "):
        loader.batches(8, 2, packing="bestfit", dtype=np.uint16, pad_id=pad_id)
    loader.batches(8, 2, packing="bestfit", dtype=np.int64, pad_id=-1).close()


@pytest.mark.parametrize(
    ("given", "said"),
    [({"shuffle": "no"}, "shuffle must be True or False"),
     ({"timeout": True}, "timeout must be > 0 seconds"),
     ({"max_member_bytes": 2**70}, "max_member_bytes must be >= 1 and at most"),
     ({"prefetch": 2**63}, "prefetch must be >= 1 and at most")],
)  # fmt: skip
def test_options_refuse_what_was_taken_as_another_type(given: dict[str, Any], said: str) -> None:
    """Each was accepted: a string as a true shuffle, True as a 1 s timeout, limits that
    failed in a worker or in mmap."""
    with pytest.raises(ValueError, match=said):
        Options(**given)


@pytest.fixture
def resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file that gets the pid of every process that resolves a tokenizer spec, one a line."""
    from openwebtext.tokenizer import load as tokenizer_module

    log = tmp_path / "resolved"
    log.touch()
    load = tokenizer_module.cached_load

    def counting_load(spec: tokenizer_module.Request) -> tokenizer_module.Tokenizer:
        # Forked workers inherit this spy: each call, in any process, appends its pid.
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        return load(spec)

    monkeypatch.setattr(tokenizer_module, "cached_load", counting_load)
    return log


@pytest.mark.parametrize("workers", [0, 2])
def test_a_tokenizer_spec_is_resolved_once_per_run(
    small_corpus: Path, workers: int, resolved: Path
) -> None:
    """The loader resolves the spec; the pool and forked workers use that object as it is."""
    docs = list(Loader(small_corpus, workers=workers, tokenizer="bytes"))
    assert len(docs) == 120 and all(len(d.tokens) > 1 for d in docs)
    assert resolved.read_text().split() == [str(os.getpid())]


def test_prepare_resolves_its_tokenizer_spec_once(
    small_corpus: Path, tmp_path: Path, resolved: Path
) -> None:
    from openwebtext.prepare import PrepareOptions, prepare

    options = PrepareOptions(tokenizer="bytes", workers=2)
    report = prepare(Corpus.open(small_corpus), tmp_path / "out", options)
    assert sum(report.meta["counts"]["documents"].values()) == 120
    assert resolved.read_text().split() == [str(os.getpid())]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("lands", [1, 37, 100])
def test_an_interrupt_while_a_document_is_made_leaves_the_state_of_the_last_one(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mixed: bool, lands: int
) -> None:
    """A Ctrl-C while the ``lands``-th document's ids are copied out (or while a unit is read:
    the reader copies too): the state and stats are those after the last document handed out,
    which resumes to the uninterrupted run, and the iterator says it failed (``next``,
    ``iter``). Before, the position had counted the document being made: it was lost on
    resume, a mixture's state refused itself, and a ``for`` after ended silently."""
    from tables_support import mixture_folders

    source: Any = small_corpus
    if mixed:
        source = openwebtext.Mixture(mixture_folders(small_corpus, tmp_path))
    loader = Loader(source, tokenizer="bytes", workers=0, seed=1, shuffle_buffer=50, epochs=1)

    def key(doc: Any) -> tuple[Any, ...]:
        return doc.source, doc.name, doc.tokens.tobytes()

    with loader.iter() as it:
        whole = [key(d) for d in it]
    real, made = np.frombuffer, [0]

    def frombuffer(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        if made[0] == lands:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "frombuffer", frombuffer)
    it, first = loader.iter(), []
    with pytest.raises(KeyboardInterrupt):
        for doc in it:
            first.append(key(doc))
    monkeypatch.setattr(np, "frombuffer", real)
    state = it.state_dict()
    assert it.stats.documents == len(first) < len(whole)
    for again in (lambda: next(it), lambda: list(it)):
        with pytest.raises(RuntimeError, match=r"failed inside an earlier next\(\) \(Keyboard"):
            again()
    it.close()
    with loader.iter(state=state) as rest:
        assert first + [key(d) for d in rest] == whole


def test_a_loader_is_comparable_and_immutable_as_its_docstring_says(small_corpus: Path) -> None:
    """Red team, session 28: two loaders of one corpus and options compared unequal (a pickled
    copy too), and ``loader.options = ...`` was taken."""
    a, b = Loader(small_corpus, workers=0, seed=3), Loader(small_corpus, workers=0, seed=3)
    assert a == b and a == pickle.loads(pickle.dumps(a)) and hash(a) == hash(b)
    assert a != a.replace(seed=4) and a != Loader(small_corpus, workers=0, seed=3, take=2)
    assert len({a, b, a.replace(seed=4)}) == 2
    with pytest.raises(AttributeError, match=r"a Loader is immutable \(options\)"):
        a.options = b.options.__class__(seed=7)  # type: ignore[misc]
    with pytest.raises(AttributeError, match=r"immutable \(corpus\)"):
        a.corpus = b.corpus  # type: ignore[misc]
    assert a == b
