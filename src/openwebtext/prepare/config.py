"""What a prepare run writes: ``PrepareOptions``, the run's config (what its files depend
on), the order units are tokenized in, and the ``Progress`` and ``Report`` a run gives back.

Two runs with the same config (``run_config``) write the same bytes; a folder holding the
progress or the files of another config is never taken for this one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

from openwebtext.index import Corpus
from openwebtext.options import (
    NANOGPT_SPLIT,
    ErrorPolicy,
    check_max_errors,
    check_on_error,
    check_seed,
    check_shuffle,
    check_take,
    check_tokenizer,
    check_val_fraction,
    check_val_seed,
    check_workers,
    hold_numbers,
)
from openwebtext.plan import plan
from openwebtext.prepare.state import CORPUS_ORDER, LENGTH, FileName, RunConfig, Slice, SplitRule
from openwebtext.source import decoded, file_name
from openwebtext.tokenizer import Tokenizer

__all__ = [
    "BINS",
    "CORPUS_ORDER",
    "LENGTH",
    "PrepareOptions",
    "Progress",
    "Report",
    "corpus_identity",
    "difference",
    "run_config",
    "unit_order",
]

#: The files of a finished run (and of a ``hash`` slice).
BINS: tuple[FileName, ...] = ("train.bin", "val.bin")


@dataclass(frozen=True)
class PrepareOptions:
    """What a prepare run writes. Every field but ``workers`` shapes the files.

    Attributes:
        split_rule: ``hash`` (keyed hash of the name) or ``nanogpt`` (byte-identical to
            nanoGPT); ``owt tokenize --split``. (``Options.split`` is another thing: which
            documents a stream reads, all, train or val.)
        tokenizer: A tokenizer spec (``openwebtext.tokenizer``).
        workers: Worker processes (0: in this process).
        seed: ``hash``: the unit order's seed.
        shuffle: ``hash``: shuffle the units (else corpus order).
        val_fraction: ``hash``: the held-out share; ``nanogpt``: ``test_size``.
        val_seed: ``hash``: the hash's key; ``nanogpt``: the permutation's seed.
        take: Stop after this many documents (in the order documents are tokenized).
        on_error: ``raise``, or ``skip`` / ``warn`` bad members and documents (counted).
        max_errors: With skip or warn, fail past this many skips (None: no bound).
    """

    split_rule: SplitRule = "hash"
    tokenizer: str = "gpt2"
    workers: int = 2
    seed: int = 0
    shuffle: bool = True
    val_fraction: float = NANOGPT_SPLIT.fraction
    val_seed: int = NANOGPT_SPLIT.seed
    take: int | None = None
    on_error: ErrorPolicy = "raise"
    max_errors: int | None = None

    def __post_init__(self) -> None:
        if self.split_rule not in get_args(SplitRule):
            raise ValueError(f"split_rule must be 'hash' or 'nanogpt', not {self.split_rule!r}")
        hold_numbers(self)  # (numpy's too, held as Python numbers: a record's)
        check_workers(self.workers)
        check_seed(self.seed)
        check_shuffle(self.shuffle)
        check_tokenizer(self.tokenizer)
        check_val_fraction(self.val_fraction)
        check_val_seed(self.val_seed)
        check_take(self.take)
        check_on_error(self.on_error)
        check_max_errors(self.max_errors)


class Progress(NamedTuple):
    """A progress event: ``phase`` ``tokenize`` (``done``/``total`` in compressed bytes of
    units), ``permute`` or ``copy`` (in bytes written; ``done`` counts what an earlier run
    did too); ``tokens`` written in this phase by this run only (a rate is this run's
    tokens over this run's seconds, even when it goes on from an earlier run's progress)."""

    phase: Literal["tokenize", "permute", "copy", "format"]
    done: int
    total: int
    tokens: int


@dataclass(frozen=True)
class Report:
    """What a run wrote.

    Attributes:
        out: The output folder, or its URL.
        meta: The ``meta.json`` written (options, counts, files with their sha256).
        resumed: The run went on from another run's progress.
        already: The folder already held these files; nothing was done.
        skipped: Messages of the members and documents skipped by this process.
        tokenized: Tokens this run tokenized (not those of an earlier run it went on from):
            a rate is ``tokenized`` over this run's seconds.
        format: The format whose files were then written beside (``write_format``; ``owt
            tokenize --format``), or None.
    """

    out: Path | str
    meta: dict[str, Any]
    resumed: bool = False
    already: bool = False
    skipped: tuple[str, ...] = ()
    tokenized: int = 0
    format: str | None = None


def unit_order(corpus: Corpus, options: PrepareOptions) -> list[int]:
    """The units in the order their documents are tokenized.

    ``nanogpt``: files sorted by name (then path), members in archive order, as the loading
    script reads ``urlsf_subset00.tar`` … ``urlsf_subset20.tar``. ``hash``: ``plan.plan``.
    """
    units = corpus.units
    if options.split_rule == "nanogpt":
        return sorted(
            range(len(units)),
            key=lambda u: (file_name(units[u].path), decoded(units[u].path), units[u].member_index),
        )
    return plan(len(units), shuffle=options.shuffle, seed=options.seed)


def corpus_identity(corpus: Corpus, options: PrepareOptions) -> str:
    """What a run's files are of: its corpus's members' content, not only their sizes
    (``Corpus.content_fingerprint``), in the order that decides the files: ``hash``'s, the
    corpus's (its plan permutes it by the seed, which the config holds too); ``nanogpt``'s,
    its files sorted (``unit_order``: two files of one name in other folders are read in
    the order of their paths, so the same files in other folders may make other files)."""
    order = None if options.split_rule == "hash" else unit_order(corpus, options)
    return corpus.content_fingerprint(order)


def run_config(
    corpus: Corpus, options: PrepareOptions, tokenizer: Tokenizer, piece: Slice | None = None
) -> RunConfig:
    """What the files depend on: two runs with the same config write the same bytes.
    ``piece``: the slice of ``unit_order`` a slice run does (None: a whole run)."""
    hashed = options.split_rule == "hash"
    return RunConfig(
        split_rule=options.split_rule,
        corpus=corpus_identity(corpus, options),
        units=len(corpus.units),
        tokenizer=tokenizer.spec,
        fingerprint=tokenizer.fingerprint,
        dtype=tokenizer.dtype.name,
        eot=tokenizer.eot,
        n_vocab=tokenizer.n_vocab,
        val_fraction=options.val_fraction,
        val_seed=options.val_seed,
        take=options.take,
        on_error=options.on_error,
        # (corpus order: the files do not depend on a seed, so neither does the config)
        seed=(options.seed if options.shuffle else 0) if hashed else None,
        shuffle=options.shuffle if hashed else None,
        slice=piece,
    )


def difference(saved: RunConfig, wanted: RunConfig, other: str = "now") -> str:
    """Say how two configs differ, in words (``other`` names where ``wanted`` comes from)."""
    if (saved.corpus, saved.units) != (wanted.corpus, wanted.units):
        return (
            f"a different corpus (fingerprint {saved.corpus}, {saved.units} "
            f"members; {other}: {wanted.corpus}, {wanted.units} members)"
        )
    keys = [k for k in saved.__struct_fields__ if getattr(saved, k) != getattr(wanted, k)]
    what = ", ".join(f"{k} {getattr(saved, k)!r} ({other}: {getattr(wanted, k)!r})" for k in keys)
    return f"different options: {what}"
