"""Every door of the API that takes an int takes numpy's integers too, as the reference API
(``OpenWebTextLoader``, ``take``, ``shuffle``) and ``Options`` do, and holds them as Python
ints: the batches, documents, states and records are those of the same call with Python ints.
A red team found ``seq_len=np.int64(16)`` refused ("seq_len must be an int >= 1, not
np.int64(16)") by ``Loader.batches``, the schedules, ``reshard``, ``ahead``, ``to_device``,
the torch and HF doors and ``prepare``, while ``Options`` took it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, Options, Schedule, StateError, ahead, reshard
from openwebtext.plan import shard_count, shard_range, unit_groups
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.prepare.convert import write_format
from tables_support import sample_texts, write_jsonl


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("numpy-ints")
    a, b = folder / "a.jsonl", folder / "b.jsonl"
    write_jsonl(a, sample_texts(30, seed=5))
    write_jsonl(b, sample_texts(30, seed=6))
    return a, b


def _batches(path: Path, n: Callable[[int], Any], **given: Any) -> Any:
    """Three batches and the state after them, as JSON (a numpy int in it would not encode)."""
    with Loader(path, tokenizer="bytes", workers=0).batches(**given) as it:
        got = [next(it).tolist() for _ in range(3)]
        return got, json.dumps(it.state_dict())


def _documents(corpus: Any, n: Callable[[int], Any]) -> Any:
    with Loader(corpus, workers=0, seed=n(3)).iter() as it:
        got = [next(it).text for _ in range(5)]
        if isinstance(corpus, Mixture):
            it.set_weights({"a": n(1), "b": n(3)})
        got += [next(it).text for _ in range(5)]
        return got, json.dumps(it.state_dict())


def _prepared(tmp: Path, path: Path, n: Callable[[int], Any], **given: Any) -> str:
    out = tmp / f"run{len(list(tmp.iterdir()))}"
    options = PrepareOptions(tokenizer="bytes", workers=n(0), seed=n(1), take=given.pop("take",
                                                                                          None))
    prepare(Corpus.open(path), out, options, **given)
    return (out / "meta.json").read_text()


DOORS: dict[str, Callable[[tuple[Path, Path], Path, Callable[[int], Any]], Any]] = {
    "batches sizes": lambda p, t, n: _batches(p[0], n, seq_len=n(16), batch_size=n(2)),
    "best fit window and pad": lambda p, t, n: _batches(
        p[0], n, seq_len=n(16), batch_size=n(2), packing="bestfit", window=n(4), pad_id=n(0)),
    "a schedule's steps": lambda p, t, n: _batches(
        p[0], n, schedule=Schedule([(n(0), n(16), n(2)), (n(2), n(32), n(1))])),
    "a table of steps": lambda p, t, n: _batches(p[0], n, schedule=[(n(0), n(8), n(3))]),
    "a warm-up": lambda p, t, n: Schedule.warmup(
        n(16), n(64), tokens=n(256), batches=n(4), stages=n(3), multiple=n(8)).steps,
    "reshard": lambda p, t, n: json.dumps(reshard([json.loads(_documents(p[0], n)[1])], n(2))),
    "ahead": lambda p, t, n: next(ahead(Loader(p[0], tokenizer="bytes", workers=0).batches(
        16, 2), n(2))).tolist(),
    "a mixture's schedule and weights": lambda p, t, n: _documents(Mixture(
        {"a": str(p[0]), "b": str(p[1])}, {"a": n(1), "b": n(1)},
        schedule=[(n(4), {"a": n(2), "b": n(1)})]), n),
    "open_tokens": lambda p, t, n: Corpus.open_tokens(
        _token_file(t), unit_tokens=n(4), eot=n(0)).counts,
    "prepare's options": lambda p, t, n: _prepared(t, p[0], n, take=n(7)),
    "prepare's shard": lambda p, t, n: _prepared(t, p[0], n, shard=(n(0), n(2))),
    "prepare's slice": lambda p, t, n: _prepared(t, p[0], n, start=n(0), stop=n(1)),
    "the Ray doors' tasks and slices": lambda p, t, n: (
        unit_groups(5, n(2)), shard_count(5, n(2)), shard_range(10, n(1), n(3))),
}  # fmt: skip


def _token_file(tmp: Path) -> Path:
    path = tmp / "tokens.bin"
    np.array([5, 6, 0, 7, 0, 8, 9, 10, 0], dtype="<u2").tofile(path)
    return path


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_door_takes_numpy_integers_as_python_ints(
    parts: tuple[Path, Path], tmp_path: Path, door: str
) -> None:
    got = {}
    for n in (np.int64, int):
        (tmp_path / n.__name__).mkdir()
        got[n] = DOORS[door](parts, tmp_path / n.__name__, n)
    assert got[np.int64] == got[int]


def test_the_torch_doors_take_numpy_integers(parts: tuple[Path, Path]) -> None:
    pytest.importorskip("torch")
    from openwebtext.torch import PackedBatchDataset, reshard_loader_states, to_device

    def first(n: Callable[[int], Any]) -> Any:
        dataset = PackedBatchDataset(parts[0], seq_len=n(16), batch_size=n(2),
                                     tokenizer="bytes", workers=0)  # fmt: skip
        batch = next(iter(dataset)).tolist()
        return batch, json.dumps(dataset.state_dict())

    assert first(np.int64) == first(int)
    moved = to_device(Loader(parts[0], tokenizer="bytes", workers=0).batches(16, 2), "cpu",
                      depth=np.int64(2))  # fmt: skip
    assert next(moved).shape == (2, 17)
    moved.close()
    for n in (np.int64, int):  # (past its arguments: no state to reshard)
        with pytest.raises(StateError, match="no state"):
            reshard_loader_states([], n(2), n(0))


def test_the_hf_door_takes_numpy_integers(parts: tuple[Path, Path]) -> None:
    pytest.importorskip("datasets")
    from openwebtext.hf import iterable_dataset

    def texts(n: Callable[[int], Any]) -> list[str]:
        dataset = iterable_dataset(str(parts[0]), num_shards=n(2), workers=0, seed=n(1))
        return [row["text"] for row in dataset]

    assert texts(np.int64) == texts(int)


def test_convert_takes_a_numpy_shard_size(parts: tuple[Path, Path], tmp_path: Path) -> None:
    markers = []
    for n in (np.int64, int):
        out = tmp_path / n.__name__
        prepare(Corpus.open(parts[0]), out, PrepareOptions(tokenizer="bytes", workers=0))
        write_format(out, "llmc", shard_tokens=n(1000))
        markers.append(json.loads((out / "llmc.json").read_text()))
    assert markers[0] == markers[1] and markers[0]["source"]["shard_tokens"] == 1000


def test_prepare_refuses_a_slice_of_strings(parts: tuple[Path, Path], tmp_path: Path) -> None:
    """``start="0"`` was compared with ints, and said as positions ``[0, 1)`` not within
    ``[0, 1)``."""
    with pytest.raises(ValueError, match=r"unit positions \['0', 1\) are not ints"):
        prepare(Corpus.open(parts[0]), tmp_path / "o", PrepareOptions(tokenizer="bytes"),
                start="0", stop=1)  # type: ignore[arg-type]  # fmt: skip


def test_numpy_floats_are_held_as_floats(parts: tuple[Path, Path], tmp_path: Path) -> None:
    """``val_fraction=np.float64(0.2)`` (a float subclass, so taken) split by numpy's bools,
    which ``is`` told from True: train and val both held no document; its state, prepare's
    record and a counts file did not encode. ``timeout=np.int64(5)`` was refused."""
    def split(fraction: Any, which: str) -> tuple[list[str], str]:
        with Loader(parts[0], workers=0, split=which, val_fraction=fraction).iter() as it:
            texts = [d.text for d in it]
            return texts, json.dumps(it.state_dict())

    for which in ("train", "val"):
        assert split(np.float64(0.2), which) == split(0.2, which)
        assert split(0.2, which)[0]
    assert type(Options(timeout=np.int64(5)).timeout) is float
    assert type(PrepareOptions(val_fraction=np.float32(0.25)).val_fraction) is float
    out = tmp_path / "run"
    prepare(Corpus.open(parts[0]), out, PrepareOptions(tokenizer="bytes", workers=0,
                                                       val_fraction=np.float64(0.2)))  # fmt: skip
    assert json.loads((out / "meta.json").read_text())["config"]["val_fraction"] == 0.2


def test_the_packed_torch_dataset_takes_a_numpy_window(parts: tuple[Path, Path]) -> None:
    pytest.importorskip("torch")
    from openwebtext.torch import PackedBatchDataset

    def first(n: Callable[[int], Any]) -> Any:
        dataset = PackedBatchDataset(parts[0], seq_len=16, batch_size=2, tokenizer="bytes",
                                     workers=0, packing="bestfit", window=n(4),
                                     pad_id=n(0))  # fmt: skip
        return next(iter(dataset)).tolist(), json.dumps(dataset.state_dict())

    assert first(np.int64) == first(int)


@pytest.mark.parametrize("share", [None, {}, {"format": "openwebtext-state/2"}])
def test_load_resharded_refuses_what_is_not_a_state(parts: tuple[Path, Path], share: Any) -> None:
    """``load_resharded([None])`` was taken, and the next pass started the epoch again."""
    pytest.importorskip("torch")
    from openwebtext.torch import OpenWebTextDataset

    dataset = OpenWebTextDataset(parts[0], workers=0)
    with pytest.raises(StateError, match="resharded state 0: ") as caught:
        dataset.load_resharded([share])
    assert caught.value.field is not None and caught.value.field.startswith("[0]")
