"""``owt bench``: loader throughput against worker count, next to the decompression ceiling.

Every configuration (the loader, the ceiling, or a ``--vs`` command, at one worker count)
runs as a fresh process, so start-up is counted as the reference ``measure.sh`` counted it.
Rounds are interleaved (every configuration once, then every configuration again, ...) so
that a shared machine's drift in speed lands on all of them alike; the first ``warmup``
rounds are discarded.

Measured per run, by this (parent) process:

- wall seconds, from spawn to exit;
- CPU seconds, user + system, of the child and every descendant it waited for
  (``os.wait4``);
- peak memory: the largest sum of PSS over the child's process group, sampled every
  0.1 s (shared pages counted once), and the largest single process's peak RSS
  (``ru_maxrss``).

Reported by the loader child (``python -m openwebtext.bench run-one``): documents, text
bytes, the compressed bytes of the members it consumed, the time from spawn to its first
document, and its own (consumer) CPU seconds. The ceiling child (``... ceiling-one``) runs
N processes that only ``pread`` and decompress those same members: no tar parsing, no
transfer, no text. Efficiency is loader throughput / ceiling throughput, paired by round.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import dataclasses
import functools
import json
import multiprocessing
import os
import platform
import resource
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import Corpus, Loader, Options, OWTError, Unit, __version__
from .formats import decompress
from .plan import plan
from .synth import paths_or_default
from .workers import cpu_count

__all__ = [
    "BenchError",
    "BenchResult",
    "Run",
    "Settings",
    "Summary",
    "add_parser",
    "machine_info",
    "main",
    "run_bench",
]

LOADER, CEILING, VS = "loader", "ceiling", "vs"
OK, TIMEOUT = "ok", "timeout"
EXIT_INTERRUPTED = 130
#: How often the memory of a running child's process group is sampled.
SAMPLE_SECONDS = 0.1
#: Worker counts within this fraction of the best throughput are "as good".
GOOD_ENOUGH = 0.05
#: Environment variable through which a child learns when it was spawned.
STARTED_ENV = "OWT_BENCH_STARTED"
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
)
PLOT_HINT = "pip install 'openwebtext[bench]'"


class BenchError(Exception):
    """A benchmark that cannot go on: a child failed, or its report is unreadable."""


def _now() -> float:
    # CLOCK_MONOTONIC is one clock for every process on Linux, so a child can subtract the
    # parent's spawn time from its own reading.
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# ---------------------------------------------------------------------------------------
# The children
# ---------------------------------------------------------------------------------------


def _plan_units(corpus: Corpus, seed: int, count: int | None) -> list[Unit]:
    """The first ``count`` units (all when None) in the loader's order for ``seed``."""
    order = plan(len(corpus.units), shuffle=True, seed=seed)
    return [corpus.units[i] for i in order[:count]]


def _run_one(args: argparse.Namespace) -> int:
    """Child: stream the documents through the loader, print one JSON line."""
    started = float(os.environ.get(STARTED_ENV, _now()))
    corpus = Corpus.open(args.paths)
    cpu = time.process_time()
    first_document_s = None
    with Loader(corpus, workers=args.workers, seed=args.seed, take=args.take).iter() as docs:
        for _ in docs:
            first_document_s = _now() - started
            break
        for _ in docs:
            pass
        stats = docs.stats
    report = {
        "documents": stats.documents,
        "text_bytes": stats.text_bytes,
        "units": stats.units,
        "compressed_bytes": sum(u.size for u in _plan_units(corpus, args.seed, stats.units)),
        "first_document_s": first_document_s,
        "consumer_cpu_s": time.process_time() - cpu,
    }
    print(json.dumps(report))
    return 0


def _decompress_unit(unit: Unit) -> int:
    fd = os.open(unit.path, os.O_RDONLY)
    try:
        raw = os.pread(fd, unit.size, unit.offset)
    finally:
        os.close(fd)
    return len(decompress(raw, unit.kind, Options.max_member_bytes))


def _ceiling_one(args: argparse.Namespace) -> int:
    """Child: N processes only read and decompress the members; print one JSON line."""
    units = _plan_units(Corpus.open(args.paths), args.seed, args.units)
    start = _now()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        decompressed = sum(pool.imap_unordered(_decompress_unit, units))
    report = {
        "units": len(units),
        "compressed_bytes": sum(u.size for u in units),
        "decompressed_bytes": decompressed,
        "decompress_s": _now() - start,
    }
    print(json.dumps(report))
    return 0


# ---------------------------------------------------------------------------------------
# Running and measuring one child
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finished:
    """How one child process ended and what it cost."""

    status: str
    """``ok``, or ``timeout`` (killed after the timeout)."""
    exit_code: int | None
    wall_s: float
    cpu_s: float
    peak_pss_bytes: int
    max_rss_bytes: int
    stdout: str
    stderr_tail: str


def _group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``, from /proc (empty where there is none)."""
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def _pss_bytes(pid: int) -> int:
    """Proportional set size of ``pid`` (0 if it is gone or the kernel cannot say)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _kill_group(pgid: int) -> None:
    # Also after a normal exit: a straggler left behind would slow the next measurement.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: poll instead
        return None


def _watch(pid: int, deadline: float) -> tuple[int | None, resource.struct_rusage | None, int]:
    """Wait for ``pid`` until ``deadline``, sampling its group's memory.

    Returns:
        (wait status or None on timeout, its rusage or None, peak summed PSS in bytes).
    """
    pidfd = _pidfd(pid)
    peak = 0
    try:
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage, peak
            peak = max(peak, sum(_pss_bytes(p) for p in _group_pids(pid)))
            wait = min(SAMPLE_SECONDS, deadline - _now())
            if wait <= 0:
                return None, None, peak
            if pidfd is None:
                time.sleep(wait)
            else:
                # Readable when the child exits: the wall time is not rounded up to a sample.
                select.select([pidfd], [], [], wait)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _tail(data: bytes, lines: int = 10) -> str:
    text = data.decode(errors="replace").replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def run_child(command: Sequence[str] | str, timeout: float) -> Finished:
    """Run a command in its own session and measure it.

    The whole process group is killed with SIGKILL when the command ends, times out, or
    this process is interrupted, so nothing it started is left running.

    Args:
        command: An argv, or a string to run through ``/bin/sh``.
        timeout: Seconds before the command is killed and reported as ``timeout``.

    Returns:
        Its status, exit code, wall and CPU seconds, peak memory, stdout and end of stderr.
    """
    # Files, not pipes: a chatty child (a progress bar) can never block on a full pipe.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = {**os.environ, STARTED_ENV: repr(_now())}
        start = _now()
        proc = subprocess.Popen(
            command,
            shell=isinstance(command, str),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=True,
        )
        try:
            status, usage, peak = _watch(proc.pid, start + timeout)
            wall = _now() - start
            if status is not None:
                proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by _watch
        finally:
            _kill_group(proc.pid)
            if proc.returncode is None:
                proc.wait()
        out.seek(0)
        err.seek(0)
        return Finished(
            status=TIMEOUT if usage is None else OK,
            exit_code=None if usage is None else proc.returncode,
            wall_s=wall,
            cpu_s=0.0 if usage is None else usage.ru_utime + usage.ru_stime,
            peak_pss_bytes=peak,
            max_rss_bytes=0 if usage is None else usage.ru_maxrss * 1024,
            stdout=out.read().decode(errors="replace"),
            stderr_tail=_tail(err.read()),
        )


# ---------------------------------------------------------------------------------------
# The whole benchmark
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What to measure.

    Attributes:
        paths: Corpus paths (empty: the built-in generated corpus).
        workers: Worker counts, ascending.
        repeat: Measured runs per configuration (after the warm-up rounds).
        warmup: Discarded rounds before them.
        take: Stop the loader after this many documents (None: the whole corpus).
        seed: The loader's seed.
        out: Folder for timings.csv, bench.json and scaling.png.
        vs: Other loaders' commands, with ``{workers}`` and ``{paths}`` placeholders.
        timeout: Seconds any one child may run before it is killed and reported.
        progress: Show a progress bar on stderr.
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

    @property
    def config(self) -> Config:
        return Config(self.kind, self.workers, self.template)


def _command(
    config: Config, settings: Settings, paths: Sequence[str], units: int | None
) -> list[str] | str:
    """The argv (our children) or shell string (``--vs``) of one configuration."""
    if config.kind == VS:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return config.template.replace("{workers}", str(config.workers)).replace("{paths}", quoted)
    argv = [sys.executable, "-m", "openwebtext.bench"]
    argv += ["run-one" if config.kind == LOADER else "ceiling-one"]
    argv += ["--workers", str(config.workers), "--seed", str(settings.seed)]
    if config.kind == LOADER and settings.take is not None:
        argv += ["--take", str(settings.take)]
    if config.kind == CEILING and units is not None:
        argv += ["--units", str(units)]
    return [*argv, "--", *paths]


def _report(finished: Finished, command: str) -> dict[str, Any]:
    """The JSON line a child of ours printed last."""
    try:
        report: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as exc:
        raise BenchError(f"`{command}` printed no report; its output:\n{finished.stdout}") from exc
    return report


def _check(finished: Finished, command: str) -> None:
    if finished.status == OK and finished.exit_code != 0:
        raise BenchError(
            f"`{command}` exited with code {finished.exit_code}; the end of its stderr:\n"
            + (finished.stderr_tail or "(empty)")
        )


def _configs(workers: Sequence[int], cores: int, vs: Sequence[str]) -> list[Config]:
    """Every configuration of one round, grouped by worker count."""
    ceilings = {min(n, cores) for n in workers}
    configs = []
    for n in sorted(set(workers) | ceilings):
        if n in workers:
            configs.append(Config(LOADER, n))
        if n in ceilings:
            configs.append(Config(CEILING, n))
        if n in workers:
            configs.extend(Config(VS, n, template) for template in vs)
    return configs


class _Bench:
    """The running benchmark: configurations, rounds, and what they measured."""

    def __init__(self, settings: Settings, paths: list[str], cores: int) -> None:
        self.settings = settings
        self.paths = paths
        self.cores = cores
        self.configs = _configs(settings.workers, cores, settings.vs)
        self.runs: list[Run] = []
        self.units: int | None = None  # members the loader consumed (for the ceiling)
        self.timed_out: set[Config] = set()

    def run_all(self) -> list[Run]:
        from tqdm import tqdm

        rounds = self.settings.warmup + self.settings.repeat
        with tqdm(
            total=rounds * len(self.configs),
            unit="run",
            file=sys.stderr,
            disable=not self.settings.progress,
            dynamic_ncols=True,
        ) as bar:
            for round_ in range(rounds):
                for config in self.configs:
                    bar.set_description(self._describe(config, round_), refresh=True)
                    if config not in self.timed_out:
                        self._run(config, round_, functools.partial(bar.write, file=sys.stderr))
                    bar.update()
        return self.runs

    def _describe(self, config: Config, round_: int) -> str:
        warmup = self.settings.warmup
        what = config.kind
        if config.kind == VS:
            what = f"vs{self.settings.vs.index(config.template) + 1}"
        what += f" x {config.workers}"
        if round_ < warmup:
            return f"warm-up {round_ + 1}/{warmup}: {what}"
        return f"repeat {round_ - warmup + 1}/{self.settings.repeat}: {what}"

    def _run(self, config: Config, round_: int, say: Callable[[str], object]) -> None:
        command = _command(config, self.settings, self.paths, self.units)
        shown = command if isinstance(command, str) else shlex.join(command)
        finished = run_child(command, self.settings.timeout)
        _check(finished, shown)
        report = _report(finished, shown) if finished.status == OK and config.kind != VS else {}
        if finished.status == TIMEOUT:
            self.timed_out.add(config)
            say(f"timed out after {self.settings.timeout:g} s, not run again: {shown}")
        if config.kind == LOADER and report and self.settings.take is not None:
            self.units = self.units or int(report["units"])
        self.runs.append(self._record(config, round_, shown, finished, report))

    def _record(
        self, config: Config, round_: int, command: str, finished: Finished, report: dict[str, Any]
    ) -> Run:
        return Run(
            kind=config.kind,
            workers=config.workers,
            template=config.template,
            command=command,
            round=round_,
            warmup=round_ < self.settings.warmup,
            status=finished.status,
            exit_code=finished.exit_code,
            oversubscribed=config.workers > self.cores,
            elapsed=finished.wall_s,
            cpu_s=finished.cpu_s,
            peak_pss_bytes=finished.peak_pss_bytes,
            max_rss_bytes=finished.max_rss_bytes,
            documents=report.get("documents"),
            text_bytes=report.get("text_bytes"),
            compressed_bytes=report.get("compressed_bytes"),
            first_document_s=report.get("first_document_s"),
            consumer_cpu_s=report.get("consumer_cpu_s"),
        )


# ---------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------


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


def _summarise(
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


def _scaling(
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


# ---------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _liblzma_version() -> str:
    # The lzma module does not expose the version of the liblzma it was built against.
    try:
        lib = ctypes.CDLL("liblzma.so.5")
        lib.lzma_version_string.restype = ctypes.c_char_p
        version: bytes = lib.lzma_version_string()
        return version.decode()
    except (OSError, AttributeError):
        return "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """CPU model, usable cores, memory, and the versions that set the speed."""
    return {
        "cpu_model": _cpu_model(),
        "cores": cpu_count(),
        "cpus": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "python": platform.python_version(),
        "liblzma": _liblzma_version(),
        "openwebtext": __version__,
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
    }


def _cpu_ticks() -> tuple[int, int, int]:
    """(all, idle, steal) CPU ticks since boot, from /proc/stat (zeros where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
        # user nice system idle iowait irq softirq steal
        idle, iowait, steal = fields[3], fields[4], fields[7]
    except (OSError, ValueError, IndexError):
        return 0, 0, 0
    return sum(fields), idle + iowait, steal


def _conditions(
    before: tuple[int, int, int], after: tuple[int, int, int], seconds: float, runs: Sequence[Run]
) -> dict[str, float | None]:
    """How busy the machine was with other things while we measured.

    ``other_cores``: CPU seconds per second spent by everything but our children (other
    users, this process' own polling); ``steal``: the share the hypervisor took.
    """
    total, idle, steal = (a - b for a, b in zip(after, before, strict=True))
    if total <= 0 or seconds <= 0:
        return {"seconds": seconds, "other_cores": None, "steal": None}
    busy = (total - idle - steal) / os.sysconf("SC_CLK_TCK")
    ours = sum(r.cpu_s for r in runs)
    return {
        "seconds": seconds,
        "other_cores": max(0.0, busy - ours) / seconds,
        "steal": steal / total,
    }


# ---------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------


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


def _write_csv(path: Path, runs: Sequence[Run]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for run in runs:
            row = dataclasses.asdict(run)
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def _corpus_name(result: BenchResult) -> str:
    paths = result.corpus["paths"]
    name = Path(paths[0]).name + (f" +{len(paths) - 1}" if len(paths) > 1 else "")
    docs, text = result.corpus["documents"] or 0, result.corpus["text_bytes"] or 0
    return f"{name} ({docs:,} documents, {text / 1e6:,.1f} MB of text)"


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
    fig.savefig(path)
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
    ax.set_title(f"owt bench: {_corpus_name(result)}\n{machine}", fontsize="medium")


def _curves(result: BenchResult) -> list[tuple[str, str, list[Summary]]]:
    """(label, format, one summary per worker count) of each curve to draw."""
    cores = result.machine["cores"]
    table = {(s.kind, s.workers, s.template): s for s in result.summaries}
    x = [r.workers for r in result.scaling]
    curves = [
        ("openwebtext loader", "o-", [table[LOADER, n, ""] for n in x]),
        ("ceiling: decompression only", "s--", [table[CEILING, min(n, cores), ""] for n in x]),
    ]
    for k, template in enumerate(result.settings["vs"]):
        label = f"vs{k + 1}: {_shorten(template)}"
        curves.append((label, "^-", [table[VS, n, template] for n in x]))
    return curves


def _shorten(text: str, width: int = 60) -> str:
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


def _write_outputs(result: BenchResult) -> None:
    _write_csv(result.out / "timings.csv", result.runs)
    (result.out / "bench.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")


# ---------------------------------------------------------------------------------------
# Putting it together
# ---------------------------------------------------------------------------------------


def _loader_work(runs: Sequence[Run]) -> tuple[int, int, int]:
    """(documents, text bytes, compressed bytes) of the first loader run that finished."""
    for run in runs:
        if run.kind == LOADER and run.documents is not None:
            return run.documents, run.text_bytes or 0, run.compressed_bytes or 0
    return 0, 0, 0


def _summaries(bench: _Bench, work: tuple[int, int, int]) -> list[Summary]:
    return [
        _summarise(config, [r for r in bench.runs if r.config == config], work, bench.cores)
        for config in bench.configs
    ]


def run_bench(settings: Settings) -> BenchResult:
    """Run the benchmark, write timings.csv, bench.json and scaling.png into ``settings.out``.

    Args:
        settings: What to measure, and where to write it.

    Returns:
        Everything measured; ``plot`` is None when matplotlib is missing.

    Raises:
        CorpusError: a path holds no corpus.
        BenchError: a child (the loader, the ceiling or a ``--vs`` command) failed.
        KeyboardInterrupt: after killing the running child's process group.
    """
    paths = paths_or_default(settings.paths)
    corpus = Corpus.open(paths)
    settings.out.mkdir(parents=True, exist_ok=True)
    bench = _Bench(settings, paths, cpu_count())
    machine = machine_info()
    ticks, start = _cpu_ticks(), _now()
    runs = bench.run_all()
    conditions = _conditions(ticks, _cpu_ticks(), _now() - start, runs)
    work = _loader_work(runs)
    summaries = _summaries(bench, work)
    scaling = _scaling(summaries, runs, settings, bench.cores)
    result = BenchResult(
        machine=machine,
        corpus=_corpus_info(corpus, paths, work),
        settings=_settings_info(settings),
        conditions=conditions,
        runs=tuple(runs),
        summaries=tuple(summaries),
        scaling=tuple(scaling),
        recommended_workers=recommend(scaling),
        out=settings.out,
        plot=settings.out / "scaling.png",
    )
    _write_outputs(result)
    if not plot(result, settings.out / "scaling.png"):
        (settings.out / "scaling.png").unlink(missing_ok=True)  # never leave an older run's
        result = dataclasses.replace(result, plot=None)
    return result


def _corpus_info(
    corpus: Corpus, paths: Sequence[str], work: tuple[int, int, int]
) -> dict[str, Any]:
    return {
        "paths": list(paths),
        "members": len(corpus.units),
        "compressed_bytes": corpus.compressed_bytes,
        "documents": work[0] or None,
        "text_bytes": work[1] or None,
        "compressed_bytes_read": work[2] or None,
        "fingerprint": corpus.fingerprint(),
    }


def _settings_info(settings: Settings) -> dict[str, Any]:
    info = dataclasses.asdict(settings)
    info["out"] = str(settings.out)
    info["vs"] = list(settings.vs)
    info["workers"] = list(settings.workers)
    info["paths"] = list(settings.paths)
    return info


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _worker_counts(text: str) -> tuple[int, ...]:
    try:
        counts = {_positive_int(part) for part in text.split(",") if part.strip()}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of counts: {text}") from exc
    if not counts:
        raise argparse.ArgumentTypeError("no worker count given")
    return tuple(sorted(counts))


def default_workers(cores: int) -> tuple[int, ...]:
    """Powers of two below the core count, the core count, and twice it (oversubscribed)."""
    counts = {1 << k for k in range(cores.bit_length()) if 1 << k < cores}
    return tuple(sorted(counts | {cores, 2 * cores}))


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the ``bench`` subcommand (its ``run`` returns an exit code)."""
    cores = cpu_count()
    defaults = default_workers(cores)
    p = subparsers.add_parser(
        "bench",
        help="time the loader against worker count, next to the decompression ceiling",
        description="Time the loader for each worker count (fresh processes, warm-up, "
        "repeats), next to the decompression ceiling and any --vs command; write "
        "timings.csv, bench.json and scaling.png. No path: the built-in generated corpus.",
    )
    p.add_argument("paths", nargs="*", help="files, folders or glob patterns")
    p.add_argument(
        "--workers",
        type=_worker_counts,
        default=defaults,
        help=f"comma-separated worker counts (default: {','.join(map(str, defaults))})",
    )
    p.add_argument("--repeat", type=_positive_int, default=3, help="measured runs (median)")
    p.add_argument("--warmup", type=_non_negative_int, default=1, help="discarded rounds first")
    p.add_argument("--take", type=_positive_int, default=None, help="stop after N documents")
    p.add_argument("--seed", type=int, default=0, help="the loader's seed")
    p.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder")
    p.add_argument(
        "--vs",
        action="append",
        default=[],
        metavar="COMMAND",
        help="another loader's shell command, timed alike; {workers} and {paths} are "
        "replaced (e.g. 'python main.py -j {workers} {paths}'); repeatable",
    )
    p.add_argument(
        "--timeout", type=_positive_float, default=600.0, help="seconds per run (default 600)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=_bench)


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit, so the running child's group is killed on the way out."""

    def exit_(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, exit_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _bench(args: argparse.Namespace) -> int:
    settings = Settings(
        paths=tuple(args.paths),
        workers=args.workers,
        repeat=args.repeat,
        warmup=args.warmup,
        take=args.take,
        seed=args.seed,
        out=args.out,
        vs=tuple(args.vs),
        timeout=args.timeout,
        progress=not args.quiet,
    )
    try:
        with _exit_on_sigterm():
            result = run_bench(settings)
    except (OWTError, BenchError) as exc:
        print(f"owt: error: {exc}", file=sys.stderr)
        return 1
    print(summary_text(result))
    return 0


def summary_text(result: BenchResult) -> str:
    """What ``owt bench`` prints: the machine, the corpus, the table, the verdict, the files."""
    m, s, c = result.machine, result.settings, result.conditions
    lines = [
        f"machine: {m['cpu_model']}, {m['cores']} cores, Python {m['python']}, "
        f"liblzma {m['liblzma']}",
        f"corpus: {_corpus_name(result)}, {result.corpus['members']} members; "
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
    lines += _verdict(result)
    return "\n".join(lines)


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


def _child_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    one = sub.add_parser("run-one", help="(internal) stream once with the loader")
    one.add_argument("--take", type=_positive_int, default=None)
    ceiling = sub.add_parser("ceiling-one", help="(internal) only decompress the members")
    ceiling.add_argument("--units", type=_positive_int, default=None)
    for p, run in ((one, _run_one), (ceiling, _ceiling_one)):
        p.add_argument("--workers", type=_positive_int, required=True)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("paths", nargs="+")
        p.set_defaults(run=run)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m openwebtext.bench bench ...`` (as ``owt bench``), and the children."""
    parser = argparse.ArgumentParser(prog="python -m openwebtext.bench")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    _child_parsers(sub)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
