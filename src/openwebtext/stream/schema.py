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

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
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


#: The JSON scalars a record's fields hold, by annotation: the check, and what it says.
_SCALARS: dict[str, tuple[Callable[[Any, int], bool], str]] = {
    "int": (_is_int, "an int >= {least}"),
    "int | None": (lambda v, least: v is None or _is_int(v, least), "null or an int >= {least}"),
    "bool": (lambda v, least: isinstance(v, bool), "true or false"),
    "Rule | None": (lambda v, least: v in (None, *_RULES), "'drop', 'pad' or null"),
    "Packing": (lambda v, least: v in _PACKINGS, "'concat' or 'bestfit'"),
}


def _scalars(cls: Any, obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The scalar fields of record ``cls`` read from ``obj`` (a missing one: its default;
    ``least`` in a field's metadata: its smallest int).

    Raises:
        StateError: a field missing without a default, or of the wrong type, named.
    """
    out = {}
    for f in fields(cls):
        if f.type not in _SCALARS:
            continue
        check, says = _SCALARS[f.type]
        least = f.metadata.get("least", 0)
        value = obj.get(f.name, f.default)
        if value is MISSING or not check(value, least):
            shown = "missing" if value is MISSING else repr(value)
            says = says.format(least=least)
            raise StateError(f"bad {where}{f.name} is {shown}, not {says}")
        out[f.name] = value
    return out


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        kind = "null" if value is None else type(value).__name__
        raise StateError(f"bad state: {where} is {kind}, not an object")
    return value


def _ints(value: Any, n: int | None = None, least: int = 0) -> bool:
    ok = isinstance(value, list) and all(_is_int(v, least) for v in value)
    return ok and n in (None, len(value))


def _tuples(value: Any, n: int, where: str) -> tuple[tuple[int, ...], ...]:
    """A list of lists of ``n`` ints >= 0, as tuples."""
    if not isinstance(value, list) or not all(_ints(v, n) for v in value):
        raise StateError(f"bad state: {where} malformed")
    return tuple(tuple(v) for v in value)


#: A field of ints of at least 1.
_POSITIVE = {"least": 1}


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
        return cls(**_scalars(cls, _object(position, "position"), "state: position."))

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
        if not _ints(value, 4, least=-1) or min(value[0], value[1], value[3]) < 0:
            raise StateError("bad state: reshard.ranks malformed")
        block, in_block, handed, cut = value
        return cls(block, in_block, None if handed < 0 else handed, cut)

    def to_json(self) -> list[int]:
        return [self.block, self.in_block, -1 if self.handed is None else self.handed, self.cut]


@dataclass(frozen=True, slots=True)
class Level:
    """One earlier reshard of the epoch: its shares' world size and rule, and what each share
    handed out before this reshard."""

    world_size: int = field(metadata=_POSITIVE)
    rule: Rule | None
    done: tuple[int, ...]
    """Documents each share handed out."""
    cuts: tuple[int, ...]
    """Concat batches: each share's cut (as ``OldRank.cut``)."""
    windows: tuple[tuple[int, int], ...] | None = None
    """Best fit: each share's ``(window number, rows of it handed out)``."""

    @classmethod
    def from_json(cls, value: Any) -> Level:
        level = _object(value, "reshard.levels")
        if not (_ints(level.get("done")) and _ints(level.get("cuts"))):
            raise StateError("bad state: reshard.levels malformed")
        windows = level.get("windows")
        return cls(
            **_scalars(cls, level, "state: reshard.levels."),
            done=tuple(level["done"]),
            cuts=tuple(level["cuts"]),
            windows=None if windows is None else _tuples(windows, 2, "reshard.levels"),  # type: ignore[arg-type]
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


@dataclass(frozen=True, slots=True)
class Reshard:
    """The ``reshard`` section of a state in the rest of a resharded epoch (``reshard``
    writes it): the old ranks at their states and this new rank's share of what they left.

    O(old ranks) integers, never a list of documents.
    """

    world_size: int = field(metadata=_POSITIVE)
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
    window: int | None = field(default=None, metadata=_POSITIVE)
    """Best fit: documents a window holds."""
    windows: tuple[tuple[int, int, int], ...] | None = None
    """Best fit: ``(old rank, window number, rows handed out)`` of the windows old ranks had
    begun, each to be packed again."""
    next_window: int | None = None
    """Best fit: the number the new ranks' own windows start at."""

    @classmethod
    def from_json(cls, section: Any) -> Reshard:
        """Raises: StateError: naming the first field that is missing or of the wrong type."""
        section = _object(section, "reshard")
        scalars = _scalars(cls, section, "state: reshard.")
        if not isinstance(section.get("ranks"), list):
            raise StateError("bad state: reshard.ranks malformed")
        ranks = tuple(OldRank.from_json(r) for r in section["ranks"])
        if not isinstance(section.get("levels"), list):
            raise StateError("bad state: reshard.levels malformed")
        levels = tuple(Level.from_json(v) for v in section["levels"])
        exact = section.get("exact")
        if exact is not None and not (
            isinstance(exact, list)
            and all(isinstance(e, bool) for e in exact)
            and len(exact) in (0, len(ranks))
        ):
            raise StateError("bad state: reshard.exact malformed")
        share = section.get("share")
        if not _ints(share, 2) or not share[0] < share[1]:
            raise StateError("bad state: reshard.share malformed")
        windows = section.get("windows")
        best_fit = windows is not None
        if best_fit and (scalars["window"] is None or scalars["next_window"] is None):
            raise StateError("bad state: reshard.window and reshard.next_window are needed")
        if any((level.windows is not None) != best_fit for level in levels):
            raise StateError("bad state: reshard.levels malformed")
        return cls(
            **scalars,
            ranks=ranks,
            levels=levels,
            share=(share[0], share[1]),
            exact=None if exact is None else tuple(exact),
            windows=_tuples(windows, 3, "reshard.windows") if best_fit else None,  # type: ignore[arg-type]
        )

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

    seq_len: int = field(metadata=_POSITIVE)
    batch_size: int = field(metadata=_POSITIVE)
    documents: DocumentState
    offset: int = 0
    """Ids of the next document already in batches (concat)."""
    batches: int = 0
    """Batches handed out before."""
    packing: Packing = "concat"
    window: int | None = field(default=None, metadata=_POSITIVE)
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
        if not isinstance(state.get("documents"), dict):
            kind = type(state.get("documents")).__name__
            raise StateError(f"bad batches state: documents is {kind}")
        scalars = _scalars(cls, state, "batches state: ")
        if scalars["packing"] == "bestfit" and scalars["window"] is None:
            raise StateError("bad batches state: window is missing, not an int >= 1")
        return cls(**scalars, documents=DocumentState.from_json(state["documents"]))

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
