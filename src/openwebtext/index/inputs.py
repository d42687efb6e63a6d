"""Inputs: the files that paths, folders and glob patterns name, before any is indexed.

A folder is a dataset folder: it may hold README.md, .gitattributes, checksums
or manifests beside the corpus. It (or a pattern) keeps the files that are
corpus files by their magic bytes (as members are recognised) or by a corpus
file's name (``.parquet``, ``.jsonl``, ``.tar``, ``.xz``…: indexed whatever their bytes, so
that a Git LFS pointer in their place is an error naming it, or a counted skip), and the
others are listed as ``ignored``. A path that
cannot be read (a dangling symlink, a symlink loop, a FIFO or device, a file
without permission) is a problem, said as such: ``index`` raises it, or
counts it as skipped under ``on_error="skip"``. The same file named twice, by
any spelling, is refused.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from openwebtext.errors import CorpusError, OutOfResources, read_error
from openwebtext.formats import MAGIC_BYTES, detect, is_empty_tar
from openwebtext.index.jsonl import is_jsonl
from openwebtext.records import Unit
from openwebtext.source import FileInfo, Storage, decoded, is_url, resolve

__all__ = [
    "Found",
    "distinct_names",
    "expand_paths",
    "file_version",
    "find_files",
    "named_as_corpus_file",
    "noted_versions",
    "refuse_corpus_folder",
]


class Found(NamedTuple):
    """What paths, folders and patterns name (``find_files``)."""

    items: list[Path | CorpusError]
    """In order: corpus files, and paths that name something unreadable (a dangling
    symlink, a FIFO, a loop) as the error that says so."""
    ignored: list[str]
    """Entries of folders and patterns that are not corpus files (README.md, checksums)."""

    @property
    def files(self) -> list[Path]:
        return [item for item in self.items if isinstance(item, Path)]

    @property
    def problems(self) -> list[CorpusError]:
        return [item for item in self.items if isinstance(item, CorpusError)]


#: Names a corpus file goes by (the OpenWebText release's, parquet, tars and compressed
#: members): such a file is kept in a folder whatever its bytes, so that indexing reads it
#: or says what is wrong with it (a Git LFS pointer named ``train-00000-of-00001.parquet``),
#: never left out as "not a corpus file".
_CORPUS_NAME = re.compile(
    r"^(urlsf_subset\d+.*\.tar|.*_data\.xz|openwebtext\.tar.*"
    r"|.*\.(parquet|tar|tgz|txz|xz|gz|bz2|zst|zstd))$",
    re.IGNORECASE,
)

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _unless_out_of_resources(error: CorpusError | OutOfResources) -> CorpusError:
    """``error``, a file's to list (and skip, under ``skip``); raised when the machine ran
    out (never a file's fault)."""
    if isinstance(error, OutOfResources):
        raise error
    return error


def _unreadable(path: str, lstat_ok: bool) -> CorpusError:
    """Why ``path`` (which ``os.stat`` refused) cannot be read."""
    try:
        os.stat(path)
    except ValueError:  # (what no file system's name holds: said, never a file read)
        return CorpusError("not a path: it holds a NUL or an unpaired surrogate", path=path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return CorpusError("symlink loop: the link never reaches a file", path=path)
        if exc.errno == errno.ENOENT and lstat_ok:
            return CorpusError(f"dangling symlink to {os.readlink(path)}", path=path)
        if exc.errno == errno.ENOENT:
            return CorpusError("no such file or folder", path=path)
        return _unless_out_of_resources(read_error(exc, path, kind=CorpusError))
    return CorpusError("cannot read", path=path)  # pragma: no cover - it went away and back


def _classify(path: str) -> tuple[str, os.stat_result | None, str]:
    """``("file" | "folder" | "other" | "bad", stat, why)`` for one path, following links."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # (ValueError: a NUL, an unpaired surrogate)
        return "bad", None, ""
    if stat.S_ISDIR(st.st_mode):
        return "folder", st, ""
    if stat.S_ISREG(st.st_mode):
        return "file", st, ""
    what = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    return "other", st, what


def named_as_corpus_file(path: str) -> bool:
    """Whether a file's name (of a path or URL) is a corpus file's (``_CORPUS_NAME``, JSON
    lines): such a file is read, or is an error naming it, whatever its bytes."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return bool(_CORPUS_NAME.match(name)) or is_jsonl(name)


def refuse_corpus_folder(
    out: str | os.PathLike[str], units: Iterable[Unit] | None = None
) -> None:
    """Refuse an output folder (``--out``) a run's files written into would be read with
    corpus files next time (each warned of as left out): a folder of ``units``' files (a
    corpus's), or one that holds corpus files by their names.

    Raises:
        ValueError: naming the folder (and the first of those files).
    """
    out = os.fspath(out)
    if is_url(out):
        return
    if units is not None:
        local = {unit.path for unit in units if not is_url(unit.path)}
        if os.path.realpath(out) in {os.path.realpath(os.path.dirname(p)) for p in local}:
            raise ValueError(f"out {out} is a folder of the corpus's files: the run's files "
                             "would be read with them next time; give a folder of its own")
    if not os.path.isdir(out):
        return
    found = sorted(e.name for e in os.scandir(out) if named_as_corpus_file(e.name))
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise ValueError(f"--out {out} holds corpus files ({found[0]}{more}): its files would "
                         "be read with them next time; give a folder of its own")  # fmt: skip


def _is_corpus_file(path: str) -> bool | CorpusError:
    """Whether a file found in a folder or pattern belongs to the corpus: its magic bytes
    (as members are recognised, and parquet's ``PAR1``), or a corpus file's name
    (``_CORPUS_NAME``, JSON lines: ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``) whatever its
    bytes. An unreadable one is an error."""
    if named_as_corpus_file(os.path.basename(path)):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(MAGIC_BYTES)
    except OSError as exc:
        return _unless_out_of_resources(read_error(exc, path, kind=CorpusError))
    return detect(head) is not None or is_empty_tar(head)


def find_files(paths: Iterable[str | os.PathLike[str]]) -> Found:
    """Turn paths, folders and glob patterns into the corpus files they name.

    A folder (not recursive; names starting with ``.`` or ``_`` are left out)
    or a pattern keeps the files that are corpus files by their magic bytes or
    their OpenWebText names; the others, and the folders in it (said with a
    trailing separator), are ``ignored``. A path named
    explicitly is kept whatever it holds (indexing it says what is wrong).
    Unreadable paths are ``problems``. The same file named twice, by any
    spelling, is refused: its documents would silently count twice.

    Raises:
        CorpusError: a folder or pattern that names no file, or a file named twice.
    """
    found = Found([], [])
    seen: dict[tuple[int, int], str] = {}

    def keep(path: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise CorpusError(
                f"the same file is given twice (also as {seen[key]}): its documents would be "
                "read twice; name each file once",
                path=path,
            )
        seen[key] = path
        found.items.append(Path(path))

    def entries(source: str, listed: list[str]) -> None:
        before = len(found.items)
        folders = [path for path in listed if os.path.isdir(path)]  # (not read: said)
        if "**" not in source:  # (a pattern that goes down: its files in them are matched)
            found.ignored.extend(os.path.join(path, "") for path in folders)
        not_read = set(folders)
        listed = [path for path in listed if path not in not_read]
        for path in listed:
            kind, st, what = _classify(path)
            if kind == "other" and named_as_corpus_file(path):  # (a corpus file's name: said)
                found.items.append(CorpusError(f"is {what}, not a file", path=path))
            elif kind == "bad":
                found.items.append(_unreadable(path, os.path.lexists(path)))
            elif kind == "file" and st is not None:
                corpus_file = _is_corpus_file(path)
                if isinstance(corpus_file, CorpusError):
                    found.items.append(corpus_file)
                elif corpus_file:
                    keep(path, st)
                else:
                    found.ignored.append(path)
            elif kind == "other":
                found.ignored.append(path)
        if len(found.items) == before:
            sub = f" (its folders are not read: name one, e.g. {folders[0]})" if folders else ""
            raise CorpusError(f"holds no corpus file{sub}", path=source)

    for raw in paths:
        text = os.fspath(raw)
        if not isinstance(text, str):
            raise TypeError(f"the corpus is a path (str or os.PathLike of str), not {raw!r}, "
                            f"whose os.fspath is {type(text).__name__}")  # fmt: skip
        text = str(text)  # (numpy's np.str_: its os.listdir gives bytes)
        kind, st, what = _classify(text)
        if kind == "folder":
            listed = sorted(
                os.path.join(text, name)
                for name in os.listdir(text)
                if not name.startswith((".", "_"))
            )
            entries(text, listed)
        elif kind == "file" and st is not None:
            keep(text, st)
        elif kind == "other":
            found.items.append(CorpusError(f"is {what}, not a file", path=text))
        elif glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True))  # (``**``: as fsspec's, a URL's)
            if not matches:
                raise CorpusError("pattern matches no file", path=text)
            entries(text, matches)
        else:
            found.items.append(_unreadable(text, os.path.lexists(text)))
    return found


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The corpus files named by paths, folders and glob patterns (see ``find_files``).

    Raises:
        CorpusError: an unreadable path, or one that holds no corpus file.
    """
    found = find_files(paths)
    if found.problems:
        raise found.problems[0]
    return found.files


def distinct_names(paths: Iterable[str]) -> dict[str, str]:
    """Each path's (or URL's) shortest trailing part — ``name``, ``folder/name``… — that no
    other of ``paths`` ends with: what names its documents, so that files of one base name in
    different folders (the Hub's ``en/train-00000-of-00001.parquet``, ``de/…``) never give
    two documents one name (the held-out split hashes names)."""
    parts = {path: decoded(path).rstrip("/").split("/") for path in dict.fromkeys(paths)}
    depth = dict.fromkeys(parts, 1)
    while True:
        tails = {p: "/".join(parts[p][-depth[p] :]) for p in parts}
        seen: dict[str, int] = {}
        for tail in tails.values():
            seen[tail] = seen.get(tail, 0) + 1
        clashing = [p for p in parts if seen[tails[p]] > 1 and depth[p] < len(parts[p])]
        if not clashing:
            return tails
        for p in clashing:
            depth[p] += 1


def noted_versions(paths: Iterable[str], storage: Storage | None = None) -> tuple[str, ...]:
    """``file_version`` of each of ``paths``, a local file's identity noted in ``storage``
    (where indexing did not note it: a URL's is noted as it is indexed, a local file's from
    the descriptor it is indexed with): the workers' reads check it (``engine.raw``), so a
    file changed after it was indexed is said to be, never read as another corpus.

    Raises:
        CorpusError: a local file changed while it was indexed (its units may be the old
            file's): open the corpus again.
    """
    store, versions = resolve(storage), []
    for path in paths:
        if not is_url(path):
            now, noted = FileInfo.of_local(os.stat(path)), store.identity(path)
            if noted is None:
                store.remember(path, now)
            elif noted != now:
                raise CorpusError("the file changed while it was indexed: open the corpus "
                                  "again", path=path)  # fmt: skip
        versions.append(file_version(path, storage))
    return tuple(versions)


def file_version(path: str, storage: Storage | None = None) -> str:
    """What changes when the file changes: its size and modification time.

    The counts cache is keyed on it. A remote file gives its size and ETag (or
    generation, or last-modified) as indexed (``storage.identity``); a remote token file,
    also a hash of the index fetched beside it (``index.tokens``: its documents' ends), which
    its own validators do not cover.
    """
    if is_url(path):
        store = resolve(storage)
        info, how = store.identity(path), store.tokens.get(path)  # (noted when indexed)
        index = "" if how is None else f":{how.digest}"
        return f"{info.size}:{info.identity}{index}" if info else "unknown"
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}"
