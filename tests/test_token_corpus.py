"""A token corpus (``Corpus.open_tokens``, issue 30): the files of ``owt tokenize`` in any of
the four formats read back as ``TokenDocument``s, ``Loader.batches`` (segments, best fit), and
damaged files. The guarantees every kind gives (seeded order, exact resume, even shares,
reshard; locally and over HTTP): test_corpus_contract.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, TokenDocument
from openwebtext.errors import CorpusError, CorruptMember
from openwebtext.tokenfiles import TokenFileError
from resumable import check_save_load
from support import fit_window

EOT = 256  # the bytes tokenizer's
UNIT = 3_000  # ids a unit holds: ~20 units of the small corpus's train.bin


@pytest.fixture
def run(token_run: Path) -> Path:
    """The small corpus tokenized in all four formats (conftest.py's ``token_run``)."""
    return token_run


def _documents(path: Path) -> list[list[int]]:
    ids = np.fromfile(path, dtype="<u2")
    return [d.tolist() for d in np.split(ids, np.flatnonzero(ids == EOT)[:-1] + 1)]


def _nanogpt_only(run: Path, tmp_path: Path) -> Path:
    """train.bin alone (no idx beside it): boundaries at end-of-text."""
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "train.bin").write_bytes((run / "train.bin").read_bytes())
    return alone / "train.bin"


def _paths(run: Path, fmt: str, tmp_path: Path) -> list[Path]:
    if fmt == "nanogpt":
        return [_nanogpt_only(run, tmp_path)]
    if fmt == "llmc":
        return sorted(run.glob("train_*.bin"))
    return [run / ("train.ds" if fmt == "datatrove" else "train.bin")]


def _loader(corpus: Corpus, **options: Any) -> Loader:
    return Loader(corpus, **{"tokenizer": "bytes", "workers": 0, "shuffle_buffer": 40, **options})


@pytest.mark.parametrize("fmt", ["nanogpt", "megatron", "llmc", "datatrove"])
def test_every_format_reads_back_train_bin_document_for_document(
    run: Path, fmt: str, tmp_path: Path
) -> None:
    corpus = Corpus.open_tokens(_paths(run, fmt, tmp_path), eot=EOT, unit_tokens=UNIT)
    assert corpus.counts is not None and sum(corpus.counts.documents) == len(
        _documents(run / "train.bin")
    )
    docs = list(_loader(corpus, shuffle=False))
    assert all(isinstance(d, TokenDocument) and d.tokens.dtype == np.uint16 for d in docs)
    assert [d.tokens.tolist() for d in docs] == _documents(run / "train.bin")


def test_concat_batches_hold_every_id_once(run: Path) -> None:
    corpus = Corpus.open_tokens(run / "train.bin", unit_tokens=UNIT)
    loader = _loader(corpus, seed=4)
    stream = np.concatenate([d.tokens for d in loader])
    with loader.batches(seq_len=64, batch_size=3) as batches:
        rows = [row for batch in batches for row in batch]
    targets = np.concatenate([row[1:] for row in rows])
    assert targets.tolist() == stream[1 : 1 + len(targets)].tolist()
    assert len(stream) - 1 - len(targets) < 64 * 3  # only the last partial batch is left


@pytest.mark.parametrize(("packing", "segments"), [("concat", True), ("bestfit", True)])
def test_packed_batches_resume_exactly(run: Path, packing: str, segments: bool) -> None:
    corpus = Corpus.open_tokens(run / "val.bin", unit_tokens=UNIT)  # the smaller: ~200 batches

    def start(state: dict[str, Any] | None, epochs: int) -> Any:
        return _loader(corpus, epochs=epochs, shuffle_buffer=5).batches(
            256, 2, state=state, segments=segments, packing=packing, window=fit_window(packing, 7)
        )

    def key(batch: Any) -> Any:
        if isinstance(batch, tuple):  # a PackedBatch: its sources None (one corpus)
            return tuple(a.tolist() for a in batch if a is not None)
        return batch.tolist()

    check_save_load(start, key=key)


def test_a_damaged_index_is_one_error_naming_it(run: Path, tmp_path: Path) -> None:
    for name in ("train.bin", "train.idx"):
        (tmp_path / name).write_bytes((run / name).read_bytes())
    body = bytearray((tmp_path / "train.idx").read_bytes())
    body[9] = 3  # version 3
    (tmp_path / "train.idx").write_bytes(bytes(body))
    with pytest.raises(TokenFileError, match=r"train.idx: megatron index version 3, not 1"):
        Corpus.open_tokens(tmp_path / "train.bin")


def test_a_file_cut_after_it_was_opened_names_file_and_unit(run: Path, tmp_path: Path) -> None:
    path = _nanogpt_only(run, tmp_path)
    corpus = Corpus.open_tokens(path, eot=EOT, unit_tokens=UNIT)
    with open(path, "r+b") as f:  # same inode: the opened ends stay; the bytes are gone
        f.truncate(corpus.units[-1].offset + 10)
    # The file changed (its size, its mtime): said so, never blamed on its ids.
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        list(_loader(corpus, shuffle=False))
    assert caught.value.path == str(path) and caught.value.member == corpus.units[0].member


def test_a_file_changed_in_place_after_it_was_opened_says_so(run: Path, tmp_path: Path) -> None:
    """Its size kept, one document (end-of-text ids written over): numpy's ``ValueError``
    from deep inside the stream (its documents' ids past the unit's bytes), or a unit whose
    documents were gone said "file is truncated: N of N bytes"."""
    path = _nanogpt_only(run, tmp_path)
    corpus = Corpus.open_tokens(path, eot=EOT, unit_tokens=UNIT)
    ids = np.fromfile(path, dtype="<u2")
    ids[np.flatnonzero(ids == EOT)[:-1]] = 32  # one document, the file's size and mtime new
    ids.tofile(path)
    changed = r"the file changed since it was indexed"  # (its size and mtime: ``engine.raw``)
    with pytest.raises(CorruptMember, match=changed) as caught:
        list(_loader(corpus, shuffle=False))
    assert caught.value.path == str(path) and caught.value.member == corpus.units[0].member
    with _loader(corpus, shuffle=False, on_error="skip").iter() as it:
        assert list(it) == [] and it.stats.skipped_members == len(corpus.units)


def test_a_token_corpus_needs_its_tokenizer(run: Path) -> None:
    corpus = Corpus.open_tokens(run / "train.bin", unit_tokens=UNIT)
    with pytest.raises(CorpusError, match="read with the tokenizer its ids were written with"):
        list(Loader(corpus, workers=0))


def test_ids_of_another_width_than_the_tokenizer_s_are_refused(run: Path, tmp_path: Path) -> None:
    wide = np.fromfile(run / "val.bin", dtype="<u2").astype("<u4")
    (tmp_path / "val.ds").write_bytes(wide.tobytes())
    (tmp_path / "val.ds.index").write_bytes((run / "val.ds.index").read_bytes())
    corpus = Corpus.open_tokens(tmp_path / "val.ds", dtype="uint32")
    with pytest.raises(CorpusError, match="ids of 4 bytes, not the 2 of the tokenizer 'bytes'"):
        list(_loader(corpus))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_remote_token_corpus_reads_by_range(run: Path, s3_endpoint: str, workers: int) -> None:
    boto3 = pytest.importorskip("boto3")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    for name in ("train.bin", "train.idx", "train.ds", "train.ds.index", "train_000000.bin"):
        client.upload_file(str(run / name), "owt", f"tok/{name}")
    options = {"endpoint_url": s3_endpoint}
    want = _documents(run / "train.bin")
    for name in ("train.bin", "train.ds"):
        corpus = Corpus.open_tokens(f"s3://owt/tok/{name}", unit_tokens=UNIT,
                                    storage_options=options)  # fmt: skip
        got = [d.tokens.tolist() for d in _loader(corpus, shuffle=False, workers=workers)]
        assert got == want
    with pytest.raises(CorpusError, match="read with its index beside it"):
        Corpus.open_tokens("s3://owt/tok/train_000000.bin", storage_options=options)
