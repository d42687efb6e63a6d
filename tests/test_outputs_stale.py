"""A run owns its output folder's token files: what an earlier run (or its format pass)
left there and this run does not write is removed, locally and behind a URL, so that a
trainer (and ``open_tokens``) never reads an old ``train.idx``, llm.c shard or ``.ds`` beside
the new ``train.bin``."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareOptions, outputs, prepare, write_format
from support import s3_objects

#: What a format pass adds to a run: none of it may outlive the run it was made from.
DERIVED = {"train.idx", "val.idx", "train.ds", "train.ds.index", "val.ds", "val.ds.index",
           "train_000000.bin", "val_000000.bin", "megatron.json", "llmc.json",
           "datatrove.json"}  # fmt: skip


def _opts(**overrides: object) -> PrepareOptions:
    base: dict[str, object] = {"tokenizer": "bytes", "workers": 0, "val_fraction": 0.2}
    return PrepareOptions(**{**base, **overrides})  # type: ignore[arg-type]


def _every_format(out: str | Path, corpus: Corpus) -> None:
    for fmt in ("megatron", "llmc", "datatrove"):
        write_format(out, fmt, corpus.storage, shard_tokens=20_000)


def test_a_new_run_removes_the_format_files_of_the_last(small_corpus: Path, tmp_path: Path) -> None:
    corpus = Corpus.open(small_corpus)
    prepare(corpus, tmp_path, _opts())
    _every_format(tmp_path, corpus)
    assert {p.name for p in tmp_path.iterdir()} >= DERIVED
    prepare(corpus, tmp_path, _opts(val_fraction=0.5))  # another run, nanoGPT files only
    left = {p.name for p in tmp_path.iterdir()}
    assert not left & DERIVED, left & DERIVED
    assert {"train.bin", "val.bin", "meta.json"} <= left
    opened = Corpus.open_tokens(tmp_path / "train.bin")  # read as nanoGPT, not megatron
    assert sum(opened.counts.documents) > 0  # type: ignore[union-attr]


def test_a_new_run_at_a_url_removes_the_format_files_of_the_last(
    small_corpus: Path, s3_endpoint: str
) -> None:
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    url = "s3://owt/stale-x/"
    try:
        prepare(corpus, url, _opts())
        _every_format(url, corpus)
        assert set(s3_objects(s3_endpoint, "stale-x/")) >= DERIVED
        prepare(corpus, url, _opts(val_fraction=0.5))
        left = set(s3_objects(s3_endpoint, "stale-x/"))
        assert not left & DERIVED, left & DERIVED
        assert {"train.bin", "val.bin", "meta.json"} <= left
    finally:
        outputs.remove(outputs.staging(url))
        outputs.remove(outputs.staging(url, "fetch"))


@pytest.mark.parametrize("name", ["notes.txt", "train.npy"])
def test_files_that_are_no_run_s_are_left_alone(
    small_corpus: Path, tmp_path: Path, name: str
) -> None:
    (tmp_path / name).write_bytes(b"mine")
    prepare(Corpus.open(small_corpus), tmp_path, _opts())
    assert (tmp_path / name).read_bytes() == b"mine"
