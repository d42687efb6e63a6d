"""The JSON a prepare or merge run writes and reads back, as typed records: the run's config
(``RunConfig``, with its ``Slice``), its counts (``Counts``), a finished run's ``meta.json``
(``Meta``, each file a ``FileInfo``) and the progress record (``ProgressRecord``, its
``Phase``).

Each record is parsed and checked once, at the boundary (``from_json``), and written back by
``to_json``; the JSON is the format of ``openwebtext-prepare/1``, unchanged, so a folder
written by an earlier release still resumes and finishes. A wrong field raises
``RecordError`` naming it (``files.train.bin.bytes``); the caller names the file, so a damaged
file is one clear line, never a ``KeyError`` deep inside a merge.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from enum import Enum
from typing import Any, Literal, get_args

import numpy as np

from openwebtext.options import ErrorPolicy, int_at_least
from openwebtext.plan import shard_range
from openwebtext.policy import COUNTERS

__all__ = [
    "CONFIG_KEYS",
    "FORMAT",
    "LENGTH",
    "Counts",
    "FileInfo",
    "Meta",
    "Phase",
    "ProgressRecord",
    "RecordError",
    "RunConfig",
    "Slice",
    "SplitRule",
]

FORMAT = "openwebtext-prepare/1"
SplitRule = Literal["hash", "nanogpt"]
#: The dtype of ``lengths.bin``: each document's token count.
LENGTH = np.dtype("<i8")
#: The JSON keys of a run's config (any other is refused), in the order messages name them.
CONFIG_KEYS = ("format", "split", "corpus", "units", "tokenizer", "fingerprint", "dtype", "eot",
               "n_vocab", "val_fraction", "val_seed", "take", "on_error", "seed", "shuffle",
               "slice", "merge_of")  # fmt: skip

_SHA256 = re.compile("[0-9a-f]{64}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class RecordError(ValueError):
    """A field of a record is wrong. ``field`` names it, dotted (``files.train.bin.bytes``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _wrong(what: str, why: str) -> RecordError:
    """``what must be ...``: the error of field ``what``."""
    return RecordError(what, f"{what} {why}")


class Phase(str, Enum):
    """Where a run is: pass 1, pass 2 (``nanogpt`` only), or the commit step."""

    TOKENIZE = "tokenize"
    PERMUTE = "permute"
    COMMIT = "commit"


def _count(value: object, what: str) -> int:
    if not int_at_least(value, 0):
        raise _wrong(what, f"must be an int >= 0, not {value!r}")
    return value


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _wrong(what, f"must be an object, not {type(value).__name__}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise _wrong(what, f"must be a string, not {value!r}")
    return value


def _one_of(*choices: str) -> Callable[[object, str], Any]:
    def check(value: object, what: str) -> Any:
        if value not in choices:
            raise _wrong(what, f"must be {' or '.join(map(repr, choices))}, not {value!r}")
        return value

    return check


def _dtype(value: object, what: str) -> str:
    if isinstance(value, str):
        with contextlib.suppress(TypeError):
            if np.dtype(value).kind in "ui":
                return value
    raise _wrong(what, f"must name an integer dtype, not {value!r}")


def _fraction(value: object, what: str) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1):
        raise _wrong(what, f"must be between 0 and 1, not {value!r}")
    return value


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise _wrong(what, f"must be true or false, not {value!r}")
    return value


def _or_none(check: Callable[[object, str], Any]) -> Callable[[object, str], Any]:
    return lambda value, what: None if value is None else check(value, what)


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


@dataclass(frozen=True)
class Slice:
    """Positions ``[start, stop)`` of the unit order, and the ``(i, n)`` of ``--shard``."""

    start: int
    stop: int
    shard: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "stop": self.stop,
                "shard": list(self.shard) if self.shard else None}  # fmt: skip

    @classmethod
    def from_json(cls, value: object, units: int, where: str = "slice") -> Slice:
        body = _object(value, where)
        start = _count(body.get("start"), f"{where}.start")
        stop = _count(body.get("stop"), f"{where}.stop")
        if not start <= stop <= units:
            raise RecordError(where, f"slice [{start}, {stop}) is not within the {units} units")
        shard = body.get("shard")
        if shard is None:
            return cls(start, stop)
        if not (isinstance(shard, list) and len(shard) == 2):
            raise _wrong(f"{where}.shard", f"must be [i, n], not {shard!r}")
        index = _count(shard[0], f"{where}.shard[0]")
        count = _count(shard[1], f"{where}.shard[1]")
        if not index < count:
            raise _wrong(f"{where}.shard", f"must be [i, n] with 0 <= i < n, not {shard!r}")
        first, end = shard_range(units, index, count)
        if (first, end) != (start, stop):
            raise RecordError(
                where,
                f"slice [{start}, {stop}) is not shard {index}/{count} of the {units} units "
                f"([{first}, {end}))",
            )
        return cls(start, stop, (index, count))


@dataclass(frozen=True)
class FileInfo:
    """A finished file's size and sha256 (hex)."""

    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def from_json(cls, value: object, where: str) -> FileInfo:
        body = _object(value, where)
        size = _count(body.get("bytes"), f"{where}.bytes")
        sha = body.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise _wrong(f"{where}.sha256", f"must be 64 hex digits, not {sha!r}")
        return cls(size, sha)


def _files(
    value: object, where: str = "files", needed: tuple[str, ...] | None = None
) -> dict[str, FileInfo]:
    body = _object(value, where)
    if needed is not None and sorted(body) != sorted(needed):
        raise _wrong(where, f"must be {' and '.join(needed)}, not {sorted(body)}")
    for name in body:
        if not _FILE_NAME.fullmatch(name):
            raise RecordError(where, f"{where}: {name!r} is not a file name")
    return {name: FileInfo.from_json(info, f"{where}.{name}") for name, info in body.items()}


def _merge_of(value: object, where: str) -> tuple[tuple[str, dict[str, FileInfo]], ...]:
    if not isinstance(value, list):
        raise _wrong(where, f"must be a list, not {type(value).__name__}")
    pieces = []
    for k, piece in enumerate(value):
        if not (isinstance(piece, list) and len(piece) == 2 and isinstance(piece[0], str)):
            raise _wrong(f"{where}[{k}]", "must be [folder, files]")
        pieces.append((piece[0], _files(piece[1], f"{where}[{k}]")))
    return tuple(pieces)


_SPLIT_RULE = _one_of(*get_args(SplitRule))
_ERROR_POLICY = _one_of(*get_args(ErrorPolicy))
_PHASE = _one_of(*(p.value for p in Phase))


def _read(check: Callable[[object, str], Any], key: str | None = None) -> dict[str, Any]:
    """A config field's metadata: read by ``check`` from JSON key ``key`` (None: its name)."""
    return {"check": check, "key": key}


def _key(spec: Field[Any]) -> str:
    key: str | None = spec.metadata["key"]
    return key or spec.name


@dataclass(frozen=True)
class RunConfig:
    """What a run's files depend on (``config.run_config``): two runs of the same config write
    the same bytes. Each field says how its JSON value is checked (the one list of them);
    ``seed`` and ``shuffle`` are ``hash``'s only (None and left out for ``nanogpt``), ``slice``
    a slice's (None: a whole run), ``merge_of`` a merge's progress record's only (the slices
    it reads, never in ``meta.json``). ``split_rule``'s JSON key is ``split``, as it always
    was; ``format`` is always ``FORMAT``."""

    split_rule: SplitRule = field(metadata=_read(_SPLIT_RULE, "split"))
    corpus: str = field(metadata=_read(_text))
    units: int = field(metadata=_read(_count))
    tokenizer: str = field(metadata=_read(_text))
    fingerprint: str = field(metadata=_read(_text))
    dtype: str = field(metadata=_read(_dtype))
    eot: int = field(metadata=_read(_count))
    n_vocab: int = field(metadata=_read(_count))
    val_fraction: float = field(metadata=_read(_fraction))
    val_seed: int = field(metadata=_read(_count))
    take: int | None = field(metadata=_read(_or_none(_count)))
    on_error: ErrorPolicy = field(metadata=_read(_ERROR_POLICY))
    seed: int | None = field(metadata=_read(_or_none(_count)))
    shuffle: bool | None = field(metadata=_read(_or_none(_flag)))
    slice: Slice | None = None
    merge_of: tuple[tuple[str, dict[str, FileInfo]], ...] | None = None

    @property
    def first(self) -> int:
        """The first position of the unit order this run does."""
        return 0 if self.slice is None else self.slice.start

    @property
    def in_corpus_order(self) -> bool:
        """A ``nanogpt`` slice: its files are ``tokens.bin`` and ``lengths.bin``."""
        return self.split_rule == "nanogpt" and self.slice is not None

    def finals(self) -> tuple[str, ...]:
        """The files a finished run of this config holds."""
        return ("tokens.bin", "lengths.bin") if self.in_corpus_order else ("train.bin", "val.bin")

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"format": FORMAT}
        for spec in fields(self):
            if "check" in spec.metadata:
                body[_key(spec)] = getattr(self, spec.name)
        if self.split_rule != "hash":
            del body["seed"], body["shuffle"]
        if self.slice is not None:
            body["slice"] = self.slice.to_json()
        if self.merge_of is not None:
            body["merge_of"] = [[shown, {n: f.to_json() for n, f in files.items()}]
                                for shown, files in self.merge_of]  # fmt: skip
        return body

    @classmethod
    def from_json(cls, value: object, where: str = "") -> RunConfig:
        """Parse a config (``where``: the key it lies under; "" for a ``meta.json``'s fields).

        Raises:
            RecordError: a field is wrong or unknown (a newer release's: never resumed as this
                one's, since that run's bytes may depend on it).
        """
        body = _object(value, where or "config")
        for key in body:
            if key not in CONFIG_KEYS:
                raise _wrong(_path(where, key), "is not a field of a run's config")
        if body.get("format") != FORMAT:
            raise _wrong(_path(where, "format"), f"must be {FORMAT!r}, not {body.get('format')!r}")
        values = {spec.name: spec.metadata["check"](body.get(_key(spec)), _path(where, _key(spec)))
                  for spec in fields(cls) if "check" in spec.metadata}  # fmt: skip
        for key in ("seed", "shuffle"):  # the hash rule's, and only its
            if values["split_rule"] == "hash" and values[key] is None:
                raise _wrong(_path(where, key), "must be given for the hash rule, not null")
            if values["split_rule"] != "hash" and key in body:
                raise _wrong(_path(where, key), "is the hash rule's only, not nanogpt's")
        if "slice" in body:
            values["slice"] = Slice.from_json(body["slice"], values["units"], _path(where, "slice"))
        if "merge_of" in body:
            values["merge_of"] = _merge_of(body["merge_of"], _path(where, "merge_of"))
        return cls(**values)


@dataclass
class Counts:
    """Documents and tokens per key (``train``/``val``; ``all`` in a ``nanogpt`` slice) and
    the skip counters (every one of ``policy.COUNTERS``). Changed in place as a run goes."""

    documents: dict[str, int]
    tokens: dict[str, int]
    skips: dict[str, int]

    @classmethod
    def new(cls, keys: tuple[str, ...], files: int = 0) -> Counts:
        """A new run's: 0 everywhere but ``skipped_files``, the corpus's files left out."""
        skips = {**dict.fromkeys(COUNTERS, 0), "skipped_files": files}
        return cls(dict.fromkeys(keys, 0), dict.fromkeys(keys, 0), skips)

    def copy(self) -> Counts:
        return Counts(dict(self.documents), dict(self.tokens), dict(self.skips))

    def to_json(self) -> dict[str, Any]:
        return {"documents": dict(self.documents), "tokens": dict(self.tokens), **self.skips}

    @classmethod
    def from_json(
        cls, value: object, keys: tuple[str, ...] | None = None, where: str = ""
    ) -> Counts:
        """Parse the counts held by ``value``'s fields (``keys``: the keys a kind of run has).

        ``skipped_files`` may be missing (a ``meta.json`` of an older release: 0)."""
        body = _object(value, where or "counts")
        per: dict[str, dict[str, int]] = {}
        for part in ("documents", "tokens"):
            found = _object(body.get(part), _path(where, part))
            if keys is not None and sorted(found) != sorted(keys):
                wanted = " and ".join(keys)
                raise _wrong(_path(where, part), f"must have {wanted}, not {sorted(found)}")
            per[part] = {k: _count(v, f"{_path(where, part)}.{k}") for k, v in found.items()}
        skips = {key: _count(body.get(key, 0 if key == "skipped_files" else None),
                             _path(where, key)) for key in COUNTERS}  # fmt: skip
        return cls(per["documents"], per["tokens"], skips)


def _bytes_per_item(config: RunConfig) -> dict[str, tuple[str, str, int]]:
    """For each file of ``config``'s kind: the count it holds one item per, and the item's
    size (a file's bytes are its tokens times the dtype's size, or its documents' lengths)."""
    itemsize = np.dtype(config.dtype).itemsize
    if config.in_corpus_order:
        return {"tokens.bin": ("tokens", "all", itemsize),
                "lengths.bin": ("documents", "all", LENGTH.itemsize)}  # fmt: skip
    return {f"{split}.bin": ("tokens", split, itemsize) for split in ("train", "val")}


@dataclass(frozen=True)
class Meta:
    """A ``meta.json``, the marker of a finished run or slice: its config (never
    ``merge_of``), its counts and each file's size and sha256. Its JSON is flat, as it
    always was: the config's fields, the counts', then ``files``."""

    config: RunConfig
    counts: Counts
    files: dict[str, FileInfo]

    def to_json(self) -> dict[str, Any]:
        files = {name: info.to_json() for name, info in self.files.items()}
        return {**self.config.to_json(), **self.counts.to_json(), "files": files}

    @classmethod
    def from_json(cls, value: object, where: str = "") -> Meta:
        """Parse a ``meta.json``: the config a reader uses, the counts, and ``files`` (the very
        files the run's kind writes; each one's bytes its count of items times their size).
        Fields it does not know are not read (as before).

        Raises:
            RecordError: naming the first wrong field.
        """
        body = _object(value, where or "meta")
        picked = {k: v for k, v in body.items() if k in CONFIG_KEYS and k != "merge_of"}
        config = RunConfig.from_json(picked, where)
        keys = ("all",) if config.in_corpus_order else ("train", "val")
        counts = Counts.from_json(body, keys, where)
        files = _files(body.get("files"), _path(where, "files"), config.finals())
        for name, (part, key, size) in _bytes_per_item(config).items():
            count = getattr(counts, part)[key]
            found = files[name].bytes
            if found != count * size:
                raise _wrong(
                    _path(where, f"files.{name}.bytes"),
                    f"is {found}, not the {count} {part}.{key} times {size} bytes ({count * size})",
                )
        return cls(config, counts, files)


@dataclass
class ProgressRecord:
    """How far a run got (``.owt-progress.json``): its config, its phase, the position in
    that phase (a unit of the order, or a document of the permutation), the sizes of the
    parts it wrote (synced before the record says them), its counts, and in phase ``commit``
    the ``meta`` to publish."""

    config: RunConfig
    phase: Phase
    counts: Counts
    position: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    meta: Meta | None = None

    def to_json(self) -> dict[str, Any]:
        body = {"config": self.config.to_json(), "phase": self.phase.value,
                "position": self.position, "sizes": dict(self.sizes),
                "counts": self.counts.to_json()}  # fmt: skip
        if self.meta is not None:
            body["meta"] = self.meta.to_json()
        return body

    @classmethod
    def from_json(cls, value: object) -> ProgressRecord:
        """Parse a progress record.

        Raises:
            RecordError: naming the first wrong field.
        """
        body = _object(value, "the record")
        config = RunConfig.from_json(body.get("config"), "config")
        phase = Phase(_PHASE(body.get("phase"), "phase"))
        meta = None
        if phase is Phase.COMMIT:
            meta = Meta.from_json(body.get("meta"), "meta")
        position = _count(body.get("position", 0), "position")
        sizes = _object(body.get("sizes", {}), "sizes")
        checked = {name: _count(size, f"sizes.{name}") for name, size in sizes.items()}
        counts = Counts.from_json(body.get("counts"), None, "counts")
        return cls(config, phase, counts, position, checked, meta)
