"""Weighted mixtures of corpora: the description (``Mixture``), checked as it is made
(``mixreshard.reshard`` reshards their states).

The running stream is ``mixed.MixedStream``; the state's records are in ``schema``.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace as replace_options
from typing import Any

from openwebtext.errors import CorpusError, OWTError, in_part
from openwebtext.index import Corpus, file_key
from openwebtext.mixing import check_weights
from openwebtext.options import MOST_INT, Options, as_int, countable
from openwebtext.stream.counts import ensure_counts
from openwebtext.stream.schema import (
    By,
    Change,
    MixtureConfig,
    Sampling,
)

__all__ = ["PART_OPTIONS", "Mixture", "part_counted"]

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
        names = set(self.names)  # (a schedule's steps each ask: never parts x parts)
        unknown = sorted((name for name in weights if name not in names), key=repr)
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


def part_counted(name: str, corpus: Corpus, options: Options, *, always: bool = False) -> Corpus:
    """``ensure_counts`` of the mixture's part ``name``: an error of its count says the part,
    as its stream's do."""
    try:
        return ensure_counts(corpus, options, always=always)
    except OWTError as exc:
        raise in_part(exc, name)  # noqa: B904 (the error itself, tagged: its cause kept)
