"""The JSON a prepare or merge run writes and reads back (format ``openwebtext-prepare/2``),
as records of the one codec (``openwebtext.codec``): the run's config (``RunConfig``, with its
``Slice`` and, for a merge, the slices it reads as ``Piece`` records), its counts (``Counts``:
the skips, and documents and tokens as ``Splits``), a finished run's ``meta.json`` (``Meta``:
``format``, ``config``, ``counts``, ``files``) and the progress record (``ProgressRecord``).
Files are keyed by their names (``PerFile``), counts by their splits (``Splits``): typed dicts
whose keys the codec checks.

Every field is checked by its annotation; each record's ``check`` says only what its fields
must say of each other. ``read`` is the boundary: the first wrong field is one ``StateError``
naming its dotted path (``files.train.bin.bytes``); the caller names the file.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias, TypeVar

import msgspec
import numpy as np

from openwebtext import codec
from openwebtext.codec import Count, Disagree, Fingerprint, Fraction, Positive, Record
from openwebtext.errors import StateError
from openwebtext.options import ErrorPolicy
from openwebtext.plan import shard_range
from openwebtext.policy import COUNTERS
from openwebtext.tokenfiles import PREPARE_FORMAT, Vocabulary

__all__ = [
    "CORPUS_ORDER",
    "FORMAT",
    "LENGTH",
    "Counts",
    "FileInfo",
    "FileName",
    "FormatPass",
    "Marker",
    "Meta",
    "PerFile",
    "Phase",
    "Piece",
    "ProgressRecord",
    "RunConfig",
    "Shard",
    "Slice",
    "Sources",
    "Split",
    "SplitRule",
    "Splits",
]

FORMAT = PREPARE_FORMAT
SplitRule = Literal["hash", "nanogpt"]
#: Where a run is: pass 1, pass 2 (``nanogpt`` only), or the commit step.
Phase = Literal["tokenize", "permute", "commit"]
#: The dtype of ``lengths.bin``: each document's token count.
LENGTH = np.dtype("<i8")
#: The file of each split's token ids.
_TOKENS = {"train": "train.bin", "val": "val.bin", "all": "tokens.bin"}
Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
#: A split a run counts: ``train`` and ``val``, or ``all`` (a ``nanogpt`` slice).
Split = Literal["train", "val", "all"]
#: A file a run writes.
FileName = Literal["train.bin", "val.bin", "tokens.bin", "lengths.bin"]
#: A nanogpt slice's files, or pass 1 of a whole nanogpt run: the documents in corpus order.
CORPUS_ORDER: tuple[FileName, ...] = ("tokens.bin", "lengths.bin")
T = TypeVar("T")
#: A value per file a run writes, keyed by the file's name (a name it does not write: left out).
PerFile: TypeAlias = dict[FileName, T]
#: A count per split.
Splits: TypeAlias = dict[Split, Count]


class FileInfo(Record, frozen=True):
    """A finished file's size and sha256 (hex)."""

    bytes: Count
    sha256: Sha256


class Sources(Record, frozen=True, omit_defaults=True):
    """What a format's files are made of (``convert``): the run's files by sha256 (each under
    its name: ``train.bin``), and llm.c's shard size."""

    train: Sha256 | None = msgspec.field(default=None, name="train.bin")
    val: Sha256 | None = msgspec.field(default=None, name="val.bin")
    tokens: Sha256 | None = msgspec.field(default=None, name="tokens.bin")
    lengths: Sha256 | None = msgspec.field(default=None, name="lengths.bin")
    shard_tokens: Positive | None = None


class FormatPass(Record, frozen=True):
    """``.FORMAT.progress.json``: the files a format pass (``convert``) wrote whole so far,
    and what they are made of."""

    what = "format progress record"
    source: Sources
    files: dict[str, FileInfo]


class Marker(FormatPass, frozen=True, kw_only=True):
    """``FORMAT.json``, written last: the format's files, every one written."""

    what = "format marker"
    format: Literal["megatron", "llmc", "datatrove"]


class Piece(Record, frozen=True):
    """A slice a merge reads: its folder (as shown) and its files."""

    folder: str
    files: PerFile[FileInfo]


class Shard(Record, frozen=True):
    """``--shard index/count``."""

    index: Count
    count: Positive

    def check(self) -> None:
        if self.index >= self.count:
            raise Disagree("index", f"is {self.index}, not below count {self.count}")


class Slice(Record, frozen=True, omit_defaults=True):
    """Positions ``[start, stop)`` of the unit order, and the ``--shard`` it is (if one)."""

    start: Count
    stop: Count
    shard: Shard | None = None

    def check(self) -> None:
        if self.stop < self.start:
            raise Disagree("stop", f"is {self.stop}, before start {self.start}")


class RunConfig(Vocabulary, frozen=True, omit_defaults=True):
    """What a run's files depend on (``config.run_config``): two runs of the same config write
    the same bytes: the ids (``Vocabulary``: what a reader of its files reads of it), and how
    the corpus was split and ordered. ``seed`` and ``shuffle`` are ``hash``'s only, ``slice``
    a slice's (None: a whole run), ``merge_of`` a merge's progress record's only (never in
    ``meta.json``)."""

    split_rule: SplitRule
    corpus: Fingerprint
    units: Count
    val_fraction: Fraction
    val_seed: codec.Seed
    on_error: ErrorPolicy
    take: Count | None = None
    seed: codec.Seed | None = None
    shuffle: bool | None = None
    slice: Slice | None = None
    merge_of: tuple[Piece, ...] | None = None

    def check(self) -> None:
        super().check()
        codec.check_key(self.val_seed)
        hashed = self.split_rule == "hash"
        for name in ("seed", "shuffle"):
            if (getattr(self, name) is None) == hashed:
                raise Disagree(name, "is needed by the hash rule" if hashed else "is hash's only")
        piece = self.slice
        if piece is None:
            return
        shard, where = piece.shard, f"[{piece.start}, {piece.stop})"
        if piece.stop > self.units:
            raise Disagree("slice", f"{where} is not within the {self.units} units")
        if shard and shard_range(self.units, shard.index, shard.count) != (piece.start, piece.stop):
            of = f"shard {shard.index}/{shard.count} of the {self.units} units"
            raise Disagree("slice", f"{where} is not {of}")

    @property
    def first(self) -> int:
        """The first position of the unit order this run does."""
        return 0 if self.slice is None else self.slice.start

    def splits(self) -> tuple[Split, ...]:
        """What a finished run counts: ``all`` (a ``nanogpt`` slice, in corpus order), or the
        splits."""
        in_corpus_order = self.split_rule == "nanogpt" and self.slice is not None
        return ("all",) if in_corpus_order else ("train", "val")

    def finals(self) -> tuple[FileName, ...]:
        """The files a finished run of this config holds."""
        in_corpus_order = self.splits() == ("all",)
        return ("tokens.bin", "lengths.bin") if in_corpus_order else ("train.bin", "val.bin")


class Counts(Record, frozen=True):
    """The skip counters (every one of ``policy.COUNTERS``), and the documents and tokens per
    split. Replaced, never changed, as a run goes."""

    skipped_members: Count
    skipped_documents: Count
    partial_members: Count
    skipped_files: Count
    documents: Splits
    tokens: Splits

    def check(self) -> None:
        if self.documents.keys() != self.tokens.keys():
            raise Disagree("tokens", "must count the same splits as documents")
        more = [split for split, n in self.documents.items() if n > self.tokens[split]]
        if more:  # (a document's ids end with its end-of-text id: at least one)
            raise Disagree("documents", f"{more[0]}: {self.documents[more[0]]} documents of "
                           f"{self.tokens[more[0]]} ids (each holds one at least)")  # fmt: skip

    @classmethod
    def new(cls, splits: tuple[Split, ...], files: int = 0) -> Counts:
        """A new run's: 0 everywhere but ``skipped_files``, the corpus's files left out."""
        return cls(0, 0, 0, files, dict.fromkeys(splits, 0), dict.fromkeys(splits, 0))

    def add(self, split: Split, documents: int, tokens: int) -> Counts:
        """These counts with ``documents`` and ``tokens`` more in ``split``."""
        return codec.replace(
            self,
            documents=self.documents | {split: self.documents[split] + documents},
            tokens=self.tokens | {split: self.tokens[split] + tokens},
        )

    @property
    def skips(self) -> int:
        """Every skip counter, added up (what ``max_errors`` bounds)."""
        return sum(getattr(self, key) for key in COUNTERS)


def _check_skips(config: RunConfig, counts: Counts) -> None:
    """A run under ``on_error="raise"`` skips no member or document (files left out when the
    corpus was opened are the corpus's policy's)."""
    skips = counts.skips - counts.skipped_files
    if config.on_error == "raise" and skips:
        raise Disagree("counts", f"say {skips} skips, under on_error='raise'")


class Meta(Record, frozen=True, tag_field="format", tag=FORMAT):
    """A ``meta.json``, the marker of a finished run or slice: its config (never
    ``merge_of``), its counts and each file's size and sha256: the very files of its kind,
    each one's bytes its count of items times their size."""

    what = "meta.json"
    config: RunConfig
    counts: Counts
    files: PerFile[FileInfo]

    def check(self) -> None:
        config, counts, files = self.config, self.counts, self.files
        if config.merge_of is not None:
            raise Disagree("config.merge_of", "is a merge's progress record's only")
        _check_skips(config, counts)
        if set(counts.documents) != set(config.splits()):
            raise Disagree("counts", f"must count {' and '.join(config.splits())} only")
        if set(files) != set(config.finals()):
            raise Disagree("files", f"must be {' and '.join(config.finals())}, not {list(files)}")
        item = np.dtype(config.dtype).itemsize
        sizes = {_TOKENS[split]: n * item for split, n in counts.tokens.items()}
        sizes["lengths.bin"] = counts.documents.get("all", 0) * LENGTH.itemsize
        for name, info in files.items():
            if info.bytes != sizes[name]:
                raise Disagree(f"files.{name}.bytes", f"is {info.bytes}, not {sizes[name]}")


class ProgressRecord(Record, frozen=True, omit_defaults=True, tag_field="format", tag=FORMAT):
    """How far a run got (``.owt-progress.json``): its config, its phase, the position in
    that phase (a unit of the order, or a document of the permutation), the sizes of the
    parts it wrote (synced before the record says them), its counts, and (phase ``commit``)
    the ``meta`` to publish."""

    what = "progress record"
    config: RunConfig
    phase: Phase
    counts: Counts
    position: Count = 0
    sizes: PerFile[Count] = msgspec.field(default_factory=lambda: {})
    """The sizes of the parts written, said even when there are none (as format 2 always has:
    ``omit_defaults`` leaves out a field made by the ``dict`` factory, not by this one)."""
    meta: Meta | None = None

    def check(self) -> None:
        config, counts, at, meta = self.config, self.counts, self.position, self.meta
        # The meta (what the commit publishes) says this run's config and counts: built (so
        # checked) before this record, it checked their skips (and a copy of the config
        # without ``merge_of`` to compare with would be checked again: field by field).
        says = meta is not None and meta.counts == counts and all(
            getattr(meta.config, name) == getattr(config, name)
            for name in RunConfig.__struct_fields__ if name != "merge_of"
        )  # fmt: skip
        if not says:
            _check_skips(config, counts)
        if self.phase == "commit" and meta is None:
            raise Disagree("meta", "is needed in phase commit")
        if meta is not None and not says:
            raise Disagree("meta", "must say the record's config and counts")
        if self.phase == "permute" and at > sum(counts.documents.values()):
            raise Disagree("position", f"is {at}, past the {sum(counts.documents.values())} "
                           "documents counted")  # fmt: skip
        last = config.units if config.slice is None else config.slice.stop
        if self.phase == "tokenize" and not config.first <= at <= last:
            raise Disagree("position", f"is {at}, not within the run's unit positions "
                           f"[{config.first}, {last}]")  # fmt: skip

    def check_parts(self) -> None:
        """Check the sizes of pass 1's parts against the counts, where a record is read back
        (``Workdir.load``; a run's own record says new counts before the sizes of the parts
        that hold them): the parts hold the documents counted, whole: their ids and (a
        ``nanogpt`` run's) their lengths. A permutation's parts hold its documents in another
        order: their sizes are checked against the counts when the run commits (``Meta``).

        A record at the run's first unit holds no document: the units before its position
        are the ones its counts and parts hold.

        Raises:
            StateError: naming the size (``sizes.lengths.bin``), or the ``position``.
        """
        config, counts = self.config, self.counts
        if self.phase != "tokenize":
            return
        if self.position == config.first and any(counts.documents.values()):
            raise StateError(f"bad {self.what}: position: is {self.position}, the run's first "
                             "unit, with documents counted", "position")  # fmt: skip
        item, tokens = np.dtype(config.dtype).itemsize, counts.tokens
        written = {_TOKENS[split]: tokens.get(split, 0) * item for split in ("train", "val")}
        written["tokens.bin"] = sum(tokens.values()) * item
        written["lengths.bin"] = sum(counts.documents.values()) * LENGTH.itemsize
        names = ("train.bin", "val.bin") if config.split_rule == "hash" else CORPUS_ORDER
        for name in names:
            if self.sizes.get(name, 0) != written[name]:
                raise StateError(f"bad {self.what}: sizes.{name}: is {self.sizes.get(name, 0)}, "
                                 f"not the {written[name]} bytes of the documents counted",
                                 f"sizes.{name}")  # fmt: skip
