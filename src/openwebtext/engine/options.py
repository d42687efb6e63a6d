"""Pool options: how a pool reads units (``PoolOptions``), with the loader's defaults.

The defaults are the constants of ``openwebtext.options``, which the loader's ``Options`` shares;
this module reads nothing above the engine.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from openwebtext.engine.member import Split
from openwebtext.options import (
    DECODE_ERRORS,
    MAX_DOCUMENT_BYTES,
    MAX_MEMBER_BYTES,
    PREFETCH,
    TIMEOUT,
    WORKERS,
)
from openwebtext.records import Unit
from openwebtext.source import Storage
from openwebtext.tokenizer import Tokenizer

__all__ = ["SLOT_BYTES", "Lane", "Lanes", "PoolOptions"]

#: Largest decompressed member that travels through shared memory (larger: through the pipe).
SLOT_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class PoolOptions:
    """How a pool reads units. The defaults are the loader's (``openwebtext.options``)."""

    workers: int = WORKERS
    """Worker processes; 0: read in the calling process (``InlinePool``)."""
    prefetch: int = PREFETCH
    """Units in flight per worker."""
    timeout: float = TIMEOUT
    """Seconds a worker holding work may stay silent before it counts as hung."""
    retries: int = 0
    """Fresh attempts at a unit whose worker died or hung while reading it."""
    max_member_bytes: int = MAX_MEMBER_BYTES
    max_document_bytes: int = MAX_DOCUMENT_BYTES
    split: Split | None = None
    decode_errors: str | None = DECODE_ERRORS
    """How workers check UTF-8 (``strict``, ``replace``); None: not at all."""
    hold: int = 0
    """Units the consumer may keep after asking for the next one (see ``release``)."""
    tokenizer: Tokenizer | None = None
    """Tokenize in the workers: units carry ids, not text. Resolved once by the caller; forked
    workers inherit it, and it pickles as its spec (a spawned worker loads it once)."""
    normalise: bool = False
    """With a tokenizer: tokenize ``engine.nanogpt_text(text)`` (nanoGPT's loading script)."""
    slot_bytes: int = SLOT_BYTES
    """Bytes of one shared slot."""

    def __post_init__(self) -> None:
        for name, least in (
            ("workers", 0),
            ("prefetch", 1),
            ("retries", 0),
            ("hold", 0),
            ("slot_bytes", 1),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, not {value!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, not {self.timeout!r}")


class Lane(NamedTuple):
    """The units of one corpus of a pool that reads several (a mixture's parts), each read as its
    own ``options`` say (split, limits, UTF-8 check, tokenizer) from its own ``storage``; the
    pool's own options (workers, prefetch, timeout, retries, hold, slots) are the first lane's."""

    units: Sequence[Unit]
    options: PoolOptions
    storage: Storage | None = None


class Lanes:
    """A pool's lanes, their units numbered one after another (the pool's unit table)."""

    def __init__(self, lanes: Sequence[Lane]) -> None:
        if not lanes:
            raise ValueError("a pool reads at least one lane")
        self.lanes = tuple(lanes)
        self.offsets: list[int] = []
        """Where each lane's units begin in ``units``."""
        total = 0
        for lane in self.lanes:
            self.offsets.append(total)
            total += len(lane.units)
        self.units: Sequence[Unit] = (
            self.lanes[0].units
            if len(self.lanes) == 1
            else [unit for lane in self.lanes for unit in lane.units]
        )

    def __len__(self) -> int:
        return len(self.lanes)

    def of(self, unit: int) -> int:
        """The lane of the pool's unit number ``unit``."""
        return 0 if len(self.lanes) == 1 else bisect.bisect_right(self.offsets, unit) - 1
