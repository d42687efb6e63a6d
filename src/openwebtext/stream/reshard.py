"""Resharding: the states of all ranks of a run, turned into one state per rank of another
world size (``reshard``), so that a job preempted on W GPUs resumes exactly on W'.

Nothing is read here: a new state names the old ranks' positions and this rank's share of
what they left (``stream.rest`` cuts the shares when the stream starts, with the document
counts). The section is O(old ranks) integers, never a list of documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openwebtext.errors import StateError
from openwebtext.options import int_at_least
from openwebtext.stream.batches import BATCHES_FORMAT
from openwebtext.stream.state import STATE_FORMAT, Counters, check_shape

__all__ = ["FINISHED", "reshard"]

#: The keys of a ``reshard`` section that describe the old ranks (the same for every share).
BASE = ("world_size", "epoch", "even", "ranks", "levels", "window", "windows", "exact")


def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: bool | None = None
) -> list[dict[str, Any]]:
    """One state per rank of ``world_size`` from the states of every rank of a run.

    ``states`` are the ``state_dict()`` of every rank's document iterator, or of every
    rank's ``Loader.batches`` (one kind), each taken at that rank's own position, in any
    order. State ``r`` of the result resumes ``Loader(..., rank=r, world_size=world_size)``
    (``.iter(state=…)`` or ``.batches(..., state=…)``): the old ranks' documents up to their
    states, plus what the new ranks hand out to the end of that epoch, are the epoch's
    documents once each. Every new rank hands out the same number: under ``even_rule="drop"``
    the last few of the rest are left out (``stats.dropped_documents``, on the last rank),
    under ``"pad"`` the first few are repeated (``stats.repeated_documents``); without even
    sharding the shares differ by at most one. With concat batches, a document cut across the
    checkpoint goes on from its first id not yet a target; with best-fit batches, the window
    each old rank was in is packed again by one new rank (round robin), which hands out only
    the rows not handed out before. After that epoch, every epoch is
    the new world size's own. The new ranks' counters start at 0. States of a resharded
    epoch can be resharded again.

    Args:
        states: The states of all ranks of one run.
        world_size: The new number of ranks.
        even: Even sharding of the new ranks (None: the run's own rule, evened out or
            not; True: the old rule, ``drop`` if there was none; False: not evened out).
            The new ranks' ``Loader`` must say the same (``even=``, ``even_rule=``): a
            state that disagrees is refused with the argument to pass.

    Raises:
        StateError: a state is not a state, ranks are missing or given twice, the states
            are of different runs, epochs or batch sizes; the message names what.
        ValueError: ``world_size`` is not an int >= 1.
    """
    if not int_at_least(world_size, 1):
        raise ValueError(f"world_size must be an int >= 1, not {world_size!r}")
    if not states:
        raise StateError("nothing to reshard: no state given")
    batches = _batches_sizes(states)
    documents = [s["documents"] if batches else s for s in states]
    for state in documents:
        check_shape(state)
    configs = [dict(s.get("config", {})) for s in documents]
    old_world, by_rank = _by_rank(configs)
    first = documents[by_rank[0]]
    _same_run(configs, by_rank)
    epoch = _same_epoch(documents, by_rank)
    ordered = [documents[by_rank[r]] for r in range(old_world)]
    fit = _best_fit(states, by_rank, old_world) if batches else None
    cuts = [_cut(states[by_rank[r]]) if batches and fit is None else 0 for r in range(old_world)]
    sections = [s.get("reshard") for s in ordered]
    if all(section is None for section in sections):
        base: dict[str, Any] = {
            "world_size": old_world,
            "epoch": epoch,
            "even": first["config"].get("even"),
            "ranks": [
                [s["position"]["block"], s["position"]["in_block"], _handed(s, epoch), cut]
                for s, cut in zip(ordered, cuts, strict=True)
            ],
            "levels": [],
            # Whose position must agree exactly with its count (no skip): checked when read.
            "exact": [_skipped(s) == 0 for s in ordered],
        }
        if fit is not None:  # the windows old ranks had begun, each to be packed again
            window, numbers = fit
            base["window"] = window
            base["windows"] = [[r, n, row] for r, (n, row) in enumerate(numbers) if row > 0]
    else:
        base = _next_level(ordered, sections, cuts, old_world, fit)
    if fit is not None:  # the new ranks number their own windows past every old one
        base["next_window"] = 1 + max(n for n, _ in fit[1])
    old_rule = first["config"].get("even")
    rule = old_rule if even is None else (old_rule or "drop") if even else None
    out = []
    for rank in range(world_size):
        config = {**first["config"], "rank": rank, "world_size": world_size, "even": rule}
        section = {**base, "share": [rank, world_size], "rule": rule, "counted": False}
        state = {
            "format": STATE_FORMAT,
            "config": config,
            "position": {"epoch": base["epoch"], "block": 0, "in_block": 0},
            "counters": Counters().to_state(),
            "reshard": section,
        }
        if batches:
            seq_len, batch_size = batches
            state = {
                "format": BATCHES_FORMAT,
                "seq_len": seq_len,
                "batch_size": batch_size,
                "documents": state,
                "offset": 0,
                "batches": 0,
            }
            if fit is not None:
                state.update(
                    packing="bestfit",
                    window=fit[0],
                    window_number=base["next_window"],
                    window_epoch=base["epoch"],
                    row=0,
                )
        out.append(state)
    return out


def _batches_sizes(states: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """``(seq_len, batch_size)`` of batches states (of one packing), or None for document
    states."""
    kinds = set()
    for k, state in enumerate(states):
        if not isinstance(state, Mapping):
            raise StateError(f"state {k} is {type(state).__name__}, not a state")
        kinds.add(state.get("format"))
    if kinds == {STATE_FORMAT}:
        return None
    if kinds != {BATCHES_FORMAT}:
        raise StateError(
            f"cannot reshard states of formats {sorted(map(str, kinds))}: give the states of "
            f"every rank's document iterator ({STATE_FORMAT!r}) or of every rank's batches "
            f"({BATCHES_FORMAT!r})"
        )
    packings = {(s.get("packing", "concat"), s.get("window")) for s in states}
    if len(packings) > 1:
        raise StateError(f"batches states of different (packing, window): {sorted(packings)}")
    sizes = {(s.get("seq_len"), s.get("batch_size")) for s in states}
    if len(sizes) > 1:
        raise StateError(f"batches states of different (seq_len, batch_size): {sorted(sizes)}")
    for k, state in enumerate(states):
        if not isinstance(state.get("documents"), Mapping):
            raise StateError(f"batches state {k} has no documents state")
    seq_len, batch_size = next(iter(sizes))
    assert isinstance(seq_len, int) and isinstance(batch_size, int)
    return seq_len, batch_size


def _best_fit(
    states: Sequence[Mapping[str, Any]], by_rank: Mapping[int, int], world: int
) -> tuple[int, list[tuple[int, int]]] | None:
    """Best-fit batches: the window size, and each old rank's ``(window number, rows of it
    handed out)``; None for concat batches."""
    if states[0].get("packing", "concat") != "bestfit":
        return None
    window = states[0].get("window")
    if not int_at_least(window, 1):
        raise StateError(f"bad batches state: window is {window!r}")
    numbers = []
    for r in range(world):
        state = states[by_rank[r]]
        number, row = state.get("window_number", 0), state.get("row", 0)
        if not (int_at_least(number, 0) and int_at_least(row, 0)):
            raise StateError(
                f"bad batches state of rank {r}: window_number {number!r}, row {row!r}"
            )
        numbers.append((number, row))
    return window, numbers


def _by_rank(configs: Sequence[Mapping[str, Any]]) -> tuple[int, dict[int, int]]:
    """The old world size, and the index of each rank's state; refuse gaps and doubles."""
    worlds = {c.get("world_size") for c in configs}
    if len(worlds) > 1:
        raise StateError(f"states of different runs: world sizes {sorted(map(str, worlds))}")
    world = next(iter(worlds))
    if not int_at_least(world, 1):
        raise StateError(f"bad state: config.world_size is {world!r}")
    by_rank: dict[int, int] = {}
    for k, config in enumerate(configs):
        rank = config.get("rank")
        if not isinstance(rank, int) or not 0 <= rank < world:
            raise StateError(f"bad state {k}: rank {rank!r} of world_size {world}")
        if rank in by_rank:
            raise StateError(
                f"two states of rank {rank} (states {by_rank[rank]} and {k}): give each "
                "rank's state once"
            )
        by_rank[rank] = k
    missing = sorted(set(range(world)) - set(by_rank))
    if missing:
        raise StateError(
            f"ranks missing: {missing} of world_size {world} (got {len(by_rank)} states): "
            "resharding needs the state of every rank"
        )
    return world, by_rank


def _same_run(configs: Sequence[Mapping[str, Any]], by_rank: Mapping[int, int]) -> None:
    reference = configs[by_rank[0]]
    for rank, k in sorted(by_rank.items()):
        differ = [
            f"{key}: rank 0 {reference.get(key)!r}, rank {rank} {configs[k].get(key)!r}"
            for key in sorted(set(reference) | set(configs[k]))
            if key != "rank" and reference.get(key) != configs[k].get(key)
        ]
        if differ:
            raise StateError("states of different runs: " + "; ".join(differ))


def _same_epoch(documents: Sequence[Mapping[str, Any]], by_rank: Mapping[int, int]) -> int:
    """The epoch the states are in; a state at the very start of the next one (a finished
    iterator's) counts as having handed out all of it."""
    epochs: dict[int, int] = {r: documents[k]["position"]["epoch"] for r, k in by_rank.items()}
    epochs = dict(sorted(epochs.items()))
    epoch = min(epochs.values())
    late = {r for r, e in epochs.items() if e == epoch + 1 and _at_start(documents[by_rank[r]])}
    if any(e != epoch for r, e in epochs.items() if r not in late):
        raise StateError(
            f"states of different epochs (rank: epoch {epochs}): reshard states taken in one epoch"
        )
    return epoch


def _at_start(state: Mapping[str, Any]) -> bool:
    position = state["position"]
    return bool(position["block"] == position["in_block"] == _handed(state) == 0)


#: The documents handed out of a rank that finished the epoch (``stream.rest``: none left).
FINISHED = -1


def _handed(state: Mapping[str, Any], epoch: int | None = None) -> int:
    """The state's documents of the epoch (``FINISHED``: it is past ``epoch``)."""
    if epoch is not None and state["position"]["epoch"] > epoch:
        return FINISHED
    handed = state.get("counters", {}).get("epoch_documents", 0)
    assert isinstance(handed, int)
    return handed


def _skipped(state: Mapping[str, Any]) -> int:
    """What a state's counters say was skipped (documents, members, members cut short)."""
    counters = state.get("counters", {})
    keys = ("skipped_members", "skipped_documents", "partial_members")
    return sum(int(counters.get(key, 0)) for key in keys)


def _cut(state: Mapping[str, Any]) -> int:
    """Ids of a batches state's next document already targets (0: none)."""
    offset, done = state.get("offset"), state.get("batches", 0)
    if not isinstance(offset, int) or offset < 0 or not isinstance(done, int):
        raise StateError(f"bad batches state: offset {offset!r}, batches {done!r}")
    return offset + 1 if done > 0 else 0


def _next_level(
    ordered: Sequence[Mapping[str, Any]],
    sections: Sequence[Any],
    cuts: Sequence[int],
    world: int,
    fit: tuple[int, list[tuple[int, int]]] | None,
) -> dict[str, Any]:
    """The section of states that are shares of a resharded epoch, one level deeper."""
    if any(section is None for section in sections):
        raise StateError(
            "some states are in a resharded epoch and some are not: reshard states taken in "
            "one epoch"
        )
    bases = [{key: s.get(key) for key in BASE} for s in sections]
    if any(b != bases[0] for b in bases):
        raise StateError("states of different reshards (their old ranks differ)")
    for rank, section in enumerate(sections):
        if section.get("share") != [rank, world]:
            raise StateError(f"rank {rank}'s state is share {section.get('share')!r}")
    level = {
        "world_size": world,
        "rule": sections[0].get("rule"),
        "done": [_handed(s) for s in ordered],
        "cuts": list(cuts),
    }
    packed_best = bases[0].get("windows") is not None
    if packed_best != (fit is not None):
        raise StateError(
            "batches states of different packings: the resharded epoch was packed "
            f"{'by best fit' if packed_best else 'end to end'}"
        )
    if fit is not None:
        if fit[0] != bases[0].get("window"):
            raise StateError(
                f"best-fit windows of {fit[0]} documents, resharded with {bases[0].get('window')}"
            )
        level["windows"] = [list(numbers) for numbers in fit[1]]
    base = {key: value for key, value in sections[0].items() if key in BASE}
    base["levels"] = [*base["levels"], level]
    return base
