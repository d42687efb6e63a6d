"""Options: every knob of a loader, frozen and validated when built."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["DecodePolicy", "ErrorPolicy", "Options"]

ErrorPolicy = Literal["raise", "skip", "warn"]
DecodePolicy = Literal["strict", "replace"]

MiB = 1 << 20


@dataclass(frozen=True)
class Options:
    """How a loader reads a corpus.

    Attributes:
        workers: Worker processes (1 or more; more than the units is fine).
        shuffle: Shuffle units and documents; the order is a pure function of
            ``seed`` and ``epoch``. When False, documents come in corpus order.
        seed: Seed of every random choice (a non-negative int).
        shuffle_buffer: Documents are shuffled within blocks of consecutive
            units holding at least this many documents (0: units are shuffled,
            documents within a unit are not).
        epoch: Which epoch's order to produce.
        rank: This process's rank among ``world_size`` readers.
        world_size: How many ranks split the corpus (disjoint, covering).
        take: Stop after this many documents (None: the whole epoch).
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
    """

    workers: int = 2
    shuffle: bool = True
    seed: int = 0
    shuffle_buffer: int = 4096
    epoch: int = 0
    rank: int = 0
    world_size: int = 1
    take: int | None = None
    on_error: ErrorPolicy = "raise"
    max_errors: int | None = None
    decode_errors: DecodePolicy = "strict"
    max_document_bytes: int = 64 * MiB
    max_member_bytes: int = 1024 * MiB
    prefetch: int = 2
    timeout: float = 60.0

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(message)

        need(
            _is_int(self.workers) and self.workers >= 1,
            f"workers must be >= 1, not {self.workers!r}",
        )
        need(_is_int(self.seed) and self.seed >= 0, f"seed must be an int >= 0, not {self.seed!r}")
        need(
            _is_int(self.shuffle_buffer) and self.shuffle_buffer >= 0,
            f"shuffle_buffer must be >= 0, not {self.shuffle_buffer!r}",
        )
        need(_is_int(self.epoch) and self.epoch >= 0, f"epoch must be >= 0, not {self.epoch!r}")
        need(
            _is_int(self.world_size) and self.world_size >= 1,
            f"world_size must be >= 1, not {self.world_size!r}",
        )
        need(
            _is_int(self.rank) and 0 <= self.rank < self.world_size,
            f"rank must be in 0..{self.world_size - 1} (world_size={self.world_size}), "
            f"not {self.rank!r}",
        )
        need(
            self.take is None or (_is_int(self.take) and self.take >= 0),
            f"take must be None or >= 0, not {self.take!r}",
        )
        need(
            self.on_error in ("raise", "skip", "warn"),
            f"on_error must be 'raise', 'skip' or 'warn', not {self.on_error!r}",
        )
        need(
            self.max_errors is None or (_is_int(self.max_errors) and self.max_errors >= 0),
            f"max_errors must be None or >= 0, not {self.max_errors!r}",
        )
        need(
            self.decode_errors in ("strict", "replace"),
            f"decode_errors must be 'strict' or 'replace', not {self.decode_errors!r}",
        )
        for name in ("max_document_bytes", "max_member_bytes", "prefetch"):
            value = getattr(self, name)
            need(_is_int(value) and value >= 1, f"{name} must be >= 1, not {value!r}")
        need(self.timeout > 0, f"timeout must be > 0 seconds, not {self.timeout!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
