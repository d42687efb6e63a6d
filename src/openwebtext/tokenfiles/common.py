"""What every token format shares: the error, an opened file and what the run that wrote it
recorded (``Vocabulary``: a run's ``meta.json`` read by the one codec, so that a damaged record
is an error naming its field, never a silent fall back to GPT-2's ids), the end-of-text
scan."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

import msgspec
import numpy as np

from openwebtext.codec import (
    Count,
    Disagree,
    Positive,
    Record,
    open_regular,
    parse,
    pread_all,
    read_file,
    replace,
    whose,
)
from openwebtext.errors import SHORTAGES, CorpusError, StateError
from openwebtext.records import Names

__all__ = [
    "FORMATS",
    "INT_DTYPE",
    "LLMC_SHARD",
    "PREPARE_FORMAT",
    "TOKENS",
    "IntDtype",
    "TokenFile",
    "TokenFileError",
    "TokenFormat",
    "Vocabulary",
    "beside",
    "check_run_record",
    "damaged",
    "document_names",
    "document_range",
    "eot_ends",
    "local_bytes",
    "markers",
    "recorded",
    "run_beside",
    "unit_member",
]

FORMATS = ("nanogpt", "megatron", "llmc", "datatrove")
TokenFormat = Literal["nanogpt", "megatron", "llmc", "datatrove"]
#: The ``Unit.kind`` of a run of documents of a token file (a token corpus's unit).
TOKENS = "tokens"

#: Ids scanned at a time for end-of-text (bounds the memory of a scan: 2 bytes each).
_SCAN = 1 << 26
#: Ids read at a time from a file scanned by reads (``eot_ends``' ``fd``): 8 MiB of uint16.
_READ = 1 << 22


class TokenFileError(CorpusError):
    """A token file whose header, index or size is not its format's (``path`` names it)."""


#: The format of what a prepare or merge run writes (``meta.json``, its progress record).
PREPARE_FORMAT = "openwebtext-prepare/2"
#: The name of a dtype of token ids (a pattern).
INT_DTYPE = "u?int(8|16|32|64)"
#: A dtype of token ids.
IntDtype = Annotated[str, msgspec.Meta(pattern=f"^{INT_DTYPE}$")]


class Vocabulary(Record, frozen=True):
    """The ids a run wrote: by the tokenizer ``tokenizer`` (its spec) of ``fingerprint``, of
    ``dtype``, each document ended by ``eot``, every id below ``n_vocab``."""

    tokenizer: str
    fingerprint: str
    dtype: IntDtype
    eot: Count
    n_vocab: Positive

    def check(self) -> None:
        if self.eot >= self.n_vocab:
            raise Disagree("eot", f"is {self.eot}, not below n_vocab {self.n_vocab}")


class _Seen(Vocabulary, frozen=True, forbid_unknown_fields=False):
    """A run's config as a reader of its ids sees it (its other fields are the run's own,
    checked when the run reads it back)."""


class _Sized(Record, frozen=True, forbid_unknown_fields=False):
    bytes: Count
    said_by: str = "meta.json"
    """The record that says it (set when it is read: ``run_beside``)."""


class _Counted(Record, frozen=True, forbid_unknown_fields=False):
    documents: dict[str, Count]


class _Meta(Record, frozen=True, forbid_unknown_fields=False, tag_field="format",
            tag=PREPARE_FORMAT):  # fmt: skip
    what = "meta.json"
    config: _Seen
    files: dict[str, _Sized] = msgspec.field(default_factory=dict)
    counts: _Counted | None = None


class _Marked(Record, frozen=True, forbid_unknown_fields=False):
    """A format's marker (``llmc.json``: ``prepare.state.Marker``) as a reader sees it: the
    files the format wrote beside the run's."""

    what = "format marker"
    files: dict[str, _Sized]


#: The split whose documents a run's file of ids holds, by the file's stem (``train.bin``, the
#: ``train.ds`` and megatron ``train.bin`` made of it: ``train``; a slice's ``tokens.bin``: all).
_SPLIT_OF = {"train": "train", "val": "val", "tokens": "all"}


def check_run_record(run: _Meta | None, path: str, size: int, documents: int) -> None:
    """Check a local token file of ``size`` bytes and ``documents`` documents against what
    its run (``run_beside``; None: none) records, where it records them: its size
    (``train.bin``, ``val.bin``, ``tokens.bin``; a format's files by its marker, llm.c's
    shards by ``llmc.json``) and its split's documents (those and the formats made of them,
    ``train.ds``; not llm.c's shards, which cut a split). A file cut at a document's end, or
    another run's, is then refused, not read as the run's.

    Raises:
        TokenFileError: naming the file and what its run records.
    """
    if run is None:
        return
    name = os.path.basename(path)
    said = run.files.get(name)
    if said is not None and said.bytes != size:
        raise damaged(path, f"{size} bytes, not the {said.bytes} its run's {said.said_by} "
                      "records (cut short, or not the run's)")  # fmt: skip
    split = _SPLIT_OF.get(name.split(".", 1)[0])
    counts = run.counts.documents if run.counts is not None else {}
    if split in counts and counts[split] != documents:
        raise damaged(path, f"{documents} documents, not the {counts[split]} of {split} its run's "
                      "meta.json records (cut at a document's end, or not the run's)")  # fmt: skip



class TokenFile(NamedTuple):
    """One file of ids and its documents: document ``i`` is ``ids[ends[i-1]:ends[i]]``."""

    path: str
    ids: np.ndarray
    ends: np.ndarray
    tokenizer: Vocabulary | None = None
    """The tokenizer the ids were written with, as the run's ``meta.json`` beside the file
    records it (None: nothing recorded)."""


def damaged(path: str | os.PathLike[str], why: str) -> TokenFileError:
    """The error for ``path``, damaged as ``why`` says."""
    return TokenFileError(why, os.fspath(path))


def local_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the local file ``path``, a regular file's only (``codec.open_regular``): a
    FIFO in a token file's or an index's place would make a read wait for a writer forever, a
    device (``/dev/zero``) never end.

    Raises:
        OSError: missing (``FileNotFoundError``), unreadable, or not a regular file.
    """
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()


def eot_ends(ids: np.ndarray, eot: int, path: str | os.PathLike[str],
             fd: int | None = None, offset: int = 0) -> np.ndarray:  # fmt: skip
    """The document ends of ``ids`` laid out as ``doc, eot, doc, eot, …`` (scanned in chunks).

    ``fd``: the file the ids are mapped from (at ``offset``), read by chunks rather than
    through the map: a file cut meanwhile (a sync, another program) is said, where a page of
    the map past its new end would kill the process (SIGBUS).

    Raises:
        ValueError: ``eot`` is no id of the file's dtype (the eot given, not the file, is
            wrong).
        TokenFileError: the ids do not end with ``eot`` (a cut file, or another layout), or
            the file was cut while it was read.
    """
    held = np.iinfo(ids.dtype) if ids.dtype.kind in "iu" else None
    if held is not None and not held.min <= eot <= held.max:
        raise ValueError(f"{os.fspath(path)}: the end-of-text id {eot} is no id of its "
                         f"{ids.dtype.name} ids: give the eot they were written with")  # fmt: skip
    step = _SCAN if fd is None else _READ

    def chunk(at: int) -> np.ndarray:
        if fd is None:
            return ids[at : at + step]
        want = min(step, len(ids) - at) * ids.dtype.itemsize
        data = pread_all(fd, want, offset + at * ids.dtype.itemsize)
        if len(data) != want:
            raise damaged(path, "it was cut while it was read (changed since it was opened)")
        return np.frombuffer(data, ids.dtype)

    found = [np.flatnonzero(chunk(at) == eot) + (at + 1) for at in range(0, len(ids), step)]
    ends = np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)
    if len(ids) and (not ends.size or ends[-1] != len(ids)):
        raise damaged(path, f"its {len(ids)} ids do not end with the end-of-text id {eot}")
    return ends


def unit_member(first: int, stop: int, file: str = "") -> str:
    """The member name of a token unit: documents ``[first, stop)`` of its file, after the
    file's name in a corpus of several files (``document_names``)."""
    return f"{file} docs {first}-{stop}" if file else f"docs {first}-{stop}"


def document_range(member: str) -> tuple[int, int]:
    """The documents ``[first, stop)`` a token unit's member name says."""
    first, stop = member.rsplit("docs ", 1)[1].split("-")
    return int(first), int(stop)


def document_names(member: str, first: int, stop: int) -> Names:
    """The names of documents ``[first, stop)`` of a token unit: their index in the file,
    after the file's name when the member carries it (a corpus of several files, whose
    names must differ: the held-out split hashes them). Made one by one when asked."""
    file = member.rsplit(" docs ", 1)[0] if " docs " in member else ""
    return Names(file, range(first, stop))


def recorded(body: bytes | None, meta: str) -> Vocabulary | None:
    """What the ``meta.json`` ``body`` (at ``meta``) records of the ids beside it; None: there
    is none (``body`` None), or it is another program's (a JSON value without a format of
    this project's).

    Raises:
        TokenFileError: a ``meta.json`` that is not JSON, or a run's whose field is wrong
            (of another format, missing, of the wrong type): the message names the file and
            the field's dotted path.
    """
    run = _run(body, meta)
    return None if run is None else run.config


def _run(body: bytes | None, meta: str) -> _Meta | None:
    """``recorded``'s record whole: the config, and what it says of the files and counts."""
    if body is None:
        return None
    try:
        value = parse(body)
    except ValueError as exc:  # not JSON, or not UTF-8
        raise TokenFileError(f"not JSON: {exc}", meta) from None
    if whose(value, _Meta) == "other":
        return None
    try:
        return _Meta.from_json(value)
    except StateError as exc:
        raise TokenFileError(str(exc), meta) from None


def beside(path: str) -> Vocabulary | None:
    """What the ``meta.json`` beside the local token file ``path`` records (``recorded``).

    Raises:
        TokenFileError: as ``recorded``; or the ``meta.json`` is there but cannot be read.
    """
    run = run_beside(path)
    return None if run is None else run.config


#: The name of an llm.c shard a format pass writes beside a run (``prepare.convert``).
LLMC_SHARD = re.compile(r"(train|val)_\d{6}\.bin")


def run_beside(path: str) -> _Meta | None:
    """The record of the run whose ``meta.json`` lies beside the local token file ``path``
    (None: none, or another program's): ``beside``'s, with its files and counts
    (``check_run_record``); a file ``meta.json`` does not name (a format's), with the size
    the marker of a format written beside it says (``llmc.json``: an emptied shard is no bare
    ``.bin`` of no id). A marker that is not one (another program's ``megatron.json``, or
    damaged: ``convert`` writes it again) says nothing.

    Raises:
        TokenFileError: as ``beside``; or ``path`` is of a format's names (an llm.c shard, a
            ``.ds``) that the format's marker beside it does not name (not the run's).
    """
    folder, name = Path(path).parent, Path(path).name
    run = _run(_read_beside(folder / "meta.json"), str(folder / "meta.json"))
    if run is None:
        return None
    files = {key: replace(f, said_by="meta.json") for key, f in run.files.items()}
    for marker in [] if name in files else markers(folder):
        body = _read_beside(marker)
        try:
            said = None if body is None else _Marked.from_json(parse(body)).files
        except (ValueError, StateError):
            said = None
        if said is not None and name in said:
            files[name] = replace(said[name], said_by=marker.name)
            break
        owned = _OWNED.get(marker.stem)
        if said is not None and owned is not None and owned.fullmatch(name):
            raise damaged(path, f"a file of {marker.stem}'s names that its run's {marker.name} "
                          "does not name (another run's, or copied in): not the run's")  # fmt: skip
    return replace(run, files=files)


def markers(folder: Path) -> list[Path]:
    """The markers a format pass writes in a run's ``folder`` (``FORMAT.json``; nanogpt's is
    ``meta.json``), which ``run_beside`` reads for the files ``meta.json`` does not name."""
    return [folder / f"{fmt}.json" for fmt in FORMATS[1:]]


#: The names of the token files a format writes beside a run's (``prepare.convert``), by
#: format: a file of such a name that the format's marker does not name is not the run's.
_OWNED = {"llmc": LLMC_SHARD, "datatrove": re.compile(r"(train|val)\.ds")}


def _read_beside(path: Path) -> bytes | None:
    """The bytes of the record ``path`` beside a token file (None: there is none)."""
    try:
        return read_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in SHORTAGES:  # (the machine's, not the file's: its reader says so)
            raise
        raise TokenFileError(f"cannot read it: {exc.strerror or exc}", str(path)) from None
