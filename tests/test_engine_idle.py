"""Idle workers and the hang timeout, seen from the Loader (issue 14).

``timeout`` is how long a *busy* worker may stay silent. A consumer that pauses
(an evaluation pass, a checkpoint, a slow step) leaves workers with nothing to do,
or with results written and unread; neither is a hang, however long the pause.
A hang detector that counts idle time, or forgets when it last heard from a worker,
kills healthy workers after such a pause and reports "sent nothing".

Each test pauses the consumer for more than twice ``timeout`` at a point where the
workers have nothing queued, then checks that the whole stream still arrives, equal
to an uninterrupted run. (The pool's own idle tests live with the pool's tests.)
"""

from __future__ import annotations

import bz2
import random
import time
from pathlib import Path

import pytest

from openwebtext import Loader
from support import inner_tar, names, outer_tar

#: Short, so the pauses stay short; long enough that a loaded machine does not starve a
#: worker of the CPU for this long while it reads a 20-document member.
TIMEOUT = 1.0
#: Longer than twice TIMEOUT: a detector that counts the pause fires.
PAUSE = 2.2 * TIMEOUT

pytestmark = pytest.mark.waits_on_workers


#: Documents per member of ``slow_corpus``, and its members.
SLOW_DOCS, SLOW_MEMBERS = 25, 3


@pytest.fixture(scope="module")
def slow_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Members that take a worker ~0.1 s to read (bzip2, ~0.8 MB of text each).

    A worker handed one of them cannot answer before the consumer next looks at the
    clock, so a detector that counted the idle time before the task fires every time
    (with the small corpus's ~1 ms members the worker sometimes wins that race).
    """
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(3000)]
    members = []
    for m in range(SLOW_MEMBERS):
        docs = {
            f"slow-{m}-{k:02d}.txt": " ".join(rng.choices(words, k=5000)).encode()
            for k in range(SLOW_DOCS)
        }
        members.append((f"slow-{m}_data.bz2", bz2.compress(inner_tar(docs), 9)))
    return outer_tar(tmp_path_factory.mktemp("slow") / "slow.tar", members)


@pytest.mark.parametrize("workers", [1, 2])
def test_pause_at_an_epoch_boundary(small_corpus: Path, slow_corpus: Path, workers: int) -> None:
    """An evaluation pass between epochs: the workers sit idle (every unit of epoch 0 was
    delivered, none of epoch 1 sent yet) for longer than ``timeout``."""
    loader = Loader(
        slow_corpus, workers=workers, shuffle=False, epochs=2, prefetch=1, timeout=TIMEOUT
    )
    full = names(loader)
    per_epoch = SLOW_DOCS * SLOW_MEMBERS
    assert len(full) == 2 * per_epoch
    got: list[str] = []
    evaluated: list[str] = []
    with loader.iter() as it:
        for doc in it:
            got.append(doc.name)
            if len(got) == per_epoch:  # the last document of epoch 0
                assert it.state_dict()["position"]["epoch"] == 0
                start = time.monotonic()
                # The evaluation pass: another loader (no processes), then more waiting.
                evaluated = names(Loader(small_corpus, workers=0, take=10))
                time.sleep(max(0.0, PAUSE - (time.monotonic() - start)))
    assert got == full
    assert len(evaluated) == 10


@pytest.mark.parametrize("prefetch", [2, 3])
def test_pause_after_the_last_unit_was_dispatched(small_corpus: Path, prefetch: int) -> None:
    """Pause near the end of the only epoch: every unit was sent, and the workers have
    written their results, several each, which wait unread for longer than ``timeout``."""
    loader = Loader(
        small_corpus,
        workers=2,
        shuffle=False,
        shuffle_buffer=0,  # one unit (20 documents) per block: units are asked for one by one
        prefetch=prefetch,
        timeout=TIMEOUT,
    )
    full = names(loader)
    got: list[str] = []
    with loader.iter() as it:
        for doc in it:
            got.append(doc.name)
            # The first document of the third of six units: by now all six were sent
            # (two workers x ``prefetch``), and each worker has up to two results unread.
            if len(got) == 41:
                time.sleep(PAUSE)
    assert got == full


def test_pauses_everywhere_in_a_short_run(small_corpus: Path) -> None:
    """A consumer slower than ``timeout`` at every unit boundary, over two epochs."""
    loader = Loader(
        small_corpus,
        workers=2,
        seed=4,
        shuffle_buffer=0,
        prefetch=2,
        epochs=2,
        timeout=TIMEOUT / 2,
    )
    full = names(loader)
    got: list[str] = []
    for doc in loader:
        got.append(doc.name)
        if len(got) % 40 == 1:  # six pauses, each past the timeout
            time.sleep(1.2 * TIMEOUT)
    assert got == full
