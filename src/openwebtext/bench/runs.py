"""What a benchmark measures: its :class:`Settings`, each :class:`Config` timed, and the
record of each :class:`Run`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Settings:
    """What to measure.

    Attributes:
        paths: Corpus paths (empty: the built-in bench corpus).
        workers: Worker counts, ascending.
        repeat: Measured runs per configuration (after the warm-up rounds).
        warmup: Discarded rounds before them.
        take: Stop the loader after this many documents (None: the whole corpus).
        seed: The loader's seed.
        out: Folder for timings.csv, bench.json and scaling.png.
        vs: Other loaders' commands, with ``{workers}`` and ``{paths}`` placeholders.
        timeout: Seconds any one child may run before it is killed and reported.
        progress: Show a progress bar on stderr.
        storage_options: For URLs: passed to the fsspec filesystem (``--storage-option``),
            in the loader and the ceiling; never written out unredacted.
        cache_dir: For URLs: the member cache folder (``--cache-dir``).
        cache_size: Its cap in bytes (``--cache-size``).
        text_column: The text column of parquet files (field of JSON lines).
    """

    paths: tuple[str, ...] = ()
    workers: tuple[int, ...] = (1, 2)
    repeat: int = 3
    warmup: int = 1
    take: int | None = None
    seed: int = 0
    out: Path = Path("bench-out")
    vs: tuple[str, ...] = ()
    timeout: float = 600.0
    progress: bool = True
    storage_options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None
    cache_size: int | None = None
    text_column: str = "text"


@dataclass(frozen=True)
class Config:
    """One thing to time: ``kind`` at ``workers``; ``template`` is the ``--vs`` command."""

    kind: str
    workers: int
    template: str = ""


@dataclass(frozen=True)
class Run:
    """One measured (or warm-up) run, as written to timings.csv and bench.json."""

    kind: str
    workers: int
    template: str
    command: str
    round: int
    warmup: bool
    status: str
    exit_code: int | None
    oversubscribed: bool
    elapsed: float
    cpu_s: float
    peak_pss_bytes: int
    max_rss_bytes: int
    documents: int | None = None
    text_bytes: int | None = None
    compressed_bytes: int | None = None
    first_document_s: float | None = None
    consumer_cpu_s: float | None = None
    decoder: str | None = None
    """The ceiling's faster decoder in this run (``lzma.decompress`` or ``xz -dc``)."""

    @property
    def config(self) -> Config:
        return Config(self.kind, self.workers, self.template)
