"""Hugging Face ``datasets``: ``iterable_dataset``'s order, shards, options and resume.

Every test but the missing-extra one needs ``datasets`` and skips without it; those that
run a DataLoader also need torch (torchdata for ``StatefulDataLoader``).
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Document, DocumentIterator, Loader, Options
from openwebtext.hf import iterable_dataset, shard_options

needs_datasets = pytest.mark.skipif(
    importlib.util.find_spec("datasets") is None, reason="needs the hf extra (datasets)"
)


def names(examples: Iterable[dict[str, Any]]) -> list[str]:
    return [example["name"] for example in examples]


def loader_names(corpus: Path, **options: Any) -> list[str]:
    return [doc.name for doc in Loader(corpus, **{"workers": 0, **options})]


def chained(sequences: Iterable[list[str]]) -> list[str]:
    return list(itertools.chain.from_iterable(sequences))


def round_robin(*sequences: list[str]) -> list[str]:
    """What a DataLoader hands out of its workers' sequences (in order, one at a time)."""
    turns = itertools.zip_longest(*sequences)
    return [name for turn in turns for name in turn if name is not None]


@needs_datasets
def test_one_shard_is_the_loaders_order_field_for_field(indexed: Path) -> None:
    cases = ({"seed": 0}, {"seed": 5, "shuffle_buffer": 30, "workers": 0}, {"shuffle": False})
    for options in cases:
        expected = list(Loader(indexed, **options))
        dataset = iterable_dataset(indexed, **options)
        assert dataset.n_shards == 1
        got = [Document(**example) for example in dataset]
        assert got == expected, options


@needs_datasets
def test_a_corpus_s_rows_collate_into_torch_batches(indexed: Path) -> None:
    """A corpus's rows had a ``source`` column of None (the field of a mixture's part), which
    torch's default collate refuses: a DataLoader over the dataset failed at its first batch."""
    torch = pytest.importorskip("torch")
    dataset = iterable_dataset(indexed, workers=0)
    assert "source" not in next(iter(dataset))
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=4)))
    assert len(batch["name"]) == 4 and batch["document_index"].shape == (4,)


@needs_datasets
def test_seeds_give_their_own_order_and_the_same_seed_the_same(indexed: Path) -> None:
    first = names(iterable_dataset(indexed, seed=1, workers=0, num_shards=2))
    assert names(iterable_dataset(indexed, seed=1, workers=0, num_shards=2)) == first
    other = names(iterable_dataset(indexed, seed=2, workers=0, num_shards=2))
    assert other != first and sorted(other) == sorted(first)


@needs_datasets
@pytest.mark.waits_on_workers
def test_dataloader_workers_read_the_epoch_exactly_once(
    indexed: Path, small_docs: dict[str, str]
) -> None:
    torch = pytest.importorskip("torch")
    dataset = iterable_dataset(indexed, seed=4, shuffle_buffer=30, num_shards=2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    got = names(loader)
    assert Counter(got) == Counter(list(small_docs))  # every document, each once
    # Worker i reads its shard, i.e. rank i of 2 of the loader, in that rank's order.
    shards = [
        loader_names(indexed, seed=4, shuffle_buffer=30, rank=i, world_size=2, even=None)
        for i in range(2)
    ]
    assert all(shards) and got == round_robin(*shards)


@needs_datasets
def test_split_dataset_by_node_gives_each_node_its_shards(indexed: Path) -> None:
    """Node r of 2 gets shards r and r + 2 of 4: Loader shares r and r + 2 of world 4."""
    from datasets.distributed import split_dataset_by_node

    whole = iterable_dataset(indexed, seed=6, workers=0, num_shards=4)
    seen: list[str] = []
    for rank in range(2):
        node = names(split_dataset_by_node(whole, rank=rank, world_size=2))
        shares = [
            name
            for share in (rank, rank + 2)
            for name in loader_names(indexed, seed=6, rank=share, world_size=4, even=None)
        ]
        assert sorted(node) == sorted(shares)
        seen += node
    assert sorted(seen) == sorted(loader_names(indexed, seed=6))


@needs_datasets
def test_options_pass_through(indexed: Path) -> None:
    split = {"seed": 2, "split": "val", "val_fraction": 0.2, "val_seed": 7, "workers": 0}
    val = names(iterable_dataset(indexed, **split))
    assert val and val == loader_names(indexed, **split)
    train = names(iterable_dataset(indexed, **{**split, "split": "train"}))
    assert not set(train) & set(val) and len(train) + len(val) == 120
    # Ranks: even by default with world_size > 1 (the indexed copy has its counts).
    ranked = {"seed": 2, "rank": 1, "world_size": 2, "workers": 0}
    assert names(iterable_dataset(indexed, **ranked)) == loader_names(indexed, **ranked)
    # Shards of a rank are that rank's documents, split further.
    plain = {**ranked, "even": None}
    shards = names(iterable_dataset(indexed, num_shards=3, **plain))
    assert sorted(shards) == sorted(loader_names(indexed, **plain))
    options = Options(seed=2, tokenizer="bytes", epochs=2, workers=0)
    assert Counter(names(iterable_dataset(indexed, options, num_shards=2))) == Counter(
        loader_names(indexed, seed=2, epochs=2)
    )


@needs_datasets
@pytest.mark.waits_on_workers
def test_even_shards_are_counted_once_in_the_main_process(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    from openwebtext.stream import counts

    corpus = shutil.copytree(small_corpus, tmp_path / "corpus")  # no counts file yet
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    dataset = iterable_dataset(corpus, seed=1, world_size=2, num_shards=2, workers=1)

    def counted_again(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the documents were counted again after the dataset was built")

    # Forked DataLoader workers inherit the patch: a worker that counts fails the iteration.
    monkeypatch.setattr(counts, "count_documents", counted_again)
    got = names(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2))
    # even across the 2 x 2 shares (drop): every shard yields the smallest share's count
    shares = [
        loader_names(corpus, seed=1, rank=r, world_size=4, even=None, workers=0) for r in range(4)
    ]
    assert len(got) == 2 * min(len(share) for share in shares) > 0


def test_shard_options_nest_under_the_rank() -> None:
    options = Options(seed=3, rank=1, world_size=2)
    assert shard_options(options, 0, 1) == options
    second = shard_options(options, 1, 3)  # the 2nd of 3 intervals cut from rank 1's
    assert (second.rank, second.world_size, second.even) == (4, 6, "drop")
    assert shard_options(Options(), 1, 2).even is None  # one training rank: not evened out
    with pytest.raises(ValueError, match=r"shard must be an int in 0\.\.2"):
        shard_options(options, 3, 3)


@needs_datasets
def test_take_is_the_datasets_whatever_its_shards(indexed: Path) -> None:
    whole = [example["name"] for example in iterable_dataset(indexed, seed=2, num_shards=3)]
    for take in (0, 1, 4, 7):  # (shards read one after another here: each its own first)
        shards = iterable_dataset(indexed, seed=2, num_shards=3, take=take)
        got = [example["name"] for example in shards]
        assert len(got) == take and set(got) <= set(whole), take
    options = Options(take=7)
    assert [shard_options(options, k, 3).take for k in range(3)] == [3, 2, 2]
    assert shard_options(Options(), 1, 3).take is None


@needs_datasets
def test_tokens_are_the_loaders_arrays(indexed: Path) -> None:
    expected = list(Loader(indexed, seed=1, tokenizer="bytes", workers=0))
    got = list(iterable_dataset(indexed, seed=1, tokenizer="bytes", workers=0))
    assert [e["name"] for e in got] == [d.name for d in expected]
    assert "text" not in got[0]
    for example, doc in zip(got, expected, strict=True):
        assert isinstance(example["tokens"], np.ndarray)
        assert example["tokens"].dtype == doc.tokens.dtype
        assert np.array_equal(example["tokens"], doc.tokens)
    torch = pytest.importorskip("torch")
    formatted = iterable_dataset(indexed, seed=1, tokenizer="bytes").with_format("torch")
    first = next(iter(formatted))["tokens"]
    assert isinstance(first, torch.Tensor) and first.tolist() == expected[0].tokens.tolist()


@needs_datasets
def test_num_shards_must_be_a_positive_int(indexed: Path) -> None:
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="num_shards must be an int >= 1"):
            iterable_dataset(indexed, num_shards=bad)  # type: ignore[arg-type]


@needs_datasets
def test_set_epoch_of_datasets_reorders_the_shards_only(indexed: Path) -> None:
    dataset = iterable_dataset(indexed, seed=3, workers=0, num_shards=3)
    shards = [
        loader_names(indexed, seed=3, workers=0, rank=s, world_size=3, even=None) for s in range(3)
    ]
    assert names(dataset) == chained(shards)
    orders = set()
    for epoch in range(1, 8):
        dataset.set_epoch(epoch)
        got = names(dataset)
        orders.add(tuple(got))
        assert any(got == chained(p) for p in itertools.permutations(shards))
    assert len(orders) > 1  # some epoch reordered the shards; none reordered a shard


def counting(read: list[str]) -> Any:
    """``DocumentIterator.__iter__`` that also notes every document it hands out."""
    plain = DocumentIterator.__iter__

    def documents(self: DocumentIterator) -> Iterator[Any]:
        for doc in plain(self):
            read.append(doc.name)
            yield doc

    return documents


@needs_datasets
def test_datasets_resume_is_exact_by_reading_the_shard_again(
    indexed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = names(iterable_dataset(indexed, seed=8, workers=0, num_shards=2))
    first_shard = len(loader_names(indexed, seed=8, rank=0, world_size=2, even=None))
    for stop in (7, first_shard + 9):  # inside the first shard, inside the second
        dataset = iterable_dataset(indexed, seed=8, workers=0, num_shards=2)
        running = iter(dataset)
        head = [next(running)["name"] for _ in range(stop)]
        state = dataset.state_dict()
        resumed = iterable_dataset(indexed, seed=8, workers=0, num_shards=2)
        resumed.load_state_dict(state)
        read: list[str] = []
        with monkeypatch.context() as patch:
            patch.setattr(DocumentIterator, "__iter__", counting(read))
            rest = names(resumed)
        assert head + rest == full  # exact, not from the start nor from a shard boundary
        # ... by reading again the documents of the shard before the state.
        in_shard = stop if stop < first_shard else stop - first_shard
        assert len(read) == len(rest) + in_shard


@needs_datasets
@pytest.mark.waits_on_workers
def test_stateful_dataloader_resumes_datasets_state_exactly(indexed: Path) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader() -> Any:
        dataset = iterable_dataset(indexed, seed=9, shuffle_buffer=30, num_shards=2)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=2)

    full = names(loader())
    first = loader()
    running = iter(first)
    head = [next(running)["name"] for _ in range(37)]
    state = first.state_dict()
    del running
    again = loader()
    again.load_state_dict(state)
    assert head + names(again) == full and len(full) == 120


MISSING = textwrap.dedent(
    """
    import sys
    sys.modules["datasets"] = None  # as if the hf extra were not installed
    import openwebtext.hf
    try:
        openwebtext.hf.iterable_dataset(sys.argv[1])
    except ImportError as exc:
        print(exc)
    else:
        print("no error")
    """
)


def test_without_datasets_import_works_and_the_call_says_what_to_install(
    small_corpus: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", MISSING, str(small_corpus)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pip install -e '.[hf]'" in proc.stdout, proc.stdout


def test_a_mixture_as_an_iterable_dataset(small_corpus: Path, tmp_path: Path) -> None:
    """Each shard is a rank of the mixture: every part's share in it, each row with its part;
    together the shards read web's epoch once (web ends each shard's run last)."""
    from openwebtext import Mixture
    from tables_support import sample_texts, write_jsonl

    web_corpus = shutil.copytree(small_corpus, tmp_path / "web")  # counted: a copy
    write_jsonl(tmp_path / "a.jsonl", sample_texts(30, seed=2))
    mixture = Mixture({"web": web_corpus, "js": tmp_path / "a.jsonl"})  # equal weights
    rows = list(iterable_dataset(mixture, num_shards=2, workers=0, seed=1, even=None))
    web = [r["name"] for r in rows if r["source"] == "web"]
    assert len(web) == len(set(web)) == 120
    counts = Counter(r["source"] for r in rows)  # each shard's run ends at web's last
    assert set(counts) == {"web", "js"} and abs(counts["js"] - 120) <= 2  # (equal weights)
    assert len({r["name"] for r in rows if r["source"] == "js"}) == 30
