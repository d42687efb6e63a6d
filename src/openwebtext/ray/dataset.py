"""``read_openwebtext``: a ``ray.data.Dataset`` of the documents of a corpus, one read task per
group of units (``plan.unit_groups``), and ``SkipLog``, where its tasks count what they
left out under the skip policy (``policy.SkipPolicy``).

A token corpus's units (``Corpus.open_tokens``: ids already) are read as the loader reads
them, through the engine's inline pool: its documents' ids as the file holds them, the
tokenizer refused when its ids are not the file's (width, the ``meta.json``'s fingerprint),
a document holding an id outside its vocabulary left out (``CorruptDocument``). They have no
text: read without a tokenizer, ``read_openwebtext`` refuses them at once."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
from collections.abc import Sequence
from typing import Any

from openwebtext.errors import CorpusError, OWTError, in_part
from openwebtext.index import Corpus
from openwebtext.loader import Mixture
from openwebtext.options import ErrorPolicy, Options
from openwebtext.plan import unit_groups
from openwebtext.policy import SkipPolicy
from openwebtext.ray.cluster import ray_module
from openwebtext.records import Unit
from openwebtext.source import Storage, resolve
from openwebtext.tokenfiles import TOKENS
from openwebtext.tokenizer import Tokenizer, load_tokenizer

__all__ = ["SkipLog", "read_openwebtext"]

#: The most ids one chunk of the ``ids`` column holds: ``list<int64>`` has int32 offsets.
_MAX_LIST_VALUES = (1 << 31) - 1


class _SkipActor:
    def __init__(self) -> None:
        self.messages: list[str] = []
        self._seen: set[str] = set()

    def add(self, messages: list[str]) -> int:
        """Add each message not added before: a dataset read again (a second pass, ``count()``
        then ``take_all()``) runs its tasks again, and they skip the same things."""
        for message in messages:
            if message not in self._seen:
                self._seen.add(message)
                self.messages.append(message)
        return len(self.messages)

    def get(self) -> list[str]:
        return self.messages


class SkipLog:
    """What ``read_openwebtext(..., on_error="skip", skips=log)`` left out, across tasks.

    A small Ray actor (no CPU reserved): create it after Ray is initialised, read it after
    the dataset was consumed.
    """

    def __init__(self) -> None:
        ray = ray_module()
        self._ray = ray
        self._actor = ray.remote(num_cpus=0)(_SkipActor).remote()

    def add(self, messages: list[str]) -> None:
        if messages:
            self._ray.get(self._actor.add.remote(messages))

    def messages(self) -> list[str]:
        """Every skipped member or document, as the library's error message: once, however
        many times the dataset was read."""
        result: list[str] = self._ray.get(self._actor.get.remote())
        return result

    def count(self) -> int:
        return len(self.messages())

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_log, (self._actor,))


def _rebuild_log(actor: Any) -> SkipLog:
    log = SkipLog.__new__(SkipLog)
    log._ray = ray_module()
    log._actor = actor
    return log


#: This process's one copy of each storage the tasks were pickled with, by its pickle: Ray
#: unpickles the read function for every task, and what a process makes for a storage (its
#: filesystems and clients, its Hub resolutions: ``source.PerStorage``) is kept per copy, so
#: each task would make its own (a Hub lookup per member, against the Hub's rate limit).
_COPIES: dict[bytes, Storage] = {}


def _one_copy(storage: Storage) -> Storage:
    key = hashlib.blake2b(pickle.dumps(storage), digest_size=16).digest()
    return _COPIES.setdefault(key, storage)


@dataclasses.dataclass(frozen=True)
class _ReadGroup:
    """The map_batches function: reads the groups of units named by its input rows."""

    groups: tuple[tuple[Unit, ...], ...]
    storages: tuple[Storage, ...]
    """Each group's: the storage its corpus was opened with (the driver's default where it
    was opened without), pickled with what indexing learnt (aliases, identities). A Ray
    worker is not forked from the driver: its own default storage knows none of it."""
    tokenizer: Tokenizer | None
    """Resolved once by ``read_openwebtext``; pickled as its spec (loaded once per Ray worker)."""
    on_error: ErrorPolicy
    skips: SkipLog | None
    max_member_bytes: int
    max_document_bytes: int
    sources: tuple[str, ...] | None = None
    """A mixture's: the part of each group (a column ``source``)."""

    def __call__(self, batch: dict[str, Any]) -> Any:
        import pyarrow as pa

        tokenizer = self.tokenizer
        readers: dict[int, Any] = {}  # one per storage (a mixture's parts may each have one)
        pools: dict[int, Any] = {}  # one per group of token units (``_read_ids``)
        columns: dict[str, list[Any]] = {"subset": [], "member": [], "name": [], "value": []}
        ids: list[Any] = []  # with a tokenizer: each member's packed ids ("value": the counts)
        skipped: list[str] = []
        source: list[str] = []
        try:
            for group in map(int, batch["group"]):
                before = len(columns["name"])
                storage = _one_copy(self.storages[group])
                for k, unit in enumerate(self.groups[group]):
                    if unit.kind == TOKENS:
                        self._read_ids(group, k, storage, pools, columns, ids, skipped)
                        continue
                    reader = self._reader(readers, storage)
                    self._read(reader, unit, tokenizer, columns, ids, skipped)
                if self.sources is not None:
                    source += [self.sources[group]] * (len(columns["name"]) - before)
        finally:
            for reader in readers.values():
                reader.close()
            for pool in pools.values():
                pool.close()
        if self.skips is not None:
            self.skips.add(skipped)
        if tokenizer is None:
            value = pa.array(columns.pop("value"), pa.string())
            key = "text"
        else:
            value = _ids_column(ids, columns.pop("value"))
            key = "ids"
        arrays = {k: pa.array(v, pa.string()) for k, v in columns.items()}
        if self.sources is not None:
            arrays = {"source": pa.array(source, pa.string()), **arrays}
        return pa.table({**arrays, key: value})

    def _reader(self, readers: dict[int, Any], storage: Storage) -> Any:
        """The text reader of ``storage``, opened at its first unit."""
        from openwebtext.engine import Reader

        if id(storage) not in readers:  # texts: the UTF-8 check decodes each document
            readers[id(storage)] = Reader(self.max_member_bytes, self.max_document_bytes,
                                          storage=storage, texts=True)  # fmt: skip
        return readers[id(storage)]

    def _read_ids(
        self,
        group: int,
        k: int,
        storage: Storage,
        pools: dict[int, Any],
        columns: dict[str, list[Any]],
        ids: list[Any],
        skipped: list[str],
    ) -> None:
        """Unit ``k`` of ``group``, a token unit: read as the loader reads it (the engine's
        inline pool: its tokenizer checked against the file, its ids against the vocabulary),
        each kept document's ids as the file holds them."""
        import numpy as np

        from openwebtext.engine import PoolOptions, open_pool

        units = self.groups[group]
        if group not in pools:
            options = PoolOptions(workers=0, max_member_bytes=self.max_member_bytes,
                                  max_document_bytes=self.max_document_bytes,
                                  tokenizer=self.tokenizer)  # fmt: skip
            pools[group] = open_pool(units, options, storage)
        unit = units[k]
        for loaded in pools[group].run([k]):
            for error in loaded.errors:  # the unit's failure (nothing read), or documents left out
                self._error(error, skipped)
            if loaded.counts is None or self.tokenizer is None:
                return
            dtype = self.tokenizer.dtype  # the file's width (checked): the loader's ids
            data = np.frombuffer(loaded.data, dtype)
            kept = [j for j, offset in enumerate(loaded.offsets) if offset >= 0]
            if len(kept) == len(loaded.offsets):  # every document: the unit's ids as they lie
                ids.append(data)
            else:
                for j in kept:
                    start = loaded.offsets[j] // dtype.itemsize
                    ids.append(data[start : start + loaded.counts[j]])
            for j in kept:
                _add_row(columns, unit, loaded.names[j], loaded.counts[j])

    def _read(
        self,
        reader: Any,
        unit: Unit,
        tokenizer: Any,
        columns: dict[str, list[Any]],
        ids: list[Any],
        skipped: list[str],
    ) -> None:
        import numpy as np

        from openwebtext.engine import encode_member, failure

        try:
            member = reader.read(unit)
        except CorpusError as exc:
            self._error(exc, skipped)
            return
        except Exception as exc:  # (a bug, a missing extra: the library's error, as the pool's)
            raise failure(exc, unit) from exc
        for dropped in member.dropped:
            self._error(dropped, skipped)
        if tokenizer is not None:
            try:
                encoded = encode_member(member, tokenizer, unit)
            except OWTError:
                raise
            except Exception as exc:  # (a tokenizer's own error: naming the unit)
                raise failure(exc, unit) from exc
            # The kept documents' ids, packed in the order of the rows appended below.
            ids.append(np.frombuffer(encoded.data, dtype=tokenizer.dtype))
        texts = iter(member.texts or ())
        for k, offset in enumerate(member.offsets):
            if offset < 0:
                continue
            value: Any = next(texts) if tokenizer is None else encoded.counts[k]
            _add_row(columns, unit, member.names[k], value)

    def _error(self, error: CorpusError, skipped: list[str]) -> None:
        SkipPolicy(self.on_error).take(error)  # raise it, or log it (warn)
        skipped.append(str(error))


def _add_row(columns: dict[str, list[Any]], unit: Unit, name: str, value: Any) -> None:
    """One document's row: its unit's subset and member, its name, its text or id count."""
    columns["subset"].append(unit.subset)
    columns["member"].append(os.path.basename(unit.member))  # (``Document.member``'s)
    columns["name"].append(name)
    columns["value"].append(value)


def _ids_column(parts: list[Any], counts: list[int]) -> Any:
    """The ``ids`` column, ``list<int64>``: one row of ``counts[i]`` ids per document, cut in
    order from the members' packed ids ``parts``. Built from one flat array and its offsets,
    not from a Python list per document (the same type and values; past 2**31 - 1 ids, the
    int32 offsets' limit, a chunked array of that type).
    """
    import numpy as np
    import pyarrow as pa

    values = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    cuts = [0]  # the first row of each chunk
    while offsets[-1] - offsets[cuts[-1]] > _MAX_LIST_VALUES:
        end = int(np.searchsorted(offsets, offsets[cuts[-1]] + _MAX_LIST_VALUES, "right")) - 1
        cuts.append(max(end, cuts[-1] + 1))  # a row too long alone fails in from_arrays
    chunks = []
    for first, stop in zip(cuts, [*cuts[1:], len(counts)], strict=True):
        start = offsets[first]
        chunk_offsets = (offsets[first : stop + 1] - start).astype(np.int32)
        chunk_values = values[start : offsets[stop]]
        chunks.append(pa.ListArray.from_arrays(pa.array(chunk_offsets), pa.array(chunk_values)))
    return chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks, pa.list_(pa.int64()))


def _has_text(corpus: Corpus, part: str | None) -> None:
    """Check that ``corpus`` (the mixture's ``part``) can be read as text.

    Raises:
        CorpusError: it holds token ids (``Corpus.open_tokens``), naming its first token file.
    """
    unit = next((u for u in corpus.units if u.kind == TOKENS), None)
    if unit is not None:
        raise in_part(CorpusError(
            "a token corpus holds ids, not text: read it with the tokenizer its ids were "
            "written with (read_openwebtext(..., tokenizer=...)), rows of ids", unit.path
        ), part)  # fmt: skip


def read_openwebtext(
    paths: Corpus | Mixture | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    storage_options: dict[str, Any] | None = None,
    tokenizer: str | None = None,
    on_error: ErrorPolicy = "raise",
    skips: SkipLog | None = None,
    units_per_task: int = 1,
    max_member_bytes: int = 1 << 30,
    max_document_bytes: int = 64 << 20,
) -> Any:
    """A ``ray.data.Dataset`` of the documents of an OpenWebText-style corpus.

    Rows: ``subset``, ``member``, ``name`` and ``text`` (or ``ids``, the token ids followed by
    the end-of-text id, with ``tokenizer=``), in archive order within a member. One read task
    per ``units_per_task`` units of the same index as the local loader. Ray must be
    initialised (``ray.init``) before the dataset is consumed.

    A ``Mixture``: every part read once, each row with its part's name (a column
    ``source``). Ray Data is order-free bulk processing, so the weights do not shape it: a
    weighted, ordered, resumable stream of a mixture is ``Loader``'s (or PyTorch's).

    A token corpus (``Corpus.open_tokens``, or a mixture's part) is read as ``Loader`` reads
    it: ``ids`` are each document's ids as the file holds them (its own end-of-text id
    included, none added), never tokenized again. It needs the tokenizer its ids were written
    with: another width, or another fingerprint than its ``meta.json``'s, is the loader's
    ``CorpusError`` (in the task, under ``on_error``); a document holding an id outside the
    vocabulary is a ``CorruptDocument`` (raised, or left out under ``skip``).

    Args:
        paths: Files, folders or glob patterns readable by every node, or URLs; or a
            ``Corpus`` (``Corpus.open``, ``Corpus.open_tokens``) or a ``Mixture``.
        storage_options: For URLs (``s3://``…, the ``remote`` extra): the options of their
            filesystems (``Corpus.open``), here and in every task. Not with a ``Corpus`` or a
            ``Mixture``: each is read in the tasks with the storage it was opened with.
        tokenizer: A tokenizer spec (``openwebtext.tokenizer``): rows carry ``ids``.
            Needed for a token corpus (rows of ids: it holds no text).
        on_error: ``raise`` the library's error (naming file and member) in the task: the
            consumer gets Ray's ``RayTaskError(CorruptMember)``, also a ``CorruptMember``
            (``library_errors()`` gives back the error itself); ``skip`` or ``warn``
            (logged in the task) leave the member or document out.
        skips: Where skipped members and documents are counted (``SkipLog``).
        units_per_task: Units read by one task.
        max_member_bytes: A member decompressing past this is an error.
        max_document_bytes: A document larger than this is an error.

    Raises:
        ValueError: ``on_error``, ``units_per_task``, ``max_member_bytes`` or
            ``max_document_bytes`` is not valid (checked as a loader's options, here).
        EngineError: Ray is not installed.
        CorpusError: a path holds no corpus, or a token corpus is read without a
            tokenizer (raised here, at once, naming its file).
    """
    # Checked as a loader's options are (one rule each), before Ray is asked.
    if skips is not None and not isinstance(skips, SkipLog):
        raise TypeError(f"skips must be None or a SkipLog, not {type(skips).__name__}")
    limits = Options(on_error=on_error, max_member_bytes=max_member_bytes,
                     max_document_bytes=max_document_bytes)  # fmt: skip
    max_member_bytes, max_document_bytes = limits.max_member_bytes, limits.max_document_bytes
    unit_groups(0, units_per_task)
    ray = ray_module()
    # Resolved once: a bad spec fails here, not in every task.
    resolved = None if tokenizer is None else load_tokenizer(tokenizer)
    if isinstance(paths, Mixture | Corpus):
        if storage_options is not None:
            what = "a Mixture's parts are" if isinstance(paths, Mixture) else "a Corpus is"
            raise ValueError(f"storage_options: {what} read with the storage each was opened "
                             f"with (Corpus.open(url, storage_options=...))")  # fmt: skip
        mixed = isinstance(paths, Mixture)
        parts = paths.corpora if isinstance(paths, Mixture) else {"": paths}
    else:  # (under ``skip``, files that are no corpus file are left out, as a loader's are)
        parts = {"": Corpus.open(paths, storage_options=storage_options, on_error=on_error)}
        mixed = False
    bad = [error for corpus in parts.values() for error in corpus.skipped_files]
    for error in bad:  # files left out at the open: raised, or logged and counted
        SkipPolicy(on_error).take(error)
    if bad and skips is not None:
        skips.add([str(error) for error in bad])
    if resolved is None:
        for name, corpus in parts.items():
            _has_text(corpus, name if mixed else None)
    sources: tuple[str, ...] | None = () if mixed else None
    groups: tuple[tuple[Unit, ...], ...] = ()
    storages: tuple[Storage, ...] = ()
    for name, corpus in parts.items():
        units = corpus.units
        cuts = unit_groups(len(units), units_per_task)
        groups += tuple(tuple(units[k] for k in cut) for cut in cuts)
        storages += (resolve(corpus.storage).detached(),) * len(cuts)  # (the driver's options)
        if sources is not None:
            sources += (name,) * len(cuts)
    read = _ReadGroup(
        groups,
        storages,
        resolved,
        on_error,
        skips,
        max_member_bytes,
        max_document_bytes,
        sources,
    )
    items = [{"group": g} for g in range(len(groups))]
    dataset = ray.data.from_items(items, override_num_blocks=len(groups))
    # This dataset's own copy of the context (derived datasets inherit it): raise the task's
    # error itself, a CorruptMember naming file and member, not a UserCodeException around it
    # (the wrapper would lose it: a pickled exception loses its __cause__).
    dataset.context.raise_original_map_exception = True
    return dataset.map_batches(read, batch_size=1, batch_format="numpy", zero_copy_batch=True)
