"""Shared fixtures: small generated corpora, an independent reference reader, process checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.counts import count_documents
from openwebtext.synth import write_corpus
from support import plain_read


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 subsets x 3 members x 20 documents (120), seed 0. Read-only: copy it to damage it."""
    out = tmp_path_factory.mktemp("corpus") / "small"
    write_corpus(out, subsets=2, members=3, docs=20, seed=0, workers=1)
    return out


@pytest.fixture(scope="session")
def small_docs(small_corpus: Path) -> dict[str, str]:
    return plain_read(sorted(small_corpus.glob("*.tar")))


@pytest.fixture(scope="session")
def small_names(small_docs: dict[str, str]) -> tuple[str, ...]:
    """The names of the small corpus's documents (short enough for Hypothesis to print)."""
    return tuple(small_docs)


@pytest.fixture(scope="session")
def indexed(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Path:
    """A copy of the small corpus with its counts file beside it (for even sharding), counted
    for nanoGPT's split and for ``val_fraction=0.2, val_seed=7``."""
    path = Path(shutil.copytree(small_corpus, tmp_path_factory.mktemp("indexed") / "c"))
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=2, splits=((0.0005, 2357), (0.2, 7))))
    return path
