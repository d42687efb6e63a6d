"""Resume at its edges (issue 14): refusal for every option that shapes the stream, and a
finished state resumed with more epochs."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, StateError
from openwebtext.options import SHAPING, Options

# Options that may change between runs without changing which documents follow, and why.
# Every other field of Options must be refused on resume: a key dropped from state.SHAPING
# makes its case below fail.
NOT_SHAPING = {
    "workers": "the order never depends on the worker count",
    "prefetch": "read-ahead only",
    "timeout": "hang detection only",
    "epoch": "the state carries its own epoch",
    "epochs": "how far to go, not what comes next (see the finished-state tests)",
    "take": "where to stop",
    "on_error": "what to do with bad data; the clean stream is the same",
    "max_errors": "what to do with bad data",
    "max_member_bytes": "a guard against bombs; a member over it is an error, never reordered",
    "tokenizer": "checked apart: the state carries the vocabulary's fingerprint",
}

# The base run evens out two ranks, so that every option has a say.
BASE: dict[str, Any] = {"workers": 0, "world_size": 2, "rank": 0, "split": "all"}

# Another value for each shaping option.
OTHER: dict[str, tuple[str, Any]] = {
    "shuffle": ("shuffle", False),
    "seed": ("seed", 1),
    "shuffle_buffer": ("shuffle_buffer", 100),
    "rank": ("rank", 1),
    "world_size": ("world_size", 3),
    "even": ("even", "pad"),
    "split": ("split", "train"),
    "val_fraction": ("val_fraction", 0.5),
    "val_seed": ("val_seed", 1),
    "max_document_bytes": ("max_document_bytes", 1 << 20),
    "decode_errors": ("decode_errors", "replace"),
}


@pytest.fixture(scope="module")
def corpus(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ignore = shutil.ignore_patterns(".owt-counts-*")  # counted here, on first even use
    return Path(
        shutil.copytree(small_corpus, tmp_path_factory.mktemp("edges") / "c", ignore=ignore)
    )


def state_after(loader: Loader, n: int) -> dict[str, Any]:
    with loader.iter() as it:
        for _ in zip(range(n), it, strict=False):
            pass
        return json.loads(json.dumps(it.state_dict()))


def test_every_option_is_shaping_or_says_why_not() -> None:
    fields = {f.name for f in dataclasses.fields(Options)}
    shaping = fields - set(NOT_SHAPING)
    assert set(OTHER) == shaping, "give the new option a value in OTHER, or a reason in NOT_SHAPING"
    assert set(SHAPING) <= set(OTHER)


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("key", sorted(OTHER))
def test_resume_with_another_value_of_a_shaping_option_is_refused(corpus: Path, key: str) -> None:
    state = state_after(Loader(corpus, **BASE), 5)
    Loader(corpus, **BASE).iter(state=state).close()  # the same options resume
    option, value = OTHER[key]
    with pytest.raises(StateError, match=key):
        Loader(corpus, **{**BASE, option: value}).iter(state=state).close()


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("workers", [0, 2])
def test_a_finished_document_state_resumes_with_more_epochs(
    small_corpus: Path, workers: int
) -> None:
    one = Loader(small_corpus, workers=workers, seed=3, epochs=1)
    with one.iter() as it:
        first = [d.name for d in it]
        state = json.loads(json.dumps(it.state_dict()))
    two = one.replace(epochs=2)
    whole = [d.name for d in two]
    with two.iter(state=state) as it:
        rest = [d.name for d in it]
    assert len(whole) == 2 * len(first) == 240
    assert first + rest == whole


@pytest.mark.waits_on_workers
def test_a_finished_batches_state_resumes_with_more_epochs(small_corpus: Path) -> None:
    shape = {"seq_len": 32, "batch_size": 3}
    one = Loader(small_corpus, workers=0, seed=3, epochs=1, tokenizer="bytes")
    with one.batches(**shape) as batches:
        first = list(batches)
        state = json.loads(json.dumps(batches.state_dict()))
    two = one.replace(epochs=2)
    with two.batches(**shape) as batches:
        whole = list(batches)
    with two.batches(**shape, state=state) as batches:
        rest = list(batches)
    assert len(whole) > len(first) > 0
    assert len(first) + len(rest) == len(whole)
    for got, want in zip(first + rest, whole, strict=True):
        np.testing.assert_array_equal(got, want)
