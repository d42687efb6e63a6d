"""A red team of the passes of ``openwebtext.torch``'s datasets. Each test failed before its fix
(``torch/datasets.py``):

- with ``num_workers=0`` every DataLoader iterator is a pass of the one dataset, and a second
  one (``next(iter(loader))`` to look at a batch, an eval pass) closed the first: the training
  loop ended after the items it had, as if the epoch were over (``__iter__`` closed the
  running iterator of the pass before);
- ``set_epoch`` was lost in persistent DataLoader workers (``persistent_workers=True``): they
  keep their copy of the dataset, and the next pass repeated the last epoch's order;
- after a corpus error reached the loop (``num_workers=0``), the next ``next()`` ended the pass
  (``StopIteration``), where ``Loader.iter``'s and ``Loader.batches``' say that it failed.
"""

from __future__ import annotations

import gc
import pickle
from pathlib import Path
from typing import Any

import pytest

from openwebtext import CorruptMember
from support import (
    child_pids,
    corrupt_member,
    damage,
    member_offset,
    names,
    outer_tar,
    sample_docs,
    xz_member,
)

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext.torch import OpenWebTextDataset, PackedBatchDataset  # noqa: E402

DataLoader = torch.utils.data.DataLoader
KINDS = ["documents", "packed"]


def dataset_of(kind: str, corpus: Path, **options: Any) -> Any:
    options = {"seed": 3, "shuffle_buffer": 40, "workers": 0, **options}
    if kind == "documents":
        return OpenWebTextDataset(corpus, **options)
    return PackedBatchDataset(corpus, 256, 2, tokenizer="bytes", **options)


def item(x: Any) -> Any:
    return x.numpy().tobytes() if isinstance(x, torch.Tensor) else x.name


# --- a second iterator leaves the first going on ----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_iterator_leaves_the_first_going_on(indexed: Path, kind: str) -> None:
    """A loop that peeks at one item (``next(iter(loader))``) at its third: it ended there
    (3 items of the pass), and now gets every item, as with ``num_workers=2``. The peek is a
    new pass's first item, and ``state_dict()`` the pass started last's."""
    dataset = dataset_of(kind, indexed)
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    full = [item(x) for x in loader]
    assert len(full) > 10
    got = []
    for step, x in enumerate(loader):
        got.append(item(x))
        if step == 2:
            assert item(next(iter(loader))) == full[0]
            peeked = dataset.state_dict()
    assert got == full
    assert dataset.state_dict() == peeked  # (the peek's pass: the one started last)
    rest = dataset_of(kind, indexed)
    rest.load_state_dict(peeked)
    assert [item(x) for x in DataLoader(rest, batch_size=None, num_workers=0)] == full[1:]


@pytest.mark.waits_on_workers
def test_each_pass_stops_its_own_workers(indexed: Path) -> None:
    """Two passes at once, each with its own reading workers: the first reads on after the
    second started (before, it was closed); a pass's workers stop when it is dropped, closed
    or runs out, and none of another's."""
    before = set(child_pids())
    dataset = dataset_of("packed", indexed, workers=2)
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    full = [item(x) for x in loader]
    first = iter(loader)
    head = [item(next(first))]
    first_workers = set(child_pids()) - before
    second = iter(loader)
    next(second)
    second_workers = set(child_pids()) - before - first_workers
    assert len(first_workers) == len(second_workers) == 2
    head += [item(x) for _, x in zip(range(3), first, strict=False)]
    assert head == full[:4]
    del first
    gc.collect()
    assert not first_workers & set(child_pids())
    assert second_workers <= set(child_pids())
    third = iter(dataset)
    next(third)
    third_workers = set(child_pids()) - before - second_workers
    third.close()  # type: ignore[attr-defined]
    assert not third_workers & set(child_pids())
    assert [item(x) for x in second] == full[1:]  # (ran out: its workers stopped)
    assert not (first_workers | second_workers | third_workers) & set(child_pids())


# --- set_epoch reaches persistent workers -------------------------------------------------


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("kind", KINDS)
def test_set_epoch_reaches_persistent_workers(indexed: Path, kind: str) -> None:
    """Persistent DataLoader workers read the epoch ``set_epoch`` set in the main process:
    the pass after ``set_epoch(1)`` is epoch 1's (it repeated epoch 0's), and after
    ``set_epoch(0)`` epoch 0's again."""

    def passes(epoch: int) -> list[Any]:
        fresh = dataset_of(kind, indexed, epoch=epoch)
        return [item(x) for x in DataLoader(fresh, batch_size=None, num_workers=2)]

    epoch0, epoch1 = passes(0), passes(1)
    assert epoch0 != epoch1
    dataset = dataset_of(kind, indexed)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    got = [[item(x) for x in loader]]
    for epoch in (1, 0):
        dataset.set_epoch(epoch)
        got.append([item(x) for x in loader])
    assert got == [epoch0, epoch1, epoch0]
    copy = pickle.loads(pickle.dumps(dataset))  # (a copy is a dataset of its own)
    copy.set_epoch(1)
    assert copy.options.epoch == 1 and [item(x) for x in loader] == epoch0


@pytest.mark.waits_on_workers
def test_set_epoch_reaches_spawned_persistent_workers(indexed: Path) -> None:
    """The same with workers spawned, not forked: the epoch is shared with them too."""
    dataset = dataset_of("documents", indexed)
    epoch1 = names(dataset_of("documents", indexed, epoch=1))
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True,
                        multiprocessing_context="spawn")  # fmt: skip
    epoch0 = names(loader)
    dataset.set_epoch(1)
    assert names(loader) == epoch1 != epoch0


# --- a pass after a corpus error says so ---------------------------------------------------


def damaged(folder: Path, kind: str) -> Any:
    """A dataset of one tar of 4 members, built (counted), then its third member damaged
    (``CorruptMember``, under ``on_error='raise'``)."""
    members = [(f"m{k}.xz", xz_member(sample_docs(f"m{k}", 12))) for k in range(4)]
    path = outer_tar(folder / "damaged.tar", members)
    dataset = dataset_of(kind, folder, shuffle=False)
    offset, _ = member_offset(path, "m2.xz")
    damage(path, offset, corrupt_member(sample_docs("m2", 12)))
    return dataset


@pytest.mark.parametrize("kind", KINDS)
def test_a_pass_after_a_corpus_error_says_it_failed(tmp_path: Path, kind: str) -> None:
    """After the ``CorruptMember`` reached the loop, ``next()`` raises the library's
    RuntimeError, every time, as ``Loader.iter``/``Loader.batches`` do: it ended the pass
    (``StopIteration``), and the epoch looked finished."""
    dataset = damaged(tmp_path, kind)
    running = iter(DataLoader(dataset, batch_size=None, num_workers=0))
    with pytest.raises(CorruptMember):
        for _ in running:
            pass
    for _ in range(2):
        with pytest.raises(RuntimeError, match="failed inside an earlier next"):
            next(running)
    bare = iter(dataset)  # (a pass of its own, without a DataLoader)
    with pytest.raises(CorruptMember):
        for _ in bare:
            pass
    with pytest.raises(RuntimeError, match="failed inside an earlier next"):
        next(bare)


# --- a copy of a dataset with a pass running; a corpus opened under skip ------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_dataset_with_a_pass_running_is_copied_without_it(indexed: Path, kind: str) -> None:
    """One pass in the main process (a peek, an eval pass), then a spawned DataLoader worker's
    copy: the pickle failed on the running pass's error policy (red team, session 28). The
    copy's passes start as the dataset's next pass does."""
    dataset = dataset_of(kind, indexed)
    running = iter(DataLoader(dataset, batch_size=None, num_workers=0))
    first = item(next(running))
    copy = pickle.loads(pickle.dumps(dataset))
    copied = [item(x) for x in DataLoader(copy, batch_size=None, num_workers=0)]
    assert copied == [item(x) for x in DataLoader(dataset_of(kind, indexed), batch_size=None)]
    assert copied[0] == first and item(next(running)) == copied[1]  # (the pass here goes on)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dataset_opens_its_corpus_under_its_on_error(
    small_corpus: Path, tmp_path: Path, kind: str
) -> None:
    """``on_error="skip"``: a file that is not a corpus file is left out when the dataset opens
    its paths, as ``Loader`` leaves it (it was opened under ``raise``: ``UnknownFormat``)."""
    import shutil

    folder = tmp_path / "c"
    shutil.copytree(small_corpus, folder)
    (folder / "urlsf_subset99.tar").write_bytes(b"not a tar" * 100)
    dataset = dataset_of(kind, folder, on_error="skip")
    assert dataset.corpus.skipped_files and len(list(DataLoader(dataset, batch_size=None))) > 0


def test_states_that_are_no_dataloader_states_are_said_so() -> None:
    """Red team, session 28: ``loader_dataset_states(None)`` said "(no argument of type
    'NoneType' is not iterable in it)", ``reshard_loader_states(None, 2, 0)`` a bare
    ``TypeError``."""
    from openwebtext import StateError
    from openwebtext.torch import loader_dataset_states, reshard_loader_states

    for state, said in [(None, r"\(a dict\), but NoneType"), ([], r"\(a dict\), but list"),
                        ({"_snapshot": 5}, "its _snapshot is not one's"),
                        ({"x": 1}, "no 'dataset_state' in it")]:  # fmt: skip
        with pytest.raises(StateError, match=said):
            loader_dataset_states(state)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="states must be a list of every old rank's"):
        reshard_loader_states(None, 2, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not dict"):
        reshard_loader_states({"dataset_state": {}}, 2, 0)  # type: ignore[arg-type]
