"""A token corpus: files of ids (any of ``tokenfiles``' four formats) cut into units that
are runs of whole documents, their counts known at once (no counting pass).

A unit is ``Unit(path, member="DOCS FIRST-STOP", offset, size, kind=TOKENS, ...)``: the
byte range of documents ``[FIRST, STOP)`` of its file, about ``unit_tokens`` ids of whole
documents. A worker reads those bytes (``engine.read``) and finds the documents in them
from the file's ends (``tokenfiles.opened``: opened here, in the main process, so forked
workers inherit them); each document's name is its index in the file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from openwebtext.errors import CorpusError
from openwebtext.index.inputs import distinct_names
from openwebtext.records import Unit
from openwebtext.source import Storage, fetch, file_info, is_url, resolve
from openwebtext.tokenfiles import (
    TOKENS,
    TokenFile,
    Vocabulary,
    beside,
    opened,
    read_datatrove_index,
    read_megatron_index,
    recorded,
    remember,
    unit_member,
)

__all__ = ["UNIT_TOKENS", "token_units"]

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
    or ``X.ds`` and ``X.ds.index``): the index is fetched here, the ids by range later.

    Raises:
        CorpusError: a file missing; the same file twice (by any path, a symlink or a hard
            link such as a ``.ds`` beside its ``train.bin``); a URL without an index (llm.c
            shards, a bare ``train.bin``: their documents are found only by reading every id).
        TokenFileError: a damaged header or index.
    """
    units: list[Unit] = []
    counts: list[int] = []
    seen: dict[object, str] = {}
    given_names = [os.fspath(p) for p in paths]
    # Documents are named by their index in the file, after the file's name when there are
    # several (llm.c's shards each start at 0): the held-out split hashes the names.
    files = distinct_names(given_names) if len(given_names) > 1 else {}
    for name in given_names:
        if is_url(name):
            _once(seen, name.rstrip("/"), name)
            run = _remote_run(name, storage)
            token_file = _remote(name, dtype or ("uint16" if run is None else run.dtype), run,
                                 storage)  # fmt: skip
        else:
            if not os.path.isfile(name):
                raise CorpusError("no such token file", name)
            st = os.stat(name)
            _once(seen, (st.st_dev, st.st_ino), name)
            run = beside(name)  # the run's meta.json: its eot and dtype, else GPT-2's
            file_eot = eot if eot is not None else 50256 if run is None else run.eot
            file_dtype = dtype or ("uint16" if run is None else run.dtype)
            token_file = opened(name, eot=file_eot, dtype=file_dtype)
        base = int(getattr(token_file.ids, "offset", 0))  # an llm.c shard's header
        itemsize = token_file.ids.dtype.itemsize
        ends = token_file.ends
        subset = name.rstrip("/").rsplit("/", 1)[-1].split(".")[0]
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


def _once(seen: dict[object, str], key: object, name: str) -> None:
    """Refuse a file given twice (``key``: its device and inode, or its URL), as
    ``Corpus.open`` refuses a text file twice: its documents would be read twice."""
    if key in seen:
        raise CorpusError(
            f"the same token file is given twice (also as {seen[key]}): its documents would "
            "be read twice; name each file once",
            name,
        )
    seen[key] = name


def _remote(url: str, dtype: str, run: Vocabulary | None, storage: Storage | None) -> TokenFile:
    """A remote token file's ends, from its index (fetched whole: ~20 bytes a document),
    kept for the workers (``tokenfiles.remember``)."""

    def whole(of: str) -> bytes:
        return fetch(of, 0, file_info(of, storage).size, None, storage)

    info = file_info(url, storage)
    resolve(storage).remember(url, info)  # its ETag or Last-Modified: the corpus's identity
    size = info.size
    if url.endswith(".ds"):
        ids_dtype = np.dtype(dtype).newbyteorder("<")
        if size % ids_dtype.itemsize:  # (as a local one: ``tokenfiles.opening``)
            raise CorpusError(f"{size} bytes of ids, not a whole number of {dtype} ids", url)
        ends = read_datatrove_index(
            url + ".index", size // ids_dtype.itemsize, whole(url + ".index")
        )
    elif url.endswith(".bin"):
        index = url[: -len(".bin")] + ".idx"
        try:
            body = whole(index)
        except CorpusError:
            raise CorpusError(
                "a remote token file is read with its index beside it (X.idx for X.bin, "
                "X.ds.index for X.ds): llm.c shards and a bare train.bin are found in "
                "documents only by reading every id; download them, or write the index "
                "(owt tokenize --format megatron)",
                url,
            ) from None
        ids_dtype, ends = read_megatron_index(index, body)
        if (ends[-1] if ends.size else 0) * ids_dtype.itemsize != size:
            raise CorpusError(f"{size} bytes, not the ids of {index}", url)
    else:
        raise CorpusError("not a token file this reads remotely (X.bin with X.idx, X.ds)", url)
    token_file = TokenFile(url, np.zeros(0, ids_dtype), ends, run)
    remember(url, token_file)
    return token_file


def _remote_run(url: str, storage: Storage | None) -> Vocabulary | None:
    """What the ``meta.json`` beside a remote token file records (``recorded``); None if
    there is none to fetch.

    Raises:
        TokenFileError: a ``meta.json`` that is there but damaged, naming it and the field.
    """
    meta_url = url.rsplit("/", 1)[0] + "/meta.json"
    try:
        body = fetch(meta_url, 0, file_info(meta_url, storage).size, None, storage)
    except (CorpusError, OSError):
        return None
    return recorded(body, meta_url)
