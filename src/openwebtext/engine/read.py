"""Read: open one unit, decompress it under limits, and locate its documents.

This runs inside the workers. It returns the decompressed member as one
``bytes`` object plus the name, offset and size of every document in it, each
document already checked to be valid UTF-8. Turning those bytes into text
happens in the consumer (see ``stream``), at hand-out time, since a ``str``
cannot cross a process boundary without being encoded again.
"""

from __future__ import annotations

import lzma
import os
import re
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from openwebtext.engine.tables import Footer, Records, jsonl_records, parquet_records
from openwebtext.errors import (
    CorpusError,
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    TruncatedMember,
    UnknownFormat,
)
from openwebtext.formats import (
    MAGIC_BYTES,
    PARQUET,
    TAR,
    LimitExceeded,
    Truncated,
    decompress,
    detect,
)
from openwebtext.index import footer_of, split_jsonl_kind
from openwebtext.plan import Split, in_validation
from openwebtext.records import Unit
from openwebtext.source import RangeReader, Storage, is_url
from openwebtext.tarwalk import TarFormatError, walk
from openwebtext.tokenfiles import (
    TOKENS,
    TokenFileError,
    document_names,
    document_range,
    opened,
)

if TYPE_CHECKING:
    from openwebtext.tokenizer import Tokenizer

__all__ = ["Encoded", "Member", "Reader", "Split", "encode_member", "nanogpt_text"]

# bz2 reports corrupt data as OSError; zstandard as ZstdError, a subclass of Exception only.
_DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (
    lzma.LZMAError,
    zlib.error,
    OSError,
    EOFError,
    ValueError,
)


class Member(NamedTuple):
    """A decompressed member: its bytes and where its documents lie in them."""

    data: bytes
    names: list[str]
    offsets: list[int]
    sizes: list[int]
    dropped: list[CorruptMember]
    """Documents left out: past ``max_document_bytes``, or invalid UTF-8 under ``strict``
    (``CorruptDocument``); and a ``TruncatedMember`` when the member was cut short and
    only the documents before the cut are listed.

    Their offset is -1, as is that of documents outside the requested split.
    """
    replace: int
    """How many documents are invalid UTF-8 and kept, to decode with ``errors="replace"``."""
    texts: list[str] | None = None
    """With ``Reader(..., texts=True)``: the text of every kept document (offset >= 0), in
    order, decoded by the UTF-8 check itself (what ``encode_member`` tokenizes)."""


class Reader:
    """Reads units, keeping a few files open between them.

    ``decode_errors`` says what becomes of a document that is not valid UTF-8:
    ``strict`` leaves it out (a ``CorruptDocument`` in ``dropped``), ``replace``
    keeps it and counts it in ``Member.replace``, None does not check.

    ``texts`` is for a reader whose every document is then needed as a ``str`` (a
    tokenizing worker): each member comes with ``Member.texts``, and the UTF-8 check is
    that decode, once per document, rather than a check of the non-ASCII documents
    followed by a second decode of all of them.
    """

    def __init__(
        self,
        max_member_bytes: int,
        max_document_bytes: int,
        max_open: int = 16,
        split: Split | None = None,
        decode_errors: str | None = "strict",
        storage: Storage | None = None,
        texts: bool = False,
        token_eot: int | None = None,
        token_vocab: int | None = None,
    ):
        self.token_eot = token_eot
        """A token corpus's end-of-text id, should a worker open its file anew (spawned)."""
        self.token_vocab = token_vocab
        """A token corpus's tokenizer's vocabulary size: a document holding an id at or past
        it is a ``CorruptDocument`` (never handed to a model's embedding)."""
        self.storage = storage
        """What URLs are read with (the corpus's; None: the process's default)."""
        self.max_member_bytes = max_member_bytes
        self.max_document_bytes = max_document_bytes
        self.split = split
        self.decode_errors = decode_errors
        self.texts = texts
        """Decode every kept document into ``Member.texts``."""
        self.max_open = max_open
        self._files: dict[str, int] = {}
        self._remote: RangeReader | None = None  # made on first use: after the fork
        self._footers: dict[str, Footer] = {}  # parquet files' parsed footers

    def _fd(self, path: str) -> int:
        fd = self._files.get(path)
        if fd is None:
            if len(self._files) >= self.max_open:
                os.close(self._files.pop(next(iter(self._files))))
            fd = self._files[path] = os.open(path, os.O_RDONLY)
        return fd

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        if self._remote is not None:
            self._remote.close()
            self._remote = None

    def _ranges(self) -> RangeReader:
        if self._remote is None:
            self._remote = RangeReader(storage=self.storage)
        return self._remote

    def prefetch(self, units: Sequence[Unit]) -> None:
        """Start fetching the remote ones of ``units`` (read next, in this order)."""
        if any(is_url(u.path) for u in units):
            self._ranges().prefetch(units)

    def _raw(self, unit: Unit) -> bytes:
        if is_url(unit.path):  # by byte range (see ``ranges``)
            return self._ranges().read(unit)
        return os.pread(self._fd(unit.path), unit.size, unit.offset)

    def _cached_note(self, unit: Unit) -> str:
        """Words for a member that fails to decode from the member cache: its copy there is
        intact (checksummed) and is what the server sent, so the remote file is bad."""
        if not (is_url(unit.path) and self._remote is not None and self._remote.from_cache):
            return ""
        return (
            " (read from the member cache, whose copy is intact and is what the server sent: "
            "the remote file itself is damaged)"
        )

    def read(self, unit: Unit) -> Member:
        """Read, decompress and walk one unit (and, with ``texts``, decode its documents).

        Raises:
            CorruptMember: unreadable or corrupt compressed data, or a tar that
                cannot be walked; names the file and member. A member cut short
                with complete documents before the cut is not raised: it is
                listed with a ``TruncatedMember`` in ``dropped``.
            MemberTooLarge: the member decompresses past ``max_member_bytes``.
        """
        if unit.size > self.max_member_bytes and _read_as_is(unit.kind):
            what = {TAR: "tar", TOKENS: "token ids"}.get(unit.kind, "JSON lines")
            raise MemberTooLarge(
                f"{unit.size} bytes of {what} pass max_member_bytes={self.max_member_bytes}",
                unit.path,
                unit.member,
            )
        if unit.kind == TOKENS:
            return _read_tokens(self, unit)
        if not unit.kind:
            what = "empty" if unit.size == 0 else "not a tar, or xz, gzip, bzip2 or zstd data"
            raise UnknownFormat(f"member is {what}", unit.path, unit.member)
        try:
            raw = self._raw(unit)
        except OSError as exc:
            raise CorruptMember(
                f"cannot read: {exc.strerror or exc}", unit.path, unit.member
            ) from exc
        if unit.kind == PARQUET or split_jsonl_kind(unit.kind) is not None:
            records = self._records(unit, raw)  # ``tables``
            member = self._keep(unit, *records[:5])
            if self.decode_errors != "replace":
                return member
            return member._replace(replace=member.replace + records.replaced)
        # A cut (the file, or the compressed stream, ends early) keeps what precedes it;
        # corruption (a decoder error) keeps nothing.
        cut = None
        if len(raw) != unit.size:
            cut = f"file is truncated: {len(raw)} of {unit.size} bytes"
        try:
            data = decompress(raw, unit.kind, self.max_member_bytes)
        except LimitExceeded:
            raise MemberTooLarge(
                f"decompresses to more than max_member_bytes={self.max_member_bytes}",
                unit.path,
                unit.member,
            ) from None
        except Truncated as exc:
            data = exc.data
            cut = cut or f"corrupt {unit.kind} data: {exc}"
        except _DECOMPRESS_ERRORS as exc:
            why = cut or f"corrupt {unit.kind} data: {exc}"
            raise CorruptMember(why + self._cached_note(unit), unit.path, unit.member) from exc
        del raw
        try:
            names, offsets, sizes = walk(data, partial=cut is not None)
        except TarFormatError as exc:
            why = f"not a valid tar: {exc}{self._cached_note(unit)}"
            raise CorruptMember(why, unit.path, unit.member) from exc
        dropped: list[CorruptMember] = []
        if cut is not None:
            if not names:
                raise CorruptMember(cut + self._cached_note(unit), unit.path, unit.member)
            dropped.append(
                TruncatedMember(
                    f"{cut}: partial, {len(names)} documents end before the cut",
                    unit.path,
                    unit.member,
                )
            )
        if names and detect(data[offsets[0] : offsets[0] + MAGIC_BYTES]) not in (None, TAR):
            raise CorruptMember(
                "holds compressed members, not documents: is this a compressed outer tar? "
                "decompress it first (e.g. xz -d openwebtext.tar.xz)",
                unit.path,
                unit.member,
            )
        return self._keep(unit, data, names, offsets, sizes, dropped)

    def _records(self, unit: Unit, raw: bytes) -> Records:
        """The documents of a parquet row group or a JSON lines unit (``tables``)."""
        if unit.kind != PARQUET:
            truncated = len(raw) != unit.size
            errors = self.decode_errors or "replace"  # JSON is text: always decoded
            return jsonl_records(raw, unit, self.max_member_bytes, truncated, errors)
        if unit.size == 0:  # a row group of no rows
            return Records(b"", [], [], [], [])
        if len(raw) != unit.size:
            why = f"file is truncated: {len(raw)} of {unit.size} bytes of row group"
            raise CorruptMember(why, unit.path, unit.member)
        if "#rg" not in unit.member:
            raise UnknownFormat("a parquet member of a tar is not read: extract it first",
                                unit.path, unit.member)  # fmt: skip
        footer = self._footers.get(unit.path)
        if footer is None:
            if len(self._footers) >= self.max_open:
                self._footers.pop(next(iter(self._footers)))
            try:
                footer = Footer(footer_of(unit.path, self.storage), unit.path)
            except CorpusError as exc:
                raise CorruptMember(exc.message, unit.path, unit.member) from exc
            except OSError as exc:
                why = f"cannot read its footer: {exc.strerror or exc}"
                raise CorruptMember(why, unit.path, unit.member) from exc
            self._footers[unit.path] = footer
        # The file seen as ending with the chunk: pyarrow then reads nothing past it.
        return parquet_records(raw, unit, footer, unit.offset + unit.size, self.max_member_bytes)

    def _keep(
        self,
        unit: Unit,
        data: bytes,
        names: list[str],
        offsets: list[int],
        sizes: list[int],
        dropped: list[CorruptMember],
    ) -> Member:
        """What of a unit's documents is kept: its split, the size limit, the UTF-8 check."""
        if self.split is not None:
            which, fraction, seed = self.split
            held_out = which == "val"
            for k, name in enumerate(names):
                if in_validation(name, fraction, seed) is not held_out:
                    offsets[k] = -1
        limit = self.max_document_bytes
        if sizes and max(sizes) > limit:
            for k, size in enumerate(sizes):
                if size > limit and offsets[k] >= 0:
                    dropped.append(
                        CorruptDocument(
                            f"document of {size} bytes passes max_document_bytes={limit}",
                            unit.path,
                            unit.member,
                            names[k],
                        )
                    )
                    offsets[k] = -1
        if self.texts:
            decoded, replace = self._decode_text(data, unit, names, offsets, sizes, dropped)
            return Member(data, names, offsets, sizes, dropped, replace, decoded)
        replace = self._check_text(data, unit, names, offsets, sizes, dropped)
        return Member(data, names, offsets, sizes, dropped, replace)

    def _check_text(
        self,
        data: bytes,
        unit: Unit,
        names: list[str],
        offsets: list[int],
        sizes: list[int],
        dropped: list[CorruptMember],
    ) -> int:
        """Check that every kept document is UTF-8; return how many need ``replace``.

        Done here so that the consumer's decode cannot fail: its stream then
        holds only documents it will hand out. ASCII is checked without decoding.
        """
        if self.decode_errors is None or data.isascii():
            return 0
        replace = 0
        for k, offset in enumerate(offsets):
            if offset < 0:
                continue
            raw = data[offset : offset + sizes[k]]
            if raw.isascii():
                continue
            try:
                raw.decode()
            except UnicodeDecodeError as exc:
                if self.decode_errors == "replace":
                    replace += 1
                    continue
                dropped.append(bad_utf8(exc, unit, names[k]))
                offsets[k] = -1
        return replace

    def _decode_text(
        self,
        data: bytes,
        unit: Unit,
        names: list[str],
        offsets: list[int],
        sizes: list[int],
        dropped: list[CorruptMember],
    ) -> tuple[list[str], int]:
        """The text of every kept document, and how many needed ``replace``; what
        ``_check_text`` leaves out is left out here the same way.

        Each is decoded from a view of ``data`` (no copy of its bytes). Without a check
        (``decode_errors`` None), invalid UTF-8 raises ``UnicodeDecodeError``, as decoding
        the member's documents afterwards would.
        """
        view = memoryview(data)
        errors = self.decode_errors
        texts: list[str] = []
        replace = 0
        for k, offset in enumerate(offsets):
            if offset < 0:
                continue
            raw = view[offset : offset + sizes[k]]
            try:
                texts.append(str(raw, "utf-8"))
            except UnicodeDecodeError as exc:
                if errors is None:
                    raise
                if errors == "replace":
                    replace += 1
                    texts.append(str(raw, "utf-8", "replace"))
                    continue
                dropped.append(bad_utf8(exc, unit, names[k]))
                offsets[k] = -1
        return texts, replace


def _read_as_is(kind: str) -> bool:
    """Whether a unit of ``kind`` is read into memory as it lies (a tar, token ids, a plain
    JSON lines chunk, one long line of which makes it long): its size is what it costs."""
    jsonl = split_jsonl_kind(kind)
    return kind in (TAR, TOKENS) or (jsonl is not None and not jsonl[0])


def _read_tokens(reader: Reader, unit: Unit) -> Member:
    """A token unit: its documents' ids as they lie in the file (no decoding, no tar),
    each document's place in them from the file's ends (``tokenfiles.opened``: a forked
    worker has them from the main process's index). Names are document indices."""
    try:
        token_file = opened(unit.path, eot=reader.token_eot)
        data = reader._raw(unit)
    except TokenFileError as exc:
        raise CorruptMember(exc.message, unit.path, unit.member) from exc
    except OSError as exc:
        why = f"cannot read: {exc.strerror or exc}"
        raise CorruptMember(why, unit.path, unit.member) from exc
    first, stop = document_range(unit.member)
    ends, itemsize = token_file.ends, token_file.ids.dtype.itemsize
    if len(data) != unit.size or stop > len(ends):
        why = f"file is truncated: {len(data)} of {unit.size} bytes"
        raise CorruptMember(why, unit.path, unit.member)
    start = int(ends[first - 1]) if first else 0
    bounds = (ends[first:stop] - start) * itemsize
    offsets = [0, *bounds[:-1].tolist()]
    sizes = np.diff(bounds, prepend=0).tolist()
    names = document_names(unit.member, first, stop)
    if reader.split is not None:
        which, fraction, seed = reader.split
        for k, name in enumerate(names):
            if in_validation(name, fraction, seed) is not (which == "val"):
                offsets[k] = -1
    dropped: list[CorruptMember] = []
    if reader.token_vocab is not None:
        ids = np.frombuffer(data, dtype=token_file.ids.dtype)
        past = np.flatnonzero(ids >= reader.token_vocab)
        if past.size:  # rare: the documents that hold them, found by their ends
            for k in sorted(set(np.searchsorted(ends[first:stop] - start, past, "right"))):
                if offsets[k] >= 0:
                    offsets[k] = -1
                    dropped.append(CorruptDocument(
                        f"holds ids at or past the tokenizer's vocabulary of "
                        f"{reader.token_vocab} (e.g. {int(ids[past[0]])}): ids of another "
                        "tokenizer, or a damaged file", unit.path, unit.member, names[k],
                    ))  # fmt: skip
    return Member(data, names, offsets, sizes, dropped, 0)


def bad_utf8(error: UnicodeDecodeError, unit: Unit, name: str) -> CorruptDocument:
    """The error of a document that is not UTF-8, naming its file, member and name."""
    reason = f"invalid UTF-8 at byte {error.start}: {error.reason}"
    return CorruptDocument(reason, unit.path, unit.member, name)


class Encoded(NamedTuple):
    """A member's documents as token ids (``tokenizer`` set): what crosses to the consumer."""

    data: bytes
    """The ids of the kept documents, each followed by the end-of-text id, as ``dtype``."""
    offsets: list[int]
    """Byte offset of each document's ids in ``data`` (-1: left out)."""
    counts: list[int]
    """Ids per document, end-of-text included (0: left out)."""


_BLANK_LINES = re.compile("\n\n\n+")


def nanogpt_text(text: str) -> str:
    """``text`` as the Hugging Face ``openwebtext`` loading script yields it to nanoGPT.

    Three or more newlines become two, then ``str.strip()`` (which strips Unicode
    whitespace, not only ASCII). An empty or all-whitespace document becomes ``""``.
    """
    return _BLANK_LINES.sub("\n\n", text).strip()


def encode_member(member: Member, tokenizer: Tokenizer, *, normalise: bool = False) -> Encoded:
    """Tokenize the kept documents of ``member`` (its text is already checked).

    Each document's ids end with ``tokenizer.eot``, as nanoGPT's
    ``prepare.py`` writes them, so concatenating documents packs them.
    With ``normalise``, each text goes through ``nanogpt_text`` first.
    """
    kept = [k for k, offset in enumerate(member.offsets) if offset >= 0]
    texts = member.texts  # decoded by the reader's check (``Reader(..., texts=True)``)
    if texts is None:
        errors = "replace" if member.replace else "strict"
        data = member.data
        texts = [
            data[member.offsets[k] : member.offsets[k] + member.sizes[k]].decode("utf-8", errors)
            for k in kept
        ]
    if normalise:
        texts = [nanogpt_text(text) for text in texts]
    ids, kept_counts = tokenizer.encode_packed(texts)  # one array: no Python int per id
    offsets = [-1] * len(member.offsets)
    counts = [0] * len(member.offsets)
    itemsize = tokenizer.dtype.itemsize
    position = 0
    for k, count in zip(kept, kept_counts, strict=True):
        offsets[k] = position * itemsize
        counts[k] = count
        position += count
    return Encoded(ids.tobytes(), offsets, counts)
