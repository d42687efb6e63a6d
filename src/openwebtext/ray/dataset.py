"""``read_openwebtext``: a ``ray.data.Dataset`` of the documents of a corpus, one read task per
group of units (``plan.unit_groups``), and ``SkipLog``, where its tasks count what they
left out under the skip policy (``policy.SkipPolicy``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from openwebtext.errors import CorpusError
from openwebtext.index import Corpus
from openwebtext.options import ErrorPolicy, check_on_error
from openwebtext.plan import unit_groups
from openwebtext.policy import SkipPolicy
from openwebtext.ray.cluster import configure_storage, ray_module
from openwebtext.records import Unit
from openwebtext.tokenizer import Tokenizer, load_tokenizer

__all__ = ["SkipLog", "read_openwebtext"]


class _SkipActor:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, messages: list[str]) -> int:
        self.messages += messages
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
        """Every skipped member or document, as the library's error message."""
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


@dataclasses.dataclass(frozen=True)
class _ReadGroup:
    """The map_batches function: reads the groups of units named by its input rows."""

    groups: tuple[tuple[Unit, ...], ...]
    storage_options: dict[str, Any] | None
    tokenizer: Tokenizer | None
    """Resolved once by ``read_openwebtext``; pickled as its spec (loaded once per Ray worker)."""
    on_error: ErrorPolicy
    skips: SkipLog | None
    max_member_bytes: int
    max_document_bytes: int

    def __call__(self, batch: dict[str, Any]) -> Any:
        import pyarrow as pa

        from openwebtext.engine import Reader

        configure_storage(self.storage_options)
        tokenizer = self.tokenizer
        reader = Reader(self.max_member_bytes, self.max_document_bytes)
        columns: dict[str, list[Any]] = {"subset": [], "member": [], "name": [], "value": []}
        skipped: list[str] = []
        try:
            for group in batch["group"]:
                for unit in self.groups[int(group)]:
                    self._read(reader, unit, tokenizer, columns, skipped)
        finally:
            reader.close()
        if self.skips is not None:
            self.skips.add(skipped)
        if tokenizer is None:
            value = pa.array(columns.pop("value"), pa.string())
            key = "text"
        else:
            value = pa.array(columns.pop("value"), pa.list_(pa.int64()))
            key = "ids"
        arrays = {k: pa.array(v, pa.string()) for k, v in columns.items()}
        return pa.table({**arrays, key: value})

    def _read(
        self,
        reader: Any,
        unit: Unit,
        tokenizer: Any,
        columns: dict[str, list[Any]],
        skipped: list[str],
    ) -> None:
        from openwebtext.engine import encode_member

        try:
            member = reader.read(unit)
        except CorpusError as exc:
            self._error(exc, skipped)
            return
        for dropped in member.dropped:
            self._error(dropped, skipped)
        if tokenizer is not None:
            encoded = encode_member(member, tokenizer)
            ids = memoryview(encoded.data).cast(tokenizer.dtype.char)
            itemsize = tokenizer.dtype.itemsize
        errors = "replace" if member.replace else "strict"
        for k, offset in enumerate(member.offsets):
            if offset < 0:
                continue
            if tokenizer is None:
                value: Any = member.data[offset : offset + member.sizes[k]].decode("utf-8", errors)
            else:
                first = encoded.offsets[k] // itemsize
                value = ids[first : first + encoded.counts[k]].tolist()
            columns["subset"].append(unit.subset)
            columns["member"].append(unit.member)
            columns["name"].append(member.names[k])
            columns["value"].append(value)

    def _error(self, error: CorpusError, skipped: list[str]) -> None:
        SkipPolicy(self.on_error).take(error)  # raise it, or log it (warn)
        skipped.append(str(error))


def read_openwebtext(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
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
    initialised (``ray.init`` or ``local_ray``) before the dataset is consumed.

    Args:
        paths: Files, folders or glob patterns readable by every node, or URLs.
        storage_options: For URLs (``s3://``…, the ``remote`` extra): the options of their
            filesystems (``Corpus.open``), here and in every task.
        tokenizer: A tokenizer spec (``openwebtext.tokenizer``): rows carry ``ids``.
        on_error: ``raise`` the library's error (naming file and member) in the task: the
            consumer gets Ray's ``RayTaskError(CorruptMember)``, also a ``CorruptMember``
            (``library_errors()`` gives back the error itself); ``skip`` or ``warn``
            (logged in the task) leave the member or document out.
        skips: Where skipped members and documents are counted (``SkipLog``).
        units_per_task: Units read by one task.
        max_member_bytes: A member decompressing past this is an error.
        max_document_bytes: A document larger than this is an error.

    Raises:
        EngineError: Ray is not installed.
        CorpusError: a path holds no corpus (raised here, at once).
    """
    check_on_error(on_error)
    unit_groups(0, units_per_task)  # a bad value fails here, before Ray is asked
    ray = ray_module()
    # Resolved once: a bad spec fails here, not in every task.
    resolved = None if tokenizer is None else load_tokenizer(tokenizer)
    units = Corpus.open(paths, storage_options=storage_options).units
    groups = tuple(tuple(units[k] for k in cut) for cut in unit_groups(len(units), units_per_task))
    read = _ReadGroup(
        groups, storage_options, resolved, on_error, skips, max_member_bytes, max_document_bytes
    )
    items = [{"group": g} for g in range(len(groups))]
    dataset = ray.data.from_items(items, override_num_blocks=len(groups))
    # This dataset's own copy of the context (derived datasets inherit it): raise the task's
    # error itself, a CorruptMember naming file and member, not a UserCodeException around it
    # (the wrapper would lose it: a pickled exception loses its __cause__).
    dataset.context.raise_original_map_exception = True
    return dataset.map_batches(read, batch_size=1, batch_format="numpy", zero_copy_batch=True)
