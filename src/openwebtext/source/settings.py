"""Settings, per corpus: a ``Storage`` holds what one corpus's URLs are read with (its
fsspec options, passed as they are, and its member cache) and what indexing learnt (the
real URL behind each alias, each file's identity, how each token file was indexed).
``Corpus.open(..., storage_options=...)`` makes one and the corpus carries it to its pools
and readers; forked workers inherit it with their units. Two corpora opened with different
options never share a filesystem, an alias or an identity. Every function of ``source``
takes the ``storage`` to use; None means the process's default one (``resolve``), which
``configure`` sets. What is kept on disk about a remote file is keyed on the URL and the
storage's ``place``: a hash of its options without anything that looks like a secret, so
``endpoint_url`` tells two servers apart and no credential is ever written.

What a process makes for a storage (fsspec filesystems, Hub resolutions, small files read
whole) belongs to the backend module that makes it, in a :class:`PerStorage` table of that
module keyed by the storage (as an HTTP client routes to transports that own their pools):
a ``Storage`` holds only what travels with it, so pickling it (Ray) needs no exceptions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar
from urllib.parse import unquote

from openwebtext.errors import CorpusError
from openwebtext.options import as_int, countable
from openwebtext.source.redaction import public_options, redact

if TYPE_CHECKING:
    from openwebtext.tokenfiles import IndexedAs

__all__ = [
    "LOCK",
    "CacheSettings",
    "FileInfo",
    "PerStorage",
    "Storage",
    "configure",
    "is_url",
    "place",
    "placed",
    "protocol",
    "resolve",
]

K = TypeVar("K")
V = TypeVar("V")

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+)://")
#: Guards every ``Storage``'s tables and the backends' ``PerStorage`` tables across threads.
LOCK = threading.Lock()


def is_url(path: object) -> bool:
    """True for ``scheme://…`` (two letters at least, so ``C:\\`` stays a path)."""
    return isinstance(path, str) and _URL.match(path) is not None


def decoded(path: str) -> str:
    """``path`` as its files are named: an http(s) URL percent-decoded (a server's folder page
    quotes its links: ``%C3%A9.tar`` is ``é.tar``; bytes not UTF-8 as a local name's are,
    ``surrogateescape``), anything else as it is."""
    return unquote(path, errors="surrogateescape") if _quoted(path) else path


def file_name(path: str) -> str:
    """The name of the file at ``path``: its last part, ``decoded``, so that a file has one
    name whichever way it is reached (a corpus's identity, its documents' names, nanogpt's
    order)."""
    name = os.path.basename(path)
    return unquote(name, errors="surrogateescape") if _quoted(path) else name


def _quoted(path: str) -> bool:
    """Whether ``path``'s names are percent-encoded (an http(s) URL's)."""
    return protocol(path) in ("http", "https")


def protocol(url: str) -> str:
    """``url``'s scheme, lower-case (``file`` for a path)."""
    match = _URL.match(url)
    return match.group(1).lower() if match else "file"


class CacheSettings(NamedTuple):
    """The optional local cache of members (``membercache``)."""

    root: str
    cap: int | None


class FileInfo(NamedTuple):
    """What identifies a remote file's content: its size and its ETag (or the like)."""

    size: int
    identity: str
    """ETag, generation, blob id or last-modified: what changes when the content does."""

    @classmethod
    def of_local(cls, st: os.stat_result) -> FileInfo:
        """A local file's, from its ``os.stat``: its size, modification time and inode (a file
        put in its place by a rename, its size and mtime kept, is another)."""
        return cls(st.st_size, f"mtime_ns:{st.st_mtime_ns}:ino:{st.st_ino}:dev:{st.st_dev}")


def place(options: dict[str, Any] | None) -> str:
    """A short hash of where ``options`` point (``endpoint_url``, ``anon``, a profile…),
    made without anything that may be secret; "" for no options."""
    public = public_options(options or {})
    if not public:
        return ""
    text = json.dumps(public, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def placed(url: str, place: str) -> str:
    """What a cache on disk keys ``url`` by: the URL, and ``place`` when it is not the
    default's (the same URL on another endpoint is another file)."""
    return f"{url}\0{place}" if place else url


class Storage:
    """What one corpus's URLs are read with: fsspec options and the member cache.

    It also keeps what indexing learnt about the corpus's files: the real URL
    behind each alias, each file's identity and how each token file was indexed. Workers
    forked from the process inherit it, and pickling it (Ray, a spawned process) keeps all of
    it, local files' identities only for a process of the same host; what a process makes
    for it (filesystems, Hub resolutions, token files' ends) is its backends' (``PerStorage``,
    ``tokenfiles.indexed``). Its ``repr`` shows no option.

    Args:
        options: Passed as they are to ``fsspec.filesystem`` (for S3:
            ``endpoint_url``, ``anon``, ``key``…); for ``http(s)://`` URLs, those its
            filesystem and aiohttp's requests take (the others left out, with a warning).
        cache_dir: Keep the remote members read in this folder (None: no cache).
        cache_size: The member cache's cap in bytes (None: no cap).

    Raises:
        ValueError: a ``cache_size`` without a ``cache_dir`` (it would bound nothing), or not
            an int of bytes >= 0; an empty ``cache_dir``.
        TypeError: a ``cache_dir`` that is not a path, ``options`` that are not a mapping.
    """

    def __init__(
        self,
        options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | None = None,
    ):
        if cache_size is not None and cache_dir is None:
            raise ValueError("cache_size caps the member cache of cache_dir: give cache_dir "
                             "(owt: --cache-dir), or leave it out")  # fmt: skip
        cache_size = as_int(cache_size)  # (numpy's integers too, as every door)
        if cache_size is not None and not countable(cache_size, 0):
            raise ValueError(f"cache_size must be None or an int of bytes >= 0, not "
                             f"{cache_size!r}")  # fmt: skip
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise TypeError(f"cache_dir must be a folder's path, not {type(cache_dir).__name__}")
        if cache_dir is not None and not os.fspath(cache_dir).strip():
            raise ValueError(f"cache_dir must name a folder, not {cache_dir!r}")
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"storage_options must be a mapping of option names to values, "
                            f"not {type(options).__name__}")  # fmt: skip
        self.options: dict[str, Any] = dict(options or {})
        self.cache = None if cache_dir is None else CacheSettings(os.fspath(cache_dir), cache_size)
        self.place = place(self.options)
        """What caches on disk are keyed on besides the URL (``place``)."""
        self.aliases: dict[str, str] = {}
        self.identities: dict[str, FileInfo] = {}
        self.tokens: dict[str, IndexedAs] = {}
        """How each token file (path, or URL's alias) was indexed: its eot and dtype, a remote
        index's digest. Its ends are this process's (``tokenfiles.indexed``, inherited by
        forked workers); a process it is pickled to indexes the file again this way."""
        self.root = self
        """Whose options, cache and backends' tables these are: itself, or the storage a
        corpus's ``view`` was made of."""

    def __repr__(self) -> str:
        return f"Storage(place={self.place!r}, cache={self.cache})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Ray task, a spawned worker): all of it, with the host it was pickled on.
        Local files' identities are that host's files' (a copy on another node has other
        mtimes and inodes): a process of another host drops them, one of the same host keeps
        them, so that its reads are checked as a forked worker's are, and a token file is
        indexed again there only if it is the one this corpus indexed (``index.tokens``),
        never new bytes cut at the old ends. A view of the default is unpickled as a view of
        that process's default (its options, and ``configure`` there reaching it), as a corpus
        opened without options always read with the default of the process it is read in;
        ``detached`` for a copy that keeps this process's options."""
        state = dict(self.__dict__, host=_host())
        if self.root is _default and self is not _default:
            state.update(root=None, options={}, cache=None, place="")  # (none of them travels)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.pop("host", None) != _host():  # another host's local files
            state["identities"] = {k: v for k, v in state["identities"].items() if is_url(k)}
        self.__dict__.update(state)
        if self.root is None:  # a view of the default, in this process
            self.root = _default
            with LOCK:
                self.options, self.cache, self.place = _default.options, _default.cache, \
                    _default.place  # fmt: skip
                _views.add(self)

    def detached(self) -> Storage:
        """A storage of its own with this one's options, cache, aliases and identities (what
        travels to a Ray worker that must read as this process does)."""
        copy = object.__new__(Storage)
        copy.__dict__.update(self.__dict__, aliases=dict(self.aliases),
                             identities=dict(self.identities), tokens=dict(self.tokens))
        copy.root = copy
        return copy

    def alias(self, url: str) -> str:
        """The name units carry for ``url``: without credentials or query string.

        Units' paths end up in errors, skip lists and states, so a signed URL's
        signature must not be one. The real URL stays here (in this process and
        the workers it forks), and ``fetch`` goes back to it (``real_url``).
        """
        shown = redact(url)
        if shown != url:
            with LOCK:
                if self.aliases.setdefault(shown, url) != url:
                    raise CorpusError("another URL of this corpus differs from it only in its "
                                      "query string or credentials: their units would have the "
                                      "same names", path=shown)  # fmt: skip
        return shown

    def real_url(self, url: str) -> str:
        """The URL behind an ``alias`` (``url`` itself if it is none)."""
        return self.aliases.get(url, url)

    def remember(self, url: str, info: FileInfo) -> None:
        """Note what identifies ``url``'s content (the index does, before the workers fork)."""
        self.identities[url] = info

    def identity(self, url: str) -> FileInfo | None:
        """The size and identity (ETag, generation…) of ``url`` as last indexed, if it was.

        What a cache of anything read from ``url`` (members, counts) should be keyed on.
        """
        return self.identities.get(url)

    def view(self) -> Storage:
        """A storage for one corpus (``Corpus.open`` without options): this one's options,
        cache and backends' tables (``PerStorage`` keys by ``root``; ``configure`` reaches the
        default's views), with aliases, identities and token files of its own, noted as the
        corpus is indexed. The same files opened again once they changed (another corpus) are
        noted in that corpus's view, never here: this corpus's reads are checked against what
        it indexed, and said to have changed.
        """
        view = object.__new__(Storage)
        view.__dict__.update(self.__dict__, aliases={}, identities={}, tokens={})
        if self.root is _default:
            with LOCK:
                _views.add(view)
        return view


_default = Storage()
_views: weakref.WeakSet[Storage] = weakref.WeakSet()
_registered: list[PerStorage[Any, Any]] = []


class PerStorage(Generic[K, V]):
    """One backend module's table for each ``Storage`` in this process (its filesystems, its
    Hub resolutions…), held by that module, not by the storage: it is never pickled with
    the storage, forked workers inherit it with the module, and ``configure`` empties the
    default storage's (it was made with the old options)."""

    def __init__(self) -> None:
        self._tables: weakref.WeakKeyDictionary[Storage, dict[K, V]] = weakref.WeakKeyDictionary()
        _registered.append(self)

    def of(self, storage: Storage | None) -> dict[K, V]:
        """The table of ``storage`` (None: the default one); read and change it under ``LOCK``."""
        store = resolve(storage).root
        with LOCK:
            return self._tables.setdefault(store, {})

    def forget(self, storage: Storage) -> None:
        """Drop ``storage``'s table: the next use makes everything again."""
        with LOCK:
            self._tables.pop(storage, None)


def resolve(storage: Storage | None) -> Storage:
    """``storage``, or the process's default one (set by ``configure``) when None."""
    return _default if storage is None else storage


def _host() -> str:
    """This machine's view of its local files: its host name and, where the kernel says them
    (Linux), its boot's id (two machines of one name told apart) and the process's mount
    namespace (a container sharing the host's name sees other files at the same paths; a
    spawned process or a Ray worker of the same node shares it)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as f:
            boot = f.read().strip()
        mounts = os.readlink("/proc/self/ns/mnt")
    except OSError:
        boot = mounts = ""
    return f"{socket.gethostname()} {boot} {mounts}"


def configure(
    storage_options: dict[str, Any] | None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_size: int | None = None,
) -> None:
    """Set the process's default storage: what a corpus opened without options uses.

    ``storage_options`` go to ``fsspec.filesystem`` as they are (for S3:
    ``endpoint_url``, ``anon``, ``key``…). ``cache_dir`` turns on the local
    cache of remote members (``cache_size`` bytes at most; None: no cap).
    Workers forked afterwards inherit it. Filesystems (and all else made
    with the old options) are dropped, so the next request uses the new ones. A corpus opened with
    its own ``storage_options`` or ``cache_dir`` (``Corpus.open``) is not
    affected: it carries its own ``Storage``.
    """
    fresh = Storage(storage_options, cache_dir, cache_size)
    with LOCK:  # what indexing learnt (aliases, identities) stays
        for store in (_default, *list(_views)):
            store.options, store.cache, store.place = fresh.options, fresh.cache, fresh.place
    for table in _registered:  # filesystems and resolutions made with the old endpoint, token…
        table.forget(_default)
