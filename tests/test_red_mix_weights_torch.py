"""A red team of a mixture's batches' ``set_weights`` and of the PyTorch datasets' states. Each
test failed before its fix:

- ``MixtureBatches.set_weights`` added a change to the state at every call, although all but
  the last at a position are never in force: 40 calls while one best-fit window was handed
  out left 40 changes at its end, and the state grew without bound (``stream/mixbatches.py``,
  ``_pending``), and so did ``MixtureIterator.set_weights`` between two documents
  (``stream/mixed.py``, ``MixedStream.set_weights``);
- ``state_dict()`` of a dataset of ``openwebtext.torch`` right after ``load_resharded`` was
  ``{}``, so a checkpoint taken then started the epoch again; and a state loaded after
  ``load_resharded`` was not where the next pass started (``torch/datasets.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Mixture
from tables_support import sample_texts, write_jsonl, write_parquet

WEIGHTS = [{"a": 0.5, "b": 0.5}, {"a": 0.9, "b": 0.1}, {"a": 0.2, "b": 0.8}]


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """a: 60 parquet rows in 4 row groups; b: 40 JSON lines (documents of a few hundred bytes)."""
    root = tmp_path_factory.mktemp("red-mix-weights")
    a = write_parquet(root / "a" / "a.parquet", sample_texts(60, seed=11), row_group=15)
    b = write_jsonl(root / "b" / "b.jsonl", sample_texts(40, seed=12))
    return {"a": str(a.parent), "b": str(b.parent)}


def copied(batch: Any) -> Any:
    return tuple(None if a is None else np.array(a) for a in batch)


def same(a: list[Any], b: list[Any]) -> bool:
    """The same batches (copied), field by field."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b, strict=True)):
        return False
    pairs = [(p, q) for x, y in zip(a, b, strict=True) for p, q in zip(x, y, strict=True)]
    return all((p is None and q is None) or np.array_equal(p, q) for p, q in pairs)


# --- set_weights keeps only the changes that can still take effect ---------------------------


@pytest.mark.parametrize("schedule", [(), ((30, {"a": 0.3, "b": 0.7}),)])
def test_set_weights_called_while_one_window_is_handed_out_leaves_one_change(
    parts: dict[str, str], schedule: tuple[Any, ...]
) -> None:
    """40 calls in one best-fit window left 40 changes at its end (the state grew by one at
    every call); now the last one alone, and the state and batches are those of a run that
    called once, with the last weights, at the last of those batches."""
    loader = Loader(Mixture(parts, WEIGHTS[0], schedule=schedule), workers=0, seed=0,
                    tokenizer="bytes", epochs=None)  # fmt: skip

    def batches(state: Any = None) -> Any:
        return loader.batches(32, 2, packing="bestfit", window=64, segments=True, state=state)

    with batches() as it:
        next(it)
        for k in range(40):
            it.set_weights(WEIGHTS[k % 3])
            next(it)
        state = it.state_dict()
        after = [copied(next(it)) for _ in range(30)]
    changes = state["documents"]["changes"]
    assert len(changes) == 1, [c["at"] for c in changes]
    assert changes[0]["at"] == 64 and changes[0]["weights"] == pytest.approx([0.5, 0.5])
    with batches() as it:
        for _ in range(40):
            next(it)
        it.set_weights(WEIGHTS[39 % 3])
        next(it)
        assert it.state_dict() == state
        assert same([copied(next(it)) for _ in range(30)], after)
    with batches(json.loads(json.dumps(state))) as it:
        assert same([copied(next(it)) for _ in range(30)], after)


def test_the_document_iterator_s_set_weights_between_two_documents_leaves_one_change(
    parts: dict[str, str],
) -> None:
    """``MixtureIterator.set_weights`` called 40 times between two documents left 40 changes
    in the state (``MixedStream.set_weights``); now the last, and the documents after it are
    those of one call with the last weights, live and resumed from the state."""
    names: list[list[str]] = []
    states = []
    for calls in (WEIGHTS * 13 + WEIGHTS[:1], WEIGHTS[:1]):  # 40 calls, or the last alone
        with Loader(Mixture(parts, WEIGHTS[1]), workers=0, seed=0, epochs=None).iter() as it:
            first = [next(it).name for _ in range(5)]
            for weights in calls:
                it.set_weights(weights)
            states.append(json.loads(json.dumps(it.state_dict())))
            names.append(first + [next(it).name for _ in range(40)])
    assert len(states[0]["changes"]) == 1 and states[0] == states[1]
    assert names[0] == names[1]
    loader = Loader(Mixture(parts, WEIGHTS[1]), workers=0, seed=0, epochs=None)
    with loader.iter(state=states[0]) as resumed:
        assert [next(resumed).name for _ in range(40)] == names[0][5:]


def test_set_weights_at_every_concat_batch_keeps_the_state_small(parts: dict[str, str]) -> None:
    """A call at every batch of rows shorter than a document: the calls inside one document
    all changed the weights from its end, each one more change in the state. Now at most two
    (the change the document in progress was chosen under, and the one after it), and a run
    resumed from any state, calling alike, hands out the uninterrupted run's batches."""
    loader = Loader(Mixture(parts, WEIGHTS[0]), workers=0, seed=0, tokenizer="bytes",
                    epochs=None)  # fmt: skip
    out: list[Any] = []
    states = []
    with loader.batches(16, 1, segments=True) as it:
        for k in range(60):
            it.set_weights(WEIGHTS[k % 3])
            out.append(copied(next(it)))
            states.append(it.state_dict())
            assert len(states[-1]["documents"]["changes"]) <= 2, (k, states[-1]["documents"])
    assert len({json.dumps(s["documents"]["changes"]) for s in states}) > 10  # (weights moved)
    sizes = [len(json.dumps(s)) for s in states]
    assert max(sizes) - min(sizes) < 400
    resumed = []
    with loader.batches(16, 1, segments=True, state=json.loads(json.dumps(states[29]))) as it:
        for k in range(30, 60):
            it.set_weights(WEIGHTS[k % 3])
            resumed.append(copied(next(it)))
        assert it.state_dict() == states[-1]
    assert same(resumed, out[30:])


# --- the datasets' state_dict() is where the next pass starts, at any moment -----------------

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext.torch import (  # noqa: E402
    OpenWebTextDataset,
    PackedBatchDataset,
    reshard_loader_states,
)


def dataset_of(kind: str, corpus: Any) -> Any:
    if kind == "documents":
        return OpenWebTextDataset(corpus, seed=0, workers=0, epochs=1)
    return PackedBatchDataset(corpus, 32, 2, tokenizer="bytes", seed=0, workers=0, epochs=1,
                              packing="bestfit", window=16, segments=True)  # fmt: skip


def item(x: Any) -> Any:
    if isinstance(x, dict):
        return tuple(v.numpy().tobytes() for v in x.values())
    return (x.source, x.name)


def resharded(kind: str, corpus: Any, num_workers: int, taken: int = 25) -> list[Any]:
    """The dataset states of ``num_workers`` DataLoader workers of one rank (one for 0) that
    go on from a run of one share that handed out ``taken`` items."""
    old = dataset_of(kind, corpus)
    running = iter(old)
    for _ in range(taken):
        next(running)
    state = json.loads(json.dumps(old.state_dict()))
    (shares,) = reshard_loader_states([{"dataset_state": state}], 1, num_workers)
    return shares


@pytest.mark.parametrize("kind", ["documents", "packed"])
@pytest.mark.parametrize("mixed", [False, True])
def test_state_dict_after_load_resharded_is_where_the_share_starts(
    parts: dict[str, str], kind: str, mixed: bool
) -> None:
    """It was ``{}``: a checkpoint taken then, loaded back, started the epoch again (the old
    ranks' items handed out twice). At every moment after (mid-pass, at the end) the state
    goes on exactly too."""
    corpus = Mixture(parts, WEIGHTS[1]) if mixed else parts["a"]
    shares = resharded(kind, corpus, 0)
    dataset = dataset_of(kind, corpus)
    dataset.load_resharded(shares)
    saved = json.loads(json.dumps(dataset.state_dict()))
    assert saved == shares[0]
    rest = [item(x) for x in dataset]
    assert rest and dataset.state_dict() != saved  # (the end: the pass ran out)
    again = dataset_of(kind, corpus)
    again.load_state_dict(saved)
    assert again.state_dict() == saved
    running = iter(again)
    head = [item(next(running)) for _ in range(5)]
    middle = json.loads(json.dumps(again.state_dict()))
    assert head + [item(x) for x in running] == rest
    ended = again.state_dict()
    onward = dataset_of(kind, corpus)
    onward.load_state_dict(middle)
    assert [item(x) for x in onward] == rest[5:]
    last = dataset_of(kind, corpus)
    last.load_state_dict(ended)
    assert [item(x) for x in last] == []


@pytest.mark.parametrize("kind", ["documents", "packed"])
def test_a_state_loaded_after_load_resharded_is_where_the_next_pass_starts(
    parts: dict[str, str], kind: str
) -> None:
    """A loaded state was its ``state_dict()``, but the next pass took the resharded share
    loaded before it: the checkpoint was ignored and the share's items came again."""
    corpus = parts["a"]
    shares = resharded(kind, corpus, 0)
    first = dataset_of(kind, corpus)
    first.load_resharded(shares)
    running = iter(first)
    for _ in range(7):
        next(running)
    checkpoint = json.loads(json.dumps(first.state_dict()))
    rest = [item(x) for x in running]
    restarted = dataset_of(kind, corpus)
    restarted.load_resharded(shares)  # (a script that reshards at every start)
    restarted.load_state_dict(checkpoint)  # (then loads its checkpoint)
    assert restarted.state_dict() == checkpoint
    assert [item(x) for x in restarted] == rest
    # The other way round: the share loaded last is where the pass starts.
    later = dataset_of(kind, corpus)
    later.load_state_dict(checkpoint)
    later.load_resharded(shares)
    assert later.state_dict() == shares[0]
    assert len([item(x) for x in later]) == len(rest) + 7


@pytest.mark.waits_on_workers
def test_a_checkpoint_of_resharded_workers_resumes_under_stateful_dataloader(
    parts: dict[str, str],
) -> None:
    """Two DataLoader workers resharded, a checkpoint after a few batches, and a restart that
    reshards again before it loads the checkpoint: the workers took their shares again."""
    corpus = parts["a"]
    shares = resharded("packed", corpus, 2)

    def loader() -> Any:
        dataset = dataset_of("packed", corpus)
        dataset.load_resharded(shares)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=2)

    first = loader()
    running = iter(first)
    for _ in range(5):
        next(running)
    checkpoint = first.state_dict()
    rest = [item(x) for x in running]
    restarted = loader()
    restarted.load_state_dict(checkpoint)
    assert [item(x) for x in restarted] == rest
