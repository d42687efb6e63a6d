"""Read: open one unit, decompress it under limits, and locate its documents.

This runs inside the workers. ``Reader`` is the text reader: a tar member, a parquet row
group or a JSON lines unit → the decompressed bytes as one ``bytes`` object plus the name,
offset and size of every document in them (a ``Member``), each document already checked
to be valid UTF-8 (``member.check_utf8``). Token units go to the token reader beside it
(``tokens.TokenReader``); both read their bytes through ``raw.UnitBytes``. Turning the
bytes into text happens in the consumer (see ``stream``), at hand-out time, since a
``str`` cannot cross a process boundary without being encoded again.
"""

from __future__ import annotations

import lzma
import zlib
from collections.abc import Sequence

from openwebtext.engine.member import Member, Split, check_utf8, leave_out_split
from openwebtext.engine.raw import UnitBytes
from openwebtext.engine.tables import Footer, Records, jsonl_records, parquet_records
from openwebtext.engine.tokens import TokenReader
from openwebtext.errors import (
    CorpusError,
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    TruncatedMember,
    UnknownFormat,
    read_error,
)
from openwebtext.formats import (
    MAGIC_BYTES,
    PARQUET,
    TAR,
    LimitExceeded,
    Truncated,
    decompress,
    sure_kind,
)
from openwebtext.index import footer_of, json_hint, split_jsonl_kind
from openwebtext.records import Unit
from openwebtext.source import Storage
from openwebtext.tarwalk import TarFormatError, walk
from openwebtext.tokenfiles import TOKENS

__all__ = ["Reader"]

# bz2 reports corrupt data as OSError; zstandard as ZstdError, a subclass of Exception only.
_DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (
    lzma.LZMAError,
    zlib.error,
    OSError,
    EOFError,
    ValueError,
)


class Reader:
    """Reads units, keeping a few files open between them: tars and record files here, token
    units with its ``tokens`` (a ``TokenReader`` over the same ``raw`` bytes).

    ``decode_errors`` says what becomes of a document that is not valid UTF-8:
    ``strict`` leaves it out (a ``CorruptDocument`` in ``dropped``), ``replace``
    keeps it and counts it in ``Member.replace``, None does not check.

    ``texts`` is for a reader whose every document is then needed as a ``str`` (a
    tokenizing worker): each member comes with ``Member.texts``, and the UTF-8 check is
    that decode, once per document, rather than a check of the non-ASCII documents
    followed by a second decode of all of them.

    ``token_eot`` and ``token_vocab`` are a token corpus's end-of-text id and its
    tokenizer's vocabulary size (``TokenReader``).
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
        self.raw = UnitBytes(max_open, storage)
        """Where units' bytes come from (local files, or URLs read with ``storage``)."""
        self.tokens = TokenReader(self.raw, split, token_eot, token_vocab)
        """The reader of token units."""
        self.max_member_bytes = max_member_bytes
        self.max_document_bytes = max_document_bytes
        self.split = split
        self.decode_errors = decode_errors
        self.texts = texts
        """Decode every kept document into ``Member.texts``."""
        self._footers: dict[str, Footer] = {}  # parquet files' parsed footers

    @property
    def storage(self) -> Storage | None:
        """What URLs are read with (the corpus's; None: the process's default)."""
        return self.raw.storage

    @property
    def max_open(self) -> int:
        """Files (and parquet footers) kept open between units."""
        return self.raw.max_open

    def close(self) -> None:
        self.raw.close()

    def prefetch(self, units: Sequence[Unit]) -> None:
        """Start fetching the remote ones of ``units`` (read next, in this order)."""
        self.raw.prefetch(units)

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
            return self.tokens.read(unit)
        if not unit.kind:
            what = "empty" if unit.size == 0 else "not a tar, or xz, gzip, bzip2 or zstd data"
            raise UnknownFormat(f"member is {what}", unit.path, unit.member)
        try:
            raw = self.raw.read(unit)
        except OSError as exc:
            raise read_error(exc, unit.path, unit.member) from exc
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
            raise CorruptMember(why + self.raw.cached_note(unit), unit.path, unit.member) from exc
        del raw
        try:
            names, offsets, sizes = walk(data, partial=cut is not None)
        except TarFormatError as exc:
            why = f"not a valid tar: {exc}{json_hint(data[:64])}{self.raw.cached_note(unit)}"
            raise CorruptMember(why, unit.path, unit.member) from exc
        dropped: list[CorruptMember] = []
        if cut is not None:
            if not names:
                raise CorruptMember(cut + self.raw.cached_note(unit), unit.path, unit.member)
            dropped.append(
                TruncatedMember(
                    f"{cut}: partial, {len(names)} documents end before the cut",
                    unit.path,
                    unit.member,
                )
            )
        first = (data[offsets[0] : offsets[0] + MAGIC_BYTES],
                 data[offsets[0] + sizes[0] - 4 : offsets[0] + sizes[0]]) if names else None
        if first is not None and sure_kind(*first) not in (None, TAR):
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
                if not exc.skippable:  # (encrypted: an index cached before it was refused)
                    raise
                raise CorruptMember(exc.message, unit.path, unit.member) from exc
            except OSError as exc:
                raise read_error(exc, unit.path, unit.member,
                                 what="cannot read its footer") from exc  # fmt: skip
            self._footers[unit.path] = footer
        # The file seen as ending with the chunk: pyarrow then reads nothing past it.
        return parquet_records(raw, unit, footer, unit.offset + unit.size, self.max_member_bytes)

    def _keep(
        self,
        unit: Unit,
        data: bytes,
        names: Sequence[str],
        offsets: list[int],
        sizes: list[int],
        dropped: list[CorruptMember],
    ) -> Member:
        """What of a unit's documents is kept: its split, the size limit, the UTF-8 check."""
        leave_out_split(self.split, names, offsets, dropped)
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
        errors = self.decode_errors
        texts, replace = check_utf8(data, unit, names, offsets, sizes, dropped, errors, self.texts)
        return Member(data, names, offsets, sizes, dropped, replace, texts)


def _read_as_is(kind: str) -> bool:
    """Whether a unit of ``kind`` is read into memory as it lies (a tar, token ids, a plain
    JSON lines chunk, one long line of which makes it long): its size is what it costs."""
    jsonl = split_jsonl_kind(kind)
    return kind in (TAR, TOKENS) or (jsonl is not None and not jsonl[0])
