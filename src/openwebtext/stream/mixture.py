"""Weighted mixtures of corpora: the description (``Mixture``), checked as it is made, and
``reshard`` for their states (and, passed on, for a single corpus's).

The running stream is ``mixed.MixedStream``; the state's records are in ``schema``.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace as replace_options
from typing import Any, cast, overload

from msgspec import UNSET, UnsetType

from openwebtext.codec import differing, replace
from openwebtext.errors import CorpusError, OWTError, StateError, in_part
from openwebtext.index import Corpus, file_key
from openwebtext.mixing import check_weights
from openwebtext.options import MOST_INT, Options, as_int, countable
from openwebtext.stream.counts import ensure_counts
from openwebtext.stream.given import check_is_state, decode_each, new_schedule, parse_batches
from openwebtext.stream.resharding import KEEP, Even, new_ranks, reshard_states
from openwebtext.stream.schema import (
    BatchesState,
    By,
    Change,
    DocumentState,
    MixtureConfig,
    MixtureState,
    Replay,
    Sampling,
    kind_of,
)

__all__ = ["PART_OPTIONS", "Mixture", "part_counted", "reshard"]

#: The options a part may set for itself (``Mixture(options={name: {...}})``); the rest are
#: the loader's, for every part.
PART_OPTIONS = frozenset({"split", "val_fraction", "val_seed", "seed", "shuffle", "shuffle_buffer"})


class Mixture:
    """Corpora mixed by weights: accepted wherever a corpus is (``Loader``, the PyTorch
    datasets, ``owt stream --mix``).

    Args:
        parts: Names (the user's) and corpora: a ``Corpus`` (``Corpus.open_tokens`` for token
            files), or paths, folders, globs or URLs of text corpora to open (tars, parquet,
            JSON lines), their bad files left to the loader's ``on_error``.
        weights: Each part's weight (>= 0, at least one positive; normalised). None: equal.
        by: Proportions of ``documents``, or of ``tokens`` (needs the loader's tokenizer).
        sampling: ``stratified`` (the default: a deterministic low-discrepancy order, within
            one document of the weights after any number of documents), or ``random`` (a
            seeded draw per position).
        schedule: ``(documents handed out by the rank, weights)`` steps: the weights in force
            from each position on (the first may be 0, replacing ``weights``).
        options: Per part, the options it reads with besides the loader's (``PART_OPTIONS``:
            ``split``, ``val_fraction``, ``val_seed``, ``seed``, ``shuffle``, ``shuffle_buffer``).
        text_column: For parquet and JSON-lines parts opened here: the field of the text.

    Raises:
        ValueError: no parts, a bad weight or schedule, an unknown part name, an option a part
            cannot set, or a file in two parts.
    """

    def __init__(
        self,
        parts: Mapping[str, Any],
        weights: Mapping[str, float] | None = None,
        *,
        by: By = "documents",
        sampling: Sampling = "stratified",
        schedule: Iterable[tuple[int, Mapping[str, float]]] = (),
        options: Mapping[str, Mapping[str, Any]] | None = None,
        text_column: str | None = None,
    ) -> None:
        if not isinstance(parts, Mapping):
            raise ValueError(f"parts: a mapping of names to corpora, not {type(parts).__name__}")
        if not parts:
            raise ValueError("a mixture needs at least one part")
        for name in parts:  # (``.`` parts the dotted path of a state's field, = and : --mix)
            if not (isinstance(name, str) and name.isprintable() and name.strip() == name != ""
                    and not set(name) & set("=:.")):  # fmt: skip
                raise ValueError(f"a part's name must be a non-empty str of printable characters "
                                 f"without = : . or spaces at its ends, not {name!r}")  # fmt: skip
        if by not in ("documents", "tokens"):
            raise ValueError(f"by must be 'documents' or 'tokens', not {by!r}")
        if sampling not in ("stratified", "random"):
            raise ValueError(f"sampling must be 'stratified' or 'random', not {sampling!r}")
        if sampling == "random" and by == "tokens":
            raise ValueError(
                "sampling='random' draws a part per document: by='tokens' needs the default "
                "sampling='stratified'"
            )
        self.names: tuple[str, ...] = tuple(parts)
        self._config: MixtureConfig | None = None
        self.by: By = by
        self.sampling: Sampling = sampling
        equal = dict.fromkeys(self.names, 1.0)  # (None: equal; {} names no part, refused)
        self.weights = self.weights_of(equal if weights is None else weights, "weights")
        if isinstance(schedule, Mapping | str) or not isinstance(schedule, Iterable):
            raise ValueError(
                f"a schedule is a list of (position, weights) pairs, not {type(schedule).__name__}"
            )
        pairs = list(schedule)
        for step in pairs:
            if not isinstance(step, tuple | list) or len(step) != 2:
                raise ValueError(f"a schedule's step is a (position, weights) pair, not {step!r}")
        pairs = [(as_int(at), weights) for at, weights in pairs]
        for step in pairs:
            if not countable(step[0], 0):
                raise ValueError(
                    f"a schedule's positions must be ints from 0 to {MOST_INT} (documents "
                    f"handed out), not {step[0]!r}"
                )
        steps = [(at, self.weights_of(w, f"schedule at {at}")) for at, w in pairs]
        positions = [at for at, _ in steps]
        if any(b <= a for a, b in itertools.pairwise(positions)):
            raise ValueError(f"a schedule's positions must increase (one step each), not "
                             f"{positions}")  # fmt: skip
        self.schedule = tuple(Change(at, w) for at, w in steps)
        self.options: dict[str, dict[str, Any]] = {}
        if not isinstance(options or {}, Mapping):
            raise ValueError(f"options: a mapping of part names to options, not {options!r}")
        for name, given in (options or {}).items():
            if name not in self.names:
                raise ValueError(f"options for {name!r}, which is not a part ({self.names})")
            if not isinstance(given, Mapping):
                raise ValueError(f"options for {name!r}: a mapping of options, not {given!r}")
            wrong = sorted(set(given) - PART_OPTIONS)
            if wrong:
                raise ValueError(
                    f"a part sets only {sorted(PART_OPTIONS)} of its own, not {wrong}: the "
                    "others are the loader's, for every part"
                )
            try:  # (checked here, not where the part first runs)
                Options(**given)
            except ValueError as exc:
                raise ValueError(f"options for {name!r}: {exc}") from None
            self.options[name] = dict(given)
        opened = {}
        for name, corpus in parts.items():
            if not isinstance(corpus, Corpus):
                _check_part(name, corpus)
                given = {} if text_column is None else {"text_column": text_column}
                # Bad files skipped and recorded: the loader's on_error decides (it raises the
                # first under "raise", as for a corpus it is given; under skip they count).
                try:
                    corpus = Corpus.open(corpus, on_error="skip", **given)
                except CorpusError:  # nothing left: the first bad file's own error
                    try:
                        corpus = Corpus.open(corpus, **given)
                    except CorpusError as exc:
                        in_part(exc, name)
                        raise
            opened[name] = corpus
        self.corpora: dict[str, Corpus] = opened
        _refuse_shared_files(opened)
        empty = [name for name, corpus in opened.items() if not corpus.units]
        if empty:
            raise ValueError(f"the mixture's parts {empty} have no corpus files")

    def weights_of(self, weights: Mapping[str, float], what: str) -> tuple[float, ...]:
        """``weights`` by part name as one normalised value per part (a part left out: 0).

        Raises:
            ValueError: a name that is not a part's, or weights ``check_weights`` refuses
                (``what`` says whose).
        """
        if not isinstance(weights, Mapping):
            raise ValueError(
                f"{what}: a mapping of part names to weights, not {type(weights).__name__}"
            )
        unknown = sorted((name for name in weights if name not in self.names), key=repr)
        if unknown:
            raise ValueError(f"{what}: {unknown} are not parts of the mixture {list(self.names)}")
        values = [weights.get(name, 0.0) for name in self.names]
        try:
            return check_weights(values, len(values), self.names)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None

    def part_options(self, name: str, options: Options) -> Options:
        """The options part ``name`` reads with under the loader's ``options``: endless (the
        mixture decides when the run ends), its own settings over the loader's."""
        return replace_options(options, epochs=None, take=None, **self.options.get(name, {}))

    def with_counts(self, options: Options, *, always: bool = False) -> Mixture:
        """This mixture with its parts counted as ``options`` need (``ensure_counts`` of each
        part, with its own options): a DataLoader's workers then inherit the counts."""
        counted = copy.copy(self)
        counted.corpora = {
            name: part_counted(name, corpus, self.part_options(name, options), always=always)
            for name, corpus in self.corpora.items()
        }
        return counted


    def config(self) -> MixtureConfig:
        """What a state of the mixture must agree with; made once (it is checked as it is
        made, schedule and all: a mark takes it)."""
        if self._config is None:
            self._config = MixtureConfig(self.names, self.weights, self.by, self.sampling,
                                         self.schedule)  # fmt: skip
        return self._config

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{n}: {len(self.corpora[n].units)} units @ {w:.3g}"
            for n, w in zip(self.names, self.weights, strict=True)
        )
        return f"Mixture({{{parts}}}, by={self.by!r}, sampling={self.sampling!r})"


def _check_part(name: str, where: Any) -> None:
    """A part given to open: a path, a URL, or a list of them.

    Raises:
        ValueError: anything else, naming the part.
    """
    each = [where] if isinstance(where, str | os.PathLike) else where
    if isinstance(where, Mapping | Mixture | bytes) or not isinstance(each, Sequence) or not each:
        raise ValueError(
            f"part {name!r}: a Corpus, a path, a URL or a list of them, not {type(where).__name__}"
        )
    for item in each:
        if not isinstance(item, str | os.PathLike):
            raise ValueError(f"part {name!r}: a path or URL, not {type(item).__name__}")


def _refuse_shared_files(corpora: Mapping[str, Corpus]) -> None:
    """A file (``index.file_key``: a local one by its device and inode, a path's or a
    ``file://`` URL's; a URL by itself) in two parts is refused."""
    owner: dict[object, str] = {}
    for name, corpus in corpora.items():
        for path in dict.fromkeys(u.path for u in corpus.units):
            key = file_key(path)
            if owner.setdefault(key, name) != name:
                raise ValueError(
                    f"{path} is in two parts of the mixture ({owner[key]!r} and {name!r}): "
                    "a file belongs to one part"
                )


@overload
def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = ..., rank: None = ...
) -> list[dict[str, Any]]: ...
@overload
def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = ..., rank: int
) -> dict[str, Any]: ...
def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = KEEP,
    rank: int | None = None,
) -> list[dict[str, Any]] | dict[str, Any]:  # fmt: skip
    """``resharding.reshard`` (``rank``: that new rank's state only, not a list) for states
    of single corpora, and for mixtures (the states of
    their documents, or of their batches): each part's states resharded as a corpus's, each
    new rank with the weights in force on old rank 0 (and its schedule position); the
    proportions count again from the reshard. A document a concat batch had begun goes on
    in its part (first on the new rank whose share of the part begins with it, from the last
    id that was a target: ``Stream.lead_cut``); a best-fit window an old rank had begun
    is replayed by one new rank (``_reshard_best_fit``)."""
    if isinstance(states, str | bytes | Mapping) or not isinstance(states, Iterable):
        raise TypeError(f"states must be a list of every rank's state_dict(), not {states!r}")
    states, world_size = list(states), as_int(world_size)  # (a generator: read once)
    ranks = new_ranks(world_size, rank)  # (first, as ``resharding.reshard`` checks them)
    made = _reshard(states, world_size, even, ranks)
    return made if rank is None else made[0]


def _reshard(
    states: list[Mapping[str, Any]], world_size: int, even: Even, ranks: Sequence[int]
) -> list[dict[str, Any]]:
    """``reshard``: the states of ``ranks`` (of ``world_size``) in a list."""
    for k, given in enumerate(states):  # each a state first, whatever the others are
        check_is_state(k, given)
    mixtures = [_is_mixture(s) for s in states]
    if not states or not any(mixtures):
        return reshard_states(states, world_size, even=even, ranks=ranks)
    if any(_of_corpus(s) for s in states):  # (documents of no state: decoded, said below)
        raise StateError("states of a mixture and of a single corpus cannot be resharded together")
    if len({_batches(s) for s in states}) > 1:
        raise StateError("states of a mixture's documents and of its batches given together")
    batches = parse_batches(states) if _batches(states[0]) else None
    parsed = (
        decode_each(states, MixtureState)
        if batches is None
        else [cast(MixtureState, b.documents) for b in batches]  # (each read once)
    )
    first = min(parsed, key=lambda s: next(iter(s.parts.values())).config.rank)
    for s in parsed:
        if s.config != first.config:
            differ = "; ".join(f"{key}: {getattr(first.config, key)!r} and "
                               f"{getattr(s.config, key)!r}"
                               for key in differing(first.config, s.config))  # fmt: skip
            raise StateError(f"the states are of different mixtures: {differ}")
    names = first.config.parts
    if batches is not None and batches[0].packing == "bestfit":
        return _reshard_best_fit(batches, parsed, world_size, even, ranks)

    def part_states(index: int, name: str) -> list[dict[str, Any]]:
        if batches is None:
            return [s.parts[name].to_json() for s in parsed]
        out = []
        for b, m in zip(batches, parsed, strict=True):
            if b.offset and m.next is None:
                raise StateError("a concat batches state of a mixture begun inside a document "
                                 "must name its part (documents.next)")  # fmt: skip
            mine = m.next == index  # (its cut: where its document lies in the part)
            part = BatchesState(b.seq_len, b.batch_size, m.parts[name],
                                b.offset if mine else 0, b.batches if mine else 0,
                                cut_slots=b.cut_slots if mine else UNSET,
                                cut_next=b.cut_next if mine else UNSET)  # fmt: skip
            out.append(part.to_json())
        return out

    new_parts = {}
    for i, name in enumerate(names):
        try:
            new_parts[name] = reshard_states(part_states(i, name), world_size, even=even,
                                             part=True, ranks=ranks)  # fmt: skip
        except StateError as exc:  # (its field: the part's, inside the mixture's state)
            at = f"parts.{name}" if batches is None else f"documents.parts.{name}"
            raise exc.within(at, f"the mixture's part {name!r}: ") from None
    out = []
    for k in range(len(ranks)):
        each = {
            name: DocumentState.from_json(
                new_parts[name][k]["documents"] if batches else new_parts[name][k]
            )
            for name in names
        }
        state = MixtureState(first.config, each, first.handed, first.weights,
                             (0,) * len(names), first.changes)  # fmt: skip
        if batches is None:
            out.append(state.to_json())
            continue
        like = batches[0]
        fresh = BatchesState(like.seq_len, like.batch_size, state, schedule=new_schedule(batches))
        out.append(fresh.to_json())
    return out


def _reshard_best_fit(
    batches: Sequence[BatchesState], parsed: Sequence[MixtureState], world: int, even: Even,
    new: Sequence[int],
) -> list[dict[str, Any]]:  # fmt: skip
    """Best-fit batches of a mixture, resharded: each part's states as a corpus's best-fit
    batches, the window an old rank had begun holding its documents of that part
    (``window_parts``; in the slots ``window_slots`` says, where skips lie among them); the
    new rank each window is dealt to (round robin, as every part deals it) replays the old
    rank's turns from the window's start (``Replay``), so that it packs the same documents in
    the same order into the same rows and hands out those not handed out. Its own turns start
    after them, where old rank 0's would after the window of its own it had begun
    (``_after_window``: its position and the weights in force there)."""
    ranks = [next(iter(m.parts.values())).config.rank for m in parsed]
    order = sorted(range(len(batches)), key=ranks.__getitem__)
    batches, parsed = [batches[k] for k in order], [parsed[k] for k in order]
    names = parsed[0].config.parts
    replays: list[Replay] = []
    for rank, (b, m) in enumerate(zip(batches, parsed, strict=True)):
        pending = list(m.replays or ())  # windows dealt to it not finished (a reshard's)
        if pending and b.row:  # the first under way: its rows handed out go on from here
            packings = pending[0].packings if b.scheduled is None else b.scheduled.packings
            pending[0] = replace(pending[0], rows=b.row, packings=packings)
        replays += pending
        if pending or not b.row:
            continue
        assert b.window_parts  # (a mixture's window with rows out counts them: ``check``)
        packings = () if b.scheduled is None else b.scheduled.packings
        replays.append(Replay(rank, m.handed, m.weights, m.served, b.window_parts,
                              sum(b.window_parts), b.window_number, b.row,
                              m.changes, packings))  # fmt: skip
    new_parts = {}
    unfinished = [len(m.replays or ()) for m in parsed]
    for i, name in enumerate(names):
        states = [
            replace(b, documents=m.parts[name], packed_parts=UNSET,
                    window_parts=(b.window_parts[i],) if b.window_parts else UNSET,
                    window_slots=_part_slots(b, i),
                    window_next=(b.window_next[i],) if b.window_next and b.window_next[i].ends
                    else UNSET).to_json()
            for b, m in zip(batches, parsed, strict=True)
        ]  # fmt: skip
        try:
            new_parts[name] = reshard_states(states, world, even=even, replays=unfinished,
                                             part=True, ranks=new)  # fmt: skip
        except StateError as exc:  # (as concat's: its field, the part's in the batches state)
            raise exc.within(f"documents.parts.{name}", f"the mixture's part {name!r}: ") from None
    first = parsed[0]
    handed, weights, changes = _after_window(batches[0], first)
    out = []
    for k, rank in enumerate(new):
        each = {name: _left_out(DocumentState.from_json(new_parts[name][k]["documents"]),
                                [m.parts[name] for m in parsed]) for name in names}  # fmt: skip
        dealt = tuple(replays[rank::world])
        state = MixtureState(first.config, each, handed, weights, (0,) * len(names), changes,
                             replays=dealt or UNSET)  # fmt: skip
        like = BatchesState.from_json(new_parts[names[0]][k])  # (its window number: past all)
        out.append(replace(like, documents=state, window_epoch=batches[0].window_epoch).to_json())
    return out


def _part_slots(batches: BatchesState, part: int) -> tuple[int] | UnsetType:
    """A part's ``window_slots`` in its state resharded: the slots its documents in the window
    lie in, where some of it were skipped among them (what its share deals; absent: none)."""
    slots, counts = batches.window_slots, batches.window_parts
    if not slots or not counts or slots[part] == counts[part]:
        return UNSET
    return (slots[part],)


def _after_window(
    batches: BatchesState, mixture: MixtureState
) -> tuple[int, tuple[float, ...], tuple[Change, ...]]:
    """Where old rank 0 is after the best-fit window of its own it had begun (its state is at
    the window's start; the window's documents were its turns, handed out by the new rank it
    is dealt to): the documents it has handed out, the weights in force before the next one
    (the schedule's steps and the changes due inside the window applied; one due there is
    applied by the new ranks) and the changes not applied. The new ranks' own turns start
    there, as the old rank's would (a window dealt to it is an older rank's turns, not its)."""
    handed, weights, changes = mixture.handed, mixture.weights, mixture.changes
    if mixture.replays or not batches.row:
        return handed, weights, changes
    end = handed + sum(batches.window_parts or ())
    steps = [(c.at, 0, c.weights) for c in mixture.config.schedule if handed <= c.at < end]
    due = [(max(c.at, handed), 1, c.weights) for c in changes if c.at < end]
    events = sorted(steps + due, key=lambda e: e[:2])  # (at one position: step, then changes)
    if events:
        weights = events[-1][2]
    return end, weights, tuple(c for c in changes if c.at >= end)


def _left_out(state: DocumentState, old: Sequence[DocumentState]) -> DocumentState:
    """A part's new ``state`` whose epoch was, on the old ranks, a rest that only leaves out
    the documents of windows a crossing carried into it (``Reshard.dealt``: they were handed
    out in an earlier epoch's rest), resharded again: still so (a level's shares never held
    them), though a section resharded leaves its old ranks' say (``Reshard.base``)."""
    section = state.reshard
    if section is None or not any(
        d.reshard is not None and d.reshard.dealt and d.position.epoch == section.epoch
        for d in old
    ):
        return state
    return replace(state, reshard=replace(section, dealt=True))



def _batches(state: Mapping[str, Any]) -> bool:
    return kind_of(state) is BatchesState


def _of_corpus(state: Mapping[str, Any]) -> bool:
    """A single corpus's state, or the state of its batches."""
    inner = state.get("documents") if _batches(state) else state
    return kind_of(inner) is DocumentState


def _is_mixture(state: Any) -> bool:
    """A mixture's state, or the state of a mixture's batches (not checked here)."""
    if not isinstance(state, Mapping):
        return False
    inner = state.get("documents") if _batches(state) else state
    return kind_of(inner) is MixtureState


def part_counted(name: str, corpus: Corpus, options: Options, *, always: bool = False) -> Corpus:
    """``ensure_counts`` of the mixture's part ``name``: an error of its count says the part,
    as its stream's do."""
    try:
        return ensure_counts(corpus, options, always=always)
    except OWTError as exc:
        raise in_part(exc, name)  # noqa: B904 (the error itself, tagged: its cause kept)
