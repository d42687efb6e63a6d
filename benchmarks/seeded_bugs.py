"""A seeded-bug round: one-line behavioural mutants of the input kinds, run against their tests.

Usage: python benchmarks/seeded_bugs.py [--only ID ...] [--list] [--markdown FILE]

Each mutant replaces one exact line fragment (found exactly once) of one module by another:
an off-by-one, a dropped check, a swapped condition. The round copies ``src/`` to a temporary
folder once, and for each mutant writes the mutated module there, runs the test files of its
group against that copy (``PYTHONPATH``; ``pytest -x``, the repository's own ``tests/``),
records the first failing test (caught) or none (survived), and puts the module back
(``--wide``: a survivor runs the group's wider test files too). The
checkout is never changed. A mutant whose tests run past ``--timeout`` seconds is caught by
the timeout (a loop that no longer ends). Not part of the test suite: the round takes
minutes. docs/testing.md holds its table.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "src/openwebtext"

#: The test files (or ``file::test`` nodes) each group of mutants runs: those of its own
#: modules, then (``--wide``, only for a mutant none of them catches) the wider ones that also
#: cover them (the corpus contract over every kind, the facades, the commands).
GROUPS = {
    "parquet": (
        ["test_parquet.py", "test_tables_damage.py", "test_seeded_survivors.py",
         "test_document_names.py", "test_corpus_identity.py", "test_parquet_remote.py"],
        ["test_inputs_damage.py", "test_corpus_contract.py", "test_parquet_facades.py"],
    ),
    "jsonl": (
        ["test_jsonl.py", "test_seeded_survivors.py", "test_tables_damage.py",
         "test_seeded_round.py"],
        ["test_document_names.py", "test_jsonl_remote.py", "test_inputs_damage.py",
         "test_corpus_contract.py", "test_remote_inputs.py"],
    ),
    "tokens": (
        ["test_tokenfiles.py", "test_tokens_damage.py", "test_seeded_survivors.py",
         "test_token_corpus.py", "test_document_names.py"],
        ["test_corpus_contract.py", "test_outputs_stale.py", "test_prepare_formats.py",
         "test_remote_inputs.py"],
    ),
    "prepare": (
        ["test_prepare.py::test_merge_refuses_missing_duplicated_and_foreign_slices",
         "test_prepare.py::test_shards_merge_into_the_files_of_one_run",
         "test_prepare_finished.py", "test_prepare_records.py",
         "test_outputs_stale.py", "test_prepare_readback.py", "test_seeded_survivors.py",
         "test_seeded_round.py"],
        ["test_prepare.py", "test_prepare_formats.py", "test_prepare_skips.py",
         "test_prepare_lock.py", "test_cli_tokenize.py"],
    ),
    # (test_prepare_state.py is left out: its Hypothesis deadlines fail on a loaded machine,
    # whatever the mutant.)
    "stream": (
        ["test_stream_shares.py", "test_stream_schema.py", "test_seeded_survivors.py",
         "test_seeded_round.py"],
        ["test_stream_reshard.py", "test_stream_stats.py", "test_stream_policies.py",
         "test_stream_sharding.py"],
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    id: str
    module: str  # under src/openwebtext
    old: str
    new: str
    what: str
    group: str


M = Mutant
MUTANTS = [
    # -- parquet: index/parquet.py ------------------------------------------------------------
    M("P1", "index/parquet.py", "if len(tail) != guess or tail[-4:] != _MAGIC:",
      "if len(tail) != guess:", "the footer's PAR1 magic not checked", "parquet"),
    M("P2", "index/parquet.py", "if length + 12 > size:", "if length + 8 > size:",
      "a footer length 4 bytes too long passes", "parquet"),
    M("P3", "index/parquet.py", "if length + 8 > len(tail):", "if length > len(tail):",
      "a footer a few bytes past the first read is not read again", "parquet"),
    M("P4", "index/parquet.py", "start = min(start, dictionary)", "start = max(start, dictionary)",
      "a chunk's span starts at its data pages, not its dictionary page", "parquet"),
    M("P5", "index/parquet.py", "if start < 4 or start + size > f.size - len(footer):",
      "if start < 4 or start + size > f.size:", "a column chunk overlapping the footer",
      "parquet"),
    M("P6", "index/parquet.py", "if meta.row_group(k).num_rows == 0:",
      "if meta.row_group(k).num_rows < 0:", "a row group of 0 rows read as any other", "parquet"),
    M("P7", "index/parquet.py", "if kind not in _TEXT_TYPES:", "if kind == 'null':",
      "a column that is not text accepted at index time", "parquet"),
    M("P8", "index/parquet.py",
      "if known != {\"url\": url, \"size\": info.size, \"identity\": info.identity}:",
      "if known[\"url\"] != url:", "a cached remote footer used without its file's identity",
      "parquet"),
    M("P9", "index/parquet.py",
      "    if not units:\n        raise CorpusError(\"parquet file without row groups",
      "    if False:\n        raise CorpusError(\"parquet file without row groups",
      "a parquet file of no row group is a corpus file of nothing", "parquet"),
    # -- parquet: engine/tables.py ------------------------------------------------------------
    M("T1", "engine/tables.py", "if chunk.total_uncompressed_size > limit:",
      "if chunk.total_uncompressed_size > 4 * limit:",
      "plain values up to 4x max_member_bytes decoded", "parquet"),
    M("T2", "engine/tables.py", "        if total > limit:", "        if total > 100 * limit:",
      "a dictionary bomb decoded to 100x the limit", "parquet"),
    M("T3", "engine/tables.py", "wide = array.type in (pa.large_string(), pa.large_binary())",
      "wide = array.type == pa.large_string()", "large_binary offsets read as int32", "parquet"),
    M("T4", "engine/tables.py", "            offsets[k] = -1\n",
      "            pass\n", "a null text kept as an empty document", "parquet"),
    M("T5", "engine/tables.py", 'names = [f"{base}#{first + k}" for k in range(n)]',
      'names = [f"{base}#{k}" for k in range(n)]',
      "a row's name is its row in its row group, not in the file", "parquet"),
    M("T6", "engine/tables.py",
      "start = min(chunk.data_page_offset, dictionary or chunk.data_page_offset)",
      "start = chunk.data_page_offset", "the column found by its data pages only", "parquet"),
    M("T7", "engine/tables.py", "ends = ends[array.offset : array.offset + n + 1]",
      "ends = ends[: n + 1]", "a sliced array's offsets read from its buffer's start", "parquet"),
    M("T8", "engine/tables.py", "if at < 0 or at > len(self.data):", "if at > len(self.data):",
      "pyarrow may read before the column chunk", "parquet"),
    # -- JSON lines: engine/tables.py ---------------------------------------------------------
    M("J1", "engine/tables.py", 'text = text[: text.rfind(b"\\n") + 1]  # the lines before',
      "text = text  # the lines before", "a cut file's partial last line read", "jsonl"),
    M("J2", "engine/tables.py", 'if line in (b"", b"\\r"):', 'if line == b"":',
      "a CRLF blank line is a bad document", "jsonl"),
    M("J3", "engine/tables.py", "            if not isinstance(value, dict):\n",
      "            if isinstance(value, bool):\n", "a JSON value that is not an object",
      "jsonl"),
    M("J4", "engine/tables.py", "if not isinstance(document, str):",
      "if document is None:", "a field that is not a string", "jsonl"),
    M("J5", "engine/tables.py", 'name = f"{base}@{at + start}"', 'name = f"{base}@{start}"',
      "a chunk's documents named from the chunk's start, not the file's", "jsonl"),
    M("J6", "engine/tables.py", "        replaced += bad\n", "", "replaced lines not counted",
      "jsonl"),
    M("J7", "engine/tables.py", "if not line.strip():", "if not line:",
      "a whitespace-only line", "jsonl"),
    M("J8", "engine/tables.py", "except (ValueError, KeyError, UnicodeEncodeError, RecursionError)",
      "except (ValueError, KeyError, UnicodeEncodeError)", "a line nested too deep", "jsonl"),
    # -- JSON lines: index/jsonl.py -----------------------------------------------------------
    M("J9", "index/jsonl.py", "if head.startswith(LFS_POINTER):", "if head.startswith(b'?'):",
      "a Git LFS pointer named .jsonl", "jsonl"),
    M("J10", "index/jsonl.py", "        if found != compression:\n",
      "        if found is None and False:\n", "bytes that are not the compression named",
      "jsonl"),
    M("J11", "index/jsonl.py", 'return kind if field == "text" else f"{kind}:{field}"',
      "return kind", "the field not part of the unit's kind", "jsonl"),
    M("J12", "index/jsonl.py", 'member = base if start == 0 else f"{base}@{start}"',
      "member = base", "every chunk of a file one member name", "jsonl"),
    M("J13", "index/jsonl.py", "    if size == 0:\n        raise CorpusError(\"empty file\"",
      "    if size < 0:\n        raise CorpusError(\"empty file\"", "an empty .jsonl accepted",
      "jsonl"),
    M("J14", "index/jsonl.py", "            return position + newline + 1",
      "            return position + newline", "a plain chunk cut before its newline", "jsonl"),
    # -- token files: tokenfiles/ -------------------------------------------------------------
    M("K1", "tokenfiles/llmc.py", "if head[1] != LLMC_VERSION:", "if head[1] < 0:",
      "an llm.c shard of another version", "tokens"),
    M("K2", "tokenfiles/llmc.py", "if tokens < 0 or size != LLMC_HEADER_BYTES + 2 * tokens:",
      "if tokens < 0:", "an llm.c count its file's size does not hold", "tokens"),
    M("K3", "tokenfiles/llmc.py", "return cuts or [(0, 0)]", "return cuts",
      "no shard at all for no document", "tokens"),
    M("K4", "tokenfiles/llmc.py", "        stop = max(stop, first + 1)\n", "",
      "a document longer than a shard never cut (endless)", "tokens"),
    M("K5", "tokenfiles/megatron.py", "if version != 1:", "if version > 9:",
      "a megatron index of another version", "tokens"),
    M("K6", "tokenfiles/megatron.py",
      "if (sizes < 0).any() or not np.array_equal(pointers, cumulative[:-1] * dtype.itemsize):",
      "if (sizes < 0).any():", "megatron pointers not checked", "tokens"),
    M("K7", "tokenfiles/megatron.py", "if indices[0] != 0 or indices[-1] != sequences or",
      "if indices[0] != 0 or", "megatron document indices short of the sequences", "tokens"),
    M("K8", "tokenfiles/megatron.py", "if data.size != want or documents < 1:",
      "if data.size < want or documents < 1:", "a megatron index with bytes past its end",
      "tokens"),
    M("K9", "tokenfiles/datatrove.py", "or last != tokens:", "or last > tokens:",
      "a .ds.index that stops short of its ids", "tokens"),
    M("K10", "tokenfiles/common.py", "if len(ids) and (not ends.size or ends[-1] != len(ids)):",
      "if len(ids) and not ends.size:", "ids after the last end-of-text dropped", "tokens"),
    M("K11", "tokenfiles/opening.py", "if want != len(ids):", "if want > len(ids):",
      "a megatron .bin longer than its .idx says", "tokens"),
    M("K12", "tokenfiles/opening.py", "key = (name, stat.st_size, stat.st_mtime_ns)",
      "key = (name, stat.st_size, 0)", "the opened-file cache keyed without mtime", "tokens"),
    M("K13", "tokenfiles/opening.py", "return not words[3:].any() and (fits or",
      "return False and (fits or", "a damaged llm.c magic read as a bare train.bin", "tokens"),
    M("K14", "tokenfiles/megatron.py", "pointers = starts * np.dtype(dtype).itemsize",
      "pointers = starts", "megatron pointers written in ids, not bytes", "tokens"),
    # -- token files: index/tokens.py ---------------------------------------------------------
    M("X1", "index/tokens.py", "_once(seen, (st.st_dev, st.st_ino), name)",
      "_once(seen, name, name)", "a token file given twice by another path", "tokens"),
    M("X2", "index/tokens.py", "offset, size = base + start * itemsize,",
      "offset, size = start * itemsize,", "an llm.c shard's header read as ids", "tokens"),
    M("X3", "index/tokens.py",
      'files = distinct_names(given_names) if len(given_names) > 1 else {}',
      "files = {}", "documents of several files named by index only", "tokens"),
    M("X4", "index/tokens.py", "if (ends[-1] if ends.size else 0) * ids_dtype.itemsize != size:",
      "if (ends[-1] if ends.size else 0) * ids_dtype.itemsize > size:",
      "a remote .bin longer than its .idx", "tokens"),
    M("X5", "index/tokens.py",
      "stop = max(int(np.searchsorted(ends, start + unit_tokens, side=\"right\")), first + 1)",
      "stop = max(int(np.searchsorted(ends, start + unit_tokens, side=\"left\")), first + 1)",
      "a unit one document short of unit_tokens", "tokens"),
    M("X6", "index/tokens.py",
      "eot if eot is not None else known_eot if isinstance(known_eot, int) else 50256",
      "eot if eot is not None else 50256", "meta.json's end-of-text ignored", "tokens"),
    # -- prepare ------------------------------------------------------------------------------
    M("R1", "prepare/merging.py", "        if other != config:\n",
      "        if other.tokenizer != config.tokenizer:\n",
      "slices of different tokenizer fingerprints merged", "prepare"),
    M("R2", "prepare/merging.py", "    if end != units:\n", "    if end > units + 1:\n",
      "a missing last slice merged", "prepare"),
    M("R3", "prepare/merging.py",
      "        if piece.start < end:\n", "        if piece.start < end - 1:\n",
      "slices overlapping by one unit", "prepare"),
    M("R4", "prepare/meta.py",
      "if any(found[name] != info.bytes for name, info in meta.files.items()):",
      "if any(found[name] < 0 for name, info in meta.files.items()):",
      "finished_run not comparing file sizes", "prepare"),
    M("R5", "prepare/meta.py", "if meta.config != codec.replace(config, merge_of=None):",
      "if meta.config.tokenizer != config.tokenizer:", "finished_run on another config",
      "prepare"),
    M("R6", "prepare/workdir.py",
      "        self.guard()  # no meta.json over files another run may have replaced meanwhile\n",
      "", "no second commit guard before meta.json", "prepare"),
    M("R7", "prepare/workdir.py", "if owned(stale.name) and stale.name not in names:",
      "if stale.name.endswith('.idx') and stale.name not in names:",
      "an earlier run's shards and .ds files left", "prepare"),
    M("R8", "prepare/state.py",
      "        if set(counts.documents) != set(config.splits()):\n",
      "        if False:\n", "Counts keys not checked against the run's kind", "prepare"),
    M("R9", "prepare/outputs.py", "if owned(name) and name not in keep:",
      "if name.endswith('.idx') and name not in keep:",
      "an earlier run's files left behind a URL", "prepare"),
    M("R10", "prepare/convert.py",
      "if len(ends) != (documents := meta.counts.documents[split]):",
      "if len(ends) < (documents := meta.counts.documents[split]):",
      "a format pass over ids holding more documents than counted", "prepare"),
    # -- the stream's pieces #39 named as unpinned --------------------------------------------
    M("S1", "plan.py", "            trims[last - first] = (0, stop - begins[1])\n",
      "            pass\n",
      "a share's last unit not trimmed", "stream"),
    M("S2", "stream/schema.py",
      "    cut: Count = 0\n    \"\"\"Concat batches: ids of its next document",
      "    cut: int = 0\n    \"\"\"Concat batches: ids of its next document",
      "an OldRank cut below zero accepted", "stream"),
    M("S3", "plan.py", "        if (lo, hi) != (0, counts[0]):\n", "        if lo != 0:\n",
      "a share's first unit cut at its end not trimmed", "stream"),
    M("S4", "plan.py", "    while need > 0 and end < lap_end:\n", "    while need > 0:\n",
      "an evened-out pass crossing its lap's end", "stream"),
    M("S5", "stream/counters.py",
      "        return self.skipped_members + self.skipped_documents + self.partial_members",
      "        return self.skipped_members + self.skipped_documents",
      "a member cut short is no skip", "stream"),
    M("S6", "stream/resharding.py", "exact=tuple(d.counters.skips == 0 for d in ordered),",
      "exact=tuple(True for d in ordered),", "every old rank taken as without skips",
      "stream"),
]  # fmt: skip


@dataclass
class Outcome:
    mutant: Mutant
    caught_by: str | None  # the first failing test; None: survived
    seconds: float


#: A run of the tests that did not end in time: neither caught nor survived (undecided).
TIMEOUT = "undecided: timeout"
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def apply(source: str, mutant: Mutant) -> str:
    found = source.count(mutant.old)
    if found != 1:
        raise SystemExit(f"{mutant.id}: {mutant.module} holds its line {found} times, not once")
    mutated = source.replace(mutant.old, mutant.new)
    try:  # a mutant that does not compile is no behavioural mutant
        compile(mutated, mutant.module, "exec")
    except SyntaxError as exc:
        raise SystemExit(f"{mutant.id}: {mutant.module} mutated does not compile: {exc}") from None
    return mutated


def diff(mutant: Mutant) -> str:
    """The mutant as a unified diff of its module."""
    path = ROOT / PACKAGE / mutant.module
    before = path.read_text().splitlines(keepends=True)
    after = apply(path.read_text(), mutant).splitlines(keepends=True)
    name = f"{PACKAGE}/{mutant.module}"
    return "".join(difflib.unified_diff(before, after, f"a/{name}", f"b/{name}", n=1))


def run(
    mutant: Mutant, copy: Path, timeout: float, wide: bool, tests: list[str] | None = None
) -> Outcome:
    target = copy / PACKAGE / mutant.module
    original = target.read_text()
    target.write_text(apply(original, mutant))
    start = time.monotonic()
    try:
        caught = None
        first, wider = GROUPS[mutant.group] if tests is None else (tests, [])
        for files in [first, wider] if wide else [first]:  # wider only if the first miss it
            caught = _first_failure(files, copy, timeout)
            if caught is not None:
                break
    finally:
        target.write_text(original)
    return Outcome(mutant, caught, time.monotonic() - start)


def _first_failure(files: list[str], copy: Path, timeout: float) -> str | None:
    """The first test of ``files`` that fails against the package in ``copy``, or None."""
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "PYTHONDONTWRITEBYTECODE": "1",
           "HYPOTHESIS_PROFILE": "ci"}  # fmt: skip  # deadlines of 5 s: a loaded machine
    tests = [str(ROOT / "tests" / name) for name in files]
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:  # a hung test fails by pytest-timeout before this
        return f"{TIMEOUT} ({timeout:.0f} s)"
    failed = FAILED.search(done.stdout)
    if failed:
        return failed.group(1).removeprefix("tests/")
    return f"pytest exit {done.returncode}" if done.returncode not in (0, 5) else None


def table(outcomes: list[Outcome]) -> str:
    rows = ["| mutant | module | what it breaks | caught by |", "|---|---|---|---|"]
    for o in outcomes:
        by = f"`{o.caught_by}`" if o.caught_by else "**survived**"
        rows.append(f"| {o.mutant.id} | `{o.mutant.module}` | {o.mutant.what} | {by} |")
    decided = [o for o in outcomes if not (o.caught_by or "").startswith(TIMEOUT)]
    caught = sum(o.caught_by is not None for o in decided)
    rows.append("")
    rows.append(
        f"{caught} of {len(decided)} caught ({100 * caught / max(len(decided), 1):.0f}%)"
        f"; {len(outcomes) - len(decided)} undecided (timeout)."
    )
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--group", nargs="*", choices=sorted(GROUPS), help="only these groups")
    parser.add_argument("--list", action="store_true", help="print each mutant's diff, run none")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--wide",
        action="store_true",
        help="a mutant the group's own tests miss runs the wider ones too",
    )
    parser.add_argument("--tests", nargs="*", help="these test files instead of the group's")
    parser.add_argument("--markdown", help="write the table to this file")
    args = parser.parse_args()
    chosen = [
        m
        for m in MUTANTS
        if (not args.only or m.id in args.only) and (not args.group or m.group in args.group)
    ]
    # A SIGTERM unwinds as Ctrl-C does: the running tests are killed, the copy removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for mutant in chosen:  # every line found once before anything runs
        apply((ROOT / PACKAGE / mutant.module).read_text(), mutant)
    if args.list:
        for mutant in chosen:
            print(f"# {mutant.id}: {mutant.what} ({mutant.group})\n{diff(mutant)}")
        return
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="owt-mutants-") as folder:
        copy = Path(folder)
        shutil.copytree(ROOT / "src", copy / "src",
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        for mutant in chosen:
            outcome = run(mutant, copy, args.timeout, args.wide, args.tests)
            outcomes.append(outcome)
            print(f"{mutant.id:4} {outcome.seconds:6.1f} s  {outcome.caught_by or 'SURVIVED'}",
                  flush=True)  # fmt: skip
    text = table(outcomes)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
