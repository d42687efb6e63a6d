"""Ranks are disjoint and cover the corpus; even sharding gives equal counts; the val split."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openwebtext import Corpus, Loader
from openwebtext.plan import in_validation, plan
from openwebtext.stream import count_documents
from resumable import check_save_load


def test_plan_golden() -> None:
    # Changing this changes every seeded stream and breaks every saved state.
    assert plan(10, shuffle=True, seed=0, epoch=0) == [3, 2, 1, 8, 6, 0, 7, 4, 5, 9]
    assert plan(10, shuffle=True, seed=0, epoch=0, rank=1, world_size=3) == [2, 6, 4]


@pytest.mark.parametrize("world_size", [1, 2, 4, 7, 9])
def test_uneven_ranks_are_disjoint_and_cover(
    indexed: Path, small_docs: dict[str, str], world_size: int
) -> None:
    """Without even sharding, shares are cut at documents: each document once, and the
    shares' sizes differ by at most one (6 members of 20 over 9 ranks: 13 or 14 each)."""
    seen: list[str] = []
    sizes = []
    for rank in range(world_size):
        loader = Loader(indexed, workers=2, seed=5, rank=rank, world_size=world_size, even=None)
        names = [d.name for d in loader]
        sizes.append(len(names))
        seen += names
    assert sorted(seen) == sorted(small_docs)
    assert max(sizes) - min(sizes) <= 1


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


def test_more_ranks_than_members(indexed: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Shares are cut at documents: 8 ranks of 6 members each get 15 of the 120; more ranks
    than documents leave all of them out under drop (said, and counted on the last rank)
    and give each rank one under pad."""
    assert [len(list(Loader(indexed, rank=r, world_size=8))) for r in range(8)] == [15] * 8
    # 400 more loaders: in this process (workers=0), as the shares do not depend on workers.
    its = [Loader(indexed, rank=r, world_size=200, workers=0).iter() for r in range(200)]
    assert [len(list(it)) for it in its] == [0] * 200
    assert [it.stats.dropped_documents for it in its] == [0] * 199 + [120]
    assert "120 documents left out" in caplog.text
    padded = [[d.name for d in Loader(indexed, rank=r, world_size=200, even="pad", workers=0)]
              for r in range(200)]  # fmt: skip
    assert {len(names) for names in padded} == {1}
    assert len({n for names in padded for n in names}) == 120


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
            even=rule,
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


def test_pad_reads_into_the_next_share_and_counts_it(indexed: Path) -> None:
    """120 documents over 7 ranks: pad gives each 18 (ceil), every document at least once,
    126 - 120 = 6 read twice, each by the share that reaches into the next one's start."""
    its = [Loader(indexed, seed=5, rank=r, world_size=7, even="pad").iter() for r in range(7)]
    names = [[d.name for d in it] for it in its]
    assert {len(n) for n in names} == {18}
    assert len({n for ns in names for n in ns}) == 120
    assert sum(it.stats.repeated_documents for it in its) == 6


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


def test_pad_resumes_exactly_across_units_cut_at_both_ends(tmp_path: Path) -> None:
    """A resumed padded rank must cut its passes where an uninterrupted one does."""
    from openwebtext.synth import write_corpus

    path = tmp_path / "c"
    write_corpus(path, subsets=1, members=13, docs=5, seed=1, workers=1, progress=False)
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=0))
    corpus = Corpus.open(path)  # now with its counts
    # 13 units of 5 over 3 ranks: rank 1 takes documents 21..43 (22, reaching one into
    # rank 2's share), cut inside units at both ends; blocks of 3 units.
    loader = Loader(corpus, workers=0, seed=2, rank=1, world_size=3, even="pad",
                    shuffle_buffer=12)  # fmt: skip
    whole = check_save_load(
        lambda state, epochs: loader.replace(epochs=epochs).iter(state=state),
        key=lambda doc: doc.name,
        cuts=lambda _, whole: range(whole + 1),
    )
    assert len(whole) == 44  # 22 per epoch
