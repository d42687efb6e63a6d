"""What ``owt tokenize`` and ``owt merge`` show alike: a progress bar per phase while they
run (``with_progress``), then one summary of the files written, from the library's report."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from openwebtext.prepare import Progress, Report

__all__ = ["with_progress"]


def _prepare_progress(quiet: bool) -> tuple[Callable[[Progress], None], Callable[[], None]]:
    """A tqdm bar per phase: compressed bytes read (tokenize) or bytes written, and tokens/s."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}
    started: dict[str, float] = {}
    labels = {"tokenize": "tokenize", "permute": "permuted copy", "copy": "merge"}

    def update(event: Progress) -> None:
        bar = bars.get(event.phase)
        if bar is None:
            for other in bars.values():
                other.close()
            bar = bars[event.phase] = tqdm(
                total=event.total, initial=event.done, unit="B", unit_scale=True, disable=quiet,
                file=sys.stderr,
                desc=labels.get(event.phase, event.phase), dynamic_ncols=True, mininterval=0.5,
            )  # fmt: skip
            started[event.phase] = time.perf_counter()
        bar.update(event.done - bar.n)
        if event.tokens and not quiet:
            rate = event.tokens / max(time.perf_counter() - started[event.phase], 1e-9)
            bar.set_postfix_str(f"{rate / 1e6:.2f} M tokens/s", refresh=False)

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return update, close


def _print_prepared(report: Report, seconds: float) -> None:
    meta = report.meta
    if report.already:
        print(f"{report.out} already holds these files (meta.json): nothing to do", file=sys.stderr)
        return
    documents, tokens = meta["documents"], meta["tokens"]
    total = sum(tokens.values())
    files = ", ".join(f"{name} {tokens[name.split('.')[0]]:,}" for name in meta["files"]
                      if name.split(".")[0] in tokens)  # fmt: skip
    if "all" in tokens:
        files = f"tokens.bin {tokens['all']:,} (a slice: join slices with owt merge)"
    print(
        f"{sum(documents.values())} documents, {total:,} tokens in {seconds:.1f} s "
        f"({total / max(seconds, 1e-9):,.0f} tokens/s{', resumed' if report.resumed else ''}): "
        f"{files} ({meta['dtype']}) in {report.out}",
        file=sys.stderr,
    )
    skipped = meta["skipped_members"] + meta["skipped_documents"] + meta["partial_members"]
    if skipped:
        print(
            f"skipped {meta['skipped_members']} members, {meta['skipped_documents']} documents; "
            f"{meta['partial_members']} members cut short (their documents before the cut kept)",
            file=sys.stderr,
        )
        for line in report.skipped[:20]:
            print(f"  skipped: {line}", file=sys.stderr)


def with_progress(run: Callable[[Callable[[Progress], None]], Report], quiet: bool) -> int:
    """Run a tokenize or merge under its progress bars (closed however it ends, Ctrl-C
    included, so the message after them stands on its own line), then say what it wrote."""
    update, close = _prepare_progress(quiet)
    start = time.perf_counter()
    try:
        report = run(update)
    finally:
        close()
    _print_prepared(report, time.perf_counter() - start)
    return 0
