"""The typed records of a saved state, parsed and checked once at the boundary.

A state crosses the boundary as JSON (``state_dict()`` returns it, ``iter(state=…)`` and
``batches(state=…)`` take it, ``owt stream --state-out`` writes it). Inside, it is one of
these frozen records, built by ``from_json`` — which checks every field's type and the
fields against each other, and names the first that is wrong in a ``StateError`` — and
turned back by ``to_json``. Nothing past ``from_json`` checks a type again. The records
nest as the streams do: a ``BatchesState`` holds the ``DocumentState`` of the documents
it packs, which holds its ``Counters``, ``Position`` and, in the rest of a resharded epoch,
its ``Reshard`` section (the old ranks as ``OldRank`` records, one ``Level`` per earlier
reshard).

The JSON is the format the first release wrote (``openwebtext-state/1``,
``openwebtext-batches/1``): ``to_json(from_json(j)) == j`` for every state it saves, so
saved states keep loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypeAlias

from openwebtext.errors import StateError
from openwebtext.stream.counters import Counters

__all__ = [
    "BATCHES_FORMAT",
    "SHARES",
    "STATE_FORMAT",
    "BatchesState",
    "Counters",
    "DocumentState",
    "Level",
    "OldRank",
    "Packing",
    "Position",
    "Reshard",
    "Rule",
]

STATE_FORMAT = "openwebtext-state/1"
BATCHES_FORMAT = "openwebtext-batches/1"

#: How a sharded state's shares are cut (``plan.EpochShares``): intervals of documents.
SHARES = "documents"

#: How ranks are evened out: ``drop`` the documents past the smallest count, or ``pad``.
Rule: TypeAlias = Literal["drop", "pad"]
#: How batches are packed: end to end, or best fit in windows of documents.
Packing: TypeAlias = Literal["concat", "bestfit"]

_RULES = ("drop", "pad")
_PACKINGS = ("concat", "bestfit")


# -- field readers: each names the field it refuses ------------------------------------


def _is_int(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _int(
    obj: Mapping[str, Any], key: str, where: str, *, least: int = 0, default: Any = ...
) -> Any:
    value = obj.get(key, default)
    if value is ... or not _is_int(value, least):
        raise StateError(f"bad state: {where}{key} is {value!r}, not an int >= {least}")
    return value


def _ints(value: Any, n: int | None = None) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value) and n in (None, len(value))


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        kind = "null" if value is None else type(value).__name__
        raise StateError(f"bad state: {where} is {kind}, not an object")
    return value


def _rule(value: Any, where: str) -> Rule | None:
    if value is not None and value not in _RULES:
        raise StateError(f"bad state: {where} is {value!r}, not 'drop', 'pad' or null")
    return value  # type: ignore[no-any-return]


# -- the records -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Position:
    """Where a stream is: the epoch, the plan position of the first unit of the current
    shuffle block, and how many of that block's documents were handed out."""

    epoch: int = 0
    block: int = 0
    in_block: int = 0

    @classmethod
    def from_json(cls, position: Any) -> Position:
        """Raises: StateError: not an object, or a field that is not an int >= 0."""
        position = _object(position, "position")
        return cls(*(_int(position, f.name, "position.") for f in fields(Position)))

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "block": self.block, "in_block": self.in_block}


@dataclass(frozen=True, slots=True)
class OldRank:
    """An old rank of a resharded epoch, at its state: its position and what it handed out."""

    block: int
    in_block: int
    handed: int | None
    """Documents of the epoch it handed out; None: it finished the epoch (JSON: -1)."""
    cut: int = 0
    """Concat batches: ids of its next document already targets, plus one (0: none)."""

    @classmethod
    def from_json(cls, value: Any) -> OldRank:
        if not (isinstance(value, list) and len(value) == 4 and all(_is_int(v, -1) for v in value)):
            raise StateError("bad state: reshard.ranks malformed")
        block, in_block, handed, cut = value
        if min(block, in_block, cut) < 0:
            raise StateError("bad state: reshard.ranks malformed")
        return cls(block, in_block, None if handed < 0 else handed, cut)

    def to_json(self) -> list[int]:
        return [self.block, self.in_block, -1 if self.handed is None else self.handed, self.cut]


@dataclass(frozen=True, slots=True)
class Level:
    """One earlier reshard of the epoch: its shares' world size and rule, and what each share
    handed out before this reshard."""

    world_size: int
    rule: Rule | None
    done: tuple[int, ...]
    """Documents each share handed out."""
    cuts: tuple[int, ...]
    """Concat batches: each share's cut (as ``OldRank.cut``)."""
    windows: tuple[tuple[int, int], ...] | None = None
    """Best fit: each share's ``(window number, rows of it handed out)``."""

    @classmethod
    def from_json(cls, value: Any) -> Level:
        ok = isinstance(value, dict) and _ints(value.get("done")) and _ints(value.get("cuts"))
        windows = value.get("windows") if isinstance(value, dict) else None
        if not ok or (windows is not None and not all(_ints(w, 2) for w in _list(windows))):
            raise StateError("bad state: reshard.levels malformed")
        world = _int(value, "world_size", "reshard.levels.", least=1)
        return cls(
            world,
            _rule(value.get("rule"), "reshard.levels.rule"),
            tuple(value["done"]),
            tuple(value["cuts"]),
            None if windows is None else tuple((n, row) for n, row in windows),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "world_size": self.world_size,
            "rule": self.rule,
            "done": list(self.done),
            "cuts": list(self.cuts),
        }
        if self.windows is not None:
            out["windows"] = [list(w) for w in self.windows]
        return out


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise StateError("bad state: reshard.levels malformed")
    return value


@dataclass(frozen=True, slots=True)
class Reshard:
    """The ``reshard`` section of a state in the rest of a resharded epoch (``reshard``
    writes it): the old ranks at their states and this new rank's share of what they left.

    O(old ranks) integers, never a list of documents.
    """

    world_size: int
    """The old world size."""
    epoch: int
    even: Rule | None
    """The old ranks' rule (None: not evened out)."""
    ranks: tuple[OldRank, ...]
    levels: tuple[Level, ...]
    share: tuple[int, int]
    """``(rank, world size)`` of this share of the rest."""
    rule: Rule | None
    """The new ranks' rule."""
    counted: bool = True
    """Whether this share's losses were counted (the last share counts ``drop``'s)."""
    exact: tuple[bool, ...] | None = None
    """Old ranks whose position must agree exactly with their count (no skip)."""
    window: int | None = None
    """Best fit: documents a window holds."""
    windows: tuple[tuple[int, int, int], ...] | None = None
    """Best fit: ``(old rank, window number, rows handed out)`` of the windows old ranks had
    begun, each to be packed again."""
    next_window: int | None = None
    """Best fit: the number the new ranks' own windows start at."""

    @classmethod
    def from_json(cls, section: Any) -> Reshard:
        """Raises: StateError: naming every field that is missing or of the wrong type."""
        if not isinstance(section, dict):
            raise StateError(f"bad state: reshard is {type(section).__name__}, not an object")
        problems = [key for key in ("world_size", "epoch") if not _is_int(section.get(key))]
        parsed: dict[str, Any] = {}
        for key, parse in (("ranks", OldRank.from_json), ("levels", Level.from_json)):
            try:
                parsed[key] = tuple(parse(v) for v in section[key])
            except (StateError, KeyError, TypeError):
                problems.append(key)
        exact = section.get("exact")
        n_ranks = len(parsed["ranks"]) if "ranks" in parsed else None
        if exact is not None and not (
            isinstance(exact, list)
            and all(isinstance(e, bool) for e in exact)
            and (not exact or n_ranks is None or len(exact) == n_ranks)
        ):
            problems.append("exact")
        share: Any = section.get("share")
        if not _ints(share, 2) or not 0 <= share[0] < share[1]:
            problems.append("share")
        best_fit = cls._best_fit(section, parsed.get("levels", ()), problems)
        if problems:
            raise StateError(f"bad state: reshard.{', reshard.'.join(problems)} malformed")
        return cls(
            section["world_size"],
            section["epoch"],
            _rule(section.get("even"), "reshard.even"),
            parsed["ranks"],
            parsed["levels"],
            (share[0], share[1]),
            _rule(section.get("rule"), "reshard.rule"),
            _bool(section.get("counted", True), "reshard.counted"),
            None if exact is None else tuple(exact),
            *best_fit,
        )

    @staticmethod
    def _best_fit(
        section: Mapping[str, Any], levels: tuple[Level, ...], problems: list[str]
    ) -> tuple[int | None, tuple[tuple[int, int, int], ...] | None, int | None]:
        if "windows" not in section:  # concat batches, or documents
            return None, None, section.get("next_window")
        windows = section["windows"]
        if not isinstance(windows, list) or not all(_ints(w, 3) for w in windows):
            problems.append("windows")
        if not _is_int(section.get("window"), 1):
            problems.append("window")
        if not _is_int(section.get("next_window")):
            problems.append("next_window")
        if any(level.windows is None for level in levels):
            problems.append("levels")
        if problems:
            return None, None, None
        triples = tuple((r, n, row) for r, n, row in windows)
        return section["window"], triples, section["next_window"]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "world_size": self.world_size,
            "epoch": self.epoch,
            "even": self.even,
            "ranks": [r.to_json() for r in self.ranks],
            "levels": [level.to_json() for level in self.levels],
        }
        if self.exact is not None:
            out["exact"] = list(self.exact)
        if self.window is not None:
            out["window"] = self.window
        if self.windows is not None:
            out["windows"] = [list(w) for w in self.windows]
        if self.next_window is not None:
            out["next_window"] = self.next_window
        out.update(share=list(self.share), rule=self.rule, counted=self.counted)
        return out

    def base(self) -> Reshard:
        """The section without this share: what every share of one reshard has in common."""
        return replace(self, share=(0, 1), rule=None, counted=True)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise StateError(f"bad state: {where} is {value!r}, not true or false")
    return value


@dataclass(frozen=True, slots=True)
class DocumentState:
    """A document stream's state (``DocumentIterator.state_dict()``): what it was opened with
    (``config``), where it is, its counts, and in a resharded epoch its ``reshard`` section.

    ``config`` is what must match to resume: the corpus fingerprint and the options that
    shape the stream (``options.SHAPING``), compared key by key (``state.check_state``).
    """

    config: Mapping[str, Any] = field(default_factory=dict)
    position: Position = Position()
    counters: Counters = field(default_factory=Counters)
    reshard: Reshard | None = None

    @classmethod
    def from_json(cls, state: Any) -> DocumentState:
        """Parse a state and check its fields against each other (what needs no corpus:
        ``epochs.check_position`` checks the position against its share, with the counts).

        Raises:
            StateError: not a state of this format, or naming the first field that is of the
                wrong type or disagrees with another.
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise StateError(
                f"not an openwebtext state of format {STATE_FORMAT!r} (found {found!r})"
            )
        config = _object(state.get("config", {}), "config")
        position = Position.from_json(state.get("position", {}))
        counters = Counters.from_json(state.get("counters", {}))
        if "reshard" in state:
            return cls(config, position, counters, Reshard.from_json(state["reshard"]))
        parsed = cls(config, position, counters)
        parsed._check_fields()
        return parsed

    def _check_fields(self) -> None:
        position, counters = self.position, self.counters
        handed = counters.epoch_documents
        if position.in_block > handed:
            raise StateError(
                f"bad state: position.in_block={position.in_block} is more than the "
                f"counters.epoch_documents={handed} handed out in the epoch"
            )
        if handed > counters.documents:
            raise StateError(
                f"bad state: counters.epoch_documents={handed} is more than "
                f"counters.documents={counters.documents}"
            )
        units = self.config.get("units")
        if isinstance(units, int) and self.config.get("even") is None and position.block > units:
            raise StateError(
                f"bad state: position.block={position.block} is past the corpus's {units} members"
            )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": STATE_FORMAT,
            "config": dict(self.config),
            "position": self.position.to_json(),
            "counters": self.counters.to_json(),
        }
        if self.reshard is not None:
            out["reshard"] = self.reshard.to_json()
        return out


@dataclass(frozen=True, slots=True)
class BatchesState:
    """A ``Loader.batches`` state: the state of the documents it packs (before the document
    the next batch starts in), and where in them the next batch starts."""

    seq_len: int
    batch_size: int
    documents: DocumentState
    offset: int = 0
    """Ids of the next document already in batches (concat)."""
    batches: int = 0
    """Batches handed out before."""
    packing: Packing = "concat"
    window: int | None = None
    """Best fit: documents packed at a time."""
    window_number: int = 0
    """Best fit: the window the next batch is in."""
    row: int = 0
    """Best fit: rows of that window handed out."""
    window_epoch: int | None = None
    """Best fit: the epoch the window's number counts in (None: the documents')."""

    @classmethod
    def from_json(cls, state: Any) -> BatchesState:
        """Raises: StateError: not a batches state, or naming the field that is wrong."""
        if not isinstance(state, dict) or state.get("format") != BATCHES_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise StateError(f"not a batches state of format {BATCHES_FORMAT!r} (found {found!r})")
        where = "batches state: "
        if not isinstance(state.get("documents"), dict):
            kind = type(state.get("documents")).__name__
            raise StateError(f"bad {where}documents is {kind}")
        packing = state.get("packing", "concat")
        if packing not in _PACKINGS:
            raise StateError(f"bad {where}packing is {packing!r}, not one of {_PACKINGS}")
        best = packing == "bestfit"
        window = _int(state, "window", where, least=1) if best else state.get("window")
        epoch = state.get("window_epoch")
        if epoch is not None and not _is_int(epoch):
            raise StateError(f"bad {where}window_epoch is {epoch!r}")
        return cls(
            _int(state, "seq_len", where, least=1),
            _int(state, "batch_size", where, least=1),
            DocumentState.from_json(state["documents"]),
            _int(state, "offset", where),
            _int(state, "batches", where, default=0),
            packing,
            window,
            _int(state, "window_number", where, default=0),
            _int(state, "row", where, default=0),
            epoch,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": BATCHES_FORMAT,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "documents": self.documents.to_json(),
            "offset": self.offset,
            "batches": self.batches,
        }
        if self.packing == "bestfit":
            out.update(
                packing=self.packing,
                window=self.window,
                window_number=self.window_number,
                window_epoch=self.window_epoch,
                row=self.row,
            )
        return out

    @property
    def cut(self) -> int:
        """Concat: ids of the next document already targets, plus one (0: none)."""
        return self.offset + 1 if self.batches > 0 else 0
