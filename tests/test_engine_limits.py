"""Every limit at its boundary, on both sides (issue 14).

A limit of ``L`` must accept exactly ``L`` and refuse ``L + 1`` (or, for a bound
on a count, stop exactly there): an off-by-one (``>=`` for ``>``) is invisible to a
test that only goes far past the limit. Covered here:

- ``max_document_bytes`` (read): a document of exactly the limit, and one byte over,
  under ``raise`` and ``skip``;
- ``max_member_bytes`` (read, formats): a member decompressing to exactly the limit, and
  one byte over, for xz, gzip, bzip2, zstd, several concatenated streams, a plain tar
  member, and a plain tar file; and ``formats.decompress`` on its own;
- ``max_errors`` (stream): exactly that many skips, and one more;
- ``take`` (stream): exactly an epoch, one short of it, one past it, with endless epochs;
- ``formats.detect``: the shortest head that can show a tar's magic;
- ``tarwalk.walk``: an entry ending exactly at the end of the data, one byte short; a
  header exactly filling the data;
- ``Options``: every numeric bound, the last valid value and the first invalid one.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
from pathlib import Path
from typing import Any

import pytest

from openwebtext import (
    Corpus,
    CorruptDocument,
    Loader,
    MemberTooLarge,
    Options,
    OWTError,
    Stats,
    TooManyErrors,
)
from openwebtext.formats import TAR, LimitExceeded, decompress, detect
from openwebtext.stream import members_in_run
from openwebtext.tarwalk import TarFormatError, walk
from support import inner_tar, outer_tar, read_members, xz_member

#: The loader's hang timeout in these tests: a worker hang becomes a WorkerError fast.
TIMEOUT = 5.0


def read_all(path: Path, **options: Any) -> tuple[dict[str, str], Stats | None, OWTError | None]:
    """Every document of ``path`` (one worker, corpus order), its stats, and the error."""
    docs: dict[str, str] = {}
    it = Loader(str(path), workers=1, shuffle=False, timeout=TIMEOUT, **options).iter()
    try:
        for doc in it:
            docs[doc.name] = doc.text
    except OWTError as exc:
        return docs, it.stats, exc
    finally:
        it.close()
    return docs, it.stats, None


# -- max_document_bytes ------------------------------------------------------------------

DOC_LIMIT = 1000


def _documents_around_the_limit(over: int) -> dict[str, bytes]:
    """Documents of limit - 1 and exactly limit bytes (multi-byte text: bytes, not
    characters, count), and ``doc-subject.txt`` of limit + ``over`` bytes."""
    return {
        "doc-below.txt": b"b" * (DOC_LIMIT - 1),
        "doc-at.txt": "é".encode() * (DOC_LIMIT // 2),  # 500 characters, 1000 bytes
        "doc-subject.txt": b"s" * (DOC_LIMIT + over),
        "doc-after.txt": b"after",
    }


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("policy", ["raise", "skip"])
@pytest.mark.parametrize("over", [0, 1], ids=["exactly-the-limit", "one-byte-over"])
def test_max_document_bytes_boundary(tmp_path: Path, policy: str, over: int) -> None:
    docs = _documents_around_the_limit(over)
    tar = outer_tar(tmp_path / "t.tar", [("m_data.xz", xz_member(docs))])
    got, stats, error = read_all(tar, on_error=policy, max_document_bytes=DOC_LIMIT)
    expected = {name: data.decode() for name, data in docs.items()}
    if over == 0:
        assert error is None
        assert got == expected
        assert stats is not None and stats.skipped_documents == 0
    elif policy == "raise":
        assert isinstance(error, CorruptDocument), repr(error)
        assert (error.path, error.member, error.document) == (
            str(tar),
            "m_data.xz",
            "doc-subject.txt",
        )
        assert f"document of {DOC_LIMIT + 1} bytes passes max_document_bytes={DOC_LIMIT}" in str(
            error
        )
    else:
        del expected["doc-subject.txt"]
        assert error is None
        assert got == expected
        assert stats is not None
        assert (stats.skipped_documents, stats.skipped_members) == (1, 0)
        assert stats.skipped == (f"{tar}[m_data.xz]: {error_text(DOC_LIMIT + 1)}",)


def error_text(size: int) -> str:
    return (
        f"document of {size} bytes passes max_document_bytes={DOC_LIMIT} (document doc-subject.txt)"
    )


# -- max_member_bytes ---------------------------------------------------------------------


def _zstd(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    compressed: bytes = zstandard.ZstdCompressor().compress(data)
    return compressed


def _halves(compress: Any) -> Any:
    """Two streams, one per half of the data, concatenated (``cat a.xz b.xz``)."""
    return lambda data: compress(data[: len(data) // 2]) + compress(data[len(data) // 2 :])


COMPRESSORS: dict[str, Any] = {
    "xz": lambda data: lzma.compress(data, preset=0),
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "bzip2": bz2.compress,
    "zstd": _zstd,
    "xz-two-streams": _halves(lambda data: lzma.compress(data, preset=0)),
    "gzip-two-streams": _halves(lambda data: gzip.compress(data, mtime=0)),
    "bzip2-two-streams": _halves(bz2.compress),
    "tar": lambda data: data,  # a plain tar member: refused from its size, before it is read
}

#: Over one 10 KiB tar record (the other member is one record): only this member is at the limit.
MEMBER_DOCS = {
    f"doc-{k}.txt": f"document {k} — “text”\n".encode() * (40 * k + 90) for k in range(6)
}


@pytest.mark.parametrize("plain", [b"", b"x", bytes(5000) + b"tail" * 3000])
@pytest.mark.parametrize("kind", ["xz", "gzip", "bzip2", "zstd", "xz-two-streams", "tar"])
def test_decompress_limit_boundary(kind: str, plain: bytes) -> None:
    data = COMPRESSORS[kind](plain)
    kind = {"xz-two-streams": "xz"}.get(kind, kind)
    assert decompress(data, kind, max(1, len(plain))) == plain
    assert decompress(data, kind, len(plain) + 1) == plain
    if plain:
        with pytest.raises(LimitExceeded):
            decompress(data, kind, len(plain) - 1)


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("policy", ["raise", "skip"])
@pytest.mark.parametrize("over", [0, 1], ids=["exactly-the-limit", "one-byte-over"])
@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_max_member_bytes_boundary(tmp_path: Path, kind: str, over: int, policy: str) -> None:
    """The member decompresses to ``limit + over`` bytes; another, smaller one follows."""
    inner = inner_tar(MEMBER_DOCS)
    other = {"other.txt": b"the member after"}
    tar = outer_tar(
        tmp_path / "t.tar",
        [("m_data", COMPRESSORS[kind](inner)), ("n_data.xz", xz_member(other))],
    )
    limit = len(inner) - over
    got, stats, error = read_all(tar, on_error=policy, max_member_bytes=limit)
    expected = {n: d.decode() for n, d in (MEMBER_DOCS | other).items()}
    if over == 0:
        assert error is None
        assert got == expected
    elif policy == "raise":
        assert isinstance(error, MemberTooLarge), repr(error)
        assert (error.path, error.member) == (str(tar), "m_data")
        assert f"max_member_bytes={limit}" in str(error)
        assert got == {}
    else:
        assert error is None
        assert got == {"other.txt": "the member after"}
        assert stats is not None and (stats.skipped_members, stats.skipped_documents) == (1, 0)


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("over", [0, 1], ids=["exactly-the-limit", "one-byte-over"])
def test_max_member_bytes_boundary_for_a_plain_tar_file(tmp_path: Path, over: int) -> None:
    """A tar of documents (no compressed members) is one unit: the file's size is its size."""
    path = tmp_path / "docs.tar"
    path.write_bytes(inner_tar(MEMBER_DOCS))
    limit = path.stat().st_size - over
    got, _, error = read_all(path, max_member_bytes=limit)
    if over == 0:
        assert error is None
        assert got == {n: d.decode() for n, d in MEMBER_DOCS.items()}
    else:
        assert isinstance(error, MemberTooLarge), repr(error)
        assert error.path == str(path) and f"max_member_bytes={limit}" in str(error)


# -- max_errors ----------------------------------------------------------------------------


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("max_errors", [0, 1, 2, 3])
def test_max_errors_boundary(tmp_path: Path, max_errors: int) -> None:
    """Two bad documents: ``max_errors`` of 2 or more allows both; fewer ends the run."""
    docs = {"a.txt": b"good", "bad-1.txt": b"\xff bad", "b.txt": b"good too", "bad-2.txt": b"\xfe"}
    tar = outer_tar(tmp_path / "t.tar", [("m_data.xz", xz_member(docs))])
    got, stats, error = read_all(tar, on_error="skip", max_errors=max_errors)
    if max_errors >= 2:
        assert error is None
        assert got == {"a.txt": "good", "b.txt": "good too"}
        assert stats is not None and stats.skipped_documents == 2
    else:
        assert isinstance(error, TooManyErrors), repr(error)
        assert str(error).startswith(f"{max_errors + 1} skipped, more than max_errors={max_errors}")


# -- take ----------------------------------------------------------------------------------


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("epochs", [None, 2])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_take_at_an_epoch_boundary(small_corpus: Path, epochs: int | None, delta: int) -> None:
    """``take`` of one epoch's documents (120), one fewer, one more: exactly that many, also
    with endless epochs (where a run that does not stop at ``take`` never ends)."""
    take = 120 + delta
    loader = Loader(small_corpus, workers=2, seed=3, shuffle_buffer=30, timeout=TIMEOUT)
    first_two = list(loader.replace(epochs=2))
    with loader.replace(epochs=epochs, take=take).iter() as it:
        got = list(it)
        assert it.stats.documents == take
    assert got == first_two[:take]


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("take", [19, 20, 21, 40])
def test_take_at_a_block_boundary(small_corpus: Path, take: int) -> None:
    """Blocks of one unit (20 documents): ``take`` just before, at and after a block's end."""
    loader = Loader(small_corpus, workers=2, seed=1, shuffle_buffer=0, timeout=TIMEOUT)
    full = list(loader)
    with loader.replace(take=take).iter() as it:
        got = list(it)
        state = it.state_dict()
    assert got == full[:take]
    assert state["counters"].get("documents", 0) == take
    assert list(loader.iter(state=state)) == full[take:]


# -- formats.detect --------------------------------------------------------------------------


def test_detect_needs_exactly_the_magic_of_a_tar() -> None:
    head = inner_tar({"a.txt": b"x"})[:512]
    assert head[257:262] == b"ustar"
    assert detect(head[:262]) == TAR  # the shortest head holding the whole magic
    assert detect(head[:261]) is None


# -- tarwalk: the end of the data ---------------------------------------------------------


def _one_entry(size: int) -> bytes:
    """A tar of one ``size``-byte file, without padding or end-of-archive blocks."""
    buf = inner_tar({"only.txt": b"d" * size}, tarfile.USTAR_FORMAT)
    return buf[: 512 + size]


@pytest.mark.parametrize("size", [0, 1, 511, 512, 513])
def test_walk_entry_ending_exactly_at_the_end_of_the_data(size: int) -> None:
    buf = _one_entry(size)
    assert walk(buf) == (["only.txt"], [512], [size])
    padded = buf + bytes(-len(buf) % 512)  # tarfile wants the last block whole
    assert walk(padded) == walk(buf)
    with tarfile.open(fileobj=io.BytesIO(padded)) as tar:
        assert [(m.name, m.offset_data, m.size) for m in tar] == [("only.txt", 512, size)]
    if size:
        with pytest.raises(TarFormatError, match="at byte 0 runs past the end"):
            walk(buf[:-1])


def test_walk_header_exactly_filling_the_data() -> None:
    buf = _one_entry(0)
    assert len(buf) == 512
    assert walk(buf).names == ["only.txt"]
    with pytest.raises(TarFormatError, match="truncated"):
        walk(buf[:511])


# -- Options: the last valid value and the first invalid one ---------------------------------

#: (field, last valid value, first invalid value, message).
VAL_FRACTION = r"val_fraction must be strictly between 0 and 1 \(0 and 1 excluded\)"
BOUNDS: list[tuple[str, Any, Any, str]] = [
    ("workers", 0, -1, "workers must be >= 0"),
    ("seed", 0, -1, "seed must be an int >= 0"),
    ("shuffle_buffer", 0, -1, "shuffle_buffer must be >= 0"),
    ("epoch", 0, -1, "epoch must be >= 0"),
    ("epochs", 1, 0, "epochs must be None or >= 1"),
    ("val_fraction", 1e-9, 0.0, VAL_FRACTION),
    ("val_fraction", 1 - 1e-9, 1.0, VAL_FRACTION),
    ("val_seed", 0, -1, "val_seed must be >= 0"),
    ("world_size", 1, 0, "world_size must be >= 1"),
    ("rank", 2, 3, r"rank must be in 0\.\.2"),
    ("rank", 0, -1, r"rank must be in 0\.\.2"),
    ("take", 0, -1, "take must be None or >= 0"),
    # What a state or a record holds: what numpy's int64 holds (a state said more could not be
    # resumed); a seed is any int.
    ("shuffle_buffer", 2**63 - 1, 2**63, f"shuffle_buffer must be >= 0 and at most {2**63 - 1}"),
    ("epoch", 2**63 - 2, 2**63, f"epoch must be >= 0 and at most {2**63 - 1}"),
    ("epochs", 2**63 - 1, 2**63, f"epochs must be None or >= 1 and at most {2**63 - 1}"),
    # (a state at the run's end says the epoch after it: it must be one a state holds)
    ("epoch", 2**63 - 2, 2**63 - 1, rf"epoch \+ epochs must be at most {2**63 - 1} .* not "
     rf"{2**63 - 1} \+ 1"),
    ("world_size", 2**63 - 1, 2**63, f"world_size must be >= 1 and at most {2**63 - 1}"),
    ("take", 2**63 - 1, 2**63, f"take must be None or >= 0 and at most {2**63 - 1}"),
    ("seed", 2**130, -1, "seed must be an int >= 0"),
    ("max_errors", 0, -1, "max_errors must be None or >= 0"),
    ("max_document_bytes", 1, 0, "max_document_bytes must be >= 1"),
    ("max_member_bytes", 1, 0, "max_member_bytes must be >= 1"),
    ("prefetch", 1, 0, "prefetch must be >= 1"),
    ("timeout", 1e-9, 0, "timeout must be > 0 seconds"),
]


@pytest.mark.parametrize(
    ("field", "valid", "invalid", "message"),
    BOUNDS,
    ids=[f"{b[0]}={b[1]}|{b[2]}" for b in BOUNDS],
)
def test_option_bounds(field: str, valid: Any, invalid: Any, message: str) -> None:
    extra = {"world_size": 3} if field == "rank" else {}
    assert getattr(Options(**{field: valid}, **extra), field) == valid
    with pytest.raises(ValueError, match=message):
        Options(**{field: invalid}, **extra)


def test_the_epochs_a_progress_bar_counts_are_bounded(small_corpus: Path) -> None:
    """``owt stream``'s bar counts each epoch's share of members: ``epochs=2**62`` counted
    them one epoch after another before the first document (a run that never began)."""
    corpus = Corpus.open(small_corpus)
    assert members_in_run(corpus, Options(epochs=3), None) == 3 * len(corpus.units)
    assert members_in_run(corpus, Options(epochs=2**62), None) is None


def test_reference_reader_agrees_on_the_boundary_corpus(tmp_path: Path) -> None:
    """The corpora above are what they claim: the independent reader sees every document."""
    docs = _documents_around_the_limit(1)
    tar = outer_tar(tmp_path / "t.tar", [("m_data.xz", xz_member(docs))])
    assert read_members([tar]) == {
        (tar.name, "m_data.xz"): {n: d.decode() for n, d in docs.items()}
    }
