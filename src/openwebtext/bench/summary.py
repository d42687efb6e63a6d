"""Summaries of the runs: per configuration (:class:`Summary`) and per worker count
(:class:`Scaling`), and the recommended worker count.

Efficiency is loader throughput / ceiling throughput, paired by round.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from openwebtext.bench.common import CEILING, LOADER, OK, TIMEOUT, VS
from openwebtext.bench.runs import Config, Run, Settings

#: Worker counts within this fraction of the best throughput are "as good".
GOOD_ENOUGH = 0.05


@dataclass(frozen=True)
class Summary:
    """One configuration over its measured runs: medians, and the spread of wall time.

    Documents, text and compressed bytes are the loader's for every kind: the ceiling
    decompresses exactly the members the loader consumed, and a ``--vs`` command is
    assumed to read the same corpus. So all throughputs are of the same work.
    """

    kind: str
    workers: int
    template: str
    status: str
    runs: int
    wall_s: float | None
    wall_min_s: float | None
    wall_max_s: float | None
    spread: float | None
    """(max - min) / median of wall seconds."""
    cpu_s: float | None
    cpu_utilisation: float | None
    """CPU seconds / (wall seconds x cores): the share of the machine kept busy."""
    peak_pss_bytes: int
    max_rss_bytes: int
    first_document_s: float | None
    consumer_cpu_s: float | None
    documents_per_s: float | None
    text_mb_per_s: float | None
    compressed_mb_per_s: float | None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(
    config: Config, runs: Sequence[Run], work: tuple[int, int, int], cores: int
) -> Summary:
    """Summarise ``runs`` (warm-ups included: a timeout there counts) of ``config``.

    ``work`` is (documents, text bytes, compressed bytes) of one loader run.
    """
    status = TIMEOUT if any(r.status == TIMEOUT for r in runs) else OK
    runs = [r for r in runs if not r.warmup]
    walls = [r.elapsed for r in runs] if status == OK else []
    wall = _median(walls)
    cpu = _median([r.cpu_s for r in runs]) if walls else None

    def rate(amount: float, scale: float = 1.0) -> float | None:
        return amount / wall / scale if wall else None

    return Summary(
        kind=config.kind,
        workers=config.workers,
        template=config.template,
        status=status,
        runs=len(runs),
        wall_s=wall,
        wall_min_s=min(walls) if walls else None,
        wall_max_s=max(walls) if walls else None,
        spread=(max(walls) - min(walls)) / wall if wall else None,
        cpu_s=cpu,
        cpu_utilisation=cpu / wall / cores if cpu is not None and wall else None,
        peak_pss_bytes=max((r.peak_pss_bytes for r in runs), default=0),
        max_rss_bytes=max((r.max_rss_bytes for r in runs), default=0),
        first_document_s=_median([r.first_document_s for r in runs]),
        consumer_cpu_s=_median([r.consumer_cpu_s for r in runs]),
        documents_per_s=rate(work[0]),
        text_mb_per_s=rate(work[1], 1e6),
        compressed_mb_per_s=rate(work[2], 1e6),
    )


def _paired(runs: Sequence[Run], ours: Config, theirs: Config) -> float | None:
    """Median over measured rounds of theirs' wall time / ours' in the same round.

    Both did the same work, so this is our throughput over theirs. Pairing within a round
    (run back to back) cancels the drift of a shared machine's speed between rounds, which a
    ratio of medians would not.
    """
    walls = {(r.config, r.round): r.elapsed for r in runs if not r.warmup and r.status == OK}
    rounds = {k for config, k in walls if config == ours}
    ratios = [walls[theirs, k] / walls[ours, k] for k in sorted(rounds) if (theirs, k) in walls]
    return statistics.median(ratios) if ratios else None


@dataclass(frozen=True)
class Scaling:
    """One worker count: the loader, its ceiling, and the ``--vs`` commands, as ratios."""

    workers: int
    oversubscribed: bool
    ceiling_workers: int
    loader_documents_per_s: float | None
    ceiling_documents_per_s: float | None
    efficiency: float | None
    """Loader throughput / ceiling throughput (at ``ceiling_workers``), paired by round."""
    vs_documents_per_s: tuple[float | None, ...]
    vs_speedup: tuple[float | None, ...]
    """Loader throughput / each ``--vs`` command's, paired by round."""


def scaling_rows(
    summaries: Sequence[Summary], runs: Sequence[Run], settings: Settings, cores: int
) -> list[Scaling]:
    table = {(s.kind, s.workers, s.template): s for s in summaries}
    rows = []
    for n in settings.workers:
        loader, ceiling = Config(LOADER, n), Config(CEILING, min(n, cores))
        vs = [Config(VS, n, t) for t in settings.vs]
        rows.append(
            Scaling(
                workers=n,
                oversubscribed=n > cores,
                ceiling_workers=min(n, cores),
                loader_documents_per_s=table[LOADER, n, ""].documents_per_s,
                ceiling_documents_per_s=table[CEILING, min(n, cores), ""].documents_per_s,
                efficiency=_paired(runs, loader, ceiling),
                vs_documents_per_s=tuple(table[VS, n, v.template].documents_per_s for v in vs),
                vs_speedup=tuple(_paired(runs, loader, v) for v in vs),
            )
        )
    return rows


def recommend(rows: Sequence[Scaling]) -> int | None:
    """The smallest worker count within ``GOOD_ENOUGH`` of the best loader throughput."""
    rated = [(r.workers, r.loader_documents_per_s) for r in rows if r.loader_documents_per_s]
    if not rated:
        return None
    best = max(rate for _, rate in rated)
    return min(n for n, rate in rated if rate >= (1 - GOOD_ENOUGH) * best)
