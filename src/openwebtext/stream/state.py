"""The resumable state of a document stream: a small, JSON-safe, versioned dict, and the
``Mark`` a stream takes of where it is, which becomes one.

A state says where the stream is — ``(epoch, block, in_block)``: the epoch, the
plan position of the first unit of the current shuffle block, and how many of
that block's documents were handed out — plus running counts (``Counters``). It
belongs to the last document the consumer was given, never to what the
workers have read ahead.

``config`` is what must match to resume: the corpus fingerprint and the options
that shape the stream (``options.SHAPING``). Everything else (workers,
prefetch, take, timeouts) may change between runs without changing the
documents that follow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from openwebtext.errors import StateError
from openwebtext.index import Corpus
from openwebtext.options import SHAPING, Options, int_at_least
from openwebtext.tokenizer import Tokenizer

__all__ = [
    "STATE_FORMAT",
    "Counters",
    "Mark",
    "Stats",
    "check_block",
    "check_in_block",
    "check_section",
    "check_state",
    "config_of",
    "handed_sum",
    "load_state",
    "resume_options",
    "resume_point",
    "stream_config",
]

STATE_FORMAT = "openwebtext-state/1"

#: How a sharded state's shares are cut (``plan.EpochShares``): intervals of documents.
SHARES = "documents"


@dataclass(frozen=True, slots=True)
class Counters:
    """Running counts of a stream: the ``counters`` of its state, under the same names.

    The one record of counts: the stream keeps one, a ``Mark`` holds one, and
    ``Stats`` is one (plus the names of what was skipped).
    """

    documents: int = 0
    """Documents handed out."""
    text_bytes: int = 0
    """UTF-8 bytes of the documents handed out."""
    epoch_documents: int = 0
    """Documents handed out in the current epoch (even sharding stops at its target)."""
    units: int = 0
    """Units (members) read."""
    skipped_members: int = 0
    skipped_documents: int = 0
    replaced_documents: int = 0
    """Documents whose invalid UTF-8 became U+FFFD (``decode_errors="replace"``)."""
    tokens: int = 0
    """Token ids handed out, end-of-text ids included (with a ``tokenizer``)."""
    partial_members: int = 0
    """Members cut short whose documents before the cut were delivered (named in ``skipped``)."""
    repeated_documents: int = 0
    """Documents handed out again to keep ranks even after skips left this rank short
    (counted when each such pass ends), or, in a resharded epoch under ``pad``, to fill the
    last shares (counted when each piece ends)."""
    dropped_documents: int = 0
    """Documents of a resharded epoch's rest left out under ``drop`` so that the new ranks
    stay even (counted by the last new rank when it starts that epoch)."""

    @classmethod
    def from_state(cls, counters: Mapping[str, Any]) -> Counters:
        """The counters of a state's ``counters`` dict (missing ones are 0)."""
        return cls(*(counters.get(f.name, 0) for f in fields(Counters)))

    def to_state(self) -> dict[str, int]:
        """The ``counters`` dict of a state."""
        return {f.name: getattr(self, f.name) for f in fields(Counters)}

    def unit_read(self, replaced: int) -> Counters:
        """These counts after reading one more unit (``replaced``: its documents decoded with
        ``errors="replace"``)."""
        return replace(
            self, units=self.units + 1, replaced_documents=self.replaced_documents + replaced
        )

    def repeated(self, before: int) -> Counters:
        """These counts with the documents of the epoch since ``before`` counted as repeated."""
        repeated = self.repeated_documents + self.epoch_documents - before
        return replace(self, repeated_documents=repeated)

    def handed(self, documents: int, text_bytes: int, tokens: int) -> Counters:
        """These counts after handing out ``documents`` more (of these sizes)."""
        return replace(
            self,
            documents=self.documents + documents,
            text_bytes=self.text_bytes + text_bytes,
            epoch_documents=self.epoch_documents + documents,
            tokens=self.tokens + tokens,
        )


@dataclass(frozen=True, slots=True)
class Stats(Counters):
    """What an iterator has delivered and left out so far (``DocumentIterator.stats``)."""

    skipped: tuple[str, ...] = ()
    """Names of what was skipped (``file[member]`` or ``file[member] (document …)``)."""
    skipped_files: int = 0
    """Files left out when the corpus was opened under ``skip`` (named in ``skipped``)."""


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
    reshard: Mapping[str, Any] | None = None
    """In the rest of a resharded epoch: the state's ``reshard`` section (never changed)."""

    def counted(self) -> Counters:
        """The counts at this mark, the documents handed out of the current block included."""
        first, end = self.first_in_block, self.in_block
        return self.counters.handed(
            end - first,
            handed_sum(self.order, first, end, self.sizes),
            handed_sum(self.order, first, end, self.counts),
        )

    def position(self) -> dict[str, int]:
        """The state's position: a block handed out to its end is the next block's start."""
        if self.block_len and self.in_block >= self.block_len:
            return {"epoch": self.epoch, "block": self.block_end, "in_block": 0}
        return {"epoch": self.epoch, "block": self.block, "in_block": self.in_block}

    def state(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The state at this mark, for a stream of ``config``.

        In the rest of a resharded epoch the position is the share's documents handed out
        (``counters.epoch_documents``) and the ``reshard`` section.
        """
        if self.reshard is not None:
            return {
                "format": STATE_FORMAT,
                "config": dict(config),
                "position": {"epoch": self.epoch, "block": 0, "in_block": 0},
                "counters": self.counted().to_state(),
                "reshard": dict(self.reshard),
            }
        return {
            "format": STATE_FORMAT,
            "config": dict(config),
            "position": self.position(),
            "counters": self.counted().to_state(),
        }


def handed_sum(order: list[int] | None, first: int, end: int, values: list[int]) -> int:
    """The sum of a block's per-document ``values`` over its hand-out positions first..end."""
    if not values:
        return 0
    if order is None:
        return sum(values[first:end])
    return sum([values[k] for k in order[first:end]])


def config_of(corpus: Corpus, options: Options, tokenizer: Tokenizer | None) -> dict[str, Any]:
    """What a state of this stream must agree with (``state.stream_config``)."""
    vocabulary = None if tokenizer is None else tokenizer.fingerprint
    return stream_config(corpus.fingerprint(), len(corpus.units), options, tokenizer=vocabulary)


def stream_config(
    fingerprint: str, units: int, options: Options, *, tokenizer: str | None = None
) -> dict[str, Any]:
    """What a state must agree with to resume a stream.

    ``tokenizer`` is the vocabulary's fingerprint when the
    stream hands out token ids: a state counts tokens, and a packer's state
    cuts inside a document's ids.
    """
    config: dict[str, Any] = {"corpus": fingerprint, "units": units}
    for name in SHAPING:
        config[name] = getattr(options, name)
    config["even"] = options.even_mode  # the rule, while ranks are evened out
    config["tokenizer"] = tokenizer
    if options.world_size > 1:  # shares cut at documents: a state of whole-member shares
        config["shares"] = SHARES  # (before 0.2) is refused, not read from the wrong place
    return config


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a state saved as JSON (``owt stream --state-out``) and check its shape.

    Raises:
        StateError: the file cannot be read, is not JSON, or is not a state; the
            message names the file.
    """
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read())
    except OSError as exc:
        raise StateError(
            f"{os.fspath(path)}: cannot read the state: {exc.strerror or exc}"
        ) from exc
    except ValueError as exc:  # not JSON, or not UTF-8
        raise StateError(f"{os.fspath(path)}: not a JSON state file: {exc}") from exc
    try:
        return check_shape(state)
    except StateError as exc:
        raise StateError(f"{os.fspath(path)}: {exc}") from None


def check_shape(state: Any) -> dict[str, Any]:
    """Check that ``state`` has the fields and types of a state; return it.

    Raises:
        StateError: not a state of this format, or a field of the wrong type.
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise StateError(f"not an openwebtext state of format {STATE_FORMAT!r} (found {found!r})")
    for part in ("config", "position", "counters"):
        if part in state and not isinstance(state[part], dict):
            raise StateError(f"bad state: {part} is {_kind(state[part])}, not an object")
    position = state.get("position", {})
    for key in ("epoch", "block", "in_block"):
        value = position.get(key)
        if not _count(value):
            raise StateError(f"bad state: position.{key} is {value!r}, not an int >= 0")
    for key, value in state.get("counters", {}).items():
        if not _count(value):
            raise StateError(f"bad state: counters.{key} is {value!r}, not an int >= 0")
    if "reshard" in state:
        check_section(state["reshard"])
    else:
        _check_fields(state)
    return state


def _check_fields(state: Mapping[str, Any]) -> None:
    """The fields of a state against each other (what needs no corpus; ``epochs.check_position``
    checks the position against the share it is in, with the counts).

    Raises:
        StateError: naming the first field that disagrees.
    """
    position, counters = state["position"], state.get("counters", {})
    config = state.get("config", {})
    handed = counters.get("epoch_documents", 0)
    if position["in_block"] > handed:
        raise StateError(
            f"bad state: position.in_block={position['in_block']} is more than the "
            f"counters.epoch_documents={handed} handed out in the epoch"
        )
    if handed > counters.get("documents", handed):
        raise StateError(
            f"bad state: counters.epoch_documents={handed} is more than "
            f"counters.documents={counters['documents']}"
        )
    units = config.get("units")
    evened = config.get("even") is not None
    if isinstance(units, int) and not evened and position["block"] > units:
        raise StateError(
            f"bad state: position.block={position['block']} is past the corpus's {units} members"
        )


def check_state(state: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Validate a saved state against this stream's ``config``; return it.

    Raises:
        StateError: not a state of this format, made with another corpus or
            other shaping options (the message names every difference), or a
            position past the end of the plan.
    """
    check_shape(state)
    saved = state.get("config", {})
    differ = [
        f"{key}: saved {saved.get(key)!r}, now {value!r}"
        for key, value in config.items()
        if saved.get(key) != value
    ]
    if differ:
        hints = [
            hint
            for key, value in config.items()
            if saved.get(key) != value and (hint := _resume_hint(key, saved)) is not None
        ]
        raise StateError(
            "the state was saved for another stream; "
            + "; ".join(differ)
            + (f" (to resume it, pass {', '.join(hints)})" if hints else "")
        )
    position = state["position"]
    if config.get("even") is None:  # evened-out ranks may wrap around their share
        check_block(position["block"], position["in_block"], config["units"], config["rank"])
    checked: dict[str, Any] = state
    return checked


def resume_point(
    state: dict[str, Any] | None, config: dict[str, Any], epoch: int
) -> tuple[dict[str, int], Counters, dict[str, Any] | None]:
    """Where a stream of ``config`` starts: the position, the counters and the ``reshard``
    section of ``state`` (checked first), or the start of ``epoch`` without a state.

    Raises:
        StateError: as ``check_state``.
    """
    if state is None:
        return {"epoch": epoch, "block": 0, "in_block": 0}, Counters(), None
    check_state(state, config)
    counters = Counters.from_state(state.get("counters", {}))
    return state["position"], counters, state.get("reshard")


def _resume_hint(key: str, saved: Mapping[str, Any]) -> str | None:
    """The argument that makes an option agree with a saved state's ``key``, if one does."""
    if key not in SHAPING or key not in saved:
        return None
    if key == "even":  # the state holds the rule (None: not evened out)
        rule = saved["even"]
        return "even=False" if rule is None else f"even=True, even_rule={rule!r}"
    return f"{key}={saved[key]!r}"


def check_block(block: int, in_block: int, units: int, rank: int) -> None:
    """Check a state's position against the ``units`` of its share (not evened out: no pass
    wraps around).

    Raises:
        StateError: it lies past the share's end.
    """
    if block > units or (block == units and in_block > 0):
        raise StateError(
            f"bad state: position block={block}, in_block={in_block} lies past the end "
            f"of the plan ({units} members for rank {rank})"
        )


def check_in_block(in_block: int, n: int) -> None:
    """Check a state's ``in_block`` against the block of ``n`` documents it points into.

    Raises:
        StateError: it lies past the block's end.
    """
    if in_block > n:
        raise StateError(
            f"bad state: position in_block={in_block} lies past the end of its block "
            f"of {n} documents"
        )


def _count(value: Any) -> bool:
    return int_at_least(value, 0)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def resume_options(given: Mapping[str, Any], state: Mapping[str, Any] | None) -> Options:
    """Options to resume ``state`` with: those ``given``, and the shaping ones not given
    taken from the state's ``config`` (as ``owt stream --resume`` does).

    Args:
        given: The option values given (a shaping one left out: the state's, else
            the default).
        state: A saved state, or None (then only ``given`` counts).

    Raises:
        ValueError: an option value is not valid.
    """
    values = dict(given)
    saved = state.get("config", {}) if state else {}
    for name in SHAPING:
        if name in values or name not in saved:
            continue
        if name == "even":  # saved as the rule while evened out, else None
            rule = saved["even"]
            values["even"] = rule is not None
            if rule is not None and "even_rule" not in values:
                values["even_rule"] = rule
        else:
            values[name] = saved[name]
    return Options(**values)


def check_section(section: Any) -> None:
    """Check the shape of a state's ``reshard`` section (``reshard.reshard`` writes it).

    Raises:
        StateError: a field is missing or of the wrong type.
    """

    def ints(value: Any, n: int | None = None) -> bool:
        return (
            isinstance(value, list)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and (n is None or len(value) == n)
        )

    problems = []
    if not isinstance(section, dict):
        raise StateError(f"bad state: reshard is {type(section).__name__}, not an object")
    for key in ("world_size", "epoch"):
        if not int_at_least(section.get(key), 0):
            problems.append(key)
    ranks = section.get("ranks")
    if not isinstance(ranks, list) or not all(ints(r, 4) for r in ranks):
        problems.append("ranks")
    levels = section.get("levels")
    if not isinstance(levels, list) or not all(
        isinstance(v, dict) and ints(v.get("done")) and ints(v.get("cuts")) for v in levels
    ):
        problems.append("levels")
    exact = section.get("exact", [])
    n_ranks = len(ranks) if "ranks" not in problems and isinstance(ranks, list) else None
    bools = isinstance(exact, list) and all(isinstance(e, bool) for e in exact)
    if not bools or (exact and n_ranks is not None and len(exact) != n_ranks):
        problems.append("exact")
    share: Any = section.get("share")
    if not ints(share, 2) or not 0 <= share[0] < share[1]:
        problems.append("share")
    if "windows" in section:  # best-fit batches: the windows old ranks had begun
        windows = section["windows"]
        if not isinstance(windows, list) or not all(ints(w, 3) for w in windows):
            problems.append("windows")
        if not int_at_least(section.get("window"), 1):
            problems.append("window")
        if not int_at_least(section.get("next_window"), 0):
            problems.append("next_window")
        if isinstance(levels, list) and not all(
            isinstance(v, dict) and isinstance(v.get("windows"), list)
            and all(ints(w, 2) for w in v["windows"])
            for v in levels
        ):  # fmt: skip
            problems.append("levels")
    if problems:
        raise StateError(f"bad state: reshard.{', reshard.'.join(problems)} malformed")
