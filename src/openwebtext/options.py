"""Options: every knob of a loader, frozen and validated when built.

Some options shape the stream (which documents come, in which order); a saved
state only resumes under the same values of those. They are marked where they
are declared (``metadata=SHAPES`` on the field), and ``SHAPING`` lists them: the state's
check, the command line's resume and the tests all read that one list.
"""

from __future__ import annotations

import argparse
import numbers
import operator
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal, NamedTuple, TypeGuard, TypeVar

__all__ = [
    "MOST_INT",
    "NANOGPT_SPLIT",
    "SHAPING",
    "DecodePolicy",
    "ErrorPolicy",
    "EvenRule",
    "HeldOut",
    "Options",
    "SplitName",
    "as_int",
    "check_max_errors",
    "check_on_error",
    "check_seed",
    "check_shuffle",
    "check_take",
    "check_tokenizer",
    "check_val_fraction",
    "check_val_seed",
    "check_workers",
    "countable",
    "hold_numbers",
    "int_at_least",
    "integral",
    "option_type",
    "options_with",
]

ErrorPolicy = Literal["raise", "skip", "warn"]
DecodePolicy = Literal["strict", "replace"]
EvenRule = Literal["drop", "pad"]
SplitName = Literal["all", "train", "val"]

MiB = 1 << 20
#: The longest ``timeout``: about 11.6 days (the event loop's waits overflow past ~24 days).
MAX_TIMEOUT = 1e6

# How units are read: the defaults of ``Options`` and of a bare worker pool
# (``engine.PoolOptions``) alike. Both read them here, the lowest layer either sees, so the
# engine never builds the public description to learn its own defaults.
WORKERS = 2
PREFETCH = 2
TIMEOUT = 60.0
MAX_DOCUMENT_BYTES = 64 * MiB
MAX_MEMBER_BYTES = 1024 * MiB
#: The largest of the byte limits (a member of a TiB is no member), and of ``prefetch`` (units
#: in flight per worker): past them a limit is a mistake, not a bound.
MOST_BYTES = 1 << 40
MOST_PREFETCH = 1024
#: The largest count, size or position a state or a record holds (what numpy's int64, in which
#: the packers and the engine count, holds), and so of an option one says (``epoch``,
#: ``shuffle_buffer``, ``world_size``, a window, a schedule's positions, ``take``).
MOST_INT = 2**63 - 1
DECODE_ERRORS: DecodePolicy = "strict"


class HeldOut(NamedTuple):
    """A held-out split: the share of documents it holds and the key (or seed) it is drawn with."""

    fraction: float
    seed: int


#: nanoGPT's split (data/openwebtext/prepare.py: ``train_test_split(test_size=0.0005,
#: seed=2357)``): the default of every ``val_fraction``/``val_seed`` and of their help texts.
NANOGPT_SPLIT = HeldOut(0.0005, 2357)


#: Field metadata of an option that shapes the stream: a state saved under another
#: value of it is refused.
SHAPES: dict[str, Any] = {"shapes": True}


T = TypeVar("T")

@dataclass(frozen=True)
class Options:
    """How a loader reads a corpus.

    Attributes:
        workers: Worker processes (more than the units is fine); 0 reads in
            the calling process (no processes at all).
        shuffle: Shuffle units and documents; the order is a pure function of
            ``seed`` and ``epoch``. When False, documents come in corpus order.
        seed: Seed of every random choice (a non-negative int).
        shuffle_buffer: Documents are shuffled within blocks of consecutive
            units holding at least this many documents (0: units are shuffled,
            documents within a unit are not).
        epoch: The first epoch to produce; each epoch has its own order (a resumed run goes
            on from its state's, which may not lie before it).
        epochs: How many epochs to run, from ``epoch`` (None: without end).
        rank: This process's rank among ``world_size`` readers.
        world_size: How many ranks split the corpus (disjoint, covering).
        even: How shares are evened out when there is more than one
            (``world_size > 1``): ``drop`` (the default) gives every share
            ``N // S`` documents of an epoch, leaving out at most ``S - 1``;
            ``pad`` gives every share ``ceil(N / S)``, repeating at most
            ``S - 1``; None: shares differ by at most one document. Both are
            counted in ``Stats`` and said once. Sharded runs need the counts
            of ``owt index`` (taken on first use).
        split: ``all`` documents, or the held-out ``val`` split, or the
            ``train`` rest; decided per document name by a keyed hash.
        val_fraction: The share of documents held out (nanoGPT: 0.0005).
        val_seed: The key of the split's hash (nanoGPT: 2357).
        take: Stop after this iterator has yielded this many documents.
        on_error: ``raise`` stops at the first bad member or document;
            ``skip`` leaves it out and counts it; ``warn`` also logs one line.
        max_errors: With skip or warn, raise ``TooManyErrors`` past this many
            skips (None: no bound).
        decode_errors: ``strict``: invalid UTF-8 is an error (of ``on_error``);
            ``replace``: it becomes U+FFFD and is counted.
        max_document_bytes: Larger documents are errors.
        max_member_bytes: Members decompressing past this are errors (bombs).
        prefetch: Units in flight per worker.
        timeout: Seconds a busy worker may stay silent before it counts as hung.
        tokenizer: Tokenize in the workers (``"gpt2"``, ``"bytes"``,
            ``"tiktoken:NAME"``, ``"hf:PATH"``; see ``openwebtext.tokenizer``):
            the iterator then yields ``TokenDocument`` records of token ids,
            each document ending with the end-of-text id. None: text.
    """

    workers: int = WORKERS
    shuffle: bool = field(default=True, metadata=SHAPES)
    seed: int = field(default=0, metadata=SHAPES)
    shuffle_buffer: int = field(default=4096, metadata=SHAPES)
    epoch: int = 0
    epochs: int | None = 1
    rank: int = field(default=0, metadata=SHAPES)
    world_size: int = field(default=1, metadata=SHAPES)
    even: EvenRule | None = field(default="drop", metadata=SHAPES)
    split: SplitName = field(default="all", metadata=SHAPES)
    val_fraction: float = field(default=NANOGPT_SPLIT.fraction, metadata=SHAPES)
    val_seed: int = field(default=NANOGPT_SPLIT.seed, metadata=SHAPES)
    take: int | None = None
    on_error: ErrorPolicy = "raise"
    max_errors: int | None = None
    decode_errors: DecodePolicy = field(default=DECODE_ERRORS, metadata=SHAPES)
    max_document_bytes: int = field(default=MAX_DOCUMENT_BYTES, metadata=SHAPES)
    max_member_bytes: int = MAX_MEMBER_BYTES
    prefetch: int = PREFETCH
    timeout: float = TIMEOUT
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(message)

        hold_numbers(self)  # (numpy's too, held as Python numbers: a state's)
        check_workers(self.workers)
        check_seed(self.seed)
        check_shuffle(self.shuffle)
        need(
            countable(self.shuffle_buffer, 0),
            f"shuffle_buffer must be >= 0 and at most {MOST_INT}, not {self.shuffle_buffer!r}",
        )
        need(countable(self.epoch, 0), f"epoch must be >= 0 and at most {MOST_INT}, not "
             f"{self.epoch!r}")  # fmt: skip
        need(
            self.epochs is None or countable(self.epochs, 1),
            f"epochs must be None or >= 1 and at most {MOST_INT}, not {self.epochs!r}",
        )
        span = f"{self.epoch} + {self.epochs or 1}"  # (a state at the run's end: the epoch after)
        need(self.epoch + (self.epochs or 1) <= MOST_INT,
             f"epoch + epochs must be at most {MOST_INT} (a state at the run's end says the "
             f"epoch after it), not {span}")  # fmt: skip
        need(
            self.even in ("drop", "pad", None),
            f"even must be 'drop', 'pad' or None, not {self.even!r}",
        )
        need(
            self.split in ("all", "train", "val"),
            f"split must be 'all', 'train' or 'val', not {self.split!r}",
        )
        check_val_fraction(self.val_fraction)
        check_val_seed(self.val_seed)
        need(
            countable(self.world_size, 1),
            f"world_size must be >= 1 and at most {MOST_INT}, not {self.world_size!r}",
        )
        need(
            int_at_least(self.rank, 0) and self.rank < self.world_size,
            f"rank must be in 0..{self.world_size - 1} (world_size={self.world_size}), "
            f"not {self.rank!r}",
        )
        check_take(self.take)
        check_on_error(self.on_error)
        check_max_errors(self.max_errors)
        need(
            self.decode_errors in ("strict", "replace"),
            f"decode_errors must be 'strict' or 'replace', not {self.decode_errors!r}",
        )
        for name, most in [("max_document_bytes", MOST_BYTES), ("max_member_bytes", MOST_BYTES),
                           ("prefetch", MOST_PREFETCH)]:  # fmt: skip
            value = getattr(self, name)
            need(int_at_least(value, 1) and value <= most,
                 f"{name} must be >= 1 and at most {most}, not {value!r}")  # fmt: skip
        need(
            isinstance(self.timeout, int | float) and not isinstance(self.timeout, bool)
            and 0 < self.timeout <= MAX_TIMEOUT,
            f"timeout must be > 0 seconds and at most {MAX_TIMEOUT:g}, not {self.timeout!r}",
        )
        need(
            self.tokenizer is None or (isinstance(self.tokenizer, str) and bool(self.tokenizer)),
            f"tokenizer must be None or a tokenizer spec such as 'gpt2', not {self.tokenizer!r}",
        )

    @property
    def even_mode(self) -> EvenRule | None:
        """The rule in force: ``even`` when there is more than one share, else None (one
        share is even by itself)."""
        return self.even if self.world_size > 1 else None

    @property
    def until(self) -> int | None:
        """The epoch the run ends before: ``epoch + epochs`` (None: without end)."""
        return None if self.epochs is None else self.epoch + self.epochs

    def take_share(self, share: int, shares: int) -> int | None:
        """``take`` of share ``share`` of ``shares`` that one iterator is read as (a
        DataLoader's workers, a dataset's shards), whose documents are handed out in turns:
        together the shares hand out ``take`` (the first ``take % shares`` one more)."""
        return None if self.take is None else self.take // shares + (share < self.take % shares)

    @property
    def needs_counts(self) -> bool:
        """Whether the stream needs every member's document count: to cut the epoch into
        shares at documents (``world_size > 1``)."""
        return self.world_size > 1


def _shaping_fields() -> tuple[str, ...]:
    found: tuple[Field[Any], ...] = fields(Options)
    return tuple(f.name for f in found if f.metadata.get("shapes"))


#: The options that shape the stream, in declaration order. ``even`` stands for
#: ``even_mode``: the rule counts only while there is more than one share.
SHAPING: tuple[str, ...] = _shaping_fields()


def hold_numbers(described: Any) -> None:
    """Hold the number fields of a frozen dataclass being made (``Options``,
    ``PrepareOptions``) as Python numbers, before its checks: an ``int`` field's integral number
    (``integral``: numpy's too) as an int, a ``float`` field's real number (not a bool) as a
    float. What it holds goes into states and records, and numpy's float64 (a float) would
    split by numpy's bools and fail to encode."""
    for f in fields(described):
        value = getattr(described, f.name)
        number: float | None = None
        if f.type in ("int", "int | None"):
            number = integral(value)
        elif f.type == "float" and isinstance(value, numbers.Real) and not isinstance(value, bool):
            number = float(value)
        if number is not None:
            object.__setattr__(described, f.name, number)


def integral(value: object) -> int | None:
    """``value`` as a Python int when it is an integral number (``int``, numpy's integers,
    anything ``operator.index`` takes) that is not a bool, else None: the one rule of what a
    door (``Options``, the reference API) takes as an int, converted before ``int_at_least``
    so that a state or a record holds Python ints only."""
    if isinstance(value, bool) or type(value).__name__ in ("bool", "bool_"):  # numpy's bool:
        return None  # (its ``__index__`` took it as 0 or 1 before numpy 2.3, with a warning)
    try:
        return int(operator.index(value))  # type: ignore[arg-type]
    except TypeError:
        return None


def as_int(value: T) -> int | T:
    """``value`` as a Python int when it is an integral number (``integral``), else ``value``
    unchanged for the door's own check to refuse: what every door of the API does first with
    an int argument, so that numpy's integers are taken and a state holds Python ints only."""
    number = integral(value)
    return value if number is None else number


def int_at_least(value: object, least: int) -> TypeGuard[int]:
    """Whether ``value`` is a Python int (a bool is not one) of at least ``least``: the one test
    of every count, size and position a description, a state or a file record holds (a door
    converts any other integral number with ``integral`` first)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def countable(value: object, least: int) -> TypeGuard[int]:
    """``int_at_least``, and at most ``MOST_INT``: a value a state or a record will hold (a
    state with more could not be resumed: ``codec.Count``)."""
    return int_at_least(value, least) and value <= MOST_INT


# -- the rules of the options a loader and ``owt tokenize`` (``PrepareOptions``) share --------
# One rule each, so that the two descriptions accept and refuse the same values.


def options_with(options: Options | None, overrides: Mapping[str, Any]) -> Options:
    """``options`` (None: the defaults) with ``overrides`` (keyword arguments) over them.

    Raises:
        TypeError: ``options`` is not an ``Options`` (a dict of them: give them as keyword
            arguments).
        ValueError: an override's value is not valid.
    """
    if options is not None and not isinstance(options, Options):
        raise TypeError(f"options must be an Options, or keyword arguments, not "
                        f"{type(options).__name__} {options!r}")  # fmt: skip
    base = options or Options()
    return replace(base, **overrides) if overrides else base


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def check_workers(value: object) -> None:
    """``workers``: an int >= 0 (0: in the calling process)."""
    _need(int_at_least(value, 0), f"workers must be >= 0, not {value!r}")


def check_seed(value: object) -> None:
    """``seed``: an int >= 0 (the unit order's seed)."""
    _need(int_at_least(value, 0), f"seed must be an int >= 0, not {value!r}")


def check_shuffle(value: object) -> None:
    """``shuffle``: True or False (1 and "no" are neither)."""
    _need(isinstance(value, bool), f"shuffle must be True or False, not {value!r}")


def check_tokenizer(value: object) -> None:
    """``tokenizer`` of a run that writes ids: a spec such as ``"gpt2"`` (a non-empty str)."""
    ok = isinstance(value, str) and bool(value.strip())
    _need(ok, f"tokenizer must be a tokenizer spec such as 'gpt2', not {value!r}")


def check_val_fraction(value: object) -> None:
    """``val_fraction``: a number (not a bool) strictly between 0 and 1."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1
    _need(ok, f"val_fraction must be strictly between 0 and 1 (0 and 1 excluded), not {value!r}")


def check_val_seed(value: object) -> None:
    """``val_seed``: an int in 0..2**64-1 (the split's 8-byte key)."""
    ok = int_at_least(value, 0) and value < 2**64
    _need(ok, f"val_seed must be >= 0 and < 2**64 (the split's 8-byte key), not {value!r}")


def check_take(value: object) -> None:
    """``take``: None or an int >= 0 (at most ``MOST_INT``: ``owt tokenize``'s config says it)."""
    ok = value is None or countable(value, 0)
    _need(ok, f"take must be None or >= 0 and at most {MOST_INT}, not {value!r}")


def check_on_error(value: object) -> None:
    """``on_error``: ``raise``, ``skip`` or ``warn``."""
    _need(
        value in ("raise", "skip", "warn"),
        f"on_error must be 'raise', 'skip' or 'warn', not {value!r}",
    )


def check_max_errors(value: object) -> None:
    """``max_errors``: None or an int >= 0."""
    ok = value is None or int_at_least(value, 0)
    _need(ok, f"max_errors must be None or >= 0, not {value!r}")


def option_type(name: str, convert: type = int) -> Any:
    """An argparse type: a value of Options field ``name``, refused as Options refuses it
    (every command's flags of an option: ``owt stream``'s, ``owt bench``'s)."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        try:
            Options(**{name: value})
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    parse.__name__ = name
    return parse
