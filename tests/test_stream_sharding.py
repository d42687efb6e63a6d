"""Ranks are disjoint and cover the corpus; even sharding gives equal counts; the val split."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openwebtext import Corpus, CorpusError, Loader
from openwebtext.plan import in_validation, plan
from openwebtext.stream import count_documents
from resumable import check_save_load


def test_plan_golden() -> None:
    # Changing this changes every seeded stream and breaks every saved state.
    assert plan(10, shuffle=True, seed=0, epoch=0) == [3, 2, 1, 8, 6, 0, 7, 4, 5, 9]
    assert plan(10, shuffle=True, seed=0, epoch=0, rank=1, world_size=3) == [2, 6, 4]


@pytest.mark.parametrize("world_size", [1, 2, 4, 7])
def test_uneven_ranks_are_disjoint_and_cover(
    small_corpus: Path, small_docs: dict[str, str], world_size: int
) -> None:
    seen: list[str] = []
    for rank in range(world_size):
        loader = Loader(
            small_corpus, workers=2, seed=5, rank=rank, world_size=world_size, even=False
        )
        seen += [d.name for d in loader]
    assert sorted(seen) == sorted(small_docs)


def test_even_counts_on_first_use_and_caches_them(
    tmp_path: Path, small_corpus: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """No manual `owt index`: the first even run counts (no bar when not interactive)."""
    ignore = shutil.ignore_patterns(".owt-counts-*")  # other tests' even runs count beside it
    path = Path(shutil.copytree(small_corpus, tmp_path / "c", ignore=ignore))
    assert Corpus.open(path).counts is None
    ranks = [[d.name for d in Loader(path, workers=2, rank=r, world_size=4)] for r in range(4)]
    assert len({len(r) for r in ranks}) == 1
    assert len({n for r in ranks for n in r}) == sum(map(len, ranks))  # drop: no repeat
    counts = Corpus.open(path).counts
    assert counts is not None and counts.documents == (20,) * 6
    assert capfd.readouterr().err == ""


def test_even_counts_go_to_the_cache_folder_when_the_corpus_folder_is_read_only(
    tmp_path: Path, small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    path = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    path.chmod(0o555)
    try:
        assert len(list(Loader(path, workers=0, rank=0, world_size=2))) == 60
        assert list((tmp_path / "cache" / "counts").iterdir())
    finally:
        path.chmod(0o755)


def test_more_ranks_than_members(indexed: Path) -> None:
    # drop: the smallest shard is empty, so every rank yields nothing (equal counts).
    assert [len(list(Loader(indexed, rank=r, world_size=8))) for r in range(8)] == [0] * 8
    with pytest.raises(CorpusError, match="rank 7 has no member to read"):
        list(Loader(indexed, rank=7, world_size=8, even_rule="pad"))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    world_size=st.integers(2, 6),
    rule=st.sampled_from(["drop", "pad"]),
    epoch=st.integers(0, 3),
    split=st.sampled_from(["all", "train"]),
)
def test_even_ranks_yield_equal_counts(
    indexed: Path, small_names: tuple[str, ...], world_size: int, rule: str, epoch: int, split: str
) -> None:
    per_rank = []
    for rank in range(world_size):
        loader = Loader(
            indexed,
            workers=1,
            seed=5,
            rank=rank,
            world_size=world_size,
            even_rule=rule,
            epoch=epoch,
            split=split,
        )
        per_rank.append([d.name for d in loader])
    counts = {len(names) for names in per_rank}
    assert len(counts) == 1
    flat = [n for names in per_rank for n in names]
    if rule == "drop":
        assert len(set(flat)) == len(flat)  # disjoint: nothing is repeated
    else:
        assert set(flat) == {
            n for n in small_names if split == "all" or not in_validation(n, 0.0005, 2357)
        }


def test_pad_wraps_to_the_start_of_the_rank_s_own_shard(indexed: Path) -> None:
    # 6 units of 20 over 4 ranks: shards of 2, 2, 1, 1 units -> pad to 40 documents.
    rank3 = [
        d.name
        for d in Loader(indexed, seed=5, rank=3, world_size=4, even_rule="pad", shuffle_buffer=0)
    ]
    assert len(rank3) == 40
    assert rank3[:20] == rank3[20:]


def test_validation_split_is_disjoint_and_complete(
    small_corpus: Path, small_docs: dict[str, str]
) -> None:
    train = [d.name for d in Loader(small_corpus, split="train", val_fraction=0.2, val_seed=7)]
    val = [d.name for d in Loader(small_corpus, split="val", val_fraction=0.2, val_seed=7)]
    assert not set(train) & set(val)
    assert sorted(train + val) == sorted(small_docs)
    assert 10 <= len(val) <= 40  # 20% of 120, by a hash
    assert val == [
        d.name for d in Loader(small_corpus, workers=3, split="val", val_fraction=0.2, val_seed=7)
    ]
    other = [d.name for d in Loader(small_corpus, split="val", val_fraction=0.2, val_seed=8)]
    assert set(other) != set(val)


def test_counts_file_is_found_again(indexed: Path) -> None:
    corpus = Corpus.open(indexed)
    assert corpus.counts is not None
    assert corpus.counts.documents == (20,) * 6
    assert (indexed / f".owt-counts-{corpus.fingerprint()}.json").exists()
    train = corpus.counts.per_unit("train", 0.2, 7)
    val = corpus.counts.per_unit("val", 0.2, 7)
    assert train is not None and val is not None
    assert [t + v for t, v in zip(train, val, strict=True)] == [20] * 6
    assert corpus.counts.per_unit("val", 0.3, 7) is None


def test_pad_resumes_exactly_across_the_wrap(tmp_path: Path) -> None:
    """A resumed padded rank must cut its passes where an uninterrupted one does."""
    from openwebtext.synth import write_corpus

    path = tmp_path / "c"
    write_corpus(path, subsets=1, members=13, docs=5, seed=1, workers=1, progress=False)
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=0))
    corpus = Corpus.open(path)  # now with its counts
    # 13 units over 3 ranks: rank 1 has 4 (20 documents), padded to 25 by wrapping around;
    # blocks of 3 units, so a block that starts before the wrap would reach past it.
    loader = Loader(corpus, workers=0, seed=2, rank=1, world_size=3, even_rule="pad",
                    shuffle_buffer=12)  # fmt: skip
    whole = check_save_load(
        lambda state, epochs: loader.replace(epochs=epochs).iter(state=state),
        key=lambda doc: doc.name,
        cuts=lambda _, whole: range(whole + 1),
    )
    assert len(whole) == 50  # 25 per epoch
