"""The records of a mixture's state, format ``openwebtext-mixture/2`` (on ``codec``): its
``MixtureConfig`` (names, weights, by, sampling, schedule), each part's ``DocumentState`` by
name, the rank's position and the turns' counts; ``MixtureStats``; ``MixMark``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, TypeAlias

import msgspec

from openwebtext.codec import Count, Disagree, Record, decode, encode
from openwebtext.errors import StateError
from openwebtext.mixing import check_weights
from openwebtext.stream.counters import Counters
from openwebtext.stream.schema import DocumentState
from openwebtext.stream.state import Mark, Stats

__all__ = [
    "MIXTURE_FORMAT",
    "By",
    "Change",
    "MixMark",
    "MixtureConfig",
    "MixtureState",
    "MixtureStats",
    "Sampling",
]

MIXTURE_FORMAT = "openwebtext-mixture/2"

By: TypeAlias = Literal["documents", "tokens"]
Sampling: TypeAlias = Literal["stratified", "random"]


class Change(Record, frozen=True):
    """Weights in force from ``at`` documents handed out by the rank on."""

    at: Count
    weights: tuple[float, ...]

    def check(self) -> None:
        try:
            check_weights(self.weights, len(self.weights))
        except ValueError as exc:
            raise Disagree("weights", str(exc)) from None


class MixtureConfig(Record, frozen=True):
    """What a mixture's state must agree with, besides each part's own ``config``."""

    parts: tuple[str, ...]
    weights: tuple[float, ...]
    by: By
    sampling: Sampling
    schedule: tuple[Change, ...] = ()

    def check(self) -> None:
        if len(set(self.parts)) != len(self.parts) or not self.parts:
            raise Disagree("parts", "must be distinct names, at least one")
        for field, weights in (("weights", self.weights), *(
            (f"schedule[{k}].weights", c.weights) for k, c in enumerate(self.schedule)
        )):  # fmt: skip
            if len(weights) != len(self.parts):
                raise Disagree(field, f"has {len(weights)} weights for {len(self.parts)} parts")


class MixtureState(Record, frozen=True, tag_field="format", tag=MIXTURE_FORMAT):
    """A mixture's state: its config, each part's state by name, and where the turns are."""

    config: MixtureConfig
    parts: dict[str, DocumentState]
    handed: Count
    """Documents the rank has handed out (the positions of the schedule count these)."""
    weights: tuple[float, ...]
    """The weights in force."""
    served: tuple[Count, ...]
    """What each part has handed out since the weights were last set (documents or ids)."""
    seen: tuple[Count, ...]
    """Each part's epoch of the last document it read (handed out, or read ahead): the run
    ends when every part of positive weight has read past its last epoch."""
    changes: tuple[Change, ...] = ()
    """Every ``set_weights``, in order."""

    def check(self) -> None:
        names = self.config.parts
        if tuple(self.parts) != names:
            raise Disagree("parts", f"names {sorted(self.parts)}, not the config's {list(names)}")
        for field in ("weights", "served", "seen"):
            if len(getattr(self, field)) != len(names):
                raise Disagree(field, f"must have one value per part ({len(names)})")
        try:
            check_weights(self.weights, len(names))
        except ValueError as exc:
            raise Disagree("weights", str(exc)) from None

    @classmethod
    def from_json(cls, state: Any) -> MixtureState:
        """A mixture's ``state_dict()`` as its record (every field checked).

        Raises:
            StateError: not a mixture's state; the first wrong field named.
        """
        if isinstance(state, MixtureState):
            return state
        if not isinstance(state, Mapping) or state.get("format") != MIXTURE_FORMAT:
            what = state.get("format") if isinstance(state, Mapping) else type(state).__name__
            raise StateError(f"not a mixture's state (format {what!r}, not {MIXTURE_FORMAT!r})")
        parts = state.get("parts")
        if isinstance(parts, Mapping):  # each part first: an error names the part's field
            for name, part in parts.items():
                try:
                    decode(part, DocumentState, f"state of the part {name!r}")
                except StateError as exc:
                    field = f"parts.{name}" + ("" if exc.field is None else f".{exc.field}")
                    raise StateError(str(exc), field) from None
        return decode(dict(state), cls, "mixture state")

    def to_json(self) -> dict[str, Any]:
        return encode(self)


class MixtureStats(Stats, frozen=True):
    """A mixture's counts: the parts' summed, and each part's under its name (``parts``)."""

    parts: dict[str, Stats] = msgspec.field(default_factory=dict)
    epochs: dict[str, int] = msgspec.field(default_factory=dict)
    """Each part's epoch: of the last document it handed out (or where it starts)."""


class MixMark(NamedTuple):
    """Where a mixture was (``MixedStream.mark``), cheaply: each part's stream mark (before
    the document it read ahead), the rank's position and the turns' counts."""

    parts: tuple[Mark, ...]
    handed: int
    weights: tuple[float, ...]
    served: tuple[int, ...]
    changes: int
    seen: tuple[int, ...]

    def counted(self) -> Counters:
        """The parts' counts at this mark, summed (documents, text bytes, ids)."""
        each = [m.counted() for m in self.parts]
        return Counters(
            documents=sum(c.documents for c in each),
            text_bytes=sum(c.text_bytes for c in each),
            tokens=sum(c.tokens for c in each),
        )
