"""A mark is a state of its own run only (session 37): ``state_dict(mark)`` of a mark another
iterator took, of another seed, another mixture or a mixture of other parts, made that
iterator's position into a state of this run's config (a resume then handed out another
run's documents), or failed inside ``zip``. A copy of one's own mark is still one's own."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture
from openwebtext.synth import write_corpus


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("other") / "b"
    write_corpus(out, subsets=1, members=2, docs=10, seed=1, workers=1)
    return out


def _loaders(kind: str, a: Path, b: Path) -> tuple[Loader, Loader]:
    both = {"a": 0.5, "b": 0.5}
    if kind == "seed":
        return Loader(a, seed=1, workers=0), Loader(a, seed=2, workers=0)
    if kind == "shuffle":
        return Loader(a, seed=1, workers=0), Loader(a, seed=1, workers=0, shuffle=False)
    if kind == "weights":
        return (Loader(Mixture({"a": a, "b": b}, both), workers=0),
                Loader(Mixture({"a": a, "b": b}, {"a": 0.25, "b": 0.75}), workers=0))  # fmt: skip
    return (Loader(Mixture({"a": a, "b": b}, both), workers=0),
            Loader(Mixture({"a": a}, {"a": 1.0}), workers=0))  # fmt: skip


@pytest.mark.parametrize("kind", ["seed", "shuffle", "weights", "parts"])
def test_a_mark_of_another_run_is_refused(kind: str, small_corpus: Path, other: Path) -> None:
    mine, theirs = _loaders(kind, small_corpus, other)
    with mine.iter() as docs, theirs.iter() as others:
        next(docs), next(others), next(others)
        own, state = docs.mark(), docs.state_dict()
        with pytest.raises(ValueError, match="mark is a mark\\(\\) of an iterator of another run"):
            docs.state_dict(others.mark())
        copied: Any = pickle.loads(pickle.dumps(own))
        assert docs.state_dict(copied) == docs.state_dict(own) == state
