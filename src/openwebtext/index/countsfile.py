"""The counts cache: the per-unit document counts ``owt index`` (or a first even-sharded run)
makes of a corpus (``Counts``), and the JSON file that keeps them (``CountsFile``, format
``openwebtext-counts/2``), named by the corpus's fingerprint, beside the corpus when its
folder is writable, else in the cache folder (``Corpus.counts_paths``).

Counts are read back only for the corpus as it is now (its fingerprint, its files' version,
its units: ``CountedOf``); a damaged, unreadable or stale file is absent, said once. A save
joins the splits the file holds by then, under a lock of its folder: two processes counting
other held-out splits at once keep both.
"""

from __future__ import annotations

import json
import logging
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgspec

from openwebtext.codec import Count, Disagree, Record, parse, read_file, whose
from openwebtext.errors import CorpusError, OutputError, StateError
from openwebtext.files import atomic_write, folder_locked

__all__ = [
    "COUNTS_FORMAT",
    "CountedOf",
    "Counts",
    "CountsFile",
    "load_counts",
    "save_counts",
    "split_key",
    "split_of",
]

log = logging.getLogger("openwebtext")

#: /2: the counts carry the files' ``version`` (size and mtime), so a changed file makes
#: them stale; /1 files are treated as absent.
COUNTS_FORMAT = "openwebtext-counts/2"


def split_key(fraction: float, seed: int) -> str:
    return f"{fraction!r}/{seed}"


def split_of(key: str) -> tuple[float, int]:
    """The split a ``split_key`` names: its fraction and seed."""
    fraction, seed = key.rsplit("/", 1)
    return float(fraction), int(seed)


class CountsFile(Record, frozen=True, tag_field="format", tag=COUNTS_FORMAT):
    """A counts file (``Corpus.save_counts``): what it was counted of (the corpus's
    fingerprint, its files' ``version``, its units) and the documents of each unit, all and
    held out per split (``split_key``), read by the one codec; a damaged one is absent."""

    what = "counts file"
    fingerprint: str
    version: str
    units: Count
    total: Count
    documents: tuple[Count, ...]
    val: dict[str, tuple[Count, ...]] = msgspec.field(default_factory=dict)
    failed: tuple[Count, ...] = ()
    """The units that could not be read when counted (under skip), counted as no document."""
    unsure: tuple[Count, ...] = ()
    """Of ``failed``, those whose failure was no verdict on their bytes: read again by the
    next count (``Counts.unsure``)."""

    def check(self) -> None:
        if len(self.documents) != self.units:
            raise Disagree("documents", f"must count each of the {self.units} units")
        if any(u >= self.units or self.documents[u] for u in self.failed):
            raise Disagree("failed", "must name units of the corpus counted as no document")
        if not set(self.unsure) <= set(self.failed):
            raise Disagree("unsure", "must name units of failed")
        if sum(self.documents) != self.total:
            raise Disagree("total", f"is {self.total}, not the documents' {sum(self.documents)}")
        for key, held in self.val.items():
            if len(held) != self.units or any(map(operator.gt, held, self.documents)):
                raise Disagree(f"val[{key!r}]", f"must count each of the {self.units} units, "
                               "each at most its documents")  # fmt: skip


@dataclass(frozen=True)
class Counts:
    """Documents per unit (in corpus order), and per held-out split.

    Attributes:
        documents: Documents in each unit.
        val: For each ``split_key(fraction, seed)``, held-out documents per unit.
        failed: The units that could not be read when counted (under skip), counted as no
            document (a share whose edge one lies on does not read it: ``ensure_counts``
            refuses them under ``raise``).
    """

    documents: tuple[int, ...]
    val: dict[str, tuple[int, ...]] = field(default_factory=dict)
    failed: tuple[int, ...] = ()
    unsure: tuple[int, ...] = ()
    """Of ``failed``, the units whose failure was no verdict on their bytes (a read error, a
    limit, a worker's death: ``policy.a_verdict``): the next count reads them again (only
    them), and a run that finds them counted so counts them first (``ensure_counts``)."""

    def per_unit(self, split: str, fraction: float, seed: int) -> tuple[int, ...] | None:
        """Documents per unit for ``split`` (all, train or val); None if not counted."""
        if split == "all":
            return self.documents
        held = self.val.get(split_key(fraction, seed))
        if held is None:
            return None
        if split == "val":
            return held
        return tuple(n - v for n, v in zip(self.documents, held, strict=True))

    def joined(self, counted: Counts) -> Counts:
        """``counted`` (a later count), with the held-out splits of these counts it lacks when
        both count the same documents per unit (else ``counted`` alone): a count of one more
        split never drops the splits counted before."""
        if counted.documents != self.documents:
            return counted
        return Counts(counted.documents, {**self.val, **counted.val}, counted.failed,
                      counted.unsure)  # fmt: skip


#: The counts files warned of in this process (a corpus's counts are looked up more than once).
_WARNED: set[tuple[str, str]] = set()


def _warn_once(path: Path, exc: BaseException) -> None:
    """Say that the counts file ``path`` is damaged (``exc``), or that this user may not read
    it, once in the process."""
    said = ("counts file %s cannot be read (%s): not used" if isinstance(exc, PermissionError)
            else "counts file %s is damaged (%s): ignored, to be rewritten")  # fmt: skip
    if (str(path), said) not in _WARNED:
        _WARNED.add((str(path), said))
        log.warning(said, path, exc)


class CountedOf(NamedTuple):
    """What counts are of: a corpus's fingerprint, its files' version, its units."""

    fingerprint: str
    version: str
    units: int


def load_counts(paths: list[Path], of: CountedOf) -> Counts | None:
    """The counts the first of ``paths`` holding them for ``of`` holds."""
    for path in paths:
        counts = _counts_in(path, of)
        if counts is not None:
            return counts
    return None


def _counts_in(path: Path, of: CountedOf) -> Counts | None:
    """The counts the file ``path`` holds for ``of``, if it does: a damaged or unreadable file
    is absent, with a warning (a count rewrites a damaged one, never another user's); counts
    made before a file changed are stale, and absent."""
    try:
        raw = parse(read_file(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _warn_once(path, exc)
        return None
    if whose(raw, CountsFile) == "version":  # another version's file: absent
        return None
    try:
        saved = CountsFile.from_json(raw)
    except StateError as exc:
        _warn_once(path, exc)
        return None
    if (saved.fingerprint, saved.version) != (of.fingerprint, of.version):
        log.info("counts file %s is stale: a file changed since it was counted", path)
        return None
    if saved.units != of.units:
        log.warning("counts file %s is damaged (it counts %d units, not the %d of the "
                    "corpus): ignored, to be rewritten", path, saved.units, of.units)  # fmt: skip
        return None
    return Counts(saved.documents, dict(saved.val), saved.failed, saved.unsure)


def save_counts(paths: list[Path], of: CountedOf, counts: Counts) -> Path:
    """Write ``counts`` of ``of`` atomically to the first writable of ``paths``, joined with
    the splits the file there holds by then (``Counts.joined``), its folder locked meanwhile
    (``files.folder_locked``); return it.

    Raises:
        CorpusError: no place can be written (each one's reason said).
    """
    errors = []
    for path in paths:
        if path.exists() and not os.access(path, os.R_OK):  # (another's: kept, not taken)
            errors.append(f"{path}: another user's, which this one may not read")
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with folder_locked(path.parent):
                held = _counts_in(path, of)
                joined = counts if held is None else held.joined(counts)
                record = CountsFile(
                    of.fingerprint, of.version, of.units, sum(joined.documents),
                    joined.documents, dict(joined.val), joined.failed, joined.unsure,
                )  # fmt: skip
                atomic_write(path, json.dumps(record.to_json()))
            return path
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
        except OutputError as exc:  # the folder is not writable: try the next place
            errors.append(f"{path}: {exc}")
    raise CorpusError("cannot write the counts file: " + "; ".join(errors))
