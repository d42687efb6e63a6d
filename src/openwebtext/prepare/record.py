"""One prepare or merge run in its folder: the progress record it goes on from, its
checkpoints, its counts, and the skip policy applied to its bad members and documents."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from openwebtext.errors import OWTError
from openwebtext.policy import MEMBER_COUNTERS, SkipPolicy
from openwebtext.prepare.config import Progress, difference
from openwebtext.prepare.meta import is_finished
from openwebtext.prepare.workdir import PrepareError, Workdir

__all__ = ["Run", "new_counts", "open_record"]


class Run:
    """One prepare or merge run in a ``Workdir``: its record, checkpoints and counts.

    Args:
        workdir: The folder the run works in.
        record: The progress record it goes on from (``start``).
        progress: Called with each ``Progress`` event (None: nothing).
        checkpoint_seconds: Seconds between two checkpoints.
        policy: What to do with a bad member or document (None: raise it).
    """

    def __init__(
        self,
        workdir: Workdir,
        record: dict[str, Any],
        progress: Callable[[Progress], None] | None,
        checkpoint_seconds: float,
        policy: SkipPolicy | None = None,
    ) -> None:
        self.workdir = workdir
        self.record = record
        self.progress = progress or (lambda event: None)
        self.checkpoint_seconds = checkpoint_seconds
        self.policy = policy or SkipPolicy("raise")
        self.skipped: list[str] = []

    @property
    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = self.record["counts"]
        return counts

    def checkpoint(self, parts: dict[str, Any], **fields: Any) -> None:
        """Sync ``parts``, then record their sizes with ``fields`` (never the other order)."""
        sizes = {name: part.sync() for name, part in parts.items()}
        self.record = {**self.record, **fields, "sizes": sizes}
        self.workdir.save(self.record)

    def error(self, error: OWTError) -> None:
        """Apply the skip policy to one bad member or document (``policy.SkipPolicy``)."""
        self.policy.count(error, self.counts)
        self.skipped.append(str(error))


def new_counts(keys: Sequence[str]) -> dict[str, Any]:
    """The counts of a new run: documents and tokens per key, every skip counter at 0."""
    return {"documents": dict.fromkeys(keys, 0), "tokens": dict.fromkeys(keys, 0),
            **dict.fromkeys(MEMBER_COUNTERS, 0)}  # fmt: skip


def open_record(
    workdir: Workdir, config: dict[str, Any], restart: bool, names: list[str]
) -> tuple[dict[str, Any] | None, bool]:
    """The record to go on from (a new one if none), and whether it is an earlier run's.

    None: the folder already holds the finished files of this config.
    """
    if restart:
        workdir.clear(names)
    record = workdir.load()
    if record is not None:
        if record["config"] != config:
            what = difference(record["config"], config)
            raise PrepareError(
                f"{workdir.folder} holds the progress of a run of {what}: run the same command "
                "as before to go on, or add --restart to throw that progress away"
            )
        return record, True
    if not restart and is_finished(workdir.folder, config):
        return None, False
    keys = ["all"] if config["split"] == "nanogpt" and "slice" in config else ["train", "val"]
    first = config.get("slice", {}).get("start", 0)
    fresh = {"config": config, "phase": "tokenize", "position": first, "sizes": {},
             "counts": new_counts(keys)}  # fmt: skip
    return fresh, False
