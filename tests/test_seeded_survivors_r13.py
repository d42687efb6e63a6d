"""Behaviour that seeded bugs of round 13 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID). Round 13 took the code
session 36 changed: ``codec.pread_all``, a format pass's reads (``prepare/convert.py``), an
output's path checks (``prepare/outputs.py``), a state asked inside the iterator's own
``next`` (``stream/source.py``, ``stream/mixbatches.py``), the tokenizer's checks of what it
is given, the paths a corpus is given (``index/corpus.py``, ``index/inputs.py``), a mixture's
seeded draws and its parts' stats (``stream/mixed.py``), the bound of segments' int32
positions (``stream/batches.py``)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, codec, load_tokenizer
from openwebtext.engine import inline
from openwebtext.prepare import PrepareError, PrepareOptions, prepare, write_format
from openwebtext.stream.turns import OwnNext


def _mixture(folder: Path, **options: Any) -> Mixture:
    """Two parts of 20 JSON lines each: part ``a``'s documents are all ``a``s, ``b``'s all
    ``b``s (5 to 24 bytes); ``options`` of the ``Mixture``."""
    for name in ("a", "b"):
        lines = [json.dumps({"text": name * (5 + i)}) + "\n" for i in range(20)]
        (folder / f"{name}.jsonl").write_text("".join(lines))
    parts = {name: str(folder / f"{name}.jsonl") for name in ("a", "b")}
    return Mixture(parts, {"a": 1.0, "b": 1.0}, **options)


def _asked_inside(monkeypatch: pytest.MonkeyPatch, ask: Any) -> list[object]:
    """What ``ask()`` gave or raised, called as each unit is read (inside ``next``)."""
    said: list[object] = []
    read = inline.read_unit

    def reading(*args: Any, **kwargs: Any) -> Any:
        try:
            said.append(ask())
        except Exception as exc:  # (the handler's own: the run goes on)
            said.append(exc)
        return read(*args, **kwargs)

    monkeypatch.setattr(inline, "read_unit", reading)
    return said


# -- codec.pread_all ----------------------------------------------------------------------------


def test_pread_all_reads_nothing_where_its_read_would_pass_the_last_offset(
    tmp_path: Path,
) -> None:
    """C3: the loop's read was not cut at the largest file offset: ``n`` bytes from just
    before it raised ``OSError`` (EINVAL) instead of reading nothing (a damaged header's
    offset)."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert codec.pread_all(fd, 5, 2**63 - 3) == b""
        assert codec.pread_all(fd, 2**40, 2**63 - 2**20) == b""
    finally:
        os.close(fd)


# -- a format pass's reads (prepare/convert.py) -------------------------------------------------


@pytest.fixture(scope="module")
def finished(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    prepare(Corpus.open(small_corpus), out, PrepareOptions(tokenizer="bytes", workers=0))
    return out


def test_a_train_bin_shorter_than_its_meta_is_said_so(finished: Path, tmp_path: Path) -> None:
    """P1: the size check of ``_Ids`` took a file longer than its ``meta.json`` says only; a
    shorter one (cut after its run) was read as far as it went, and said to be "cut while it
    was read", not a file of another size."""
    folder = Path(shutil.copytree(finished, tmp_path / "run"))
    size = (folder / "train.bin").stat().st_size
    os.truncate(folder / "train.bin", size - 2)
    with pytest.raises(PrepareError, match=rf"train.bin: {size - 2} bytes, not the {size} its"):
        write_format(folder, "llmc", shard_tokens=2_000)
    assert not (folder / "llmc.json").exists()


def test_a_format_pass_s_progress_says_bytes_done_and_tokens_copied(
    finished: Path, tmp_path: Path
) -> None:
    """P3, P4: a format pass's progress said each split's tokens as its bytes (P3), or its
    ``done`` in ids against a ``total`` in bytes (P4): a bar that never reached its end."""
    folder = Path(shutil.copytree(finished, tmp_path / "run"))
    said: list[Any] = []
    write_format(folder, "llmc", shard_tokens=2_000, progress=said.append)
    meta = json.loads((folder / "meta.json").read_text())
    sizes = [(folder / f"{split}.bin").stat().st_size for split in ("train", "val")]
    tokens = [meta["counts"]["tokens"][split] for split in ("train", "val")]
    assert [(p.phase, p.tokens) for p in said] == [("format", n) for n in tokens]
    assert [p.done for p in said] == [sizes[0], sum(sizes)]
    assert {p.total for p in said} == {sum(sizes)}


def _cap(monkeypatch: pytest.MonkeyPatch, most: int = 4096) -> None:
    """``pread`` capped at ``most`` bytes a call, as Linux caps it at 0x7ffff000."""
    read = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        return read(fd, min(n, most), offset)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(codec, "_ONE_READ", most)


def test_a_run_whose_reads_are_capped_writes_the_same_files(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R3, R4: the permute pass (each document's bytes: ``split_rule="nanogpt"``) and a format
    pass's scan of the end-of-text ids read with one ``os.pread``: a read past its cap (a
    document or a chunk longer than one ``pread`` returns) was short: the run ended saying
    its files do not hold what it counted (R4), or the file was said to be "cut while it was
    read" (R3)."""
    options = PrepareOptions(tokenizer="bytes", workers=0, split_rule="nanogpt")
    prepare(Corpus.open(small_corpus), tmp_path / "whole", options)
    _cap(monkeypatch)
    out = tmp_path / "out"
    prepare(Corpus.open(small_corpus), out, options)
    for name in ("train.bin", "val.bin"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    write_format(out, "megatron")
    assert (out / "megatron.json").exists()


# -- an output's path checks (prepare/outputs.py) -----------------------------------------------


def test_an_out_path_like_of_bytes_is_a_value_error_naming_out(tmp_path: Path) -> None:
    """O1: an ``out`` whose ``os.fspath`` is bytes went on to ``"\\0" in text``: a bare
    ``TypeError`` ("a bytes-like object is required") naming nothing."""

    class Bytes(os.PathLike):  # type: ignore[type-arg]
        def __fspath__(self) -> bytes:
            return os.fsencode(str(tmp_path / "out"))

    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match="out must name a folder or a URL, not b'"):
        prepare(Corpus.open(tmp_path / "c.jsonl"), Bytes(), PrepareOptions(tokenizer="bytes"))
    assert not (tmp_path / "out").exists()


# -- a state asked inside the iterator's own next (stream/source.py, stream/mixbatches.py) ------


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_stats_asked_inside_a_packer_s_own_next_say_stats(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, packing: str
) -> None:
    """S2: ``guarded`` said every call it refused inside the packer's own ``next`` as
    ``state_dict()``: ``stats`` asked in a handler was said to be a state."""
    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")
    options: dict[str, Any] = {"packing": "bestfit", "window": 8} if packing == "bestfit" else {}
    with loader.batches(seq_len=32, batch_size=2, **options) as it:
        said = _asked_inside(monkeypatch, lambda: it.stats)
        next(it)
    assert said and all(isinstance(s, OwnNext) for s in said), said[:3]
    assert str(said[0]).startswith("stats inside the iterator's own next()"), str(said[0])
    with loader.batches(seq_len=32, batch_size=2, **options) as it:
        said = _asked_inside(monkeypatch, it.state_dict)
        next(it)
    assert str(said[0]).startswith("state_dict() inside the iterator's own next()")


def test_a_mixture_s_batches_refuse_set_weights_inside_their_own_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MB1: a mixture's batches took ``set_weights`` asked inside their own ``next`` (a signal
    handler's) to wait for that ``next``: the thread waited for its own lock, for ever."""
    loader = Loader(_mixture(tmp_path), workers=0, seed=0, tokenizer="bytes")
    with loader.batches(16, 2) as it:
        said = _asked_inside(monkeypatch, lambda: it.set_weights({"b": 1.0}))
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.append(next(it)), daemon=True)
        reader.start()
        reader.join(10)
        assert not reader.is_alive(), "set_weights() waited for its own thread's next()"
        assert got and said and isinstance(said[0], OwnNext), said[:3]
        assert str(said[0]).startswith("set_weights() inside the iterator's own next()")


# -- the tokenizer's checks (tokenizer/load.py) -------------------------------------------------


@pytest.mark.parametrize("spec", ["gpt2", "bytes"])
def test_encode_batch_refuses_an_item_that_is_not_a_str_as_encode_does(spec: str) -> None:
    """T1: ``encode_batch`` encoded each text with the backend's own call, not ``encode``: an
    item of bytes raised the backend's error (``AttributeError`` of the byte tokenizer)."""
    tokenizer = load_tokenizer(spec)
    assert tokenizer.encode_batch(["hi", np.str_("yo")]) == [
        tokenizer.encode("hi"),
        tokenizer.encode("yo"),
    ]
    with pytest.raises(TypeError, match="encode: text must be a str, not bytes"):
        tokenizer.encode_batch(["hi", b"x"])  # type: ignore[list-item]


# -- the paths and column a corpus is given (index/corpus.py, index/inputs.py) -----------------


def test_columns_of_other_unpaired_surrogates_are_other_corpora(tmp_path: Path) -> None:
    """X1: a column's unpaired surrogate was hashed as "?" (not its own bytes): corpora read
    from columns ``"\\ud800"`` and ``"\\ud801"`` had one fingerprint, a state of one taken by
    the other."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"\\ud800": "one", "\\ud801": "two"}\n')
    first, second = (Corpus.open(path, text_column=c) for c in ("\ud800", "\ud801"))
    assert first.fingerprint() != second.fingerprint()
    with Loader(first, workers=0).iter() as docs:
        assert next(docs).text == "one"
    with Loader(second, workers=0).iter() as docs:
        assert next(docs).text == "two"


def test_token_files_given_as_numpy_str_are_named_by_str(tmp_path: Path) -> None:
    """X3: the paths a corpus was given went on as they were: ``Corpus.open_tokens`` of an
    ``np.str_`` kept it in its units (their repr said ``np.str_('…')``), where ``Corpus.open``
    said a ``str``."""
    ids = np.arange(100, dtype="<u2") % 50
    ids[[49, 99]] = 50256
    ids.tofile(tmp_path / "train.bin")
    given = Corpus.open_tokens(np.str_(str(tmp_path / "train.bin")), eot=50256)
    plain = Corpus.open_tokens(str(tmp_path / "train.bin"), eot=50256)
    assert [type(u.path) for u in given.units] == [str] * len(plain.units)
    assert repr(given) == repr(plain)
    assert given.files() == plain.files() and type(given.files()[0]) is str


def test_a_path_like_whose_fspath_is_a_numpy_str_folder_is_read(small_corpus: Path) -> None:
    """N4: ``find_files`` took an ``os.fspath`` that is an ``np.str_`` as it was (``_given``
    makes ``str`` of an ``np.str_`` given, not of a path-like's): ``os.listdir`` of it gives
    bytes, and the folder failed with a bare ``TypeError``."""

    class Folder(os.PathLike):  # type: ignore[type-arg]
        def __fspath__(self) -> str:
            return np.str_(str(small_corpus))

    given = Corpus.open(Folder())
    assert given.units == Corpus.open(small_corpus).units


# -- a mixture's seeded draws and its parts' stats (stream/mixed.py) ---------------------------


def test_random_sampling_folds_in_every_64_bits_of_a_seed(tmp_path: Path) -> None:
    """MX1: the draws folded in a seed's second 64 bits and no more: seeds ``2**64`` and
    ``2**64 + 2**128`` drew alike."""
    mixture = _mixture(tmp_path, sampling="random")

    def drawn(seed: int) -> list[str]:
        with Loader(mixture, workers=0, seed=seed, shuffle=False).iter() as docs:
            return [d.text[0] for d in docs]

    assert drawn(2**64) != drawn(2**64 + 2**128)
    assert drawn(2**64 + 2**128) == drawn(2**64 + 2**128)


def _bad_lines(tmp_path: Path, by: str) -> Mixture:
    """Parts of JSON lines with lines that are not JSON (skipped), inside a unit and a unit
    of one bad line: the part reading ahead reads them before their document is handed out."""
    from test_red_skip_counts_r13 import _lines

    a = _lines(tmp_path / "a", {"a": 3, "b": 3, "c": 2, "d": 1}, {"b0", "d0"})
    b = _lines(tmp_path / "b", {"x": 2, "y": 2}, {"y0"})
    return Mixture({"A": a, "B": b}, {"A": 0.5, "B": 0.5}, by=by)


def _each_document(loader: Loader, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """The stats after each document, with the units read by then."""
    reads: list[int] = []
    read = inline.read_unit

    def reading(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(inline, "read_unit", reading)
    with loader.iter() as docs:
        return [(docs.stats, len(reads)) for _ in docs]


@pytest.mark.parametrize("by", ["documents", "tokens"])
def test_a_mixture_s_stats_name_each_skip_they_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """MX3: a part's stats at its state left out the skips its read-ahead counted, not their
    names: ``skipped`` named a skip its counts did not hold (6 names for 5 skips)."""
    tokens = {"tokenizer": "bytes"} if by == "tokens" else {}
    loader = Loader(_bad_lines(tmp_path, by), seed=0, epochs=2, on_error="skip", workers=0,
                    shuffle=False, **tokens)  # fmt: skip
    seen = _each_document(loader, monkeypatch)
    assert seen and seen[-1][0].skipped_documents > 0
    for stats, _ in seen:
        for part in (stats, *stats.parts.values()):
            assert len(part.skipped) == part.skipped_documents + part.skipped_members, part


@pytest.mark.parametrize("by", ["documents", "tokens"])
def test_a_mixture_s_stats_count_every_unit_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """MX4: a part's stats at its state took ``units`` from before its read-ahead too: the
    units a part read ahead were not counted (``units`` counts reads, documented)."""
    tokens = {"tokenizer": "bytes"} if by == "tokens" else {}
    loader = Loader(_bad_lines(tmp_path, by), seed=0, epochs=2, on_error="skip", workers=0,
                    shuffle=False, **tokens)  # fmt: skip
    seen = _each_document(loader, monkeypatch)
    assert [stats.units for stats, _ in seen] == [reads for _, reads in seen]


# -- segments' int32 positions (stream/batches.py) ----------------------------------------------


def test_positions_past_int32_are_refused_when_each_document_has_its_start() -> None:
    """B1: the bound of the positions took the first document's ``start`` only when it was an
    int: each document's own (an array, best fit's pieces) was not counted, and a position past
    2**31-1 wrapped round in the int32 silently."""
    from openwebtext.stream.batches import _marked

    with pytest.raises(ValueError, match="more than 2\\*\\*31-1 ids"):
        _marked(np.array([2, 4]), np.array([0, 2**31 - 4]))
    _, positions = _marked(np.array([2, 4]), np.array([0, 2**31 - 5]))
    assert positions.tolist() == [0, 1, 2**31 - 5, 2**31 - 4]
