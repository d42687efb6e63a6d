"""The resumable state of a document stream: a small, JSON-safe, versioned dict, and the
``Mark`` a stream takes of where it is, which becomes one.

A state says where the stream is — ``(epoch, block, in_block)``: the epoch, the
plan position of the first unit of the current shuffle block, and how many of
that block's documents were handed out; inside a pass repeating an evened-out
share's documents after skips, also where that pass ends (``pass_end``) — plus
running counts (``Counters``). It
belongs to the last document the consumer was given, never to what the
workers have read ahead.

``config`` is what must match to resume: the corpus fingerprint and the options
that shape the stream (``options.SHAPING``). Everything else (workers,
prefetch, take, timeouts) may change between runs without changing the
documents that follow.
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

import msgspec

from openwebtext import codec
from openwebtext.codec import Count
from openwebtext.errors import StateError
from openwebtext.index import Corpus
from openwebtext.options import SHAPING, Options
from openwebtext.stream.counters import READ_AGAIN, BlockSkips, Counters, PackingCounts
from openwebtext.stream.schema import DocumentState, Position, StreamConfig, kind_of
from openwebtext.stream.sections import Reshard
from openwebtext.tokenfiles import TOKENS
from openwebtext.tokenizer import Tokenizer

__all__ = [
    "Mark",
    "OverrunAt",
    "Stats",
    "check_in_block",
    "check_state",
    "config_of",
    "handed_sum",
    "load_state",
    "resume_options",
]


class Stats(Counters, frozen=True):
    """What an iterator has delivered and left out so far (``DocumentIterator.stats``)."""

    skipped: tuple[str, ...] = ()
    """Names of what was skipped (``file[member]`` or ``file[member] (document …)``)."""
    skipped_files: Count = 0
    """Files left out when the corpus was opened under ``skip`` (named in ``skipped``)."""
    padding_ids: Count = 0
    """Batches (``Loader.batches``): padding ids in the rows made (``PackingCounts``)."""
    cut_documents: Count = 0
    """Batches: documents cut across rows."""
    pieces: Count = 0
    """Batches: the pieces those documents were cut into."""

    def packed(self, counts: PackingCounts) -> Stats:
        """These counts with what packing did (``Loader.batches(...).stats``)."""
        return codec.replace(self, **msgspec.structs.asdict(counts))




class OverrunAt(NamedTuple):
    """Where a best-fit window's overrun is (``RestHandOut._overrun``), for ``Mark.overrun``."""

    end: int
    """The slots of the share passed at the window's end."""
    overrun: int
    """The documents of overruns handed out before it (``Reshard.overrun``)."""
    handed: int
    """The epoch's documents handed out before it."""
    last: int
    """The epoch's documents once its last is out (``handed`` and ``Overrun.repeats``)."""


class Mark(NamedTuple):
    """Where a stream was (``Stream.mark``): what ``state_dict`` needs, as references.

    A mark holds the current block's lists and permutation, not copies of
    them: it stays true because a block's lists are never changed once it is
    handed out (see ``blocks``), and ``counters`` is an immutable record the
    stream replaces, never updates.
    """

    epoch: int
    block: int
    block_end: int
    block_len: int
    in_block: int
    first_in_block: int
    order: list[int] | None
    sizes: list[int]
    counts: list[int]
    counters: Counters
    """Counts before the current block (documents, bytes, tokens), or so far (the rest)."""
    skipped: int
    """How many names of skipped things were recorded."""
    reshard: Reshard | None = None
    """In the rest of a resharded epoch: the state's ``reshard`` section."""
    passed: tuple[Reshard, ...] = ()
    """The sections of the rests handed out to their end (``DocumentState.passed``)."""
    pass_end: int | None = None
    """In a pass repeating an evened-out share's documents after skips: where it ends (the
    state's ``position.pass_end``, which ``EvenEpoch`` resumes the pass to)."""
    read_before: Counters | None = None
    """The counts before the current block's units were read: inside it, a state's skips are
    those (the block is read again on resume, and its skips counted then, a member failing only
    now too); a block handed out to its end is not read again (its skips count)."""
    repeats_from: int | None = None
    """The first position of the block whose documents are handed out again (None: none):
    0 in a pass or a piece that repeats documents (``repeated_documents`` counts them)."""
    skipped_slots: int = 0
    """In the rest of a resharded epoch: the slots of its share passed with no document handed
    out (documents skipped for their content hold theirs), before the current block."""
    tail: int = 0
    """A piece of a rest: the skipped slots it passes in the current block after the last
    document it hands out there (passed once that one is handed out)."""
    overrun: OverrunAt | None = None
    """Inside a best-fit window's overrun (``RestHandOut._overrun``): where it is. A state
    there is at the window's end (its documents out so far counted apart): the next window
    starts there; once its last document is out, the slots it did not fill are passed
    (``source.slots_at``), as the stream passes them when it goes on."""
    config: StreamConfig | None = None
    """The config of the stream that took it: a mark is a state of its run's only."""

    def counted(self) -> Counters:
        """The counts at this mark, the documents handed out of the current block included
        (and those of them that are repeats)."""
        first, end = self.first_in_block, self.in_block
        counted = self.counters.handed(
            end - first,
            handed_sum(self.order, first, end, self.sizes),
            handed_sum(self.order, first, end, self.counts),
        )
        if self.repeats_from is not None and end > max(first, self.repeats_from):
            return counted.plus(repeated_documents=end - max(first, self.repeats_from))
        return counted

    def position(self) -> Position:
        """The state's position: a block handed out to its end is the next block's start (in a
        pass repeating documents after skips: with where the pass ends)."""
        end = msgspec.UNSET if self.pass_end is None else self.pass_end
        if self.block_len and self.in_block >= self.block_len:
            return Position(self.epoch, self.block_end, 0, end)
        return Position(self.epoch, self.block, self.in_block, end)

    def state(
        self, config: StreamConfig, until: int | msgspec.UnsetType | None = msgspec.UNSET
    ) -> DocumentState:
        """The state at this mark, for a stream of ``config`` (of a run that ends before epoch
        ``until``).

        In the rest of a resharded epoch the position is the share's document slots passed: its
        documents handed out (``counters.epoch_documents``) and ``in_block`` more, the slots of
        documents skipped for their content (``stream.rest``), with the ``reshard`` section.
        """
        if self.config != config:  # (another run's: its position is in another order)
            raise ValueError("mark is a mark() of an iterator of another run: a state is its own")
        position, section, counted = self.position(), self.reshard, self.counted()
        if section is not None:
            past = self.tail if self.in_block >= self.block_len else 0
            position = Position(self.epoch, 0, self.skipped_slots + past)
        before = self.read_before
        if self.block_len and self.in_block >= self.block_len:  # (out: never read again)
            before = None
        if self.overrun is not None and section is not None:  # (its block: never read again)
            at = self.overrun
            position = Position(self.epoch, 0, at.end - counted.epoch_documents)
            section = codec.replace(section, overrun=at.overrun + counted.epoch_documents
                                    - at.handed)  # fmt: skip
            before = None
        if before is not None:
            read = {k: getattr(counted, k) - getattr(before, k) for k in READ_AGAIN}
            counted = codec.replace(counted, **{k: getattr(before, k) for k in READ_AGAIN})
            if any(read.values()):  # (said apart: the block is read again on resume)
                return DocumentState(config, position, counted, section, self.passed,
                                     BlockSkips(**read), until)  # fmt: skip
        return DocumentState(config, position, counted, section, self.passed, until=until)


def handed_sum(order: list[int] | None, first: int, end: int, values: list[int]) -> int:
    """The sum of a block's per-document ``values`` over its hand-out positions first..end."""
    if not values:
        return 0
    if order is None or (first == 0 and end >= len(order)):  # all of a block: any order's
        return sum(values[first:end])
    return sum([values[k] for k in order[first:end]])


#: The name of a file of ids that is one split of its corpus already: ``train.bin``,
#: ``val.bin`` (owt tokenize's, nanoGPT's), ``train.ds``, ``train_000001.bin`` (its llmc
#: format's), llm.c's ``fineweb_val_000000.bin``, ``tiny_shakespeare_val.bin``, ``train-00001``.
_A_SPLIT = re.compile(r"(?:^|[-_.])(?:train|val)(?:[-_]\d+)?\.", re.IGNORECASE)


def config_of(corpus: Corpus, options: Options, tokenizer: Tokenizer | None) -> StreamConfig:
    """What a state must agree with to resume a stream: the corpus, the options that shape
    the stream (``even``: the rule in force), and the vocabulary's fingerprint when the stream
    hands out ids (a state counts tokens, a packer's cuts inside a document).

    Raises:
        ValueError: a held-out ``split`` of a token file that is a split already (``_A_SPLIT``).
    """
    held_out = options.split != "all"
    splits = (u.path for u in corpus.units if u.kind == TOKENS and held_out)
    split = next((path for path in splits if _A_SPLIT.search(os.path.basename(path))), None)
    if split is not None:
        raise ValueError(
            f"split={options.split!r} of {split}: a file of ids named train or val is one split "
            "already (owt tokenize's, nanoGPT's, llm.c's shards): read it with split='all' (a "
            "mixture's part: options={NAME: {'split': 'all'}}); other token files are split by "
            "a hash of each document's index"
        )  # fmt: skip
    shaping = {name: getattr(options, name) for name in SHAPING} | {"even": options.even_mode}
    vocabulary = None if tokenizer is None else tokenizer.fingerprint
    units = len(corpus.units)
    return StreamConfig(corpus=corpus.fingerprint(), units=units, tokenizer=vocabulary, **shaping)


def load_state(
    path: str | os.PathLike[str], data: bytes | None = None, *, any_kind: bool = False
) -> Any:
    """Read a state saved as JSON (``owt stream --state-out``), parsed once and checked.

    Args:
        path: The state file.
        data: Its bytes, when they were read already (``owt stream --resume`` reads a pipe
            once, and at most a bound); None: read them.
        any_kind: Read a mixture's or batches' state too, by its ``format`` (``--resume``);
            else a document stream's only.

    Returns:
        The ``DocumentState`` (or with ``any_kind``, its ``MixtureState`` or ``BatchesState``).

    Raises:
        StateError: the file cannot be read, is not JSON, or is not a state; the
            message names the file.
    """
    name = os.fspath(path)
    try:
        if data is None:  # (a regular file's only, bounded: the CLI reads a pipe's itself)
            data = codec.read_file(path)
        raw = codec.parse(data)
        kind = (kind_of(raw) if any_kind else None) or DocumentState
        return kind.from_json(raw)
    except OSError as exc:
        raise StateError(f"{name}: cannot read the state: {exc.strerror or exc}") from exc
    except ValueError as exc:  # not JSON, not UTF-8, or nested too deeply
        raise StateError(f"{name}: not a JSON state file: {exc}") from exc
    except StateError as exc:
        raise exc.retold(f"{name}: {exc}") from None


def check_state(state: Any, config: StreamConfig) -> DocumentState:
    """Parse a saved state and check it against this stream's ``config``.

    Raises:
        StateError: not a state of this format (or its fields disagree: a position past the
            end of the corpus, ``DocumentState.check``), or made with another corpus or other
            shaping options (the message names every difference).
    """
    parsed = DocumentState.from_json(state)
    differ = codec.differing(parsed.config, config)
    if differ:
        again = "even" in differ and parsed.reshard is not None  # (its rule: reshard's even=)
        saved, now = msgspec.structs.asdict(parsed.config), msgspec.structs.asdict(config)
        hints = [f"{key}={saved[key]!r}" for key in differ if key in SHAPING]
        raise StateError(
            "the state was saved for another stream; "
            + "; ".join(f"{key}: saved {saved[key]!r}, now {now[key]!r}" for key in differ)
            + (f" (to resume it, pass {', '.join(hints)})" if hints else "")
            + ("; a resharded state's even is reshard's even=" if again else ""),
            f"config.{differ[0]}",
            resume_with=tuple(key for key in differ if key in SHAPING),
            mismatch=True,
        )
    return parsed


def check_in_block(in_block: int, n: int, whole: bool = False) -> None:
    """Check a state's ``in_block`` against the block of ``n`` documents it points into
    (``whole``: documents, not a rest's slots: a state is never at such a block's end, which
    ``Mark.position`` writes as the next block's start).

    Raises:
        StateError: it lies past the block's end (``whole``: at it, past its start).
    """
    if in_block > n or (whole and 0 < in_block == n):
        raise StateError(
            f"bad state: position in_block={in_block} lies {'at' if in_block == n else 'past'} "
            f"the end of its block of {n} documents (a state is never written there: edited, or "
            "a member of the block that fails only now)", "position.in_block"
        )


def resume_options(given: dict[str, Any], state: Any) -> Options:
    """Options to resume ``state`` with: those ``given``, and the shaping ones not given
    taken from the state's ``config`` (as ``owt stream --resume`` does).

    Args:
        given: The option values given (a shaping one left out: the state's, else
            the default).
        state: A saved state (JSON or its record), or None (then only ``given`` counts).

    Raises:
        ValueError: an option value is not valid.
    """
    values = dict(given)
    if state is not None:
        saved = DocumentState.from_json(state).config
        for name in SHAPING:  # ``even``: the rule in force (None: not evened out)
            values.setdefault(name, getattr(saved, name))
    return Options(**values)
