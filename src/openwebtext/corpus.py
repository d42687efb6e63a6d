"""The corpus: its units, and the per-member document counts cached by ``owt index``.

Counts are optional: reading never needs them. Options that must know how many
documents each rank will see before reading (``even`` sharding) need them, and
say so when they are missing. They are cached in a JSON file named by the
corpus fingerprint, beside the corpus when its folder is writable, and in the
cache folder (``$OWT_CACHE_DIR`` or ``~/.cache/openwebtext``) otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CorpusError
from .index import Unit, index_paths

__all__ = ["COUNTS_FORMAT", "Corpus", "Counts", "cache_dir", "split_key"]

COUNTS_FORMAT = "openwebtext-counts/1"

PathLike = str | os.PathLike[str]


def cache_dir() -> Path:
    """Where openwebtext caches things: ``$OWT_CACHE_DIR`` or ``~/.cache/openwebtext``."""
    return Path(os.environ.get("OWT_CACHE_DIR") or Path.home() / ".cache" / "openwebtext")


def split_key(fraction: float, seed: int) -> str:
    return f"{fraction!r}/{seed}"


@dataclass(frozen=True)
class Counts:
    """Documents per unit (in corpus order), and per held-out split.

    Attributes:
        documents: Documents in each unit.
        val: For each ``split_key(fraction, seed)``, held-out documents per unit.
    """

    documents: tuple[int, ...]
    val: dict[str, tuple[int, ...]] = field(default_factory=dict)

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


@dataclass(frozen=True)
class Corpus:
    """An indexed corpus: its units, in corpus order, and their counts if cached."""

    units: tuple[Unit, ...]
    counts: Counts | None = field(default=None, compare=False)

    @classmethod
    def open(cls, paths: PathLike | Sequence[PathLike]) -> Corpus:
        """Index paths, folders or glob patterns (see ``openwebtext.index``).

        Raises:
            CorpusError: a path holds no corpus, or a file is unreadable.
            UnknownFormat: a file or member is in no known format.
        """
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        corpus = cls(tuple(index_paths(list(paths))))
        counts = corpus.load_counts()
        return cls(corpus.units, counts) if counts else corpus

    @property
    def compressed_bytes(self) -> int:
        return sum(u.size for u in self.units)

    def fingerprint(self) -> str:
        """A short hash of what the units are (names, sizes, formats), not where they lie."""
        h = hashlib.sha256()
        for u in self.units:
            h.update(f"{os.path.basename(u.path)}\0{u.member}\0{u.size}\0{u.kind}\n".encode())
        return h.hexdigest()[:16]

    # -- the counts cache ------------------------------------------------------

    def counts_paths(self) -> list[Path]:
        """Where the counts file is looked for, in order (beside the corpus, then the cache)."""
        name = f".owt-counts-{self.fingerprint()}.json"
        return [Path(self.units[0].path).parent / name, cache_dir() / "counts" / name[1:]]

    def load_counts(self) -> Counts | None:
        for path in self.counts_paths():
            try:
                raw = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if raw.get("format") == COUNTS_FORMAT and raw.get("fingerprint") == self.fingerprint():
                documents = tuple(raw["documents"])
                if len(documents) == len(self.units):
                    val = {k: tuple(v) for k, v in raw.get("val", {}).items()}
                    return Counts(documents, val)
        return None

    def save_counts(self, counts: Counts) -> Path:
        """Write ``counts`` atomically to the first writable place; return it."""
        body: dict[str, Any] = {
            "format": COUNTS_FORMAT,
            "fingerprint": self.fingerprint(),
            "units": len(self.units),
            "total": sum(counts.documents),
            "documents": list(counts.documents),
            "val": {k: list(v) for k, v in counts.val.items()},
        }
        errors = []
        for path in self.counts_paths():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=".owt-counts-", dir=path.parent)
                try:
                    os.fchmod(fd, 0o644)
                    with os.fdopen(fd, "w") as f:
                        json.dump(body, f)
                    os.replace(tmp, path)
                except BaseException:
                    os.unlink(tmp)
                    raise
                return path
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror or exc}")
        raise CorpusError("cannot write the counts file: " + "; ".join(errors))
