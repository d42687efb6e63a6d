"""Either backend, the same files and states: the fingerprint and spec are the vocabulary's, a
token stream's state saved with one resumes with the other, and ``owt tokenize`` (the library's
``prepare``) goes on with one from where a run with the other stopped, to the same bytes."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader
from openwebtext.prepare import PrepareOptions, Progress, prepare
from openwebtext.tokenizer import load_tokenizer
from tokenizer_support import GPT2_FINGERPRINT, needs_splintr

pytestmark = needs_splintr  # with one backend installed there is nothing to interchange

FAST, REFERENCE = "gpt2", "gpt2@tiktoken"


def test_the_fingerprint_and_spec_are_the_vocabularys() -> None:
    fast, reference = load_tokenizer(FAST), load_tokenizer(REFERENCE)
    assert (fast.backend, reference.backend) == ("splintr", "tiktoken")
    assert fast.fingerprint == reference.fingerprint == GPT2_FINGERPRINT
    assert fast.spec == reference.spec == "gpt2"
    assert (fast.eot, fast.n_vocab, fast.dtype) == (reference.eot, reference.n_vocab, fast.dtype)


def _loader(corpus: Path, spec: str) -> Loader:
    return Loader(corpus, workers=0, seed=3, shuffle_buffer=40, tokenizer=spec)


def _named_ids(docs: Iterator[Any], count: int | None = None) -> list[tuple[str, list[int]]]:
    """(name, ids) of the next ``count`` token documents (None: all)."""
    return [(d.name, d.tokens.tolist()) for d in itertools.islice(docs, count)]


@pytest.mark.parametrize(("first", "second"), [(FAST, REFERENCE), (REFERENCE, FAST)])
def test_a_token_stream_state_resumes_with_the_other_backend(
    small_corpus: Path, first: str, second: str
) -> None:
    whole = _named_ids(iter(_loader(small_corpus, second)))
    with _loader(small_corpus, first).iter() as it:
        head = _named_ids(it, 50)
        state = it.state_dict()
    with _loader(small_corpus, second).iter() as it:
        assert _named_ids(it, 50) == head
        assert it.state_dict() == state  # the same state at the same point
    with _loader(small_corpus, second).iter(state=state) as it:
        rest = _named_ids(it)
    assert head + rest == whole


class _Stop(Exception):
    pass


def _stop_after_first_unit() -> Callable[[Progress], None]:
    def progress(event: Progress) -> None:
        if event.phase == "tokenize":
            raise _Stop

    return progress


def _bins(folder: Path) -> dict[str, str]:
    return {
        n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in ("train.bin", "val.bin")
    }


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_prepare_resumes_a_run_of_the_other_backend(
    small_corpus: Path, tmp_path: Path, split: str
) -> None:
    corpus = Corpus.open(small_corpus)

    def options(spec: str) -> PrepareOptions:
        return PrepareOptions(split_rule=split, tokenizer=spec, workers=0, val_fraction=0.1)  # type: ignore[arg-type]

    straight = prepare(corpus, tmp_path / "straight", options(REFERENCE))
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path / "mixed", options(FAST), progress=_stop_after_first_unit(),
                checkpoint_seconds=0)  # fmt: skip
    resumed = prepare(corpus, tmp_path / "mixed", options(REFERENCE))
    assert resumed.resumed
    assert _bins(tmp_path / "mixed") == _bins(tmp_path / "straight")
    assert resumed.meta["config"] == straight.meta["config"]
    assert resumed.meta["config"]["fingerprint"] == GPT2_FINGERPRINT
    assert resumed.meta["config"]["tokenizer"] == "gpt2"
    again = prepare(corpus, tmp_path / "mixed", options(FAST))  # the finished files are taken
    assert again.already
