"""What ``owt tokenize`` and ``owt merge`` show alike: a progress bar per phase while they
run (``with_progress``), then one summary of the files written, from the library's report;
rates count this run's work only (a resumed run's totals hold earlier runs' too), and a
split too small to train on is said."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

from openwebtext.cli.args import plural
from openwebtext.options import NANOGPT_SPLIT
from openwebtext.prepare import Progress, Report

__all__ = ["with_progress"]


class _Bars:
    """A tqdm bar per phase: compressed bytes read (tokenize) or bytes written, and the
    tokens/s of this run's work: the tokens counted since the phase's first event over the
    seconds since it (a resumed run's events may count earlier runs' tokens too)."""

    _LABELS: ClassVar[dict[str, str]] = {
        "tokenize": "tokenize",
        "permute": "permuted copy",
        "copy": "merge",
    }

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bars: dict[str, Any] = {}
        self.first: dict[str, tuple[float, int]] = {}  # phase: (time, tokens) of its first event

    def update(self, event: Progress) -> None:
        from tqdm import tqdm

        now = time.perf_counter()
        bar = self.bars.get(event.phase)
        if bar is None:
            for other in self.bars.values():
                other.close()
            bar = self.bars[event.phase] = tqdm(
                total=event.total, initial=event.done, unit="B", unit_scale=True,
                disable=self.quiet, file=sys.stderr,
                desc=self._LABELS.get(event.phase, event.phase), dynamic_ncols=True,
                mininterval=0.5,
            )  # fmt: skip
            self.first[event.phase] = (now, event.tokens)
        bar.update(event.done - bar.n)
        began, tokens = self.first[event.phase]
        if event.tokens > tokens and now > began and not self.quiet:
            rate = (event.tokens - tokens) / (now - began)
            bar.set_postfix_str(f"{rate / 1e6:.2f} M tokens/s", refresh=False)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _print_prepared(report: Report, seconds: float) -> None:
    meta = report.meta
    if report.already:  # (a format asked for: written beside them, if it was not)
        done = "nothing to do"
        if report.format is not None:
            done = f"not run again; {report.format}'s files are beside them"
        print(f"{report.out} already holds these files (meta.json): {done}", file=sys.stderr)
        return
    counts, config = meta["counts"], meta["config"]
    documents, tokens = counts["documents"], counts["tokens"]
    total = sum(tokens.values())
    files = ", ".join(f"{name} {tokens[name.split('.')[0]]:,}" for name in meta["files"]
                      if name.split(".")[0] in tokens)  # fmt: skip
    if "all" in tokens:
        files = f"tokens.bin {tokens['all']:,} (a slice: join slices with owt merge)"
    rate = f"{total / max(seconds, 1e-9):,.0f} tokens/s"
    if report.resumed:  # the totals hold earlier runs' work: the rate is of this run's only
        rate = "resumed"
        tokenized = report.tokenized  # this run's work only
        if tokenized:
            rate = (
                f"{tokenized:,} tokens in this run, {tokenized / max(seconds, 1e-9):,.0f} "
                "tokens/s, resumed"
            )
    print(
        f"{plural(sum(documents.values()), 'document')}, {total:,} tokens in {seconds:.1f} s "
        f"({rate}): {files} ({config['dtype']}) in {report.out}",
        file=sys.stderr,
    )
    files = counts.get("skipped_files", 0)  # left out when the corpus was opened
    skipped = counts["skipped_members"] + counts["skipped_documents"] + counts["partial_members"]
    if skipped or files:
        print(
            f"skipped {plural(files, 'file')} (not read at all), "
            f"{plural(counts['skipped_members'], 'member')}, "
            f"{plural(counts['skipped_documents'], 'document')}; "
            f"{plural(counts['partial_members'], 'member')} cut short (their documents before "
            "the cut kept)",
            file=sys.stderr,
        )
        for line in report.skipped[:20]:
            print(f"  skipped: {line}", file=sys.stderr)
        unnamed = skipped + files - len(report.skipped)  # (an earlier run's, or the slices')
        if unnamed > 0:
            print(f"  ({plural(unnamed, 'skip')} not named here: by the run this one went on "
                  "from, or by the slices merged, named in their output)", file=sys.stderr)
    _warn_small_splits(meta)


#: Tokens of one training block (nanoGPT's ``block_size`` for GPT-2): a split with fewer
#: cannot give a single batch (nanoGPT's ``train.py`` dies on ``np.memmap`` of an empty file).
BLOCK_TOKENS = 1024


def _warn_small_splits(meta: dict[str, Any]) -> None:
    """Say when train.bin or val.bin holds fewer tokens than one block, and how to get more."""
    counts, config = meta["counts"], meta["config"]
    tokens, documents = counts["tokens"], counts["documents"]
    if "all" in tokens:  # a slice: its splits are made by the merge
        return
    total = sum(tokens.values())
    for name in ("train", "val"):
        if name not in tokens or tokens[name] >= BLOCK_TOKENS:
            continue
        size = "is empty" if tokens[name] == 0 else f"holds only {tokens[name]:,} tokens"
        line = (
            f"warning: {name}.bin {size} ({plural(documents.get(name, 0), 'document')}), less "
            f"than one block of {BLOCK_TOKENS:,} tokens: a trainer cannot take a batch from it"
        )
        # A keyed hash holds out each document by chance: aim at a few blocks and documents.
        n = sum(documents.values())
        wanted = min(0.5, max(4 * BLOCK_TOKENS / max(total, 1), 5 / max(n, 1)))
        if total < 2 * BLOCK_TOKENS and config.get("take") is not None:
            line += f"; the run took --take {config['take']} documents: take more"
        elif total < 2 * BLOCK_TOKENS:
            line += "; the corpus is too small for both splits"
        elif name == "val" and config["split_rule"] == "hash" and wanted > config["val_fraction"]:
            line += (
                f"; hold out more with --val-fraction {wanted:.2g} (now "
                f"{config['val_fraction']}), or use --split nanogpt, which always holds out "
                f"ceil({NANOGPT_SPLIT.fraction} n) >= 1 documents"
            )
        print(line, file=sys.stderr)


def with_progress(run: Callable[[Callable[[Progress], None]], Report], quiet: bool) -> int:
    """Run a tokenize or merge under its progress bars (closed however it ends, Ctrl-C
    included, so the message after them stands on its own line), then say what it wrote."""
    bars = _Bars(quiet)
    start = time.perf_counter()
    try:
        report = run(bars.update)
    finally:
        bars.close()
    _print_prepared(report, time.perf_counter() - start)
    return 0
