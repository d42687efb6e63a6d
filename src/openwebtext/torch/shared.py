"""What a dataset shares with its DataLoader workers, in shared memory: the epoch its next
pass reads (``set_epoch``) and which workers started from their resharded share
(``load_resharded``). Pickled while a process is spawned, each is the shared memory itself (the
workers see the main process's changes); pickled or copied otherwise (a copy of the dataset),
values of its own, so that a copy never changes the original.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
from typing import Any

__all__ = ["SharedEpoch", "SharedFlags"]


class _Shared:
    """A value in shared memory (``_shared``): pickled as that memory while a process is
    spawned, else (a copy of its dataset) as its plain value, which makes memory of its own."""

    _shared: Any

    def _plain(self) -> Any:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        spawning = multiprocessing.context.get_spawning_popen() is not None
        return type(self), (self._plain(), self._shared if spawning else None)


class SharedEpoch(_Shared):
    """The epoch a dataset's next pass reads: ``set_epoch`` in the main process reaches
    DataLoader workers that persist across passes (``persistent_workers``), forked or
    spawned."""

    def __init__(self, epoch: int, shared: Any = None) -> None:
        self._shared = multiprocessing.RawValue("q", epoch) if shared is None else shared

    @property
    def value(self) -> int:
        return int(self._shared.value)

    @value.setter
    def value(self, epoch: int) -> None:
        self._shared.value = epoch

    def _plain(self) -> int:
        return self.value


class SharedFlags(_Shared):
    """Which DataLoader workers started from their resharded share (``load_resharded``)."""

    def __init__(self, flags: list[int], shared: Any = None) -> None:
        self._shared = multiprocessing.RawArray("b", flags) if shared is None else shared

    def __len__(self) -> int:
        return len(self._shared)

    def __getitem__(self, k: int) -> int:
        return int(self._shared[k])

    def __setitem__(self, k: int, flag: int) -> None:
        self._shared[k] = flag

    def _plain(self) -> list[int]:
        return list(self._shared)
