"""A ``StatefulDataLoader``'s states: the dataset state of each of its workers
(``loader_dataset_states``), and every old rank's resharded to a new world size and
``num_workers`` (``reshard_loader_states``), for ``load_resharded``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openwebtext.errors import StateError
from openwebtext.options import MOST_INT, EvenRule, as_int, countable
from openwebtext.stream import reshard

__all__ = ["loader_dataset_states", "reshard_loader_states"]


def loader_dataset_states(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The dataset states, one per DataLoader worker in worker order (one for
    ``num_workers=0``), in a ``StatefulDataLoader.state_dict()``.

    Raises:
        StateError: ``state`` is not a ``StatefulDataLoader``'s ``state_dict()``.
    """
    give = "give each rank's loader.state_dict()"
    if not isinstance(state, Mapping):
        raise StateError(f"not a StatefulDataLoader's state_dict() (a dict), but "
                         f"{type(state).__name__}: {give}")  # fmt: skip
    try:
        if "_snapshot" not in state:
            return [state["dataset_state"]]
        workers = state["_snapshot"]["_worker_snapshots"]
        return [workers[f"worker_{k}"]["dataset_state"] for k in range(len(workers))]
    except KeyError as exc:
        raise StateError(f"not a StatefulDataLoader's state_dict() (no {exc} in it): "
                         f"{give}") from None  # fmt: skip
    except TypeError:  # (a snapshot or a worker's that is not a dict)
        raise StateError(f"not a StatefulDataLoader's state_dict() (its _snapshot is not "
                         f"one's): {give}") from None  # fmt: skip


def reshard_loader_states(
    states: Sequence[dict[str, Any]],
    world_size: int,
    num_workers: int,
    *,
    even: EvenRule | None = "drop",
) -> list[list[dict[str, Any]]]:
    """From every old rank's ``StatefulDataLoader.state_dict()`` (e.g. gathered with
    ``torch.distributed.all_gather_object``), the dataset states of each new rank's
    ``num_workers`` DataLoader workers (``dataset.load_resharded(result[rank])``).

    Every old rank x worker is one share of the stream (rank ``rank * N + worker``), so
    the shares are resharded to ``world_size * max(1, num_workers)``; ``even`` is the new
    datasets' ``even`` (it holds across training ranks, so with one rank it is None, as
    the datasets decide it).
    """
    world_size, num_workers = as_int(world_size), as_int(num_workers)
    if not countable(num_workers, 0):
        raise ValueError(f"num_workers must be an int >= 0 (the new DataLoaders'), not "
                         f"{num_workers!r}")  # fmt: skip
    if not countable(world_size, 1) or not countable(world_size * max(1, num_workers), 1):
        raise ValueError(f"world_size must be an int >= 1 and, times num_workers, at most "
                         f"{MOST_INT}, not {world_size!r}")  # fmt: skip
    if isinstance(states, Mapping) or not isinstance(states, Sequence):
        raise TypeError(f"states must be a list of every old rank's StatefulDataLoader."
                        f"state_dict(), not {type(states).__name__}")  # fmt: skip
    shares = [share for state in states for share in loader_dataset_states(state)]
    per_rank = max(1, num_workers)
    try:
        new = reshard(shares, world_size * per_rank, even=even if world_size > 1 else None)
    except StateError as exc:  # (its ranks are the shares: rank x worker)
        if not (exc.field or "").endswith("config.rank"):  # (ranks missing, or given twice)
            raise
        raise exc.retold(f"{exc} (here a rank is a share: old rank * its DataLoader workers + "
                         "worker; give every old rank's state_dict once)") from None
    return [new[r * per_rank : (r + 1) * per_rank] for r in range(world_size)]
