"""Red team, session 29: a full disk while ``owt tokenize`` or ``owt merge`` writes is an error
naming the folder (it was a bare ``OSError``: "[Errno 28] No space left on device"), and the
run goes on from its progress once there is room."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare
from openwebtext.prepare.workdir import Part


def _full_after(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """Writes of parts fail once ``room`` bytes were written (by this process)."""
    real, written = Part.write, [0]

    def write(self: Part, data: Any) -> None:
        written[0] += len(data)
        if written[0] > room:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, data)

    monkeypatch.setattr(Part, "write", write)


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_a_full_disk_is_said_of_the_folder_and_the_run_goes_on(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(tokenizer="bytes", workers=0, split_rule=split)
    whole = prepare(corpus, tmp_path / "whole", options)
    with monkeypatch.context() as patched:
        _full_after(patched, 100_000)
        with pytest.raises(PrepareError, match=r"writing into .*/x: No space left on device \("):
            prepare(corpus, tmp_path / "x", options, checkpoint_seconds=0)
    again = prepare(corpus, tmp_path / "x", options)
    assert again.meta == whole.meta


def test_a_full_disk_in_a_merge_is_said_of_the_folder(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(tokenizer="bytes", workers=0)
    slices = [tmp_path / f"s{k}" for k in range(2)]
    for k, folder in enumerate(slices):
        prepare(corpus, folder, options, shard=(k, 2))
    with monkeypatch.context() as patched:
        _full_after(patched, 100_000)
        with pytest.raises(PrepareError, match=r"writing into .*/m: No space left on device"):
            merge(slices, tmp_path / "m")
    assert merge(slices, tmp_path / "m").meta == prepare(corpus, tmp_path / "w", options).meta
