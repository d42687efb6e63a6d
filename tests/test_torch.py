"""PyTorch: DataLoader workers split the stream; StatefulDataLoader resumes it exactly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext import Loader, StateError  # noqa: E402
from openwebtext.torch import OpenWebTextDataset, PackedBatchDataset  # noqa: E402
from support import names  # noqa: E402

DataLoader = torch.utils.data.DataLoader


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_reads_every_document_once(
    indexed: Path, small_docs: dict[str, str], num_workers: int
) -> None:
    dataset = OpenWebTextDataset(indexed, seed=1, workers=2)
    got = names(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert sorted(got) == sorted(small_docs)
    again = names(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert again == got


@pytest.mark.parametrize("take", [0, 1, 5, 6])
def test_take_is_the_datasets_whatever_its_workers(indexed: Path, take: int) -> None:
    # One take of the dataset: its workers' documents in turns are the first `take` of the
    # same DataLoader's without a take (each worker taking `take` handed out twice as many).
    whole = names(DataLoader(OpenWebTextDataset(indexed, seed=1), batch_size=None, num_workers=2))
    dataset = OpenWebTextDataset(indexed, seed=1, take=take)
    assert names(DataLoader(dataset, batch_size=None, num_workers=2)) == whole[:take]


def test_set_epoch_changes_the_order(indexed: Path) -> None:
    dataset = OpenWebTextDataset(indexed, seed=1)
    first = names(DataLoader(dataset, batch_size=None, num_workers=2))
    dataset.set_epoch(1)
    second = names(DataLoader(dataset, batch_size=None, num_workers=2))
    assert first != second and sorted(first) == sorted(second)


RESUME = textwrap.dedent(
    """
    import json, sys
    from torchdata.stateful_dataloader import StatefulDataLoader
    from openwebtext.torch import OpenWebTextDataset
    corpus, state_file = sys.argv[1], sys.argv[2]
    loader = StatefulDataLoader(
        OpenWebTextDataset(corpus, seed=3, shuffle_buffer=30), batch_size=None, num_workers=2
    )
    loader.load_state_dict(json.load(open(state_file)))
    print(json.dumps([doc.name for doc in loader]))
    """
)


@pytest.mark.parametrize("cut", [  # (each ~4 s: a new process; the default step keeps 37)
    pytest.param(1, marks=pytest.mark.slow), 37, pytest.param(64, marks=pytest.mark.slow)
])
def test_stateful_dataloader_resumes_in_a_new_process(
    indexed: Path, tmp_path: Path, cut: int
) -> None:
    def make() -> object:
        dataset = OpenWebTextDataset(indexed, seed=3, shuffle_buffer=30)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=2)

    full = names(make())
    loader = make()
    head = []
    for doc in loader:  # type: ignore[attr-defined]
        head.append(doc.name)
        if len(head) == cut:
            break
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))  # type: ignore[attr-defined]
    del loader
    proc = subprocess.run(
        [sys.executable, "-c", RESUME, str(indexed), str(state_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rest = json.loads(proc.stdout)
    assert head + rest == full


# -- packed batches ------------------------------------------------------------------------
SEQ, ROWS = 1024, 4
PACKED = {"seed": 3, "shuffle_buffer": 40, "tokenizer": "bytes"}  # bytes: eot 256
EOT = 256


def batches(loader: object) -> list[list[list[int]]]:
    out = []
    for batch in loader:  # type: ignore[attr-defined]
        assert isinstance(batch, torch.Tensor)
        assert batch.dtype == torch.int64 and batch.shape == (ROWS, SEQ + 1)
        out.append(batch.tolist())
    return out


def reference(corpus: Path, num_workers: int, rank: int = 0, world: int = 1) -> list[object]:
    """What a DataLoader over the dataset must yield, from ``Loader.batches`` in this process:
    worker ``w``'s share is rank ``rank * N + w`` of ``world * N``; the DataLoader takes the
    workers' batches in turn, skipping a worker once it has run out."""
    n = max(num_workers, 1)
    shares = []
    for w in range(n):
        share = Loader(corpus, workers=0, rank=rank * n + w, world_size=world * n, even=None)
        shares.append([b.tolist() for b in share.replace(**PACKED).batches(SEQ, ROWS)])
    out: list[object] = []
    for turn in range(max(map(len, shares))):
        out += [share[turn] for share in shares if turn < len(share)]
    return out


def id_stream(got: list[list[list[int]]]) -> list[int]:
    """The ids the batches cover, in order: rows overlap by one, so after the very first row
    every row adds its targets."""
    rows = [row for batch in got for row in batch]
    return rows[0] + [i for row in rows[1:] for i in row[1:]]


@pytest.mark.parametrize(("num_workers", "rank", "world"), [(0, 0, 1), (2, 0, 1), (2, 1, 2)])
def test_packed_batches_are_the_loaders_batches(
    indexed: Path, num_workers: int, rank: int, world: int
) -> None:
    dataset = PackedBatchDataset(
        indexed, SEQ, ROWS, workers=2, rank=rank, world_size=world, even=None, **PACKED
    )
    got = batches(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert len(got) > 20
    assert got == reference(indexed, num_workers, rank, world)
    assert batches(DataLoader(dataset, batch_size=None, num_workers=num_workers)) == got


def test_ranks_pack_disjoint_documents_and_every_id_is_a_target_once(
    indexed: Path, small_docs: dict[str, str]
) -> None:
    names = {text.encode(): name for name, text in small_docs.items()}
    packed: list[str] = []  # documents packed whole into some rank's batches
    read: list[str] = []  # documents of the ranks' streams
    for rank in range(2):
        options = {"rank": rank, "world_size": 2, "even": None, **PACKED}
        dataset = PackedBatchDataset(indexed, SEQ, ROWS, workers=2, **options)
        ids = id_stream(batches(DataLoader(dataset, batch_size=None)))
        docs = list(Loader(indexed, **options))
        everything = [i for doc in docs for i in doc.tokens.tolist()]  # type: ignore[attr-defined]
        assert ids == everything[: len(ids)]  # every id in order, each a target once
        assert len(everything) - len(ids) < SEQ * ROWS  # only what cannot fill a batch is left
        *whole, cut = _split_at_eot(ids)
        assert [names[text] for text in whole] == [doc.name for doc in docs[: len(whole)]]
        assert small_docs[docs[len(whole)].name].encode().startswith(cut)
        packed += [names[text] for text in whole]
        read += [doc.name for doc in docs]
    assert sorted(read) == sorted(small_docs)  # the ranks' shares cover the corpus
    assert len(packed) == len(set(packed))  # and no document is in two ranks' batches
    assert len(packed) > 100


def _split_at_eot(ids: list[int]) -> list[bytes]:
    pieces, start = [], 0
    for at, i in enumerate(ids):
        if i == EOT:
            pieces.append(bytes(ids[start:at]))
            start = at + 1
    return [*pieces, bytes(ids[start:])]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_packed_batches_resume_exactly_under_stateful_dataloader(
    indexed: Path, num_workers: int
) -> None:
    def make() -> object:
        dataset = PackedBatchDataset(indexed, SEQ, ROWS, workers=2, **PACKED)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers)

    full = batches(make())
    # Cuts: the first batch, mid-way at an odd step (worker 1's turn next), after the shorter
    # worker has run out (the rest comes from one worker), and at the very end.
    for cut in (1, 37, len(full) - 1, len(full)):
        loader = make()
        head = []
        for batch in loader:  # type: ignore[attr-defined]
            head.append(batch.tolist())
            if len(head) == cut:
                break
        state = json.loads(json.dumps(loader.state_dict()))  # type: ignore[attr-defined]
        del loader
        resumed = make()
        resumed.load_state_dict(state)  # type: ignore[attr-defined]
        assert head + batches(resumed) == full, cut


def test_packed_batch_dataset_refuses_what_it_cannot_do(indexed: Path) -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        PackedBatchDataset(indexed, SEQ, ROWS)
    with pytest.raises(ValueError, match="seq_len"):
        PackedBatchDataset(indexed, 0, ROWS, tokenizer="bytes")
    with pytest.raises(ValueError, match="batch_size"):
        PackedBatchDataset(indexed, SEQ, True, tokenizer="bytes")


@pytest.mark.parametrize("packed", [False, True])
def test_a_damaged_state_is_refused_where_it_is_loaded(indexed: Path, packed: bool) -> None:
    """``load_state_dict`` kept any dict: a damaged state failed only when the next pass
    started (in a DataLoader worker, far from the checkpoint that was loaded). It is decoded
    and checked where it is loaded, its first bad field named; one that is a state goes on."""
    dataset: Any = (PackedBatchDataset(indexed, SEQ, ROWS, tokenizer="bytes", workers=0)
                    if packed else OpenWebTextDataset(indexed, workers=0))  # fmt: skip
    items = iter(dataset)
    next(items)
    state = json.loads(json.dumps(dataset.state_dict()))
    good = next(items)
    inner = state["documents"] if packed else state
    damaged = json.loads(json.dumps(state))
    (damaged["documents"] if packed else damaged)["position"]["in_block"] = -1
    field = "documents.position.in_block" if packed else "position.in_block"
    with pytest.raises(StateError, match=rf"^bad (batches )?state: {field}: Expected `int` >= 0"):
        dataset.load_state_dict(damaged)
    with pytest.raises(StateError, match=r"^bad state: format: not 'openwebtext-state/2'"):
        dataset.load_state_dict({"format": "something else"})
    for empty in ([], ""):  # (only an empty dict, what state_dict() says before a pass, is none)
        with pytest.raises(StateError, match=r"^bad state: the record: Expected `object`"):
            dataset.load_state_dict(empty)
    assert inner["position"]["in_block"] >= 0
    dataset.load_state_dict(state)
    again = next(iter(dataset))
    assert (again == good).all() if packed else again == good


@pytest.mark.parametrize("dataset_class", ["documents", "packed"])
def test_even_sharding_counts_the_corpus_once_in_the_main_process(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dataset_class: str
) -> None:
    """DataLoader workers get the counts from the main process instead of each counting."""
    from openwebtext.stream import counts

    corpus = shutil.copytree(small_corpus, tmp_path / "corpus")  # no counts file yet
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "counted"
    count = counts.count_documents

    def spy(*args: Any, **kwargs: Any) -> Any:
        # Forked DataLoader workers inherit the spy: every count, in any process, leaves its pid.
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\n")
        return count(*args, **kwargs)

    monkeypatch.setattr(counts, "count_documents", spy)
    options = {"rank": 0, "world_size": 2, "even": "pad", "workers": 1}
    dataset: Any
    if dataset_class == "documents":
        dataset = OpenWebTextDataset(corpus, **options)
    else:
        dataset = PackedBatchDataset(corpus, SEQ, ROWS, **options, **PACKED)
    got = list(DataLoader(dataset, batch_size=None, num_workers=2))
    dataset.set_epoch(1)
    again = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert got and again
    assert log.read_text().split() == [str(os.getpid())]


def test_an_abandoned_dataloader_stops_the_workers_and_forked_ones_read_on(indexed: Path) -> None:
    """A DataLoader left after 3 batches and collected: the dataset's workers stop, its state
    stays that of the 3 batches. A DataLoader with a worker forked while another pass still
    runs (its copy of the dataset holds the running pool): the worker reads its own pass
    (before, it closed the copied pool: ``AssertionError: can only test a child process``)."""
    import gc

    from support import child_pids

    before = set(child_pids())  # (another test's DataLoader workers may still be exiting)
    dataset = PackedBatchDataset(indexed, SEQ, ROWS, workers=2, **PACKED)
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    for k, _ in enumerate(loader):
        if k == 2:
            workers = set(child_pids()) - before
            break
    del loader, _
    gc.collect()
    assert len(workers) == 2 and not workers & set(child_pids())
    assert dataset.state_dict()["batches"] == 3
    running = iter(DataLoader(dataset, batch_size=None, num_workers=0))
    next(running)
    workers = set(child_pids()) - before
    assert len(workers) == 2
    forked = batches(DataLoader(dataset, batch_size=None, num_workers=1))
    assert forked == reference(indexed, 1, 0, 1)
    del running
    gc.collect()
    assert not workers & set(child_pids())
