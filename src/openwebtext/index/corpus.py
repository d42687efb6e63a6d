"""The corpus: its units, and the per-member document counts cached by ``owt index`` (the
counts and their file: ``countsfile``).

Counts are optional: reading never needs them. Options that must know how many
documents each rank will see before reading (``even`` sharding) need them, and
say so when they are missing. They are cached in a JSON file named by the
corpus fingerprint, beside the corpus when its folder is writable, and in the
cache folder (``$OWT_CACHE_DIR`` or ``~/.cache/openwebtext``) otherwise.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openwebtext.errors import CorpusError
from openwebtext.files import cache_root, open_to_read
from openwebtext.index.checks import member_check
from openwebtext.index.countsfile import (
    COUNTS_FORMAT,
    CountedOf,
    Counts,
    CountsFile,
    load_counts,
    save_counts,
    split_key,
    split_of,
)
from openwebtext.index.inputs import file_version, noted_versions
from openwebtext.index.local import LocalFile
from openwebtext.index.parquet import TEXT_COLUMN
from openwebtext.index.paths import in_records, index_inputs
from openwebtext.index.tokens import UNIT_TOKENS, token_units
from openwebtext.options import as_int, check_on_error, int_at_least
from openwebtext.records import Unit
from openwebtext.source import (
    FileInfo,
    RangeFile,
    Storage,
    file_info,
    file_name,
    is_url,
    resolve,
    unchanged,
    watched,
)
from openwebtext.tokenfiles import INT_DTYPE

__all__ = ["COUNTS_FORMAT", "Corpus", "Counts", "CountsFile", "NoColumn", "split_key", "split_of"]


#: Threads reading remote members' checks: each is a small request at a member's end.
CHECK_THREADS = 16

PathLike = str | os.PathLike[str]


class NoColumn(ValueError):
    """A ``text_column`` for a corpus with no file of records (tars only): it names nothing."""


@dataclass(frozen=True)
class Corpus:
    """An indexed corpus: its units, in corpus order, and their counts if cached."""

    units: tuple[Unit, ...]
    counts: Counts | None = field(default=None, compare=False)
    skipped_files: tuple[CorpusError, ...] = field(default=(), compare=False)
    """Files left out when opened under ``on_error="skip"``, with why."""
    versions: tuple[str, ...] = field(default=(), compare=False)
    """``file_version`` of each file (``files()`` order) when it was indexed."""
    storage: Storage | None = field(default=None, compare=False, repr=False)
    """What its URLs are read with (``Corpus.open``'s options and member cache), carried
    to its pools and readers; opened without options, a view of the process's default
    (``source.configure``) with the aliases and identities of its own files as it indexed them
    (``Storage.view``); None: the default."""
    text_column: str = TEXT_COLUMN
    """The parquet column (JSON lines field) its documents are read from: part of what
    the documents are, so part of ``fingerprint`` (a parquet unit's size is its chunk's,
    which another column may share)."""

    @classmethod
    def open(
        cls,
        paths: PathLike | Sequence[PathLike],
        *,
        on_error: str = "raise",
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | None = None,
        text_column: str = TEXT_COLUMN,
    ) -> Corpus:
        """Index paths, folders or glob patterns (see ``openwebtext.index.paths``).

        Args:
            paths: Local paths, or fsspec URLs (``s3://``, ``gs://``, ``https://``,
                ``hf://``…; the ``remote`` extra), of files, folders or globs.
            on_error: ``raise``: a bad file is an error; ``skip`` (or ``warn``):
                it is left out and listed in ``skipped_files``.
            storage_options: Passed as they are to the filesystems of URLs (for
                S3: ``endpoint_url``, ``anon``…; ``http(s)://`` URLs take theirs only,
                ``source.Storage``), here and in the workers. They
                belong to this corpus (``storage``): another corpus opened in the
                same process with other options does not change them.
            cache_dir: Keep the remote members read in this folder (off by
                default), so that a second epoch reads them from disk.
            cache_size: The cache's cap in bytes (least recently used first out).
            text_column: The column of parquet files (the field of JSON lines) that holds
                each document's text (``docs/parquet.md``).

        Raises:
            CorpusError: a path holds no corpus, or a file is unreadable.
            UnknownFormat: a file is in no known format (a member's is found when it is read).
            ValueError, TypeError: a storage argument that is not valid (``source.Storage``).
        """
        given = _given(paths, "the corpus is a path, a URL, a folder or a glob pattern")
        check_on_error(on_error)
        if not isinstance(text_column, str) or not text_column:
            raise ValueError(f"text_column must be a column's name, not {text_column!r}")
        store = resolve(None).view()  # without options: the default's (``configure``)
        if storage_options is not None or cache_dir is not None or cache_size is not None:
            store = Storage(storage_options, cache_dir, cache_size)  # (which checks them)
        indexed = index_inputs(given, on_error=on_error, storage=store, text_column=text_column)
        units = tuple(indexed.units)
        if text_column != TEXT_COLUMN and units and not any(map(in_records, units)):
            raise NoColumn(f"text_column={text_column!r} names the text of parquet files or "
                             "JSON lines; the corpus holds neither (its documents are files in "
                             "tars)")  # fmt: skip
        versions = noted_versions(dict.fromkeys(u.path for u in units), store)
        corpus = cls(units, None, tuple(indexed.skipped), versions, store, text_column)
        counts = corpus.load_counts()
        return corpus.with_counts(counts) if counts else corpus

    @classmethod
    def open_tokens(
        cls,
        paths: PathLike | Sequence[PathLike],
        *,
        eot: int | None = None,
        dtype: str | None = None,
        unit_tokens: int = UNIT_TOKENS,
        storage_options: dict[str, Any] | None = None,
    ) -> Corpus:
        """A token corpus: files of ids (``train.bin`` with or without ``train.idx``, llm.c
        shards, datatrove ``.ds``; see ``openwebtext.tokenfiles``), each cut into units of
        whole documents (about ``unit_tokens`` ids), its counts known at once. Read with
        ``Options(tokenizer=)`` the ids were written with: its documents are
        ``TokenDocument``s, read from the files, never tokenized again.

        Args:
            paths: Local token files, in order.
            eot: The end-of-text id (default: a ``meta.json`` beside the file, else 50256).
            dtype: The ids' type (default: ``meta.json``'s, else uint16; an idx gives its own).
            unit_tokens: Ids a unit holds, about.
            storage_options: For URLs (``X.bin`` with ``X.idx``, or ``X.ds`` with
                ``X.ds.index``), as ``Corpus.open`` takes them.

        Raises:
            CorpusError: no file, a URL without an index, or no document in them.
            TokenFileError: a damaged header or index (naming the file).
        """
        names = [os.fspath(p) for p in _given(paths, "token files are paths or URLs")]
        unit_tokens, eot = as_int(unit_tokens), as_int(eot)  # (numpy's integers too)
        if not int_at_least(unit_tokens, 1):
            raise ValueError(f"unit_tokens must be an int >= 1, not {unit_tokens!r}")
        if eot is not None and not int_at_least(eot, 0):
            raise ValueError(f"eot must be None or an id (an int >= 0), not {eot!r}")
        if dtype is not None and not (isinstance(dtype, str) and re.fullmatch(INT_DTYPE, dtype)):
            raise ValueError(f"dtype must be None or an integer dtype's name (uint16, int32, …), "
                             f"not {dtype!r}")  # fmt: skip
        store = resolve(None).view() if storage_options is None else Storage(storage_options)
        units, counts = token_units(
            names, eot=eot, dtype=dtype, unit_tokens=unit_tokens, storage=store
        )
        if not units:
            where = os.fspath(names[0]) if names else None
            raise CorpusError("no document in these token files", where)
        versions = noted_versions(dict.fromkeys(u.path for u in units), store)
        return cls(tuple(units), Counts(tuple(counts)), (), versions, store)

    def __repr__(self) -> str:
        """A summary: its units are many (a whole corpus's repr was megabytes)."""
        said = [f"{len(self.units)} units of {len(self.files())} files",
                "counted" if self.counts is not None else "not counted"]  # fmt: skip
        if self.skipped_files:
            said.append(f"{len(self.skipped_files)} files skipped")
        if self.text_column != TEXT_COLUMN:
            said.append(f"text_column={self.text_column!r}")
        return f"Corpus({', '.join(said)})"

    def files(self) -> list[str]:
        """The corpus's files, in order, once each."""
        return list(dict.fromkeys(u.path for u in self.units))

    def version(self) -> str:
        """A short hash of what the files are now (``index.file_version``): counts made of
        another version are stale."""
        files = self.files()
        versions = self.versions if len(self.versions) == len(files) else None
        h = hashlib.sha256()
        for k, path in enumerate(files):
            current = versions[k] if versions is not None else file_version(path, self.storage)
            h.update(f"{file_name(path)}\0{current}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()[:16]

    @property
    def compressed_bytes(self) -> int:
        return sum(u.size for u in self.units)

    def _shape(self, order: Iterable[int] | None = None) -> str:
        """A short hash of what the units are (names, sizes, formats; in ``order``, positions
        of ``units``: None, theirs) and the column they are read from, not where they lie."""
        h = hashlib.sha256()
        for u in self.units if order is None else (self.units[k] for k in order):
            line = f"{file_name(u.path)}\0{u.member}\0{u.size}\0{u.kind}\n"
            h.update(_utf8(line))
        if self.text_column != TEXT_COLUMN:  # "text" adds nothing: older states still fit
            h.update(_utf8(f"column\0{self.text_column}\n"))
        return h.hexdigest()[:16]

    def fingerprint(self) -> str:
        """A short hash of what the units are (names, sizes, formats), the column they are
        read from, and each remote file's validator as indexed (its ETag, generation or
        Last-Modified): an object replaced by one of the same size and layout is another
        corpus, so a state or a count of the old one is never taken for it. A local file's
        place and mtime do not count (a corpus copied elsewhere is the same)."""
        shape = self._shape()
        files = self.files()
        remote = [k for k, path in enumerate(files) if is_url(path)]
        if not remote:
            return shape
        versions = self.versions if len(self.versions) == len(files) else None
        h = hashlib.sha256(shape.encode())
        for k in remote:
            version = versions[k] if versions is not None else file_version(files[k], self.storage)
            line = f"{file_name(files[k])}\0{version}\n"
            h.update(line.encode("utf-8", "surrogateescape"))
        return h.hexdigest()[:16]

    def content_fingerprint(self, order: Sequence[int] | None = None) -> str:
        """A short hash of what the units hold, in the order a run reads them: ``fingerprint``
        (names, sizes, formats) and each member's integrity checks (``checks.member_check``:
        an xz member's block checks and index, read at its end; any other member's bytes
        hashed), so that it changes whenever a member's content does, even at the same size.
        Where the files lie, their mtimes and ETags do not count (``_shape``, not
        ``fingerprint``): the same corpus copied elsewhere, or read by URL, has the same one.
        What a prepared run's files are of (``owt tokenize``, ``owt merge``). Costs a read at
        the end of every member (~20,600), a ranged request each remotely; worked out once per
        ``Corpus`` and order (kept with it when it is pickled, as for Ray tasks).

        Args:
            order: The positions of ``units`` in the order a run reads them (``prepare``'s
                ``unit_order``: nanogpt's sorts the files by name, then path); None: corpus
                order. The same units in another order make other files: another run's.

        Raises:
            ValueError: ``order`` does not hold each position of ``units`` once.
        """
        positions = range(len(self.units)) if order is None else order
        if sorted(positions) != list(range(len(self.units))):
            raise ValueError("order must hold each position of the corpus's units once")
        key = hashlib.sha256(repr(list(positions)).encode()).hexdigest()[:16]
        known: dict[str, str] = self.__dict__.get("_content_fingerprints", {})
        if key not in known:
            checks = dict(self._member_checks())
            h = hashlib.sha256(self._shape(positions).encode())
            for k in positions:
                h.update(len(checks[k]).to_bytes(4, "little") + checks[k])
            known = known | {key: h.hexdigest()[:16]}
            object.__setattr__(self, "_content_fingerprints", known)  # frozen: a cache only
        return known[key]

    def _member_checks(self) -> Iterator[tuple[int, bytes]]:
        """``member_check`` of every unit, by its position, file by file."""
        by_file: dict[str, list[tuple[int, Unit]]] = {}
        for k, unit in enumerate(self.units):
            by_file.setdefault(unit.path, []).append((k, unit))
        for path, units in by_file.items():
            if not is_url(path):
                try:
                    with os.fdopen(open_to_read(path), "rb") as f:  # (a FIFO: no wait)
                        stat = os.fstat(f.fileno())  # (else not the content its units are of)
                        unchanged(resolve(self.storage), path, FileInfo.of_local(stat))
                        local = LocalFile(f.fileno(), stat.st_size)
                        yield from ((k, member_check(local, unit)) for k, unit in units)
                except OSError as exc:
                    raise CorpusError(f"cannot read: {exc.strerror or exc}", path=path) from exc
                continue
            known = resolve(self.storage).identity(path) or file_info(path, self.storage)

            def check(unit: Unit, size: int = known.size) -> bytes:  # a request or two each
                return member_check(RangeFile(unit.path, size, storage=self.storage), unit)

            # On daemon threads, watched: a stalled request neither outlives the watchdog nor
            # holds a Ctrl-C'd process until its deadline (an executor joins its threads).
            results = watched(check, [unit for _, unit in units], path, CHECK_THREADS, first=True)
            for (k, _), result in zip(units, results, strict=True):
                if isinstance(result, BaseException):
                    raise result
                yield k, result

    # -- the counts cache ------------------------------------------------------

    def counts_paths(self) -> list[Path]:
        """Where the counts file is looked for, in order (beside the corpus, then the cache)."""
        name = f".owt-counts-{self.fingerprint()}.json"
        try:
            cached = [cache_root() / "counts" / name[1:]]
        except OSError:  # (no cache folder known: beside the corpus only)
            cached = []
        if is_url(self.units[0].path):  # never written beside a remote corpus
            return cached
        return [Path(self.units[0].path).parent / name, *cached]

    def load_counts(self) -> Counts | None:
        """The cached counts, if a file holds them for this corpus as it is now (``countsfile``:
        a damaged, unreadable or stale file is absent)."""
        return load_counts(self.counts_paths(), self._counted())

    def save_counts(self, counts: Counts) -> Path:
        """Write ``counts`` to the first writable place (``countsfile.save_counts``: joined
        with the splits counted there meanwhile); return it."""
        return save_counts(self.counts_paths(), self._counted(), counts)

    def _counted(self) -> CountedOf:
        return CountedOf(self.fingerprint(), self.version(), len(self.units))

    def with_counts(self, counts: Counts) -> Corpus:
        return Corpus(
            self.units, counts, self.skipped_files, self.versions, self.storage, self.text_column
        )


def _utf8(text: str) -> bytes:
    """``text``'s bytes to hash: names need not be UTF-8 (a file system's undecodable bytes
    come back as they were); a column's unpaired surrogate (JSON's ``"\\ud800"``) too."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _given(paths: Any, what: str) -> list[str | os.PathLike[str]]:
    """``paths`` (one, or an ordered collection of them) as a list (numpy's ``np.str_`` as
    ``str``).

    Raises:
        TypeError: ``what``, naming what was given (a bool, bytes, a mapping, a set: its order
            is another in each process, and so would the corpus's be).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    many = isinstance(paths, Iterable) and not isinstance(paths, bytes | Mapping | AbstractSet)
    given = list(paths) if many else None
    if given is None or not all(isinstance(p, str | os.PathLike) for p in given):
        unordered = isinstance(paths, AbstractSet)  # (its order: another in each process)
        raise TypeError(f"{what} (str or os.PathLike), or a list of them, not {paths!r}"
                        + (" (a set has no order: give a sorted list)" if unordered else ""))
    return [str(p) if isinstance(p, str) else p for p in given]
