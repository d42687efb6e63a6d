"""Counting documents per member (``owt index``), in parallel, for even sharding."""

from __future__ import annotations

from collections.abc import Callable

from .corpus import Corpus, Counts, split_key
from .errors import CorpusError
from .plan import in_validation
from .workers import PoolOptions, open_pool

__all__ = ["count_documents"]

NANOGPT_SPLIT = (0.0005, 2357)


def count_documents(
    corpus: Corpus,
    *,
    workers: int = 2,
    splits: tuple[tuple[float, int], ...] = (NANOGPT_SPLIT,),
    max_member_bytes: int = 1 << 30,
    progress: Callable[[int], None] | None = None,
) -> Counts:
    """Read every member once and count its documents, and those held out by each split.

    Documents are counted from the tar headers; text is not decoded, so a
    document with invalid UTF-8 still counts (the loader's policy decides).

    Raises:
        CorruptMember: a member cannot be read (counts must be exact).
    """
    options = PoolOptions(
        workers=workers,
        timeout=600.0,
        max_member_bytes=max_member_bytes,
        max_document_bytes=max_member_bytes,
        decode_errors=None,  # counted from the tar headers; the loader's policy decides
    )
    documents: list[int] = []
    held: dict[str, list[int]] = {split_key(f, s): [] for f, s in splits}
    with open_pool(corpus.units, options) as pool:
        for loaded in pool.run(range(len(corpus.units))):
            if loaded.errors:
                error = loaded.errors[0]
                raise CorpusError(f"cannot count documents: {error}") from error
            documents.append(len(loaded.names))
            for fraction, seed in splits:
                held[split_key(fraction, seed)].append(
                    sum(in_validation(name, fraction, seed) for name in loaded.names)
                )
            if progress is not None:
                progress(1)
    return Counts(tuple(documents), {k: tuple(v) for k, v in held.items()})
