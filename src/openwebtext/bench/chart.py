"""scaling.png: throughput against workers, drawn with matplotlib when it is installed."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openwebtext.bench.common import CEILING, LOADER, TIMEOUT, VS
from openwebtext.bench.report import BenchResult, ceiling_decoders, ceiling_kind, corpus_name
from openwebtext.bench.summary import Summary
from openwebtext.files import atomic_write


def plot(result: BenchResult, path: Path) -> bool:
    """Draw throughput against workers into ``path`` with matplotlib's Agg backend.

    Returns:
        True, or False (and nothing drawn) when matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return False
    fig = Figure(figsize=(8, 5), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas, without touching pyplot's global backend
    ax = fig.add_subplot()
    _draw(ax, result)
    image = io.BytesIO()
    fig.savefig(image, format="png")
    atomic_write(path, image.getvalue())
    return True


def _draw(ax: Any, result: BenchResult) -> None:
    cores = result.machine["cores"]
    x = [r.workers for r in result.scaling]
    handles = []
    for label, fmt, summaries in _curves(result):
        y, err = _series(result, summaries)
        bars = ax.errorbar(x, y, yerr=err, fmt=fmt, capsize=3, label=label)
        handles.append(bars)
        timeouts = [n for n, s in zip(x, summaries, strict=True) if s.status == TIMEOUT]
        if timeouts:
            color = bars.lines[0].get_color()
            (mark,) = ax.plot(timeouts, [0] * len(timeouts), "X", color=color, clip_on=False)
            mark.set_label(f"{label.split(':')[0]}: timed out")
            handles.append(mark)
    base = next((r for r in result.scaling if r.loader_documents_per_s), None)
    if base is not None and base.loader_documents_per_s:
        # Linear in the workers that have a core of their own, flat past the cores.
        ideal = [base.loader_documents_per_s * min(n, cores) / base.workers for n in x]
        label = f"linear from {base.workers} worker, up to {cores} cores"
        (line,) = ax.plot(x, ideal, ":", color="grey", label=label)
        handles.append(line)
    if max(x) > cores:
        handles.append(ax.axvspan(cores, max(x), color="0.92", label="more workers than cores"))
    ax.set_xticks(x)
    ax.set_xlabel("workers (processes)")
    ax.set_ylabel("documents / s (median, bars: min to max)")
    _text_axis(ax, result)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize="small")
    machine = f"{result.machine['cpu_model']}, {cores} cores"
    ax.set_title(f"owt bench: {corpus_name(result)}\n{machine}", fontsize="medium")


def _curves(result: BenchResult) -> list[tuple[str, str, list[Summary]]]:
    """(label, format, one summary per worker count) of each curve to draw."""
    cores = result.machine["cores"]
    table = {(s.kind, s.workers, s.template): s for s in result.summaries}
    x = [r.workers for r in result.scaling]
    ceiling = f"ceiling: {ceiling_kind(result)}, {ceiling_decoders(result)}"
    curves = [
        ("openwebtext loader", "o-", [table[LOADER, n, ""] for n in x]),
        (ceiling, "s--", [table[CEILING, min(n, cores), ""] for n in x]),
    ]
    for k, template in enumerate(result.settings["vs"]):
        label = f"vs{k + 1}: {shorten_command(template)}"
        curves.append((label, "^-", [table[VS, n, template] for n in x]))
    return curves


def shorten_command(command: str, width: int = 48) -> str:
    """A ``--vs`` command for a legend: as typed, but an absolute path keeps only its last
    folder and file (``python …/seed/main.py -j {workers} {paths}``), then cut to ``width``."""
    words = []
    for word in command.split(" "):
        parts = word.split("/")
        if word.startswith("/") and len(parts) > 3:
            word = "…/" + "/".join(parts[-2:])
        words.append(word)
    text = " ".join(words)
    return text if len(text) <= width else text[: width - 1] + "…"


def _series(
    result: BenchResult, summaries: Sequence[Summary]
) -> tuple[list[float], list[list[float]]]:
    """Median documents/s, and error bars down to the slowest and up to the fastest run."""
    docs = result.corpus["documents"] or 0
    medians, low, high = [], [], []
    for s in summaries:
        mid = s.documents_per_s or float("nan")
        medians.append(mid)
        low.append(mid - docs / s.wall_max_s if s.wall_max_s else 0.0)
        high.append(docs / s.wall_min_s - mid if s.wall_min_s else 0.0)
    return medians, [low, high]


def _text_axis(ax: Any, result: BenchResult) -> None:
    docs, text = result.corpus["documents"], result.corpus["text_bytes"]
    if not docs or not text:
        return
    mb_per_doc = text / docs / 1e6
    right = ax.secondary_yaxis(
        "right", functions=(lambda d: d * mb_per_doc, lambda m: m / mb_per_doc)
    )
    right.set_ylabel("text MB / s")
