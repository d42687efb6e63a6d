"""One prepare or merge run in its folder: the progress record it goes on from, its
checkpoints, its counts, the skip policy applied to its bad members and documents, and the
one phase driver of both (``drive``: tokenize → permute → commit)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openwebtext import codec
from openwebtext.errors import OWTError, Unreadable
from openwebtext.policy import SkipPolicy
from openwebtext.prepare.config import Progress, difference
from openwebtext.prepare.meta import build_meta
from openwebtext.prepare.state import Counts, FileName, Meta, Phase, ProgressRecord, RunConfig
from openwebtext.prepare.workdir import PrepareError, Workdir

__all__ = ["Passes", "Run", "drive", "open_record"]


class Run:
    """One prepare or merge run in a ``Workdir``: its record, checkpoints and counts.

    Args:
        workdir: The folder the run works in.
        record: The progress record it goes on from (``open_record``).
        progress: Called with each ``Progress`` event (None: nothing).
        checkpoint_seconds: Seconds between two checkpoints.
        policy: What to do with a bad member or document (None: raise it).
    """

    def __init__(
        self,
        workdir: Workdir,
        record: ProgressRecord,
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
        self.tokenized = 0
        """Tokens tokenized by this run (pass 1), not by the earlier run it goes on from."""

    @property
    def counts(self) -> Counts:
        """The counts so far (set: the record with new counts)."""
        return self.record.counts

    @counts.setter
    def counts(self, counts: Counts) -> None:
        self.record = codec.replace(self.record, counts=counts)

    def checkpoint(self, parts: dict[FileName, Any], position: int) -> None:
        """Sync ``parts``, then record their sizes and ``position`` (never the other order)."""
        sizes = {name: part.sync() for name, part in parts.items()}
        self.record = codec.replace(self.record, position=position, sizes=sizes)
        self.workdir.save(self.record)

    def begin(self, phase: Phase) -> None:
        """Go on to ``phase`` from its start (no part written in it yet), and record it."""
        self.record = codec.replace(self.record, phase=phase, position=0, sizes={})
        self.workdir.save(self.record)

    def error(self, error: OWTError) -> None:
        """Apply the skip policy to one bad member or document (``policy.SkipPolicy``). A
        member that could not be read (``Unreadable``: a disk's, a network's error) is never
        skipped: the finished run would keep its loss, and a run again find nothing to do."""
        if isinstance(error, Unreadable):
            raise error
        self.counts = self.counts.plus(**{self.policy.take(error): 1})
        self.policy.check(self.counts.skips, error)
        self.skipped.append(str(error))


def open_record(
    workdir: Workdir,
    config: RunConfig,
    restart: bool,
    fresh: Callable[[], ProgressRecord],
) -> tuple[ProgressRecord, bool]:
    """The record to go on from (``fresh()`` if there is none), and whether it is an earlier
    run's. ``restart``: forget the folder's progress and its parts first (``Workdir.clear``:
    those of any split rule).

    Raises:
        PrepareError: the folder holds the progress of another config.
    """
    if restart:
        workdir.clear()
    record = workdir.load()
    if record is None:
        return fresh(), False
    if record.config != config:
        what = difference(record.config, config)
        raise PrepareError(
            f"{workdir.folder} holds the progress of a run of {what}: run the same command "
            "as before to go on, or add --restart to throw that progress away"
        )
    return record, True


@dataclass(frozen=True)
class Passes:
    """What a run does in each phase.

    Attributes:
        tokenize: Pass 1 (prepare: tokenize the units; merge: gather what the slices counted).
        permute: Pass 2, copying pass 1's parts in permutation order (None: pass 1's parts
            are the files, as in a ``hash`` run or a slice).
        finals: The files of the finished run (the parts that are only temporary, pass 1's
            once permuted, go once it is committed: ``Workdir.commit``).
    """

    tokenize: Callable[[Run], None]
    permute: Callable[[Run], None] | None
    finals: tuple[FileName, ...]


def drive(run: Run, passes: Passes) -> Meta:
    """Take ``run`` from the phase its record is in to its commit: tokenize, then permute
    (if it has that pass), then build ``meta.json`` and commit (``Workdir.commit``). Each
    phase begins with the record saying so, so an interrupted run goes on where it was.
    Returns the ``meta.json`` committed.

    Raises:
        PrepareError: the record is in a phase this kind of run does not have (damaged).
    """
    if run.record.phase == "tokenize":
        passes.tokenize(run)
        if passes.permute is not None:
            run.begin("permute")
    if run.record.phase == "permute":
        if passes.permute is None:
            raise PrepareError(
                f"{run.workdir.progress_path} is in phase permute, which a run of its config "
                "does not have: run again with --restart"
            )
        passes.permute(run)
    meta = run.record.meta
    if run.record.phase != "commit" or meta is None:
        meta = build_meta(run.workdir, run.record, passes.finals)
        run.record = codec.replace(run.record, meta=meta)
    run.workdir.commit(run.record, passes.finals)
    return meta
