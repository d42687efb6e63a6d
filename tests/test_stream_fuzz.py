"""A seeded fuzz test: a damaged corpus ends in a clear error or counted skips, never a hang or
a silent loss. (Reliability, issue #5.)
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import (
    Corpus,
    CorpusError,
    CorruptMember,
)
from openwebtext.records import Unit
from support import (
    HANG_BOUND,
    Members,
    all_but,
    copy_corpus,
    run,
    where,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- fuzz -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine_units(small_corpus: Path) -> list[tuple[Any, ...]]:
    """The small corpus's index, undamaged."""
    return _unit_keys(Corpus.open(str(small_corpus)).units)


def _unit_keys(units: Iterable[Unit]) -> list[tuple[Any, ...]]:
    """What identifies each unit, wherever the corpus lies."""
    return [(os.path.basename(u.path), u.member, u.offset, u.size, u.kind) for u in units]


def _mangle(corpus: Path, rng: random.Random) -> str:
    """Damage one file of ``corpus`` at random; return what was done."""
    target = rng.choice(sorted(corpus.glob("*.tar")))
    data = bytearray(target.read_bytes())
    mode = rng.choices(["flip", "truncate", "flip+truncate", "zero-block"], [5, 2, 2, 1])[0]
    done = []
    if mode.startswith("flip"):
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            data[at] ^= rng.randrange(1, 256)
            done.append(at)
    if mode.endswith("truncate"):
        cut = rng.randrange(len(data))
        del data[cut:]
        done.append(-cut)
    if mode == "zero-block":
        at = rng.randrange(len(data))
        data[at : at + 512] = bytes(len(data[at : at + 512]))
        done.append(at)
    target.write_bytes(bytes(data))
    return f"{target.name} {mode} {done}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("seed", range(20))
def test_fuzz_damaged_corpus(
    seed: int,
    workers: int,
    tmp_path: Path,
    small_corpus: Path,
    pristine: Members,
    pristine_units: list[tuple[Any, ...]],
) -> None:
    """Random damage ends in documents or the library's errors; skip never loses silently.

    Every run ends within ``HANG_BOUND``; only ``CorpusError`` (data) errors appear, never
    a ``WorkerError`` (no process is harmed here) nor a foreign exception. Every delivered
    document is an original, byte-exact, once. When the outer tar headers survived (the
    index is unchanged), every missing document belongs to a member the run named: raise
    raises on it, skip counts it. (Damaged outer headers: see
    ``test_damaged_outer_header_is_not_a_silent_loss``.)
    """
    corpus = copy_corpus(small_corpus, tmp_path)
    what = _mangle(corpus, random.Random(f"owt-fuzz-{seed}"))
    originals = all_but(pristine)
    member_of = {name: key for key, docs in pristine.items() for name in docs}
    try:
        intact = _unit_keys(Corpus.open(str(corpus)).units) == pristine_units
    except CorpusError:
        intact = False
    outcomes = {}
    for policy in ("raise", "skip"):
        start = time.monotonic()
        outcome = outcomes[policy] = run(corpus, workers=workers, on_error=policy)
        assert time.monotonic() - start < HANG_BOUND, what
        assert all(originals.get(n) == t for n, t in outcome.docs.items()), what
        if outcome.error is not None:
            assert isinstance(outcome.error, CorpusError), f"{what}: {outcome.error!r}"
    skip, raised = outcomes["skip"], outcomes["raise"]
    if skip.at_open:
        assert raised.at_open and type(raised.error) is type(skip.error), what
        return
    assert skip.error is None and skip.stats is not None, what
    assert skip.stats.documents == len(skip.docs), what
    stats = skip.stats
    assert len(stats.skipped) == (
        stats.skipped_members + stats.skipped_files + stats.partial_members
    ), what
    assert not any(s.startswith(("worker ", "unexpected ")) for s in skip.stats.skipped), what
    if not intact:
        return
    lost = {member_of[name] for name in set(originals) - set(skip.docs)}
    named = {
        key
        for key in pristine
        if any(where(str(corpus / key[0]), key[1]) in s for s in skip.stats.skipped)
    }
    assert lost == named, what  # every loss counted, and nothing counted that was not lost
    if raised.error is None:
        assert raised.docs == originals and not lost, what
    else:
        assert isinstance(raised.error, CorruptMember), what
        key = (os.path.basename(raised.error.path or ""), raised.error.member or "")
        assert key in named, what
