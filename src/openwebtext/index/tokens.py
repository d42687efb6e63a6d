"""A token corpus: files of ids (any of ``tokenfiles``' four formats) cut into units that
are runs of whole documents, their counts known at once (no counting pass).

A unit is ``Unit(path, member="DOCS FIRST-STOP", offset, size, kind=TOKENS, ...)``: the
byte range of documents ``[FIRST, STOP)`` of its file, about ``unit_tokens`` ids of whole
documents. A worker reads those bytes (``engine.read``) and finds the documents in them
from the file's ends (``tokenfiles.indexed``: opened here, in the main process, kept by the
corpus's storage, so forked workers inherit them as this corpus indexed them); each
document's name is its index in the file. The identity of each local file read (the file, its
index, the ``meta.json`` beside it, there or not) is noted in the storage: the reader says a
change of any. How each file was indexed (its eot and dtype, a remote index's digest) is
noted there too (``Storage.tokens``), so that a process the corpus is pickled to, which
inherits no ends, indexes it again the same way (``as_indexed``), once, after checking it is
the file indexed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence

import numpy as np

from openwebtext.errors import CorpusError
from openwebtext.formats import (
    BZIP2,
    GZIP,
    MAGIC_BYTES,
    PARQUET,
    XZ,
    ZSTD,
    LimitExceeded,
    Truncated,
    decompress,
    detect,
)
from openwebtext.index.inputs import distinct_names
from openwebtext.records import Unit
from openwebtext.source import (
    ABSENT,
    CHANGED,
    FileInfo,
    Storage,
    fetch,
    file_info,
    file_name,
    is_url,
    local_identity,
    resolve,
    unchanged,
)
from openwebtext.tokenfiles import (
    TOKENS,
    IndexedAs,
    TokenFile,
    TokenFileError,
    Vocabulary,
    beside,
    companions,
    indexed,
    kept,
    opened,
    read_datatrove_index,
    read_megatron_index,
    recorded,
    remember,
    unit_member,
)

log = logging.getLogger("openwebtext")

__all__ = ["UNIT_TOKENS", "as_indexed", "token_units"]

#: Ids a unit holds, about (whole documents): ~2 MB of uint16, like a text member's text.
UNIT_TOKENS = 1 << 20


def token_units(
    paths: Sequence[str | os.PathLike[str]],
    *,
    eot: int | None = None,
    dtype: str | None = None,
    unit_tokens: int = UNIT_TOKENS,
    storage: Storage | None = None,
) -> tuple[list[Unit], list[int]]:
    """The units of token files, and the documents of each.

    ``eot`` and ``dtype`` default to those of a ``meta.json`` beside the file (an ``owt
    tokenize`` run), else GPT-2's (50256, uint16); a Megatron index gives its own dtype.
    A URL (read with ``storage``) is a file with an index beside it (``X.bin`` and ``X.idx``,
    or ``X.ds`` and ``X.ds.index``): the index is fetched here, the ids by range later; its
    units are named by its alias (``Storage.alias``: no credentials, no query string).

    Raises:
        CorpusError: a file missing; the same file twice (by any path, a symlink or a hard
            link such as a ``.ds`` beside its ``train.bin``); a URL without an index (llm.c
            shards, a bare ``train.bin``: their documents are found only by reading every id);
            an index or ``meta.json`` beside a URL that cannot be read (only one not there,
            a 404, is none).
        TokenFileError: a damaged header or index.
    """
    units: list[Unit] = []
    counts: list[int] = []
    seen: dict[object, str] = {}
    store = resolve(storage)
    given_names = [os.fspath(p) for p in paths]
    # As a remote text file's, a URL's units carry its alias: they reach errors and states.
    shown = {name: store.alias(name) if is_url(name) else name for name in given_names}
    # Documents are named by their index in the file, after the file's name when there are
    # several (llm.c's shards each start at 0): the held-out split hashes the names.
    files = distinct_names(shown.values()) if len(given_names) > 1 else {}
    for given in given_names:
        name = shown[given]
        if is_url(given):
            _once(seen, name.rstrip("/"), name)
            token_file = _remote(given, name, dtype, store)
        else:
            if not os.path.isfile(name):
                folder = " in it (DIR/train.bin)" if os.path.isdir(name) else ""
                what = "is a folder" if folder else "is not a regular file"
                raise CorpusError(f"{what}: give a token file{folder}" if os.path.exists(name)
                                  else "no such token file", name)  # fmt: skip
            _not_text(name)
            st = os.stat(name)
            _once(seen, (st.st_dev, st.st_ino), name)
            _note(name, st, store)  # before it is read: a change since is said by the reader
            run = beside(name)  # the run's meta.json: its eot and dtype, else GPT-2's
            file_eot = eot if eot is not None else 50256 if run is None else run.eot
            file_dtype = dtype or ("uint16" if run is None else run.dtype)
            token_file = opened(name, eot=file_eot, dtype=file_dtype)
            indexed(name, token_file, store)  # what the corpus's readers read it as
            store.tokens[name] = IndexedAs(file_eot, file_dtype)  # (where they are not forked)
        base = int(getattr(token_file.ids, "offset", 0))  # an llm.c shard's header
        itemsize = token_file.ids.dtype.itemsize
        ends = token_file.ends
        subset = file_name(name.rstrip("/")).split(".")[0]
        first, index = 0, 0
        while first < len(ends):
            start = int(ends[first - 1]) if first else 0
            stop = max(int(np.searchsorted(ends, start + unit_tokens, side="right")), first + 1)
            end = int(ends[stop - 1])
            member = unit_member(first, stop, files.get(name, ""))
            offset, size = base + start * itemsize, (end - start) * itemsize
            units.append(Unit(name, member, offset, size, TOKENS, subset, index))
            index += 1
            counts.append(stop - first)
            first = stop
    return units, counts


def _note(name: str, stat: os.stat_result, store: Storage) -> None:
    """Note in ``store`` the identity of the local token file ``name`` (its ``stat``) and of
    each file read beside it (``companions``: its index, the ``meta.json``; ``NOT_THERE``
    for one that is not): the corpus's readers check them, so that any of them changed since
    is said to be (``engine.raw``, ``engine.tokens``), never read as another cut, eot or dtype."""
    store.remember(name, FileInfo.of_local(stat))
    for path in companions(name):
        store.remember(path, local_identity(path))


def _once(seen: dict[object, str], key: object, name: str) -> None:
    """Refuse a file given twice (``key``: its device and inode, or its URL's alias), as
    ``Corpus.open`` refuses a text file twice: its documents would be read twice."""
    if key in seen:
        raise CorpusError(
            f"the same token file is given twice (also as {seen[key]}): its documents would "
            "be read twice; name each file once",
            name,
        )
    seen[key] = name


def as_indexed(path: str, storage: Storage, eot: int | None = None) -> TokenFile:
    """The token file ``path`` (a unit's) as the corpus reading with ``storage`` indexed it:
    its ends as kept in this process or the one it was forked from (``tokenfiles.kept``), else
    (a process the corpus was pickled to: spawned, a Ray task) indexed again here as
    ``storage.tokens`` says (the same eot and dtype), once: the ends are not pickled with the
    corpus (tens of MB for a large one). A storage that indexed no such file reads it as it
    is now, with ``eot`` (the reader's: ``tokenfiles.opened``).

    Raises:
        OSError: ``CHANGED``, a local file or one read beside it that is not the one noted
            at the open (its identity travels to a process of the same host only); the file
            is gone, or is no longer a regular file.
        TokenFileError: a remote file's index that is not the one indexed (``CHANGED``),
            or cannot be read again; a damaged file.
    """
    found = kept(path, storage)
    if found is not None:
        return found
    how = storage.tokens.get(path)
    if how is None:
        return opened(path, eot=eot, storage=storage)
    if is_url(path):
        found = _remote_again(path, how, storage)
    else:  # checked as a read is (``engine.tokens``): never the ends of another file
        for noted in (path, *companions(path)):
            unchanged(storage, noted, local_identity(noted))
        found = opened(path, eot=how.eot, dtype=how.dtype)
    indexed(path, found, storage)
    return found


def _remote(url: str, name: str, dtype: str | None, store: Storage) -> TokenFile:
    """A remote token file's ends, from its index (fetched whole: ~20 bytes a document),
    kept for the workers (``tokenfiles.remember``), and how it was indexed for a process the
    corpus is pickled to (``as_indexed``); ``name`` is its alias, what is shown. ``dtype``
    defaults to that of its run's ``meta.json``, else uint16 (a ``.ds``'s)."""
    index = _index_of(name)
    run = _remote_run(url, name, store)
    info = file_info(url, store)
    store.remember(name, info)  # its ETag or Last-Modified: the corpus's identity
    dtype = dtype or ("uint16" if run is None else run.dtype)
    size = info.size
    if index.endswith(".index"):
        ids_dtype = np.dtype(dtype).newbyteorder("<")
        if size % ids_dtype.itemsize:  # (as a local one: ``tokenfiles.opening``)
            raise CorpusError(f"{size} bytes of ids, not a whole number of {dtype} ids", name)
    body = _whole(_beside(url, index), _beside(name, index), store)
    if body is None:
        why = (
            "write it (owt tokenize --format datatrove)"
            if index.endswith(".index")
            else "llm.c shards and a bare train.bin are found in documents only by reading "
            "every id; download them, or write the index (owt tokenize --format megatron)"
        )
        raise CorpusError(
            f"a remote token file is read with its index beside it ({index} is not there): "
            f"{why}", name,
        )  # fmt: skip
    token_file = _from_index(name, index, body, size, dtype, run)
    remember(name, token_file, store)
    store.tokens[name] = IndexedAs(None, dtype, _digest(body), run)
    return token_file


def _remote_again(name: str, how: IndexedAs, store: Storage) -> TokenFile:
    """The remote token file ``name`` (an alias) indexed again as ``how`` says, in a process
    its corpus was pickled to: its index fetched again must be the one indexed (its digest:
    whatever validators the server sends), its ``meta.json`` is taken as it was recorded, its
    size is the one noted (every range of it is read checked against that version)."""
    index, url = _index_of(name), store.real_url(name)
    try:
        size = (store.identity(name) or file_info(url, store)).size
        key = (store.place, url, size, how)
        if key in _AGAIN:  # (another copy of the corpus in this process: its index fetched)
            return _AGAIN[key]
        body = _whole(_beside(url, index), _beside(name, index), store)
    except CorpusError as exc:
        if not exc.skippable:  # (an extra not installed: said as it is)
            raise
        raise TokenFileError(f"its {index} cannot be read again: {exc.message}", name) from None
    if body is None or _digest(body) != how.digest:
        raise TokenFileError(f"{CHANGED}: its {index} is not the one it was indexed with", name)
    found = _AGAIN[key] = _from_index(name, index, body, size, how.dtype, how.tokenizer)
    return found


#: Remote token files indexed again in this process (``_remote_again``), by place, URL, size
#: and how they were indexed (its index's digest): each copy of a corpus unpickled here (a
#: task's, a spawned worker's) finds the ends fetched for the first, not fetched again.
_AGAIN: dict[tuple[str, str, int, IndexedAs], TokenFile] = {}


def _index_of(name: str) -> str:
    """The name of the index beside the remote token file ``name`` (an alias: no query
    string to end with)."""
    base = name.rsplit("/", 1)[-1]
    if base.endswith(".ds"):
        return base + ".index"
    if base.endswith(".bin"):
        return base[: -len(".bin")] + ".idx"
    raise CorpusError("not a token file this reads remotely (X.bin with X.idx, X.ds)", name)


def _from_index(
    name: str, index: str, body: bytes, size: int, dtype: str, run: Vocabulary | None
) -> TokenFile:
    """The remote token file ``name`` of ``size`` bytes, its ends from its index's ``body``
    (a datatrove index counts ids of ``dtype``; a Megatron one says its own)."""
    if index.endswith(".index"):
        ids_dtype = np.dtype(dtype).newbyteorder("<")
        ends = read_datatrove_index(_beside(name, index), size // ids_dtype.itemsize, body)
    else:
        ids_dtype, ends = read_megatron_index(_beside(name, index), body)
        if (ends[-1] if ends.size else 0) * ids_dtype.itemsize != size:
            raise CorpusError(f"{size} bytes, not the ids of {index}", name)
    return TokenFile(name, np.zeros(0, ids_dtype), ends, run)


def _digest(body: bytes) -> str:
    """What a remote index is known by where it is fetched again: a hash of its bytes (the
    same on every host, whatever validators its server sends or not)."""
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def _remote_run(url: str, name: str, store: Storage) -> Vocabulary | None:
    """What the ``meta.json`` beside a remote token file records (``recorded``); None if
    there is none (not found: a 404).

    Raises:
        CorpusError: a ``meta.json`` that cannot be read (retries ran out): taken as none,
            ids of another tokenizer would be read as the reader's. Access refused is none,
            with a warning: S3 refuses a key it does not hold to a reader who may not list
            the bucket.
        TokenFileError: a ``meta.json`` that is there but damaged, naming it and the field.
    """
    shown = _beside(name, "meta.json")
    return recorded(_whole(_beside(url, "meta.json"), shown, store, refused=True), shown)


def _whole(url: str, shown: str, store: Storage, refused: bool = False) -> bytes | None:
    """All of the file at ``url`` (``shown``: its alias); None if it is not there (or,
    ``refused``, if access to it is refused: said in a warning).

    Raises:
        CorpusError: it cannot be read (retries ran out, access refused…), naming it and why.
    """
    try:
        return fetch(url, 0, file_info(url, store).size, None, store)
    except CorpusError as exc:
        if exc.message.endswith(ABSENT):
            return None
        if refused and "access refused" in exc.message:  # S3 without s3:ListBucket: a 403
            log.warning("%s: access refused, read as none (a store may refuse a key it does "
                        "not hold): the ids are not checked against their run's tokenizer",
                        shown)  # fmt: skip
            return None
        raise CorpusError(f"cannot read: {exc.message.removeprefix('cannot read: ')}",
                          shown) from None  # fmt: skip


def _beside(url: str, file: str) -> str:
    """The URL of ``file`` in ``url``'s folder, with ``url``'s query string (a folder's
    token; a signed URL's signature is its own file's, refused for another)."""
    head, mark, query = url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{file}{mark}{query}"


def _not_text(name: str) -> None:
    """Refuse a file of text given as token ids (a tar, compressed data, parquet, JSON), not
    named as token files are (``.bin``, ``.ds``): its bytes would be read as ids, and said not
    to end with the end-of-text id. Ids may begin with any bytes, a magic's or a ``{``: each
    kind is taken only on evidence (its head decompresses; parquet's magic at both ends; a
    first line that parses as JSON).

    Raises:
        CorpusError: naming what the file is, and what opens it.
    """
    if name.endswith((".bin", ".ds")):
        return
    with open(name, "rb") as f:  # (a regular file: ``isfile``)
        head = f.read(MAGIC_BYTES)
        f.seek(-4, os.SEEK_END)  # (a file of a few bytes: its start)
        tail = f.read(4)
    kind = _text_kind(head, tail)
    if kind is not None:
        raise CorpusError(f"is {kind} data, not token ids: a corpus of text is opened with "
                          "Corpus.open", name)  # fmt: skip


def _text_kind(head: bytes, tail: bytes) -> str | None:
    found = detect(head)
    if found in (GZIP, XZ, BZIP2, ZSTD):
        try:
            out = decompress(head, found, 1 << 20)
        except Truncated as exc:  # (its head decodes: that data, if it says something)
            out = exc.data
        except LimitExceeded:
            return found
        except Exception:  # any decoder's own error: ids that begin with its magic
            return None
        return found if out else None
    if found == PARQUET:  # (its magic at both ends)
        return found if tail == b"PAR1" else None
    if found is not None:  # (a tar)
        return found
    line, _, rest = head.partition(b"\n")
    cut = not rest and len(head) == MAGIC_BYTES  # (a first line past the head: its start)
    try:
        text = (line[: len(line) - 3] if cut else line).decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        json.loads(text)
    except ValueError:
        return "JSON" if cut and text.lstrip().startswith(('{"', "[{", '["')) else None
    return "JSON" if text.lstrip()[:1] in ("{", "[") else None
