"""Behaviours a fourth mutation-testing round found unpinned: each test kills one or more seeded
single-point bugs that survived the suite (named in its docstring by their ids and edits).

A token corpus pickled to a process it was not forked into (here: unpickled in this process, so
that its storage is not the one the ends were kept for, as in a spawned worker or a Ray task)
indexes its files again as ``Storage.tokens`` says: the eot and dtype its ``meta.json`` gave, a
remote run's recorded tokenizer, a remote index gone or replaced between two corpora of one
URL; what a pickled storage keeps of a host's local identities (its boot id); what a storage's
``detached`` copy and a corpus's ``view`` share with the storage they were made of; and
``read_openwebtext``'s token reading (its pools closed, a plain corpus's errors)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, CorpusError, CorruptMember, Loader
from openwebtext.source import CHANGED, FileInfo, Storage
from openwebtext.tokenfiles import megatron_index
from remote_servers import RangeServer
from support import rewrite_later
from test_token_spawned import (
    FIRST_CUT,
    IDS,
    SECOND_CUT,
    SIGNED_KEPT,
    _megatron,
    _signed,
)

isolated_storage = remote_servers.isolated_storage  # autouse: a fresh cache folder each test

SECOND_DOCS = [[1], [2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12]]


def _copy(corpus: Corpus) -> Corpus:
    """``corpus`` as a process it is pickled to has it: its storage another object, for which
    this process kept no ends (``tokenfiles.kept``)."""
    copy: Corpus = pickle.loads(pickle.dumps(corpus))
    return copy


def _read(corpus: Corpus, tokenizer: str = "bytes", **options: Any) -> list[list[int]]:
    loader = Loader(corpus, tokenizer=tokenizer, workers=0, shuffle=False, **options)
    with loader.iter() as it:
        return [d.tokens.tolist() for d in it]


# --- a local file indexed again as its meta.json said -----------------------------------------


def test_a_copy_cuts_a_bin_at_its_meta_json_s_eot(token_run: Path, tmp_path: Path) -> None:
    """A ``train.bin`` with its run's ``meta.json`` and no ``.idx``, opened without ``eot``: it
    is cut at the ``meta.json``'s eot (256), here and in a copy, where it is noted as such (not
    as the eot given, None: "no eot given" there).

    Kills T19 (``IndexedAs(eot, ...)``: the given eot, not the file's)."""
    for name in ("train.bin", "meta.json"):
        shutil.copy(token_run / name, tmp_path / name)
    corpus = Corpus.open_tokens(tmp_path / "train.bin", unit_tokens=1 << 12)
    assert len(corpus.units) > 1
    assert corpus.storage.tokens[str(tmp_path / "train.bin")].eot == 256
    want = _read(corpus)
    assert len(want) > 1 and all(d[-1] == 256 for d in want)
    assert _read(_copy(corpus)) == want


def test_a_copy_reads_ids_of_its_meta_json_s_dtype(tmp_path: Path) -> None:
    """A datatrove ``.ds`` whose run's ``meta.json`` says int16 (GPT-2's ids), opened without
    ``dtype``: a copy reads it as int16 too, the document holding -20000 left out, not read as
    uint16's 45536 (a GPT-2 id) and kept.

    Kills T20 (``IndexedAs(file_eot, dtype or "uint16")``: the given dtype, not the file's)."""
    from openwebtext.tokenfiles.common import PREPARE_FORMAT
    from openwebtext.tokenizer import load_tokenizer

    gpt2 = load_tokenizer("gpt2")
    config = {"tokenizer": "gpt2", "fingerprint": gpt2.fingerprint, "dtype": "int16",
              "eot": gpt2.eot, "n_vocab": 50257}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps({"format": PREPARE_FORMAT, "config": config}))
    corpus = Corpus.open_tokens(_signed(tmp_path))
    assert corpus.storage.tokens[str(tmp_path / "train.ds")].dtype == "int16"
    assert _read(corpus, "gpt2", on_error="skip") == SIGNED_KEPT
    assert _read(_copy(corpus), "gpt2", on_error="skip") == SIGNED_KEPT


@pytest.mark.parametrize("changed", ["train.bin", "train.idx"])
def test_a_file_changed_after_the_readers_check_is_not_indexed_again_at_its_new_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: str
) -> None:
    """A copy's reader checks the unit's bytes and the files beside the ``.bin``; the file is
    rewritten right after (another cut of the same size: the ``.bin`` of eot 256, or the
    ``.idx``), before the copy indexes it again: that indexing checks them again and says the
    file changed, never cutting the bytes read at the new file's ends.

    Kills T05 (``as_indexed`` without its ``unchanged`` loop) and T06 (the loop over the
    ``.bin`` alone, not its ``companions``)."""
    import openwebtext.engine.tokens as engine_tokens

    if changed == "train.bin":
        path = tmp_path / "train.bin"
        np.array([1, 2, 3, 256, 4, 5, 256], "<u2").tofile(path)
        corpus = Corpus.open_tokens(path, eot=256)
        body = np.array([7, 256, 8, 9, 10, 11, 256], "<u2").tobytes()
    else:
        path = _megatron(tmp_path)
        corpus = Corpus.open_tokens(path)
        body = megatron_index(np.array(SECOND_CUT), np.dtype("<u2"))
    checked = engine_tokens._unchanged_beside

    def then_rewritten(*args: Any) -> None:
        checked(*args)
        if not rewritten:
            rewritten.append(changed)
            rewrite_later(tmp_path / changed, body)

    rewritten: list[str] = []
    monkeypatch.setattr(engine_tokens, "_unchanged_beside", then_rewritten)
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        _read(_copy(corpus))
    assert rewritten and caught.value.path == str(path)


# --- a remote file indexed again ----------------------------------------------------------------


@pytest.mark.remote
def test_a_copy_of_a_remote_run_checks_its_recorded_tokenizer(
    token_run: Path, tmp_path: Path
) -> None:
    """A remote run's ``meta.json`` (ids of the bytes tokenizer) as recorded at the open: a
    copy read with GPT-2 (ids of the same width) is refused as the corpus is, not read.

    Kills T15 (``_remote_again`` indexing again without the recorded tokenizer)."""
    pytest.importorskip("aiohttp")
    for name in ("train.bin", "train.idx", "meta.json"):
        shutil.copy(token_run / name, tmp_path / name)
    said = r"its ids were written with the tokenizer 'bytes' .* not read with 'gpt2'"
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open_tokens(f"{server.url}/train.bin", unit_tokens=1 << 12)
        with pytest.raises(CorpusError, match=said):
            _read(corpus, "gpt2")
        with pytest.raises(CorpusError, match=said):
            _read(_copy(corpus), "gpt2")
        assert len(_read(_copy(corpus))) > 1


@pytest.mark.remote
def test_a_remote_index_gone_since_the_open_is_said_changed_in_a_copy(tmp_path: Path) -> None:
    """The ``.idx`` beside a remote ``.bin`` removed after the open: a copy says the file
    changed, naming it (a ``CorruptMember``), not a TypeError hashing no index.

    Kills T09 (``_remote_again`` without ``body is None``)."""
    pytest.importorskip("aiohttp")
    _megatron(tmp_path)
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open_tokens(f"{server.url}/train.bin")
        (tmp_path / "train.idx").unlink()
        with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
            _read(_copy(corpus))
    assert caught.value.path == f"{server.url}/train.bin"
    assert CHANGED in str(caught.value) and "train.idx" in str(caught.value)


@pytest.mark.remote
def test_two_corpora_of_one_remote_file_are_indexed_again_each_as_its_own(tmp_path: Path) -> None:
    """One remote ``.bin`` opened as corpus A, its ``.idx`` rewritten (another cut, the same
    size), opened again as corpus B: copies of both in one process are each indexed again as
    their own corpus was, B at its cut, A said to have changed, never handed B's ends (the
    same URL and size, another index).

    Kills T10 (``_AGAIN`` keyed without how the file was indexed)."""
    pytest.importorskip("aiohttp")
    _megatron(tmp_path)
    with RangeServer(tmp_path) as server:
        first = Corpus.open_tokens(f"{server.url}/train.bin")
        rewrite_later(tmp_path / "train.idx", megatron_index(np.array(SECOND_CUT), np.dtype("<u2")))
        second = Corpus.open_tokens(f"{server.url}/train.bin")
        assert _read(_copy(second)) == SECOND_DOCS
        with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
            _read(_copy(first))


@pytest.mark.remote
def test_a_remote_bin_longer_than_its_index_says_is_refused_at_the_open(tmp_path: Path) -> None:
    """A remote ``.bin`` of 13 ids beside a Megatron ``.idx`` of 12: refused at the open,
    naming both sizes, not opened (its last id in no document).

    Kills T23 (``_from_index`` without the size check of a Megatron index)."""
    pytest.importorskip("aiohttp")
    _megatron(tmp_path)
    np.arange(1, 14, dtype="<u2").tofile(tmp_path / "train.bin")
    with RangeServer(tmp_path) as server, pytest.raises(
        CorpusError, match=r"26 bytes, not the ids of train\.idx"
    ):
        Corpus.open_tokens(f"{server.url}/train.bin")


@pytest.mark.remote
def test_a_remote_index_changed_past_its_first_bytes_is_said_changed_in_a_copy(
    tmp_path: Path,
) -> None:
    """A remote ``.ds.index`` of ten documents rewritten after the open, only its ninth end
    moved (its first 64 bytes as they were): a copy's index fetched again is not the one
    indexed, the file said to have changed (its digest is of the whole index).

    Kills T24 (``_digest`` of the index's first bytes only)."""
    pytest.importorskip("aiohttp")
    IDS.tofile(tmp_path / "train.ds")
    ends = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 12], "<u8")
    (tmp_path / "train.ds.index").write_bytes(ends.tobytes())
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open_tokens(f"{server.url}/train.ds")
        moved = ends.copy()
        moved[8] = 10
        rewrite_later(tmp_path / "train.ds.index", moved.tobytes())
        with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
            _read(_copy(corpus))


@pytest.mark.remote
def test_a_remote_ds_of_four_byte_ids_is_opened(tmp_path: Path) -> None:
    """A remote datatrove ``.ds`` of uint32 ids (``dtype="uint32"``): its index counts ids of
    four bytes, so it is opened with its three documents (not refused as ends that do not
    rise to twice as many ids).

    Kills T25 (``_from_index`` counting a datatrove file's ids as two bytes each)."""
    pytest.importorskip("aiohttp")
    IDS.astype("<u4").tofile(tmp_path / "train.ds")
    (tmp_path / "train.ds.index").write_bytes(np.array(FIRST_CUT, "<u8").tobytes())
    with RangeServer(tmp_path) as server:
        url = f"{server.url}/train.ds"
        corpus = Corpus.open_tokens(url, dtype="uint32")
        assert corpus.storage.tokens[url].dtype == "uint32"
        assert sum(1 for _ in corpus.units) >= 1
        assert corpus.units[-1].offset + corpus.units[-1].size == 48


# --- what a storage keeps and shares -------------------------------------------------------------


def test_local_identities_do_not_travel_to_another_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine of the same name booted again (or another of that name) may hold other
    files at the same paths: a storage pickled before is unpickled without its local
    identities (its URLs' kept).

    Kills S04 (``_host`` without the boot id)."""
    import io

    from openwebtext.source import settings

    path = tmp_path / "train.bin"
    np.array([1, 2, 9, 3, 9], "<u2").tofile(path)
    corpus = Corpus.open_tokens(path, eot=9)
    corpus.storage.remember("https://h.invalid/x.bin", FileInfo(3, "etag:3"))
    sent = pickle.dumps(corpus.storage)
    assert set(pickle.loads(sent).identities) == set(corpus.storage.identities)
    real = open

    def rebooted(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == "/proc/sys/kernel/random/boot_id":
            return io.StringIO("00000000-0000-0000-0000-000000000000\n")
        return real(file, *args, **kwargs)

    monkeypatch.setattr(settings, "open", rebooted, raising=False)
    there: Storage = pickle.loads(sent)
    assert there.identities == {"https://h.invalid/x.bin": FileInfo(3, "etag:3")}


def test_a_detached_storage_has_aliases_of_its_own() -> None:
    """A URL's alias noted in ``Storage.detached``'s copy is not noted in the storage it was
    made of (they shared the table).

    Kills S06 (``detached`` without ``aliases=dict(self.aliases)``)."""
    storage = Storage()
    copy = storage.detached()
    shown = copy.alias("https://h.invalid/x.bin?sig=secret")
    assert shown != "https://h.invalid/x.bin?sig=secret"
    assert copy.real_url(shown) == "https://h.invalid/x.bin?sig=secret"
    assert storage.aliases == {}


def test_two_corpora_of_one_file_note_how_each_indexed_it(tmp_path: Path) -> None:
    """One ``.ds`` opened as int16 (corpus A) and as uint16 (corpus B), both with the default
    storage: each corpus's view notes its own, so a copy of A still reads int16 (the document
    holding -20000 left out), and nothing is noted in the default storage.

    Kills S07 (``view`` without ``tokens={}``: the default's table shared by every view)."""
    from openwebtext.source.settings import _default

    path = _signed(tmp_path)
    first = Corpus.open_tokens(path, dtype="int16")
    second = Corpus.open_tokens(path, dtype="uint16")
    assert first.storage.tokens[str(path)].dtype == "int16"
    assert second.storage.tokens[str(path)].dtype == "uint16"
    assert str(path) not in _default.tokens
    assert _read(_copy(first), "gpt2", on_error="skip") == SIGNED_KEPT


# --- read_openwebtext over a token corpus, a plain Corpus ---------------------------------------


class _NoRay:
    """A stand-in for Ray: what ``read_openwebtext`` refuses at once never reaches it."""

    class data:  # (``ray.data``)
        @staticmethod
        def from_items(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("read_openwebtext went on to make a dataset")


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> Any:
    from openwebtext.ray import dataset

    monkeypatch.setattr(dataset, "ray_module", lambda: _NoRay)
    return dataset.read_openwebtext


def test_a_plain_token_corpus_without_a_tokenizer_is_refused_naming_no_part(
    tmp_path: Path, no_ray: Any
) -> None:
    """A ``Corpus`` (no mixture) of token files read without a tokenizer: refused at once
    naming its file, in no part (a mixture's parts are named; a corpus has none).

    Kills R05 (``_has_text(corpus, name)``: the error said of part '')."""
    path = tmp_path / "train.bin"
    np.array([1, 2, 256], "<u2").tofile(path)
    tokens = Corpus.open_tokens(path, eot=256)
    with pytest.raises(CorpusError, match="a token corpus holds ids, not text") as caught:
        no_ray(tokens)
    assert caught.value.path == str(path) and caught.value.part is None
    assert str(caught.value).startswith(str(path))


def test_a_corpus_s_files_left_out_at_its_open_are_raised_at_once(
    tmp_path: Path, no_ray: Any
) -> None:
    """A ``Corpus`` opened with ``on_error="skip"`` that left a file out (a dangling symlink):
    ``read_openwebtext`` of it under ``raise`` raises that error at once, as for a mixture's
    part, not a dataset without the file.

    Kills R09 (the open's ``skipped_files`` taken for a ``Mixture`` only)."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "gone.jsonl")
    corpus = Corpus.open(tmp_path, on_error="skip")
    assert len(corpus.skipped_files) == 1
    with pytest.raises(CorpusError, match="dangling symlink") as caught:
        no_ray(corpus)
    assert caught.value.path == str(tmp_path / "b.jsonl")


def test_storage_options_with_a_corpus_are_refused(tmp_path: Path, no_ray: Any) -> None:
    """A ``Corpus`` is read with the storage it was opened with: ``storage_options`` given
    beside it are refused at once (they would be ignored).

    Kills R10 (the refusal for a ``Mixture`` only)."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    corpus = Corpus.open(tmp_path)
    with pytest.raises(ValueError, match="storage_options: a Corpus is read with the storage"):
        no_ray(corpus, storage_options={"anon": True})


def test_a_read_group_closes_the_pools_it_read_token_units_with(
    token_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's read of token units (the engine's inline pool, one per group) closes each pool
    it opened (its readers, their files), whether the group was read whole or not.

    Kills R03 (``_ReadGroup.__call__`` not closing ``pools``)."""
    import openwebtext.engine as engine
    from openwebtext.ray.dataset import _ReadGroup
    from openwebtext.tokenizer import load_tokenizer

    corpus = Corpus.open_tokens(token_run / "train.bin", unit_tokens=3_000)
    opened: list[Any] = []
    real = engine.open_pool

    def kept_open_pool(*args: Any, **kwargs: Any) -> Any:
        pool = real(*args, **kwargs)
        opened.append(pool)
        return pool

    monkeypatch.setattr(engine, "open_pool", kept_open_pool)
    units = corpus.units
    read = _ReadGroup((tuple(units[:2]), tuple(units[2:4])), (corpus.storage.detached(),) * 2,
                      load_tokenizer("bytes"), "raise", None, 1 << 30, 64 << 20)  # fmt: skip
    table = read({"group": np.array([0, 1])})
    assert table.num_rows > 2 and len(opened) == 2
    assert all(pool.closed for pool in opened)


def _read_group(corpus: Corpus, tokenizer: Any, **options: Any) -> dict[str, list[int]]:
    """One task's rows of all of ``corpus``'s units (``_ReadGroup`` called as Ray calls it, in
    this process), by document name: its ids."""
    from openwebtext.ray.dataset import _ReadGroup

    read = _ReadGroup((tuple(corpus.units),), (corpus.storage.detached(),), tokenizer,
                      options.get("on_error", "raise"), None, 1 << 30, 64 << 20)  # fmt: skip
    table = read({"group": np.array([0])}).to_pydict()
    return dict(zip(table["name"], table["ids"], strict=True))


def test_a_task_s_rows_after_a_document_left_out_are_their_own_ids(tmp_path: Path) -> None:
    """A unit of int16 ids whose second document holds -5 (outside the bytes tokenizer's
    vocabulary), read by a task under ``skip``: the other documents' rows are each its own ids
    (those after it cut at their own offsets), as ``Loader`` gives them.

    Kills R01 (the unit's ids taken whole though a document was left out) and R02 (a kept
    document's offset, in bytes, taken as ids)."""
    from openwebtext.tokenizer import load_tokenizer

    docs = [[1, 2, 256], [3, -5, 256], [4, 5, 256], [6, 7, 8, 256]]
    np.array([i for d in docs for i in d], "<i2").tofile(tmp_path / "train.ds")
    ends = np.cumsum([len(d) for d in docs]).astype("<u8")
    (tmp_path / "train.ds.index").write_bytes(ends.tobytes())
    corpus = Corpus.open_tokens(tmp_path / "train.ds", dtype="int16")
    assert len(corpus.units) == 1
    assert _read(corpus, on_error="skip") == [docs[0], docs[2], docs[3]]
    rows = _read_group(corpus, load_tokenizer("bytes"), on_error="skip")
    assert rows == {"0": docs[0], "2": docs[2], "3": docs[3]}


def test_a_task_reads_ids_of_four_bytes_as_the_file_holds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token file of cl100k_base's ids (uint32: ids past 65535) read by a task: each row is
    the file's ids, read at the tokenizer's width (not two bytes each).

    Kills R12 (``_read_ids`` reading the ids as uint16)."""
    pytest.importorskip("splintr")
    from openwebtext.tokenizer import load_tokenizer
    from tokenizer_support import cl100k_cache

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cl100k_cache(tmp_path / "tiktoken")))
    cl100k = load_tokenizer("tiktoken:cl100k_base")
    assert cl100k.dtype == np.dtype("uint32")
    eot = cl100k.eot
    docs = [[70_000, 5, eot], [1, 99_999, 2, eot]]
    np.array([i for d in docs for i in d], "<u4").tofile(tmp_path / "train.bin")
    corpus = Corpus.open_tokens(tmp_path / "train.bin", eot=eot, dtype="uint32")
    assert _read_group(corpus, cl100k) == {"0": docs[0], "1": docs[1]}
