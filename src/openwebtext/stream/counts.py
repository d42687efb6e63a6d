"""Counting documents per member (``owt index``, or on first use), in parallel, for even
sharding."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from openwebtext.engine import Loaded, PoolOptions, open_pool
from openwebtext.errors import (
    CorpusError,
    CorruptMember,
    OWTError,
    TruncatedMember,
)
from openwebtext.index import Corpus, Counts, split_key, split_of
from openwebtext.options import NANOGPT_SPLIT, Options
from openwebtext.plan import in_validation
from openwebtext.policy import a_verdict
from openwebtext.records import Unit
from openwebtext.tokenfiles import TOKENS, document_names, document_range

__all__ = ["ExpectedCounts", "count_documents", "ensure_counts"]

log = logging.getLogger("openwebtext")


def count_documents(
    corpus: Corpus,
    *,
    workers: int = 2,
    splits: tuple[tuple[float, int], ...] = (NANOGPT_SPLIT,),
    max_member_bytes: int = 1 << 30,
    progress: Callable[[int], None] | None = None,
    on_error: str = "raise",
    on_skip: Callable[[OWTError], None] | None = None,
    again: Counts | None = None,
) -> Counts:
    """Read every member once and count its documents, and those held out by each split.

    Documents are counted from the tar headers; text is not decoded, so a
    document with invalid UTF-8 still counts (the loader's policy decides).

    Args:
        on_error: ``raise``: a member that cannot be read whole is an error;
            ``skip`` (or ``warn``): it counts what a stream under ``skip`` will
            read of it (nothing, or the documents before a cut), and ``warn``
            logs it. The stream meets the member under its own policy when it
            reads it; if the member reads whole later (a passing fault), the
            stream's check against the counts asks for ``owt index --force``. A
            failure that is no verdict on the bytes (``policy.a_verdict``) is marked
            ``unsure``: the next count reads it again (``again``).
        on_skip: Called with the error of each member skipped or cut short.
        again: Counts made before: only their ``unsure`` units are read (for every split
            they hold; ``splits`` is not used), the others' counts kept.

    Raises:
        CorpusError: a member cannot be read whole, under ``raise`` (naming it).
    """
    options = PoolOptions(
        workers=workers,
        timeout=600.0,
        max_member_bytes=max_member_bytes,
        max_document_bytes=max_member_bytes,
        decode_errors=None,  # counted from the tar headers; the loader's policy decides
    )
    documents: list[int] = []
    failed: list[int] = []  # (counted as no document: ``_failed`` refuses them under raise)
    unsure: list[int] = []  # (of those, what was no verdict: the next count reads them again)
    kept = set() if again is None else set(range(len(corpus.units))) - set(again.unsure)
    if again is not None:
        splits = tuple(map(split_of, again.val))
    held: dict[str, list[int]] = {split_key(f, s): [] for f, s in splits}
    # A token unit's documents are named by their index in the file: counted from its member's
    # name, never read (it needs the stream's tokenizer, which a count has not).
    tokens = [unit.kind == TOKENS for unit in corpus.units]
    with open_pool(corpus.units, options, corpus.storage) as pool:
        read = pool.run([k for k, named in enumerate(tokens) if not (named or k in kept)])
        for k, unit in enumerate(corpus.units):
            if again is not None and k in kept:  # (counted before, and a verdict)
                failed += [k] if k in again.failed else []
                documents.append(again.documents[k])
                for key in held:
                    held[key].append(again.val[key][k])
                if progress is not None:
                    progress(1)
                continue
            loaded = _named(unit) if tokens[k] else next(read)
            member_failed = loaded.errors and not loaded.names
            cut = any(isinstance(e, TruncatedMember) for e in loaded.errors)
            if member_failed or cut:
                error = loaded.errors[0]
                if not error.skippable:  # (the machine's, the options': never counted as 0)
                    raise error
                if on_error == "raise":
                    message = getattr(error, "message", str(error))
                    path, member = getattr(error, "path", None), getattr(error, "member", None)
                    raise CorpusError(f"cannot count documents: {message}", path, member) from error
                if on_error == "warn":
                    log.warning("skipped: %s", error)
                if on_skip is not None:
                    on_skip(error)
            if member_failed:
                if not a_verdict(loaded.errors[0]):
                    unsure.append(len(documents))
                failed.append(len(documents))
            documents.append(len(loaded.names))
            for fraction, seed in splits:
                held[split_key(fraction, seed)].append(
                    sum(in_validation(name, fraction, seed) for name in loaded.names)
                )
            if progress is not None:
                progress(1)
    held_out = {k: tuple(v) for k, v in held.items()}
    return Counts(tuple(documents), held_out, tuple(failed), tuple(unsure))


class _Named(NamedTuple):
    """What a count needs of a unit it does not read (``count_documents``)."""

    names: Sequence[str]
    errors: tuple[OWTError, ...] = ()


def _named(unit: Unit) -> _Named:
    """A token unit's document names, from its member's name (``docs FIRST-LAST``)."""
    first, stop = document_range(unit.member)
    return _Named(document_names(unit.member, first, stop))


def ensure_counts(
    corpus: Corpus,
    options: Options,
    *,
    always: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Corpus:
    """``corpus`` with the counts that ``options`` need (shares cut at documents), or with
    them ``always`` (a resharded epoch's rest, shares of which a process is one), counting
    them now if no cache holds them, and caching them (``owt index`` does it ahead of time).

    The count reads every member once, with ``options.workers``, under a progress
    bar on stderr when it is a terminal.
    """
    if not (always or options.needs_counts):
        return corpus
    split = (options.split, options.val_fraction, options.val_seed)
    known = corpus.counts if corpus.counts is not None else corpus.load_counts()
    if known is not None and known.unsure:  # (read again: only those, then kept)
        known = _counted(corpus, options, again=known)
    if known is not None and known.per_unit(*split) is not None:
        counted = corpus if known is corpus.counts else corpus.with_counts(known)
        return _failed(counted, known, options)
    # (the splits known stay: this count adds the one they lack)
    wanted = [NANOGPT_SPLIT, (options.val_fraction, options.val_seed)]
    splits = tuple(s for s in dict.fromkeys(wanted) if not (known and split_key(*s) in known.val))
    if corpus.units and all(unit.kind == TOKENS for unit in corpus.units):  # (of names: at once)
        counts = count_documents(corpus, workers=0, splits=splits)
        counts = counts if known is None else known.joined(counts)
        return corpus.with_counts(counts)  # (never cached: a run folder's, counted in no time)
    if not _interactive() and progress is None:  # no bar to show it: one line says the wait
        log.warning(
            "counting the documents of %d member%s (once: cached beside the corpus; owt index "
            "counts ahead of time)", len(corpus.units), "" if len(corpus.units) == 1 else "s",
        )  # fmt: skip
    from tqdm import tqdm

    with tqdm(
        total=len(corpus.units),
        unit="member",
        desc="counting documents (once)",
        file=sys.stderr,
        disable=not _interactive(),
        leave=False,
    ) as bar:
        counts = _counted(corpus, options, known, splits=splits, progress=progress or bar.update)
    return _failed(corpus.with_counts(counts), counts, options)


def _counted(corpus: Corpus, options: Options, known: Counts | None = None,
             **given: Any) -> Counts:  # fmt: skip
    """``count_documents`` of ``corpus`` with ``options``' workers, limit and policy (under
    ``warn``, ``skip``: the stream warns when it reads the member, one warning, not one more
    here), joined with the splits ``known`` holds, then saved (``given``: ``again``, or the
    splits and a progress bar), saying the members whose failure was not their bytes'
    (``unsure``: the next count reads them again, else a share's edge on one would leave its
    documents out of every later run)."""
    skipped: list[OWTError] = []
    counts = count_documents(
        corpus, workers=options.workers, max_member_bytes=options.max_member_bytes,
        on_error="skip" if options.on_error == "warn" else options.on_error,
        on_skip=skipped.append, **given,
    )  # fmt: skip
    if known is not None:
        counts = known.joined(counts)
    if counts.unsure:
        first = next((e for e in skipped if not a_verdict(e)), None)
        log.warning(
            "counted; %d of the members failed for a cause that is not their bytes (first: "
            "%s): the next run reads them again", len(counts.unsure), first,
        )  # fmt: skip
    try:
        corpus.save_counts(counts)
    except CorpusError as exc:
        log.warning("counted, but cannot cache the counts: %s", exc)
    return counts


def _failed(corpus: Corpus, counts: Counts, options: Options) -> Corpus:
    """``corpus``, unless a member failed when its documents were counted and the run is under
    ``raise``: the first such member is a ``CorruptMember`` here (a share whose edge it lies on
    would not read it: its documents would be lost without a word). Under ``skip`` a share reads
    it where it lies inside the share (a counted skip), not at an edge (docs/sharding.md).

    Raises:
        CorruptMember: under ``on_error="raise"``, a member counted as failed (named).
    """
    if not counts.failed:
        return corpus
    unit = corpus.units[counts.failed[0]]
    if options.on_error != "raise":
        if options.world_size > 1:  # (one rank reads it all: a counted skip, where it lies)
            log.warning(
                "%d member(s) could not be read when the documents were counted (first: "
                "%s[%s]): a share reads one where it lies inside it (a counted skip), but where "
                "one lies at a share's edge no rank reads it, and its documents are in no share "
                "(mend it, then owt index --force)", len(counts.failed), unit.path, unit.member,
            )  # fmt: skip
        return corpus
    raise CorruptMember(
        "could not be read when the corpus's documents were counted (under skip: `owt index "
        "--on-error skip`, or a run under skip); under on_error='raise' the run stops here: "
        "mend the file and count again (owt index --force), or read under on_error='skip' "
        f"({len(counts.failed)} such member(s))", unit.path, unit.member,
    )  # fmt: skip


def _interactive() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (ValueError, OSError):  # closed
        return False


class ExpectedCounts(NamedTuple):
    """The counts an even stream's targets come from, to check each member against as it
    is read: one that disagrees would make its rank repeat or leave out documents without
    a word."""

    documents: tuple[int, ...]
    """Documents per unit."""
    in_split: tuple[int, ...] | None
    """Documents per unit in ``split`` (None: the split is ``all``)."""
    split: str

    def check(self, unit: Unit, loaded: Loaded) -> None:
        """Raise if the member read (whole: not failed, not cut) disagrees with its counts.

        Raises:
            CorpusError: naming the member and ``owt index --force``.
        """
        found, expected, what = len(loaded.names), self.documents[loaded.unit], "documents"
        if found == expected and self.in_split is not None:
            # Kept, plus those left out for their content (they were in the split too).
            found = sum(1 for offset in loaded.offsets if offset >= 0) + len(loaded.errors)
            expected, what = self.in_split[loaded.unit], f"documents in split {self.split!r}"
        if found != expected:
            raise CorpusError(
                f"holds {found} {what} but the counts file says {expected}: the member changed "
                "since it was counted; run `owt index --force` on the corpus",
                unit.path,
                unit.member,
            )
