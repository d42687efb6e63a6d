"""What a red team of concurrent use (session 35) found: a state taken on another thread.

A checkpointing thread asked a document iterator for its ``state_dict()`` while the reading
thread handed out documents: the state was read field by field while that thread changed them
(the position of the next block beside the counts of the last), and a state resumed a whole
shuffle block later, 200 documents lost without a word. Batches' states were torn the same way
(a best-fit window's number beside another batch's count). Now batches hold their ``next``
while a state or stats is taken, from any thread; a document iterator, which hands out
documents with no call of ours between them, reads its state while no thread is inside its
``next`` (twice, the same), waiting for the document being made, or refuses after a while.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture
from openwebtext.stream import ahead
from support import held_reads

_held = held_reads


def _state_while_inside(it: Any, reads: threading.Thread, go: Any) -> tuple[Any, bool]:
    """``it.state_dict()`` asked for on another thread while ``reads`` (on a thread of its
    own) is held inside ``next``: the state, and whether it waited for the reads to go on."""
    taken: list[Any] = []
    taker = threading.Thread(target=lambda: taken.append(it.state_dict()))
    taker.start()
    taker.join(0.5)
    waited = taker.is_alive()
    go.set()
    reads.join(30)
    taker.join(30)
    return taken[0], waited


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_batches_state_from_another_thread_waits_for_the_batch_being_made(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, packing: str
) -> None:
    """Asked for while the reader is inside ``next`` (held in a unit's read), the state is the
    one after that batch, given once it is out: never one read while the batch is made."""
    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")
    with loader.batches(256, 2, packing=packing) as whole:  # type: ignore[arg-type]
        next(whole)
        next(whole)
        want = whole.state_dict()  # after the second batch
    inside, go = _held(monkeypatch, at=2)
    with loader.batches(256, 2, packing=packing) as it:  # type: ignore[arg-type]
        reader = threading.Thread(target=lambda: (next(it), next(it)))
        reader.start()
        assert inside.wait(30)  # the reader is inside next(), in the second unit's read
        taken, waited = _state_while_inside(it, reader, go)
    assert waited, "the state was taken while a batch was being made"
    first = [want]  # (the read held is the first batch's, or the second's)
    with loader.batches(256, 2, packing=packing) as again:  # type: ignore[arg-type]
        next(again)
        first.append(again.state_dict())
    assert taken in first


def test_a_document_iterator_s_state_on_another_thread_is_the_one_between_two_documents(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for on another thread while the reader is inside ``next`` (held in a unit's
    read), a document iterator's state waits for that document to be handed out and is the
    state after it: never one read while the stream changes."""
    loader = Loader(small_corpus, workers=0, seed=3)
    with loader.iter() as whole:
        want = [whole.state_dict() for _ in range(120) if next(whole, None) is not None]
    inside, go = _held(monkeypatch, at=2)
    with loader.iter() as docs:
        reader = threading.Thread(target=lambda: [next(docs) for _ in range(30)])
        reader.start()
        assert inside.wait(30)  # the reader is inside next(), in the second unit's read
        taken, waited = _state_while_inside(docs, reader, go)
        assert docs.state_dict() == want[29]  # (the reader's own, after its 30 documents)
    assert waited, "the state was taken while the stream was being changed"
    assert taken in want


@pytest.mark.parametrize("ask", ["state_dict", "mark", "stats", "set_weights"])
def test_another_thread_s_state_is_refused_when_the_reader_stays_inside_next(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ask: str
) -> None:
    """A reader inside ``next`` longer than ``STEADY``: the state, mark, stats (and a
    mixture's ``set_weights``) asked for on another thread are refused, naming what, rather
    than read while the stream changes (or wait for ever); the weights stay."""
    from openwebtext.stream import source
    from openwebtext.synth import write_corpus

    monkeypatch.setattr(source, "STEADY", 0.3)
    write_corpus(tmp_path / "b", subsets=1, members=2, docs=10, seed=1, workers=1)
    mixture = Mixture({"a": small_corpus, "b": tmp_path / "b"}, {"a": 0.5, "b": 0.5})
    inside, go = _held(monkeypatch, at=3)
    refused: list[BaseException] = []
    with Loader(mixture, workers=0, seed=0).iter() as docs:
        reader = threading.Thread(target=lambda: [next(docs) for _ in range(30)])
        reader.start()
        assert inside.wait(30)
        try:
            {"state_dict": docs.state_dict, "mark": docs.mark, "stats": lambda: docs.stats,
             "set_weights": lambda: docs.set_weights({"a": 1.0, "b": 0.0})}[ask]()  # fmt: skip
        except RuntimeError as exc:
            refused.append(exc)
        finally:
            go.set()
            reader.join(30)
        assert docs.weights == {"a": 0.5, "b": 0.5}
    assert len(refused) == 1
    assert str(refused[0]).startswith(f"{ask}{'' if ask == 'stats' else '()'} of a document "
                                      "iterator while another thread stayed inside")  # fmt: skip


def test_batches_made_ahead_say_their_stats_at_once_while_the_first_is_made(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the first batch is handed out, a stage's ``stats`` are its source's when it
    started, never read from the source while its thread packs (they would wait for the batch
    being made, or be read while it changes them)."""
    inside, go = _held(monkeypatch, at=2)
    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")
    with ahead(loader.batches(256, 2)) as stage:
        stage.start()
        assert inside.wait(30)
        began = time.monotonic()
        stats = stage.stats
        took = time.monotonic() - began
        go.set()
        next(stage)
    assert took < 5 and stats.documents == 0


@pytest.mark.parametrize("kind", ["documents", "batches", "ahead"])
def test_a_running_iterator_refuses_to_pickle_saying_what(small_corpus: Path, kind: str) -> None:
    """Pickled, a running iterator failed on what it holds (a lambda of its error policy, a
    mixture's ``mmap``). It says what to pickle instead: its Loader and its state."""
    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")
    made = {"documents": loader.iter, "batches": lambda: loader.batches(64, 2),
            "ahead": lambda: ahead(loader.batches(64, 2))}[kind]  # fmt: skip
    said = r"does not pickle .* pickle its Loader and its state_dict\(\)"
    with made() as running, pytest.raises(TypeError, match=said):
        pickle.dumps(running)


def _read_in_a_pool_task(corpus: str) -> list[str]:
    with Loader(corpus, workers=2, seed=5).iter() as docs:
        return [doc.name for doc in docs]


def _synth_in_a_pool_task(out: str) -> int:
    from openwebtext.synth import write_corpus

    return write_corpus(out, subsets=1, members=3, docs=4, seed=2, workers=2).documents


def test_a_daemonic_process_reads_its_units_itself(small_corpus: Path, tmp_path: Path) -> None:
    """Inside a ``multiprocessing.Pool``'s worker (daemonic: it may start no process) a loader
    of ``workers=2`` ended with multiprocessing's ``AssertionError`` ("daemonic processes are
    not allowed to have children"), and ``write_corpus(workers=2)`` too. They now do their
    workers' work in it, as ``workers=0`` (the same documents, in the same order)."""
    want = _read_in_a_pool_task(str(small_corpus))
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply(_read_in_a_pool_task, (str(small_corpus),))
        made = pool.apply(_synth_in_a_pool_task, (str(tmp_path / "synth"),))
    assert got == want and len(got) == 120
    assert made == 12


def test_two_counts_of_other_splits_saved_at_once_keep_both(
    small_corpus: Path, tmp_path: Path
) -> None:
    """Two ``owt index`` runs of other held-out splits at once: each read the counts file
    before the other wrote it, then replaced it whole, so one split was lost though both said
    they saved it. A save now joins the splits the file holds by then, its folder locked."""
    import shutil

    from openwebtext.files import folder_locked
    from openwebtext.index import Corpus, Counts

    shutil.copytree(small_corpus, tmp_path / "c")
    corpus = Corpus.open(tmp_path / "c")
    documents = (20,) * 6
    first = corpus.save_counts(Counts(documents, {"0.1/1": (2,) * 6}))
    # The second was counted before the first was saved: it knows only its own split.
    second = corpus.save_counts(Counts(documents, {"0.2/1": (4,) * 6}))
    assert first == second
    assert Corpus.open(tmp_path / "c").load_counts() == Counts(
        documents, {"0.1/1": (2,) * 6, "0.2/1": (4,) * 6}
    )
    # The read, join and write wait for the folder's lock (another process's save).
    saved: list[Path] = []
    with folder_locked(first.parent) as held:
        assert held
        saver = threading.Thread(
            target=lambda: saved.append(corpus.save_counts(Counts(documents, {"0.3/1": (1,) * 6})))
        )
        saver.start()
        saver.join(0.5)
        assert saver.is_alive() and not saved
    saver.join(30)
    assert saved == [first]
    assert set(Corpus.open(tmp_path / "c").load_counts().val) == {"0.1/1", "0.2/1", "0.3/1"}  # type: ignore[union-attr]


def _slices(small_corpus: Path, tmp_path: Path) -> tuple[Any, Any, list[Path]]:
    """Two slices of the small corpus (``--shard i/2``): the corpus, the options, the folders."""
    from openwebtext.index import Corpus
    from openwebtext.prepare import PrepareOptions, prepare

    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)
    slices = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(slices):
        prepare(corpus, folder, options, shard=(i, 2))
    return corpus, options, slices


@contextlib.contextmanager
def _held_by_another(*holds: Any) -> Iterator[threading.Event]:
    """The locks ``holds`` (their context managers) taken on another thread (another run) for
    the block, or until the event yielded is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.ExitStack() as stack:
            for each in holds:
                stack.enter_context(each)
            taken.set()
            assert release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(60)
        yield release
    finally:
        release.set()
        holder.join(60)


def test_a_merge_never_reads_a_slice_a_run_is_writing(small_corpus: Path, tmp_path: Path) -> None:
    """``owt merge`` read a slice folder while ``owt tokenize`` wrote it again: it said the
    merge's own output was damaged ("run again with --restart", which cannot help) and left
    its parts behind, or merged the slice's old and new bytes. It now holds each local slice's
    lock: a run writing one is named at once (or, with ``wait``, waited for)."""
    from openwebtext.prepare import PrepareError, merge
    from openwebtext.prepare.lock import hold

    _, _, slices = _slices(small_corpus, tmp_path)
    with _held_by_another(hold(slices[1])) as release:  # (a run writing into slice 1)
        with pytest.raises(PrepareError, match=r"s1 is in use by another run"):
            merge(slices, tmp_path / "m")
        assert not (tmp_path / "m" / "meta.json").exists()
        threading.Timer(0.5, release.set).start()
        report = merge(slices, tmp_path / "m", wait=True)  # (waits for the run to end)
    assert report.meta["files"]["train.bin"]["bytes"] > 0


def test_merges_of_the_same_slices_read_them_at_once_and_a_run_waits(
    small_corpus: Path, tmp_path: Path
) -> None:
    """A merge's hold of a slice is a reader's: another merge of it goes on (the first took
    an exclusive lock, refusing it, and two with ``wait`` in opposite orders hung), while a
    run writing into the slice is refused; the last reader out removes the lock file."""
    from openwebtext.prepare import PrepareError, merge, prepare
    from openwebtext.prepare.lock import LOCK, hold_to_read

    corpus, options, slices = _slices(small_corpus, tmp_path)
    # (another merge, reading the slices in the other order)
    with _held_by_another(hold_to_read(slices[1]), hold_to_read(slices[0])):
        report = merge(slices, tmp_path / "m", wait=True)
        with pytest.raises(PrepareError, match=r"s0 is in use by another run"):
            prepare(corpus, slices[0], options, shard=(0, 2), restart=True)
    assert report.meta["files"]["train.bin"]["bytes"] > 0
    assert [s for s in slices if (s / LOCK).exists()] == []
