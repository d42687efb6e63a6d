"""The reference API and the reference main.py, unchanged."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import openwebtext
from openwebtext import OpenWebTextLoader, shuffle, take
from support import child_pids

SEED_DIR = Path(__file__).resolve().parents[2] / "shared" / "seed"


def test_item_shape(small_corpus: Path, small_docs: dict[str, str]) -> None:
    subsets = sorted(small_corpus.glob("*.tar"))
    items = list(OpenWebTextLoader(subsets, num_workers=2, random_state=1))
    assert len(items) == len(small_docs)
    (i, j), (part_name, entry_name), text = items[0]
    assert isinstance(i, int) and isinstance(j, int)
    assert part_name.startswith("urlsf_subset") and part_name.endswith("_data.xz")
    assert "/" not in part_name
    assert text == small_docs[entry_name]
    assert {item[1][1]: item[2] for item in items} == small_docs
    # Within a member, documents keep their order (the reference's caller shuffles).
    first_member = [item for item in items if item[1][0] == part_name]
    assert [item[0][1] for item in first_member] == list(range(20))


def test_random_state_seed_forms(small_corpus: Path) -> None:
    subsets = sorted(small_corpus.glob("*.tar"))

    def order(random_state: object) -> list[str]:
        return [it[1][1] for it in OpenWebTextLoader(subsets, 3, random_state=random_state)]

    assert order(5) == order(5)
    assert order(np.random.RandomState(5)) == order(np.random.RandomState(5))
    assert order(None) == order(None)  # unseeded runs are reproducible too
    assert order(5) != order(6)
    with pytest.raises(TypeError, match="random_state"):
        OpenWebTextLoader(subsets, random_state="five")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefetch"):
        OpenWebTextLoader(subsets, prefetch=1)


def test_more_workers_than_subsets(small_corpus: Path) -> None:
    subsets = sorted(small_corpus.glob("*.tar"))
    assert len(list(OpenWebTextLoader(subsets, num_workers=20))) == 120
    assert child_pids() == []


def test_shuffle_and_take() -> None:
    stream = list(range(1000))
    out = list(shuffle(iter(stream), 64, random_state=3))
    assert sorted(out) == stream
    assert out != stream
    assert out == list(shuffle(iter(stream), 64, random_state=3))
    assert out != list(shuffle(iter(stream), 64, random_state=4))
    assert list(shuffle(range(5), 100, 0)) != [] and sorted(shuffle(range(5), 100, 0)) == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert list(take(iter(stream), 7)) == stream[:7]
    with pytest.raises(ValueError, match="buffer_size"):
        list(shuffle(stream, 0))


@pytest.mark.skipif(
    not (SEED_DIR / "main.py").exists(), reason="../shared/seed is not beside the repo"
)
def test_reference_main_runs_unchanged(small_corpus: Path, tmp_path: Path) -> None:
    shutil.copy(SEED_DIR / "main.py", tmp_path / "main.py")
    # (the package this test imported, whatever is installed: the tree under test)
    env = {**os.environ, "PYTHONPATH": str(Path(openwebtext.__file__).resolve().parents[1])}
    proc = subprocess.run(
        [sys.executable, "main.py", "-j", "3", str(small_corpus)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "load 2 parts" in proc.stdout
    assert "120/500000" in proc.stderr  # tqdm's last count: every document, then the end


def test_a_peek_and_a_zip_read_the_one_pass(small_corpus: Path) -> None:
    """The loader is its own iterator, as the reference's: a peek and ``zip(loader, loader)``
    read the one running pass (each ``iter()`` was a pass of its own before: the peek came
    again, zip paired a document with itself; red team, session 28 then a reference diff)."""
    with OpenWebTextLoader(str(small_corpus), num_workers=1) as loader:
        first = iter(loader)
        head = [next(first) for _ in range(3)]
        peeked = next(iter(loader))
        read = [*head, peeked, *first]
        assert len(read) == len({item[1] for item in read}) == 120
        assert list(zip(loader, loader, strict=True)) == []  # (the pass ended: nothing)
        pairs = list(zip(again := copy.copy(loader), again, strict=True))  # (another pass)
        assert len(pairs) == 60 and pairs[0][1] != pairs[0][0]
    assert list(iter(loader)) == []  # (closed: it never begins anew)


def test_close_stops_the_workers_of_the_pass(small_corpus: Path) -> None:
    """``close()`` (the ``with``'s exit) stops the running pass's workers (red team, session
    29: it stopped none); ``main.py``'s chain and another ``iter()`` read that one pass."""
    with OpenWebTextLoader(str(small_corpus), num_workers=2) as loader:
        samples = take(shuffle(iter(loader), 16), 500_000)  # main.py's chain
        other = iter(loader)
        next(samples), next(other)
        assert other is loader and len(child_pids()) == 2
    assert child_pids() == []
    assert sum(1 for _ in samples) <= 16  # (the shuffle's buffer)
    with pytest.raises(StopIteration):
        next(other)


@pytest.mark.parametrize(
    ("subsets", "prefetch", "error", "said"),
    [(b"/data", 2048, TypeError, "not bytes"), (None, 2048, TypeError, "not NoneType"),
     (".", float("nan"), ValueError, "not nan"), (".", None, ValueError, "not None")],
)  # fmt: skip
def test_arguments_the_reference_would_misread_are_refused(
    subsets: object, prefetch: object, error: type[Exception], said: str
) -> None:
    """bytes were read as a list of ints, None failed in ``list()``, a NaN prefetch was taken."""
    with pytest.raises(error, match=said):
        OpenWebTextLoader(subsets, prefetch=prefetch)  # type: ignore[arg-type]
