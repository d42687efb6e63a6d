"""The inline pool: ``workers=0`` reads units in the calling process, as a worker would."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence

from openwebtext.engine.child import LaneReaders, read_unit
from openwebtext.engine.halting import check_halt
from openwebtext.engine.options import Lane, Lanes, PoolOptions
from openwebtext.engine.tasks import Loaded, failure
from openwebtext.records import Unit
from openwebtext.source import Storage

__all__ = ["InlinePool"]


class InlinePool:
    """``workers=0``: read units in the calling process (no processes, no shared memory).

    For debugging, and for callers that may not start processes (e.g. inside a
    daemonic ``torch.utils.data.DataLoader`` worker). Its errors are the ones a
    worker would send; their cause is the real exception, traceback and all.
    """

    def __init__(
        self,
        units: Sequence[Unit],
        options: PoolOptions,
        storage: Storage | None = None,
        *,
        lanes: Sequence[Lane] | None = None,
    ):
        self.lanes = Lanes([Lane(units, options, storage)] if lanes is None else lanes)
        self.units = self.lanes.units
        self.options = options
        self.readers = LaneReaders(self.lanes)
        self.closed = False

    def run(self, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """Yield every unit of ``order``, in order."""
        return self.run_lane(0, order)

    def run_lane(self, lane: int, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """Yield every unit of lane ``lane``'s ``order``, in order."""
        units = self.lanes.lanes[lane].units
        options = self.lanes.lanes[lane].options
        for unit in order:
            check_halt()  # (a thread another closes stops between units)
            try:
                member, payload, offsets, counts = read_unit(
                    self.readers.reader(lane), options.tokenizer, units[unit], options.normalise
                )
            except Exception as exc:  # as a worker reports it
                error = failure(exc, units[unit])
                if error is not exc:
                    error.__cause__ = exc
                yield Loaded(unit, b"", [], [], [], [error])
                continue
            yield Loaded(
                unit,
                payload,
                member.names,
                offsets,
                member.sizes,
                member.dropped,
                member.replace,
                -1,
                counts,
            )

    def release(self, ticket: int) -> None:
        """Nothing to free: each unit's data is its own ``bytes``."""

    def close(self) -> None:
        self.closed = True
        self.readers.close()

    def __enter__(self) -> InlinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
