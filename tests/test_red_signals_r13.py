"""A state asked for inside the iterator's own ``next`` on the same thread (session 36): a
signal handler that checkpoints (SLURM's preemption signal, a SIGTERM) lands there most of
the time, as does a callback run while a unit is read. A mixture's batches then hung for ever
(their lock held by the very thread waiting for it); a document iterator's state and concat
batches' waited 10 s for a ``next`` that could not end, then said "another thread". Each now
raises ``OwnNext`` at once, the run going on whole; ``ahead()``'s state is whole there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture, ahead
from openwebtext.engine import inline
from openwebtext.stream.turns import OwnNext
from openwebtext.synth import write_corpus

_BATCHES = {"concat": {}, "bestfit": {"packing": "bestfit", "window": 8}}


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Mixture:
    other = tmp_path_factory.mktemp("signals") / "b"
    write_corpus(other, subsets=1, members=2, docs=10, seed=1, workers=1)
    return Mixture({"a": small_corpus, "b": other}, {"a": 0.5, "b": 0.5})


def _open(kind: str, source: Any) -> Iterator[Any]:
    loader = Loader(source, workers=0, seed=3, tokenizer=None if kind == "docs" else "bytes")
    if kind == "docs":
        return loader.iter()
    return loader.batches(seq_len=32, batch_size=2, **_BATCHES[kind])


def _asked_inside(monkeypatch: pytest.MonkeyPatch, ask: Callable[[], object]) -> list[object]:
    """What ``ask()`` gave or raised, called as each unit is read (inside ``next``)."""
    said: list[object] = []
    read = inline.read_unit

    def reading(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            said.append(ask())
        except Exception as exc:  # (the handler's own: the run goes on)
            said.append(exc)
        assert time.monotonic() - start < 5, "waited for a next() that cannot end"
        return read(*args, **kwargs)

    monkeypatch.setattr(inline, "read_unit", reading)
    return said


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["docs", "concat", "bestfit"])
@pytest.mark.parametrize("mixed", [False, True], ids=["corpus", "mixture"])
@pytest.mark.parametrize("what", ["state_dict", "stats", "next", "close"])
def test_a_state_asked_inside_its_own_next_is_refused_at_once(
    small_corpus: Path, mixture: Mixture, monkeypatch: pytest.MonkeyPatch, kind: str,
    mixed: bool, what: str,
) -> None:  # fmt: skip
    source = mixture if mixed else small_corpus
    with _open(kind, source) as plain:
        expected = [_bytes(item) for item in plain]
    with _open(kind, source) as it:
        asks = {
            "state_dict": it.state_dict,
            "stats": lambda: it.stats,
            "next": lambda: next(it),
            "close": it.close,
        }  # (a close there ended batches after one, silently)
        said = _asked_inside(monkeypatch, asks[what])
        got = [_bytes(item) for item in it]
    assert got == expected  # (the run went on whole)
    # (a document iterator's next too: Python's "generator already executing" until session 40)
    assert said and all(isinstance(s, OwnNext) for s in said), said[:3]
    assert "own next()" in str(said[0])


def test_a_mixture_s_set_weights_and_a_close_inside_its_own_next_are_refused(
    mixture: Mixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open("docs", mixture) as it:
        said = _asked_inside(monkeypatch, lambda: it.set_weights({"a": 0.1, "b": 0.9}))
        next(it)
        assert said and isinstance(said[0], OwnNext)
    with _open("docs", mixture) as it:
        said = _asked_inside(monkeypatch, it.close)
        next(it)
        assert said and isinstance(said[0], OwnNext)


@pytest.mark.timeout(60)
def test_ahead_s_state_inside_its_next_is_the_last_batch_s(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ahead()`` keeps the state of the batch handed out last: a handler may ask for it."""
    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")
    with loader.batches(seq_len=32, batch_size=2) as plain:
        expected = [_bytes(b) for b in plain]
    with ahead(loader.batches(seq_len=32, batch_size=2), depth=2) as stage:
        first = [_bytes(next(stage)) for _ in range(3)]
        state = stage.state_dict()
    with loader.batches(seq_len=32, batch_size=2, state=state) as again:
        assert first + [_bytes(b) for b in again] == expected


def _bytes(item: Any) -> bytes | str:
    return item.name if hasattr(item, "name") else item.tobytes()
