"""The outputs but the plot: :class:`BenchResult`, timings.csv, bench.json, the Markdown
table and the text ``owt bench`` prints."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openwebtext.bench.common import CEILING, LOADER, TIMEOUT, VS
from openwebtext.bench.runs import Run
from openwebtext.bench.summary import GOOD_ENOUGH, Scaling, Summary
from openwebtext.files import atomic_write
from openwebtext.source import is_url

CSV_COLUMNS = (
    "workers",
    "elapsed",
    "command",
    "kind",
    "round",
    "warmup",
    "status",
    "exit_code",
    "oversubscribed",
    "documents",
    "text_bytes",
    "compressed_bytes",
    "cpu_s",
    "peak_pss_bytes",
    "max_rss_bytes",
    "first_document_s",
    "consumer_cpu_s",
    "decoder",
)
PLOT_HINT = "from the clone: pip install -e '.[bench]'"


@dataclass(frozen=True)
class BenchResult:
    """Everything one ``owt bench`` measured, and where it was written."""

    machine: dict[str, Any]
    corpus: dict[str, Any]
    settings: dict[str, Any]
    conditions: dict[str, float | None]
    """The run's length, and how busy other processes and the hypervisor kept the CPUs."""
    runs: tuple[Run, ...]
    summaries: tuple[Summary, ...]
    scaling: tuple[Scaling, ...]
    recommended_workers: int | None
    out: Path
    plot: Path | None
    """The plot, or None without matplotlib."""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "machine": self.machine,
            "corpus": self.corpus,
            "settings": self.settings,
            "conditions": self.conditions,
            "runs": [dataclasses.asdict(r) for r in self.runs],
            "summaries": [dataclasses.asdict(s) for s in self.summaries],
            "scaling": [dataclasses.asdict(s) for s in self.scaling],
            "recommended_workers": self.recommended_workers,
        }


#: The files ``owt bench`` writes into its ``--out`` folder.
OUTPUTS = ("timings.csv", "bench.json", "scaling.png")


def _write_csv(path: Path, runs: Sequence[Run]) -> None:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for run in runs:
        row = dataclasses.asdict(run)
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    atomic_write(path, text.getvalue())


def corpus_name(result: BenchResult) -> str:
    paths = result.corpus["paths"]
    first = paths[0] if is_url(paths[0]) else Path(paths[0]).name  # a URL's name may be "/"
    name = first + (f" +{len(paths) - 1}" if len(paths) > 1 else "")
    docs, text = result.corpus["documents"] or 0, result.corpus["text_bytes"] or 0
    return f"{name} ({docs:,} documents, {text / 1e6:,.1f} MB of text)"


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def table(result: BenchResult) -> str:
    """The results as a Markdown table, each ratio next to its absolute numbers."""
    head = "| workers | wall s | docs/s | text MB/s | comp. MB/s | CPU s | CPU use | peak PSS MB "
    head += "| 1st doc s | ceiling docs/s | loader ÷ ceiling |"
    for k in range(len(result.settings["vs"])):
        head += f" vs{k + 1} docs/s | loader ÷ vs{k + 1} |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    lookup = {(s.kind, s.workers, s.template): s for s in result.summaries}
    for row in result.scaling:
        cells = _loader_cells(row, lookup[LOADER, row.workers, ""])
        cells += [_rate(lookup[CEILING, row.ceiling_workers, ""]), _fmt(row.efficiency, ".2f")]
        for template, speedup in zip(result.settings["vs"], row.vs_speedup, strict=True):
            cells += [_rate(lookup[VS, row.workers, template]), _fmt(speedup, ".2f", "x")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rate(s: Summary) -> str:
    return "timeout" if s.status == TIMEOUT else _fmt(s.documents_per_s, ",.0f")


def _loader_cells(row: Scaling, s: Summary) -> list[str]:
    wall = "timeout" if s.status == TIMEOUT else _fmt(s.wall_s, ".2f")
    if s.spread is not None:
        wall += f" ±{s.spread / 2:.0%}"  # half the min-max range
    return [
        f"{row.workers}{'*' if row.oversubscribed else ''}",
        wall,
        _fmt(s.documents_per_s, ",.0f"),
        _fmt(s.text_mb_per_s, ".1f"),
        _fmt(s.compressed_mb_per_s, ".1f"),
        _fmt(s.cpu_s, ".1f"),
        _fmt(s.cpu_utilisation, ".0%"),
        f"{s.peak_pss_bytes / 1e6:.0f}",
        _fmt(s.first_document_s, ".2f"),
    ]


def write_outputs(result: BenchResult) -> None:
    _write_csv(result.out / "timings.csv", result.runs)
    atomic_write(result.out / "bench.json", json.dumps(result.to_json(), indent=1) + "\n")


def summary_text(result: BenchResult) -> str:
    """What ``owt bench`` prints: the machine, the corpus, the table, the verdict, the files."""
    m, s, c = result.machine, result.settings, result.conditions
    lines = [
        f"machine: {m['cpu_model']}, {m['cores']} cores, Python {m['python']}, "
        f"liblzma {m['liblzma']}",
        f"corpus: {corpus_name(result)}, {result.corpus['members']} members; "
        f"median of {s['repeat']} runs after {s['warmup']} warm-up",
        f"meanwhile, other processes kept {_fmt(c['other_cores'], '.2f')} of {m['cores']} "
        f"cores busy; CPU steal {_fmt(c['steal'], '.1%')} (the ratios cancel most of this)",
        "",
        table(result),
        "",
    ]
    if any(r.oversubscribed for r in result.scaling):
        lines.append(f"* more workers than cores: compared with the {m['cores']}-core ceiling")
    lines += [f"vs{k + 1}: {t}" for k, t in enumerate(s["vs"])]
    if is_remote(result):
        lines.append(
            f"ceiling: {ceiling_kind(result)} (the same members, fetched by range by the same "
            f"processes); the faster decoder in each run: {ceiling_decoders(result)}"
        )
    else:
        lines.append(f"ceiling: the faster decoder in each run: {ceiling_decoders(result)}")
    lines += _verdict(result)
    return "\n".join(lines)


def is_remote(result: BenchResult) -> bool:
    """Whether the corpus was read from URLs (its ceiling then fetches as well)."""
    return any(is_url(p) for p in result.corpus["paths"])


def ceiling_kind(result: BenchResult) -> str:
    """What the ceiling measured: ``decompression only``, or ``fetch + decompress`` (URLs)."""
    return "fetch + decompress" if is_remote(result) else "decompression only"


def ceiling_decoders(result: BenchResult) -> str:
    """Which decoder the measured ceiling runs used, e.g. ``xz -dc (3 of 3 runs)``."""
    used = [r.decoder for r in result.runs if r.kind == CEILING and not r.warmup and r.decoder]
    if not used:
        return "–"
    counts = {name: used.count(name) for name in sorted(set(used))}
    return ", ".join(f"{name} ({n} of {len(used)} runs)" for name, n in counts.items())


def _verdict(result: BenchResult) -> list[str]:
    lines = []
    if result.recommended_workers is not None:
        lines.append(
            f"recommended: -j {result.recommended_workers} "
            f"(the fewest workers within {GOOD_ENOUGH:.0%} of the best throughput)"
        )
    written = ["timings.csv", "bench.json"] + (["scaling.png"] if result.plot else [])
    lines.append(f"wrote {', '.join(str(result.out / name) for name in written)}")
    if result.plot is None:
        lines.append(f"no plot: matplotlib is not installed ({PLOT_HINT})")
    return lines
