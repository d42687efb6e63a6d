"""Reliability (issue #5): every bad input and every fault ends in a clear error or a
counted skip, never a hang or a silent loss, and leaves nothing behind.

Layout of this file:

- the leak guard (autouse): no worker, descriptor, shared-memory entry or temporary
  file outlives any test here;
- data faults x error policy (one table);
- process faults: killed and hung workers, retries;
- signals: ``owt stream`` under SIGINT / SIGTERM, and consumers that vanish;
- limits: decompression bombs and peak memory, measured in a fresh interpreter;
- policies: ``warn``, ``max_errors``, ``decode_errors``, the ``owt stream`` summary;
- a seeded fuzz test, and a soak test (``OWT_SOAK_EPOCHS``, see docs/reliability.md).

Tests marked ``xfail(strict=True, reason="BUG: ...")`` show behaviour the library does
not have yet; each is listed in docs/reliability.md. When one starts passing, pytest
fails it as XPASS: remove its marker.
"""

from __future__ import annotations

import bz2
import contextlib
import gc
import gzip
import io
import json
import logging
import lzma
import multiprocessing
import os
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from openwebtext import (
    Corpus,
    CorpusError,
    CorruptDocument,
    CorruptMember,
    Loader,
    MemberTooLarge,
    Options,
    OWTError,
    Stats,
    TooManyErrors,
    TruncatedMember,
    UnknownFormat,
    WorkerError,
)
from openwebtext import cli as owt_cli
from openwebtext.engine import Member, Reader
from openwebtext.records import Unit
from openwebtext.stream import ensure_counts
from support import (
    child_pids,
    corrupt_member,
    cut_member,
    damage,
    docs_before_cut,
    group_pids,
    inner_tar,
    member_offset,
    outer_tar,
    read_members,
    sample_docs,
    xz_member,
)

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]

#: A member in the middle of the small corpus, and the last one (corpus order).
MIDDLE = ("urlsf_subset00.tar", "openwebtext/urlsf_subset00-2_data.xz")
LAST = ("urlsf_subset01.tar", "openwebtext/urlsf_subset01-3_data.xz")

#: Hang bound for one run over a tiny corpus: far above any legitimate run.
HANG_BOUND = 30.0

Docs = dict[str, str]
Members = dict[tuple[str, str], Docs]


# -- corpus builders (the independent reader is support.read_members) --------------------


def all_but(members: Members, *excluded: tuple[str, str]) -> Docs:
    """The documents of every member except ``excluded``."""
    docs: Docs = {}
    for key, member_docs in members.items():
        if key not in excluded:
            docs.update(member_docs)
    return docs


def decoded(docs: dict[str, bytes]) -> Docs:
    """``docs`` as text."""
    return {name: data.decode() for name, data in docs.items()}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def xz_zeros(blocks: int, block_bytes: int = 16 * MiB) -> bytes:
    """A valid single-stream xz file of ``blocks * block_bytes`` zero bytes, built cheaply.

    Compresses one block of zeros once and repeats it, with an index listing every
    copy, so a 2 GiB bomb costs ~0.1 s and one 16 MiB buffer to make (streaming 2 GiB
    through ``LZMACompressor`` would take ~15 s).

    Args:
        blocks: How many copies of the block.
        block_bytes: Uncompressed size of each block.

    Returns:
        The compressed bytes (about 2.5 KB per 16 MiB block).
    """
    one = lzma.compress(bytes(block_bytes), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=0)
    header, footer = one[:12], one[-12:]
    index_size = (struct.unpack("<I", footer[4:8])[0] + 1) * 4
    index = one[-12 - index_size : -12]
    block = one[12 : -12 - index_size]
    count, pos = _read_varint(index, 1)
    unpadded, pos = _read_varint(index, pos)
    size, _ = _read_varint(index, pos)
    assert (index[0], count, size) == (0, 1, block_bytes)
    body = b"\x00" + _varint(blocks) + (_varint(unpadded) + _varint(size)) * blocks
    body += bytes(-len(body) % 4)
    new_index = body + struct.pack("<I", zlib.crc32(body))
    flags = footer[8:10]
    backward = struct.pack("<I", len(new_index) // 4 - 1)
    new_footer = struct.pack("<I", zlib.crc32(backward + flags)) + backward + flags + b"YZ"
    return header + block * blocks + new_index + new_footer


def flip_bit(path: Path, offset: int, mask: int = 0x10) -> None:
    """Flip the bits of ``mask`` in the byte of ``path`` at ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        byte = f.read(1)[0]
    damage(path, offset, bytes([byte ^ mask]))


def copy_corpus(small_corpus: Path, tmp_path: Path) -> Path:
    """A private copy of the small corpus, to damage."""
    return Path(shutil.copytree(small_corpus, tmp_path / "corpus"))


# -- running a loader ---------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run delivered, and how it ended."""

    docs: Docs
    stats: Stats | None
    error: OWTError | None
    at_open: bool


def run(paths: Path | list[Path], **options: Any) -> Outcome:
    """Read everything; return the documents (asserting none comes twice) and the end.

    Only the library's own errors are caught: anything else fails the calling test.
    """
    targets = [str(p) for p in paths] if isinstance(paths, list) else str(paths)
    try:
        loader = Loader(targets, **options)
    except OWTError as exc:
        return Outcome({}, None, exc, True)
    docs: Docs = {}
    it = loader.iter()
    try:
        for doc in it:
            assert doc.name not in docs, f"{doc.name} delivered twice"
            docs[doc.name] = doc.text
    except OWTError as exc:
        return Outcome(docs, it.stats, exc, False)
    finally:
        it.close()
    return Outcome(docs, it.stats, None, False)


# -- the leak guard ---------------------------------------------------------------------


def _fd_table() -> dict[str, str]:
    """This process's open descriptors and what each points at."""
    table = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            table[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used
            continue
    return table


#: Names that multiprocessing, shared memory or this library would give to what it leaves.
OURS = re.compile(r"^(pymp-|psm_|wnsm_|sem\.|mp-)|owt|openwebtext")


def _entries(folder: str) -> set[str]:
    """Entries of a shared folder (other programs use it too) that could be ours."""
    try:
        return {e for e in os.listdir(folder) if OURS.search(e)}
    except FileNotFoundError:
        return set()


def _lasting_new(folder: str, before: set[str]) -> set[str]:
    """Entries of ``folder`` not in ``before``, ignoring ones another process removes soon."""
    new = _entries(folder) - before
    if new:
        time.sleep(0.5)
        new &= _entries(folder)
    return new


@contextlib.contextmanager
def no_leaks(private: Path) -> Iterator[Path]:
    """Fail if the code run inside leaves a worker, a descriptor, a /dev/shm entry or a temp file.

    ``TMPDIR`` points at ``private``, a new empty folder, inherited by workers and
    subprocesses: every temporary file or folder made meanwhile by this test's processes
    (with ``tempfile``, and multiprocessing's ``pymp-*`` folder, whose per-process cache
    is cleared for the while) lands there, and it must still be empty at the end. So only
    what this test's processes made is looked at: the system temp folder, where other
    programs on the machine make ``pymp-*`` or ``owt-ray-*`` folders at any time, is not.
    /dev/shm (names do not follow ``TMPDIR``) must gain no lasting entry named like ours.
    """
    private.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(private))
        patch.setattr(tempfile, "tempdir", None)
        # A pymp-* folder made before would stand outside ``private``, unseen.
        patch.delitem(multiprocessing.process.current_process()._config, "tempdir", False)
        shm = _entries("/dev/shm")
        fds = _fd_table()
        yield private
        assert child_pids() == [], "worker processes left behind"
        assert _fd_table() == fds, "file descriptors left open"
        assert list(private.iterdir()) == [], "temporary files left behind"
        assert _lasting_new("/dev/shm", shm) == set(), "shared memory left behind"


@pytest.fixture(autouse=True)
def leaves_nothing_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test here runs under ``no_leaks``."""
    with no_leaks(tmp_path_factory.mktemp("guard") / "private-tmp") as private:
        yield private


_MAKE_TEMP_FOLDER = "import tempfile; print(tempfile.mkdtemp(prefix={!r}))"


def test_the_leak_guard_fails_on_our_leaks_only(tmp_path: Path) -> None:
    """A temp folder left by this test's processes fails it; one of another program does not."""
    system_tmp = "/tmp"
    with no_leaks(tmp_path / "others"):  # another program, with its own TMPDIR
        other = subprocess.run(
            [sys.executable, "-c", _MAKE_TEMP_FOLDER.format("owt-ray-")],
            env={**os.environ, "TMPDIR": system_tmp}, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    os.rmdir(other)
    assert Path(other).parent == Path(system_tmp)
    ours = tmp_path / "ours"
    with pytest.raises(AssertionError, match="temporary files left behind"), no_leaks(ours):
        # A child of this test.
        subprocess.run([sys.executable, "-c", _MAKE_TEMP_FOLDER.format("pymp-")], check=True)
    assert [p.name[:5] for p in ours.iterdir()] == ["pymp-"]


@pytest.fixture(scope="module")
def pristine(small_corpus: Path) -> Members:
    """The small corpus's documents per member, read without the library."""
    return read_members(sorted(small_corpus.glob("*.tar")))


# -- data faults x policy ---------------------------------------------------------------


@dataclass
class Case:
    """A damaged corpus and what each policy must make of it.

    Attributes:
        paths: What to open.
        good: Every document that must still be delivered under ``skip``.
        errors: The exact error types acceptable under ``raise``.
        path: The error's ``.path``.
        member: The member at fault: the error's ``.member``, named in skips.
        document: The error's ``.document`` (None for member-level errors).
        message: A regex the error's message must match.
        skipped_members: Members ``skip`` must count as skipped whole.
        partial_members: Members cut short whose documents before the cut ``skip`` delivers.
        skipped_documents: Documents ``skip`` must count.
        options: Extra loader options (limits).
        raise_names_member: Whether the error under ``raise`` is checked for ``member``.
    """

    paths: list[Path]
    good: Docs
    errors: tuple[type[OWTError], ...]
    path: str
    member: str | None
    document: str | None
    message: str
    skipped_members: int = 0
    skipped_documents: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    raise_names_member: bool = True
    partial_members: int = 0


A, B, U = sample_docs("a", 5), sample_docs("b", 4), sample_docs("u", 3)


def _three(tmp_path: Path, name: str, middle: bytes) -> Path:
    """An outer tar: member ``a_data.xz`` (docs A), ``middle`` as ``name``, ``b_data.xz`` (B)."""
    return outer_tar(
        tmp_path / "t.tar",
        [("a_data.xz", xz_member(A)), (name, middle), ("b_data.xz", xz_member(B))],
    )


def case_truncated_outer(tmp_path: Path, small: Path, members: Members) -> Case:
    corpus = copy_corpus(small, tmp_path)
    tar = corpus / LAST[0]
    offset, size = member_offset(tar, LAST[1])
    os.truncate(tar, offset + size // 2)
    kept = docs_before_cut(tar.read_bytes()[offset:])  # an interrupted download keeps these
    assert kept
    return Case(
        [corpus], all_but(members, LAST) | kept, (TruncatedMember,), str(tar), LAST[1], None,
        r"file is truncated", partial_members=1,
    )  # fmt: skip


def case_truncated_member(tmp_path: Path, small: Path, members: Members) -> Case:
    cut = cut_member(sample_docs("c", 5))
    kept = docs_before_cut(cut)
    assert kept
    tar = _three(tmp_path, "c_data.xz", cut)
    return Case(
        [tar], decoded(A | B) | kept, (TruncatedMember,), str(tar), "c_data.xz", None,
        r"corrupt xz data: compressed data ends before", partial_members=1,
    )  # fmt: skip


def case_bit_flip(tmp_path: Path, small: Path, members: Members) -> Case:
    corpus = copy_corpus(small, tmp_path)
    tar = corpus / MIDDLE[0]
    offset, size = member_offset(tar, MIDDLE[1])
    flip_bit(tar, offset + size // 2)
    return Case(
        [corpus], all_but(members, MIDDLE), (CorruptMember,), str(tar), MIDDLE[1], None,
        r"corrupt xz data", skipped_members=1,
    )  # fmt: skip


def case_zero_length_member(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "z_data.xz", b"")
    return Case(
        [tar], decoded(A | B), (CorruptMember, UnknownFormat), str(tar), "z_data.xz", None,
        r".", skipped_members=1,
    )  # fmt: skip


def case_not_compressed(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "n_data.xz", b"plain words, not compressed data\n" * 40)
    return Case(
        [tar], decoded(A | B), (UnknownFormat,), str(tar), "n_data.xz", None,
        r"member is not a tar, or xz, gzip, bzip2 or zstd data", skipped_members=1,
    )  # fmt: skip


def case_invalid_utf8(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "u_data.xz", xz_member({**U, "u-bad.txt": b"caf\xe9 is latin-1"}))
    return Case(
        [tar], decoded(A | U | B), (CorruptDocument,), str(tar), "u_data.xz", "u-bad.txt",
        r"invalid UTF-8 at byte 3", skipped_documents=1,
    )  # fmt: skip


def case_oversized_document(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "o_data.xz", xz_member({**U, "u-big.txt": b"x" * 5000}))
    return Case(
        [tar], decoded(A | U | B), (CorruptDocument,), str(tar), "o_data.xz", "u-big.txt",
        r"document of 5000 bytes passes max_document_bytes=4096", skipped_documents=1,
        options={"max_document_bytes": 4096},
    )  # fmt: skip


def case_small_bomb(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "bomb_data.xz", lzma.compress(bytes(8 * MiB), preset=0))
    return Case(
        [tar], decoded(A | B), (MemberTooLarge,), str(tar), "bomb_data.xz", None,
        r"decompresses to more than max_member_bytes=1048576", skipped_members=1,
        options={"max_member_bytes": MiB},
    )  # fmt: skip


def case_trailing_garbage(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "g_data.xz", xz_member(U) + b"not another stream" * 8)
    return Case(
        [tar], decoded(A | B), (CorruptMember,), str(tar), "g_data.xz", None,
        r"trailing garbage", skipped_members=1,
    )  # fmt: skip


def case_multi_stream_bomb(tmp_path: Path, small: Path, members: Members) -> Case:
    part = lzma.compress(bytes(600 << 10), preset=0)  # each stream alone is under the limit
    tar = _three(tmp_path, "ms_data.xz", part * 4)
    return Case(
        [tar], decoded(A | B), (MemberTooLarge,), str(tar), "ms_data.xz", None,
        r"decompresses to more than max_member_bytes=1048576", skipped_members=1,
        options={"max_member_bytes": MiB},
    )  # fmt: skip


CASES: dict[str, Callable[[Path, Path, Members], Case]] = {
    "truncated-outer-tar": case_truncated_outer,
    "truncated-member": case_truncated_member,
    "bit-flipped-member": case_bit_flip,
    "zero-length-member": case_zero_length_member,
    "member-not-compressed": case_not_compressed,
    "invalid-utf8": case_invalid_utf8,
    "document-over-limit": case_oversized_document,
    "small-bomb": case_small_bomb,
    "trailing-garbage": case_trailing_garbage,
    "multi-stream-bomb": case_multi_stream_bomb,
}

XFAIL: dict[tuple[str, str], str] = {}


def _params() -> list[Any]:
    """Every case under raise and skip, with the known gaps marked xfail."""
    params = []
    for name in CASES:
        for policy in ("raise", "skip"):
            reason = XFAIL.get((name, policy))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(name, policy, marks=marks, id=f"{name}-{policy}"))
    return params


def where(path: str, member: str | None) -> str:
    """How the library names a member: ``file[member]``."""
    return f"{path}[{member}]"


@pytest.mark.parametrize(("name", "policy"), _params())
def test_data_fault(
    name: str, policy: str, tmp_path: Path, small_corpus: Path, pristine: Members
) -> None:
    """Each damaged input: raise names file, member, document; skip counts and delivers the rest."""
    case = CASES[name](tmp_path, small_corpus, pristine)
    results = [run(case.paths, workers=2, on_error=policy, **case.options) for _ in range(2)]
    first, second = results
    if policy == "raise":
        error = first.error
        assert error is not None, f"no error; delivered {len(first.docs)} documents"
        assert type(error) in case.errors, repr(error)
        assert isinstance(error, CorpusError)
        assert error.path == case.path
        assert re.search(case.message, error.message), error.message
        if case.raise_names_member:
            assert error.member == case.member
            assert where(case.path, case.member) in str(error)
        assert getattr(error, "document", None) == case.document
        if case.document is not None:
            assert f"(document {case.document})" in str(error)
        assert all(case.good.get(n) == text for n, text in first.docs.items())
    else:
        assert first.error is None, repr(first.error)
        assert first.docs == case.good  # every good document, byte-exact, once
        stats = first.stats
        assert stats is not None
        assert (stats.skipped_members, stats.skipped_documents, stats.partial_members) == (
            case.skipped_members,
            case.skipped_documents,
            case.partial_members,
        )
        assert stats.documents == len(case.good)
        assert stats.replaced_documents == 0
        assert len(stats.skipped) == (
            case.skipped_members + case.skipped_documents + case.partial_members
        )
        assert all(where(case.path, case.member) in s for s in stats.skipped), stats.skipped
        if case.document is not None:
            assert f"(document {case.document})" in stats.skipped[0]
    # An immediate second run over the same folders behaves the same.
    assert (type(second.error), second.docs, second.stats) == (
        type(first.error),
        first.docs,
        first.stats,
    )


# -- damage that is easy to miss: outer headers, concatenated streams ----------------------


@pytest.mark.parametrize("how", ["bit-flip-in-header", "cut-inside-header", "cut-at-header"])
def test_damaged_outer_header_is_not_a_silent_loss(
    how: str, tmp_path: Path, small_corpus: Path, pristine: Members
) -> None:
    """A damaged outer header is an error naming the file under raise; under skip the file
    is skipped, counted and named."""
    corpus = copy_corpus(small_corpus, tmp_path)
    tar = corpus / MIDDLE[0]
    header = member_offset(tar, MIDDLE[1])[0] - 512
    if how == "bit-flip-in-header":
        flip_bit(tar, header + 10)  # inside the member's name: the checksum no longer matches
    else:
        os.truncate(tar, header + (100 if how == "cut-inside-header" else 0))
    outcome = run(corpus, workers=2, on_error="raise")
    assert isinstance(outcome.error, CorpusError)
    assert outcome.error.path == str(tar)
    outcome = run(corpus, workers=2, on_error="skip")
    assert outcome.error is None and outcome.stats is not None
    assert outcome.stats.skipped_files == 1
    assert [s for s in outcome.stats.skipped if s.startswith(str(tar)) and "kept the 1 " in s]
    # The members before the damaged header are intact: skip keeps them.
    lost = [key for key in pristine if key[0] == MIDDLE[0] and key[1] >= MIDDLE[1]]
    assert outcome.docs == all_but(pristine, *lost)


def test_truncated_outer_tar_names_the_cut_member(tmp_path: Path, small_corpus: Path) -> None:
    """The error for an outer tar cut inside a member's data names that member (when read)."""
    corpus = copy_corpus(small_corpus, tmp_path)
    tar = corpus / LAST[0]
    offset, size = member_offset(tar, LAST[1])
    os.truncate(tar, offset + size // 2)
    with pytest.raises(CorpusError) as info:
        list(Loader(corpus))
    assert (info.value.path, info.value.member) == (str(tar), LAST[1])


@pytest.mark.parametrize("codec", ["xz", "gzip", "bzip2"])
def test_multi_stream_member_is_read_whole(codec: str, tmp_path: Path) -> None:
    """A member of concatenated streams (pbzip2, bgzip, ``cat a.xz b.xz``) is read whole."""
    codecs: dict[str, Callable[[bytes], bytes]] = {
        "xz": lzma.compress,
        "gzip": gzip.compress,
        "bzip2": bz2.compress,
    }
    compress = codecs[codec]
    docs = sample_docs("m", 10)
    data = inner_tar(docs)
    cut = 512 * 8  # a header boundary: each stream alone is a valid piece of the tar
    tar = outer_tar(tmp_path / "m.tar", [("m_data.x", compress(data[:cut]) + compress(data[cut:]))])
    outcome = run(tar, workers=1)
    assert outcome.error is None
    assert outcome.docs == decoded(docs)


def test_many_tiny_streams_take_linear_time(tmp_path: Path) -> None:
    """80,000 empty xz streams after a real one (2.5 MB): read well within a 3 s timeout."""
    member = xz_member(A) + lzma.compress(b"") * 80_000
    tar = outer_tar(tmp_path / "streams.tar", [("s_data.xz", member)])
    outcome = run(tar, workers=1, timeout=3.0)  # linear: ~0.5 s; quadratic: ~12 s
    assert outcome.error is None, repr(outcome.error)
    assert outcome.docs == decoded(A)


# -- links, special files and hostile names ---------------------------------------------


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o755
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tar of ``(header, data)`` entries; ``data`` None for non-regular entries."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return out.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_links_devices_and_directories_are_ignored_and_names_are_never_paths(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Non-regular members are ignored in outer and inner tars; no name is ever written to."""
    token = f"owt-evil-{os.getpid()}-{policy}"
    hostile = [f"../../{token}", f"/etc/{token}", f"/tmp/{token}"]
    specials = [
        _special(hostile[0], tarfile.SYMTYPE, "/etc/passwd"),
        _special(hostile[1], tarfile.LNKTYPE, "doc-0.txt"),
        _special(hostile[2], tarfile.CHRTYPE),
        _special("sub/", tarfile.DIRTYPE),
        _special("fifo", tarfile.FIFOTYPE),
        _special("disk", tarfile.BLKTYPE),
    ]
    docs = {f"doc-{k}.txt": f"document {k}\n".encode() for k in range(8)}
    docs |= {f"{name}.txt": f"hostile name {name}\n".encode() for name in hostile}
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for k, (name, data) in enumerate(docs.items()):  # specials between regular files
        entries.append(_file(name, data))
        if k < len(specials):
            entries.append((specials[k], None))
    inner = _tar(entries)
    with tarfile.open(fileobj=io.BytesIO(inner)) as check:  # the specials are really there
        assert {m.type for m in check} >= {m.type for m in specials}
    member = lzma.compress(inner)
    outer = tmp_path / "outer.tar"
    outer_entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for k, name in enumerate(["good_data.xz", f"../../{token}.xz"]):
        outer_entries += [
            _file(name, member),
            (_special(f"{name}-link{k}", tarfile.SYMTYPE, f"/etc/{token}"), None),
            (_special(f"/etc/{token}-hard{k}", tarfile.LNKTYPE, name), None),
        ]
    outer_entries += [
        (_special("openwebtext/", tarfile.DIRTYPE), None),
        (_special(f"/dev/{token}", tarfile.CHRTYPE), None),
    ]
    outer.write_bytes(_tar(outer_entries))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = sorted(os.listdir(tmp_path))

    with Loader(str(outer), workers=2, on_error=policy, shuffle=False).iter() as it:
        got = [(d.member, d.name, d.text) for d in it]
        stats = it.stats

    want = [
        (m, name, text)
        for m in ("good_data.xz", f"{token}.xz")
        for name, text in decoded(docs).items()
    ]
    assert got == want  # regular documents only, in order, hostile names as plain strings
    assert (stats.skipped_members, stats.skipped_documents) == (0, 0)
    assert os.listdir(cwd) == []
    assert sorted(os.listdir(tmp_path)) == before
    written = [*hostile, *(f"{h}.txt" for h in hostile), f"../../{token}.xz", f"/dev/{token}"]
    written += [f"/etc/{token}-hard{k}" for k in (0, 1)]
    for name in written:
        assert not (cwd / name).exists(), name  # absolute names replace cwd


# -- process faults ---------------------------------------------------------------------


def _fault_on(member: str, action: str, attempts: Path, times: int | None) -> Callable[..., Member]:
    """A ``Reader.read`` that kills or hangs its worker on ``member`` (the first ``times`` times).

    Each attempt at ``member`` appends the worker's pid to ``attempts``. Workers are forked,
    so they inherit the patch.
    """
    real = Reader.read

    def read(self: Reader, unit: Unit) -> Member:
        if unit.member == member:
            with open(attempts, "a") as f:
                f.write(f"{os.getpid()}\n")
            if times is None or len(attempts.read_text().split()) <= times:
                if action == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(3600)  # a hang: the pool must kill us after `timeout`
        return real(self, unit)

    return read


@pytest.mark.parametrize("action", ["kill", "hang"])
@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_worker_killed_or_hung_every_time(
    action: str,
    policy: str,
    small_corpus: Path,
    pristine: Members,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """raise: a WorkerError naming file and member; skip: one retry, then a counted skip."""
    attempts = tmp_path / "attempts"
    monkeypatch.setattr(Reader, "read", _fault_on(MIDDLE[1], action, attempts, None))
    start = time.monotonic()
    outcome = run(small_corpus, workers=2, on_error=policy, timeout=1.0)
    assert time.monotonic() - start < HANG_BOUND  # a bound against hanging, not a speed check
    why = "exited with code -9" if action == "kill" else "sent nothing for 1 s"
    blamed = re.escape(where(str(small_corpus / MIDDLE[0]), MIDDLE[1]))
    named = rf"worker \d+ \(pid \d+\) {why} while reading {blamed}"
    pids = attempts.read_text().split()
    if policy == "raise":
        assert isinstance(outcome.error, WorkerError)
        assert re.fullmatch(named, str(outcome.error)), str(outcome.error)
        assert (outcome.error.path, outcome.error.member) == (
            str(small_corpus / MIDDLE[0]),
            MIDDLE[1],
        )
        assert len(pids) == 1
        assert set(outcome.docs) <= set(all_but(pristine, MIDDLE))
    else:
        assert outcome.error is None
        assert len(pids) == 2 and pids[0] != pids[1]  # retried once, on another process
        assert outcome.docs == all_but(pristine, MIDDLE)
        stats = outcome.stats
        assert stats is not None
        assert (stats.skipped_members, stats.skipped_documents) == (1, 0)
        assert re.fullmatch(named, stats.skipped[0]), stats.skipped


@pytest.mark.parametrize("action", ["kill", "hang"])
def test_worker_killed_or_hung_once_is_retried(
    action: str,
    small_corpus: Path,
    pristine: Members,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """skip: the unit of a worker that died or hung once is read again; nothing is lost."""
    attempts = tmp_path / "attempts"
    monkeypatch.setattr(Reader, "read", _fault_on(MIDDLE[1], action, attempts, 1))
    outcome = run(small_corpus, workers=2, on_error="skip", timeout=1.0)
    assert outcome.error is None
    assert outcome.docs == all_but(pristine)
    assert outcome.stats is not None and outcome.stats.skipped == ()
    assert len(attempts.read_text().split()) == 2


def test_retry_runs_on_a_fresh_worker(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """skip: a blamed unit is read again by the worker spawned to replace the dead one."""
    log = tmp_path / "reads"
    real = Reader.read

    def read(self: Reader, unit: Unit) -> Member:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {unit.member}\n")
        if unit.member == LAST[1] and log.read_text().count(LAST[1]) == 1:
            time.sleep(1.0)  # the other worker finishes its units and falls idle meanwhile
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, unit)

    monkeypatch.setattr(Reader, "read", read)
    outcome = run(small_corpus, workers=2, shuffle=False, on_error="skip")
    assert outcome.error is None and len(outcome.docs) == 120
    reads = [line.split() for line in log.read_text().splitlines()]
    first = next(k for k, (_, member) in enumerate(reads) if member == LAST[1])
    retry_pid = [pid for pid, member in reads if member == LAST[1]][1]
    assert retry_pid not in {pid for pid, _ in reads[: first + 1]}


def test_consumer_slower_than_timeout_is_not_a_hang(small_corpus: Path, pristine: Members) -> None:
    """Pauses of the consumer longer than ``timeout`` do not count against the workers."""
    docs: Docs = {}
    with Loader(
        str(small_corpus), workers=2, timeout=1.0, shuffle_buffer=0, prefetch=1
    ).iter() as it:
        for k, doc in enumerate(it):
            if k in (0, 70):
                time.sleep(2.0)  # the workers' results wait, unread, for twice the timeout
            docs[doc.name] = doc.text
    assert docs == all_but(pristine)


def test_skipping_never_sleeps(
    tmp_path: Path, small_corpus: Path, pristine: Members, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``time.sleep`` (consumer or workers) while skipping bad data and a dead worker."""
    corpus = copy_corpus(small_corpus, tmp_path)
    offset, size = member_offset(corpus / LAST[0], LAST[1])
    flip_bit(corpus / LAST[0], offset + size // 2)
    calls = tmp_path / "sleeps"
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        with open(calls, "a") as f:
            f.write(f"{os.getpid()} {seconds}\n")
        real_sleep(seconds)

    monkeypatch.setattr(Reader, "read", _fault_on(MIDDLE[1], "kill", tmp_path / "a", None))
    with monkeypatch.context() as patch:
        patch.setattr(time, "sleep", sleep)
        outcome = run(corpus, workers=2, on_error="skip")
    assert outcome.stats is not None and outcome.stats.skipped_members == 2
    assert outcome.docs == all_but(pristine, MIDDLE, LAST)
    assert not calls.exists(), calls.read_text()


@pytest.mark.parametrize("how", ["break", "del"])
def test_abandoned_iterator_stops_its_workers_at_once(how: str, small_corpus: Path) -> None:
    """Dropping a running iterator stops its workers at once, without the cyclic GC."""
    gc.disable()
    try:
        if how == "break":
            for _ in Loader(str(small_corpus), workers=2):
                break
        else:
            it = Loader(str(small_corpus), workers=2).iter()
            next(it)
            assert len(child_pids()) == 2
            del it
        assert child_pids() == []
    finally:
        gc.enable()
        gc.collect()


# -- signals and vanished consumers --------------------------------------------------------


def test_ctrl_c_in_a_program_stops_the_workers(small_corpus: Path) -> None:
    """SIGINT in a consumer's own loop: KeyboardInterrupt, and the with-block stops the workers."""
    with pytest.raises(KeyboardInterrupt), Loader(str(small_corpus), workers=2).iter() as it:
        for k, _ in enumerate(it):
            assert len(child_pids()) == 2
            if k == 10:
                signal.raise_signal(signal.SIGINT)
    assert child_pids() == []


#: ``owt`` with ``Reader.read`` hanging on one member: argv = marker member owt-args...
HANGING_OWT = """
import os, sys, time
from pathlib import Path
from openwebtext import cli
from openwebtext.engine.read import Reader
marker, member = Path(sys.argv[1]), sys.argv[2]
real = Reader.read
def read(self, unit):
    if unit.member.endswith(member):
        marker.write_text(str(os.getpid()))
        time.sleep(3600)
    return real(self, unit)
Reader.read = read
sys.exit(cli.main(sys.argv[3:]))
"""


def _owt(*args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``owt`` in a new session (its process group is ours to signal and check)."""
    return subprocess.Popen(
        [sys.executable, "-m", "openwebtext.cli", *args], start_new_session=True, **popen
    )


def _wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a process group this test started."""
    for pid in group_pids(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("policy", ["raise", "skip"])
@pytest.mark.parametrize("target", ["group", "main"])
def test_sigint_stops_owt_stream(
    target: str, policy: str, small_corpus: Path, pristine: Members
) -> None:
    """Ctrl-C (to the process group, or to owt alone): exit 130, one line, no traceback."""
    # --jsonl into a pipe nobody reads: owt blocks mid-stream with its workers alive.
    proc = _owt(
        "stream", str(small_corpus), "-j", "2", "--jsonl", "--shuffle-buffer", "0",
        "--on-error", policy, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert _wait_until(lambda: len(group_pids(proc.pid)) >= 3, 60), "owt did not start"
        time.sleep(0.3)
        (os.killpg if target == "group" else os.kill)(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_BOUND)
    finally:
        _kill_group(proc.pid)
        proc.wait()
    assert proc.returncode == 130
    text = err.decode()
    assert "Traceback" not in text
    assert text.rstrip().endswith("interrupted")
    assert re.search(r"^\d+ documents, ", text, re.M)
    assert group_pids(proc.pid) == []
    # Whole records only (an interrupted write may drop some, never garble one).
    delivered = [json.loads(line) for line in out.split(b"\n") if line]
    texts = all_but(pristine)
    assert all(texts[r["name"]] == r["text"] for r in delivered)
    assert run(small_corpus, workers=2).docs == texts  # and the next run works


def test_sigint_while_a_worker_hangs(small_corpus: Path, tmp_path: Path) -> None:
    """Ctrl-C while a worker is stuck in a member: the stuck worker is killed too."""
    marker = tmp_path / "hanging"
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_OWT, str(marker), MIDDLE[1].rsplit("/")[-1],
         "stream", str(small_corpus), "-j", "2", "-q", "--no-shuffle"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert _wait_until(marker.exists, 60), "the worker never reached the member"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_BOUND)
    finally:
        _kill_group(proc.pid)
        proc.wait()
    assert proc.returncode == 130
    assert "Traceback" not in err.decode() and "interrupted" in err.decode()
    assert group_pids(proc.pid) == []


def test_sigterm_ends_owt_stream_and_its_workers(small_corpus: Path) -> None:
    """SIGTERM, as SIGINT: owt stops its workers and exits 143, even blocked on a pipe
    nobody reads (it gives the reader ``GRACE_SECONDS`` to take the line being written)."""
    proc = _owt(
        "stream", str(small_corpus), "-j", "2", "--jsonl", "--shuffle-buffer", "0",
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert _wait_until(lambda: len(group_pids(proc.pid)) >= 3, 60), "owt did not start"
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=HANG_BOUND) == 143
        assert _wait_until(lambda: group_pids(proc.pid) == [], 10), group_pids(proc.pid)
    finally:
        _kill_group(proc.pid)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.fixture(scope="module")
def consumer_killed(
    small_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, bool]:
    """SIGKILL an ``owt stream`` whose worker 1 hangs (worker 0 idle); who is alive 3 s later?"""
    marker = tmp_path_factory.mktemp("consumer-killed") / "hanging"
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_OWT, str(marker), MIDDLE[1].rsplit("/")[-1],
         "stream", str(small_corpus), "-j", "2", "-q", "--no-shuffle", "--shuffle-buffer", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        assert _wait_until(marker.exists, 60), "the worker never reached the member"
        time.sleep(0.5)  # worker 0 reads its other units and waits for more
        workers = [pid for pid in group_pids(proc.pid) if pid != proc.pid]
        hung = int(marker.read_text())
        assert hung in workers and len(workers) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _wait_until(lambda: group_pids(proc.pid) == [], 3)
        alive = set(group_pids(proc.pid))
        return {"hung": hung in alive, "idle": bool(alive - {hung})}
    finally:
        _kill_group(proc.pid)
        proc.wait()
        _wait_until(lambda: group_pids(proc.pid) == [], 10)


def test_idle_worker_exits_when_its_consumer_dies(consumer_killed: dict[str, bool]) -> None:
    """An idle worker sees EOF on its task pipe (no sibling holds it open) and exits."""
    assert not consumer_killed["idle"]


def test_hung_worker_dies_with_its_consumer(consumer_killed: dict[str, bool]) -> None:
    """A worker stuck inside a member dies with its consumer (SIGKILL, OOM killer)."""
    assert not consumer_killed["hung"]


# -- limits and peak memory ------------------------------------------------------------


#: Read a corpus under raise and under skip; print the outcome and peak RSS as JSON.
PEAK_RSS = """
import json, resource, sys, time
from openwebtext import Loader, OWTError
path, limit = sys.argv[1], int(sys.argv[2])
result = {}
start = time.monotonic()
for policy in ("raise", "skip"):
    try:
        with Loader(path, workers=1, on_error=policy, max_member_bytes=limit).iter() as it:
            names = sorted(d.name for d in it)
            result[policy] = {"documents": names, "skipped": list(it.stats.skipped)}
    except OWTError as exc:
        result[policy] = {"error": type(exc).__name__, "path": getattr(exc, "path", None),
                          "member": getattr(exc, "member", None), "message": str(exc)}
result["seconds"] = time.monotonic() - start
result["worker_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
result["consumer_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def peak_rss_run(path: Path, limit: int) -> dict[str, Any]:
    """Run ``PEAK_RSS`` in a fresh interpreter (whose only children are the workers)."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(path), str(limit)],
        capture_output=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_decompression_bomb_is_stopped_by_the_limit(tmp_path: Path) -> None:
    """A 2 GiB-of-zeros xz member (~320 KB) fails fast at 64 MiB; no process nears 2 GiB."""
    bomb = xz_zeros(128)  # 128 x 16 MiB = 2 GiB decompressed
    assert len(bomb) < 400_000
    tar = outer_tar(tmp_path / "bomb.tar", [("good_data.xz", xz_member(A)), ("bomb_data.xz", bomb)])
    result = peak_rss_run(tar, 64 * MiB)
    assert result["raise"]["error"] == "MemberTooLarge"
    assert (result["raise"]["path"], result["raise"]["member"]) == (str(tar), "bomb_data.xz")
    assert "max_member_bytes=67108864" in result["raise"]["message"]
    assert result["skip"]["documents"] == sorted(A)
    assert len(result["skip"]["skipped"]) == 1 and "bomb_data.xz" in result["skip"]["skipped"][0]
    assert result["seconds"] < HANG_BOUND
    assert result["worker_peak_mib"] < 512, result  # 2048 MiB if the kernel had to stop it
    assert result["consumer_peak_mib"] < 512, result


def test_plain_tar_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A 300 MiB uncompressed unit over a 16 MiB limit is refused without being read."""
    size = 300 * MiB
    tar = tmp_path / "plain.tar"
    info = tarfile.TarInfo("big.txt")
    info.size = size
    with open(tar, "wb") as f:  # sparse: costs no disk
        f.write(info.tobuf(format=tarfile.GNU_FORMAT))
        f.truncate(512 + size + 1024)
    result = peak_rss_run(tar, 16 * MiB)
    assert result["raise"]["error"] == "MemberTooLarge"
    assert result["worker_peak_mib"] < 200, result


# -- policies: warn, max_errors, decode_errors, the owt stream summary -----------------


@pytest.fixture
def three_faults(tmp_path: Path) -> tuple[Path, Docs]:
    """An outer tar with a corrupt member, a truncated member and one invalid-UTF-8 document.

    The truncated member lacks only its xz index: its documents are all before the cut.
    """
    cut = xz_member(sample_docs("d", 3))
    tar = outer_tar(
        tmp_path / "three.tar",
        [
            ("a_data.xz", xz_member({**A, "a-bad.txt": b"\xff\xfe not UTF-8"})),
            ("c_data.xz", corrupt_member(sample_docs("c", 3))),
            ("b_data.xz", xz_member(B)),
            ("d_data.xz", cut[: len(cut) - 20]),
        ],
    )
    return tar, decoded(A | B) | docs_before_cut(cut[: len(cut) - 20])


def test_warn_logs_one_line_per_skip(
    three_faults: tuple[Path, Docs], caplog: pytest.LogCaptureFixture
) -> None:
    """warn: skip, plus one WARNING line on the "openwebtext" logger per skip."""
    tar, good = three_faults
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        outcome = run(tar, workers=2, on_error="warn", shuffle=False)
    assert outcome.error is None and outcome.docs == good
    assert outcome.stats is not None
    records = [r for r in caplog.records if r.name == "openwebtext"]
    assert [r.levelno for r in records] == [logging.WARNING] * 3
    assert [r.getMessage() for r in records] == [f"skipped: {s}" for s in outcome.stats.skipped]
    named = " ".join(outcome.stats.skipped)
    for part in ("[a_data.xz]", "(document a-bad.txt)", "[c_data.xz]", "[d_data.xz]"):
        assert part in named


def test_counting_for_even_sharding_leaves_the_warnings_to_the_stream(
    three_faults: tuple[Path, Docs], caplog: pytest.LogCaptureFixture, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """warn: the count made on first use warns nothing; the stream warns as it reads."""
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    tar, _ = three_faults
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        counted = ensure_counts(Corpus.open(tar), Options(on_error="warn", even=True))
    assert counted.counts is not None and counted.counts.documents == (len(A) + 1, 0, len(B), 3)
    assert [r.getMessage() for r in caplog.records if r.name == "openwebtext"] == []


def test_max_errors_turns_too_many_skips_into_an_error(three_faults: tuple[Path, Docs]) -> None:
    """max_errors=3 allows three skips; max_errors=2 ends the run at the third."""
    tar, good = three_faults
    enough = run(tar, workers=2, on_error="skip", max_errors=3)
    assert enough.error is None and enough.docs == good
    assert enough.stats is not None
    assert (enough.stats.skipped_members, enough.stats.skipped_documents) == (1, 1)
    assert enough.stats.partial_members == 1
    too_many = run(tar, workers=2, on_error="skip", max_errors=2, shuffle=False)
    assert isinstance(too_many.error, TooManyErrors)
    assert str(too_many.error).startswith("3 skipped, more than max_errors=2; last: ")
    assert isinstance(too_many.error.__cause__, CorpusError)
    assert str(too_many.error.__cause__) in str(too_many.error)


def test_invalid_utf8_under_replace_is_counted(three_faults: tuple[Path, Docs]) -> None:
    """decode_errors=replace: U+FFFD and a count, not a skip; corrupt members still count."""
    tar, good = three_faults
    outcome = run(tar, workers=2, on_error="skip", decode_errors="replace")
    assert outcome.stats is not None
    assert outcome.stats.replaced_documents == 1
    assert (outcome.stats.skipped_members, outcome.stats.skipped_documents) == (1, 0)
    assert outcome.docs == good | {"a-bad.txt": "\ufffd\ufffd not UTF-8"}
    assert isinstance(run(tar, workers=2, decode_errors="replace").error, CorruptMember)


@pytest.mark.parametrize("policy", ["raise", "skip", "warn"])
def test_owt_stream_reports_errors_and_skips(
    policy: str, three_faults: tuple[Path, Docs], capsys: pytest.CaptureFixture[str]
) -> None:
    """owt stream: raise exits 1 naming file, member, document; skip/warn print counts."""
    tar, good = three_faults
    code = owt_cli.main(["stream", str(tar), "-j", "2", "-q", "--no-shuffle", "--on-error", policy])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if policy == "raise":
        assert code == 1
        assert f"owt: error: {where(str(tar), 'a_data.xz')}: invalid UTF-8" in err
        return
    assert code == 0
    assert f"{len(good)} documents, " in err
    assert "skipped 1 members, 1 documents" in err
    skipped = [line for line in err.splitlines() if line.startswith("  skipped: ")]
    assert len(skipped) == 3
    assert all(f"{tar}[" in line for line in skipped)
    code = owt_cli.main(
        ["stream", str(tar), "-j", "1", "-q", "--on-error", policy, "--max-errors", "1"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "more than max_errors=1" in err


# -- fuzz -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine_units(small_corpus: Path) -> list[tuple[Any, ...]]:
    """The small corpus's index, undamaged."""
    return _unit_keys(Corpus.open(str(small_corpus)).units)


def _unit_keys(units: Iterable[Unit]) -> list[tuple[Any, ...]]:
    """What identifies each unit, wherever the corpus lies."""
    return [(os.path.basename(u.path), u.member, u.offset, u.size, u.kind) for u in units]


def _mangle(corpus: Path, rng: random.Random) -> str:
    """Damage one file of ``corpus`` at random; return what was done."""
    target = rng.choice(sorted(corpus.glob("*.tar")))
    data = bytearray(target.read_bytes())
    mode = rng.choices(["flip", "truncate", "flip+truncate", "zero-block"], [5, 2, 2, 1])[0]
    done = []
    if mode.startswith("flip"):
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            data[at] ^= rng.randrange(1, 256)
            done.append(at)
    if mode.endswith("truncate"):
        cut = rng.randrange(len(data))
        del data[cut:]
        done.append(-cut)
    if mode == "zero-block":
        at = rng.randrange(len(data))
        data[at : at + 512] = bytes(len(data[at : at + 512]))
        done.append(at)
    target.write_bytes(bytes(data))
    return f"{target.name} {mode} {done}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("seed", range(20))
def test_fuzz_damaged_corpus(
    seed: int,
    workers: int,
    tmp_path: Path,
    small_corpus: Path,
    pristine: Members,
    pristine_units: list[tuple[Any, ...]],
) -> None:
    """Random damage ends in documents or the library's errors; skip never loses silently.

    Every run ends within ``HANG_BOUND``; only ``CorpusError`` (data) errors appear, never
    a ``WorkerError`` (no process is harmed here) nor a foreign exception. Every delivered
    document is an original, byte-exact, once. When the outer tar headers survived (the
    index is unchanged), every missing document belongs to a member the run named: raise
    raises on it, skip counts it. (Damaged outer headers: see
    ``test_damaged_outer_header_is_not_a_silent_loss``.)
    """
    corpus = copy_corpus(small_corpus, tmp_path)
    what = _mangle(corpus, random.Random(f"owt-fuzz-{seed}"))
    originals = all_but(pristine)
    member_of = {name: key for key, docs in pristine.items() for name in docs}
    try:
        intact = _unit_keys(Corpus.open(str(corpus)).units) == pristine_units
    except CorpusError:
        intact = False
    outcomes = {}
    for policy in ("raise", "skip"):
        start = time.monotonic()
        outcome = outcomes[policy] = run(corpus, workers=workers, on_error=policy)
        assert time.monotonic() - start < HANG_BOUND, what
        assert all(originals.get(n) == t for n, t in outcome.docs.items()), what
        if outcome.error is not None:
            assert isinstance(outcome.error, CorpusError), f"{what}: {outcome.error!r}"
    skip, raised = outcomes["skip"], outcomes["raise"]
    if skip.at_open:
        assert raised.at_open and type(raised.error) is type(skip.error), what
        return
    assert skip.error is None and skip.stats is not None, what
    assert skip.stats.documents == len(skip.docs), what
    stats = skip.stats
    assert len(stats.skipped) == (
        stats.skipped_members + stats.skipped_files + stats.partial_members
    ), what
    assert not any(s.startswith(("worker ", "unexpected ")) for s in skip.stats.skipped), what
    if not intact:
        return
    lost = {member_of[name] for name in set(originals) - set(skip.docs)}
    named = {
        key
        for key in pristine
        if any(where(str(corpus / key[0]), key[1]) in s for s in skip.stats.skipped)
    }
    assert lost == named, what  # every loss counted, and nothing counted that was not lost
    if raised.error is None:
        assert raised.docs == originals and not lost, what
    else:
        assert isinstance(raised.error, CorruptMember), what
        key = (os.path.basename(raised.error.path or ""), raised.error.member or "")
        assert key in named, what


# -- soak --------------------------------------------------------------------------------


SOAK_PASSES = int(os.environ.get("OWT_SOAK_EPOCHS", "20"))


def _rss_kib(pid: int | str = "self") -> int:
    """Resident set size of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def _flat(samples: list[float], margin_kib: float) -> bool:
    """The median of the last few samples is within ``margin_kib`` of the first few's."""
    n = max(1, len(samples) // 4)
    return statistics.median(samples[-n:]) <= statistics.median(samples[:n]) + margin_kib


@pytest.mark.slow
@pytest.mark.timeout(60 + 5 * SOAK_PASSES)
def test_soak_many_passes_slow_consumer(small_corpus: Path, pristine: Members) -> None:
    """``OWT_SOAK_EPOCHS`` passes (new iterators, epoch=k) with a slow consumer: nothing grows.

    RSS of the consumer (after each pass) and of the workers (mid-pass) stays flat, open
    descriptors stay the same, and no child process outlives its pass.
    """
    originals = all_but(pristine)
    fds = _fd_table()
    consumer: list[float] = []
    workers: list[float] = []
    for epoch in range(SOAK_PASSES + 1):  # pass 0 warms up (imports, allocator)
        seen = 0
        with Loader(str(small_corpus), workers=2, epoch=epoch, shuffle_buffer=50).iter() as it:
            for doc in it:
                assert originals[doc.name] == doc.text
                seen += 1
                if seen % 10 == 0:
                    time.sleep(0.001)
                if seen == 60:
                    pids = child_pids()
                    assert len(pids) == 2
                    if epoch:
                        workers.append(statistics.mean(_rss_kib(p) for p in pids))
        assert seen == len(originals)
        assert child_pids() == []
        assert _fd_table() == fds
        if epoch:
            consumer.append(_rss_kib())
    assert _flat(consumer, 16 * 1024), consumer
    assert _flat(workers, 16 * 1024), workers


@pytest.mark.slow
@pytest.mark.timeout(60 + 5 * SOAK_PASSES)
def test_soak_one_iterator_many_epochs(small_corpus: Path, pristine: Members) -> None:
    """One iterator over ``OWT_SOAK_EPOCHS`` epochs: worker and consumer RSS stay flat."""
    originals = all_but(pristine)
    fds = _fd_table()
    consumer: list[float] = []
    workers: list[float] = []
    per_epoch = len(originals)
    with Loader(
        str(small_corpus), workers=2, epochs=SOAK_PASSES + 1, shuffle_buffer=50
    ).iter() as it:
        for seen, doc in enumerate(it, 1):
            assert originals[doc.name] == doc.text
            if seen % 10 == 0:
                time.sleep(0.001)
            if seen % per_epoch == per_epoch // 2 and seen > per_epoch:
                pids = child_pids()
                assert len(pids) == 2
                workers.append(statistics.mean(_rss_kib(p) for p in pids))
                consumer.append(_rss_kib())
        assert seen == per_epoch * (SOAK_PASSES + 1)
        assert it.stats.skipped == ()
    assert child_pids() == []
    assert _fd_table() == fds
    assert _flat(consumer, 16 * 1024), consumer
    assert _flat(workers, 16 * 1024), workers


# -- the documentation -------------------------------------------------------------------


def test_documented_defaults_are_the_real_ones() -> None:
    """docs/reliability.md's table of limits and policies matches ``Options()``."""
    text = (ROOT / "docs" / "reliability.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)`", text, re.M))
    defaults = Options()
    names = {
        "on_error", "max_errors", "decode_errors", "max_document_bytes",
        "max_member_bytes", "timeout", "prefetch",
    }  # fmt: skip
    assert names <= set(rows), sorted(names - set(rows))
    for name, shown in rows.items():
        assert shown == repr(getattr(defaults, name)), name
