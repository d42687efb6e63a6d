"""The whole benchmark: every configuration in interleaved rounds, then :func:`run_bench`.

Every configuration (the loader, the ceiling, or a ``--vs`` command, at one worker count)
runs as a fresh process, so start-up is counted as the reference ``measure.sh`` counted it.
Rounds are interleaved (every configuration once, then every configuration again, ...) so
that a shared machine's drift in speed lands on all of them alike; the first ``warmup``
rounds are discarded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from openwebtext import Corpus
from openwebtext.bench.chart import plot
from openwebtext.bench.common import CEILING, LOADER, OK, STORAGE_ENV, TIMEOUT, VS, BenchError, now
from openwebtext.bench.machine import cpu_ticks, machine_info, run_conditions
from openwebtext.bench.process import Finished, run_child
from openwebtext.bench.report import OUTPUTS, BenchResult, write_outputs
from openwebtext.bench.runs import Config, Run, Settings
from openwebtext.bench.summary import Summary, recommend, scaling_rows, summarise
from openwebtext.engine import cpu_count
from openwebtext.files import output_path
from openwebtext.source import redact, redact_options
from openwebtext.synth import paths_or_default


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
    if settings.cache_dir is not None:
        argv += ["--cache-dir", settings.cache_dir]
    if settings.cache_size is not None:
        argv += ["--cache-size", str(settings.cache_size)]
    if settings.text_column != "text":
        argv += ["--text-column", settings.text_column]
    return [*argv, "--", *paths]


def _child_env(settings: Settings) -> dict[str, str]:
    """Our children's storage options (through the environment: they may hold secrets)."""
    if not settings.storage_options:
        return {}
    try:
        return {STORAGE_ENV: json.dumps(settings.storage_options)}
    except (TypeError, ValueError) as exc:
        raise BenchError(
            f"storage options must be JSON values to reach the children: {exc}"
        ) from None


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
        # URLs as written to timings.csv, bench.json and messages: without credentials.
        shown = redact(command if isinstance(command, str) else shlex.join(command))
        env = {} if config.kind == VS else _child_env(self.settings)
        finished = run_child(command, self.settings.timeout, env)
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
            # The ceiling ran every decoder; its run is the fastest one's (start-up included).
            elapsed=finished.wall_s - float(report.get("extra_s", 0.0)),
            cpu_s=finished.cpu_s,
            peak_pss_bytes=finished.peak_pss_bytes,
            max_rss_bytes=finished.max_rss_bytes,
            documents=report.get("documents"),
            text_bytes=report.get("text_bytes"),
            compressed_bytes=report.get("compressed_bytes"),
            first_document_s=report.get("first_document_s"),
            consumer_cpu_s=report.get("consumer_cpu_s"),
            decoder=report.get("decoder"),
        )


def _loader_work(runs: Sequence[Run]) -> tuple[int, int, int]:
    """(documents, text bytes, compressed bytes) of the first loader run that finished."""
    for run in runs:
        if run.kind == LOADER and run.documents is not None:
            return run.documents, run.text_bytes or 0, run.compressed_bytes or 0
    return 0, 0, 0


def _summaries(bench: _Bench, work: tuple[int, int, int]) -> list[Summary]:
    return [
        summarise(config, [r for r in bench.runs if r.config == config], work, bench.cores)
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
    paths = paths_or_default(settings.paths, bench=True)
    _child_env(settings)  # refused now, not after the first run
    corpus = Corpus.open(
        paths,
        storage_options=settings.storage_options or None,
        cache_dir=settings.cache_dir,
        cache_size=settings.cache_size,
        text_column=settings.text_column,
    )
    try:
        settings.out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file in its place, or in its parents'
        raise BenchError(f"--out {settings.out} is not a folder: a file is in its way") from None
    for name in OUTPUTS:  # refused now (a FIFO, a folder, a device), not after every run
        output_path(settings.out / name)
    bench = _Bench(settings, paths, cpu_count())
    machine = machine_info()
    ticks, start = cpu_ticks(), now()
    runs = bench.run_all()
    conditions = run_conditions(ticks, cpu_ticks(), now() - start, runs)
    work = _loader_work(runs)
    summaries = _summaries(bench, work)
    scaling = scaling_rows(summaries, runs, settings, bench.cores)
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
    write_outputs(result)
    if not plot(result, settings.out / "scaling.png"):
        (settings.out / "scaling.png").unlink(missing_ok=True)  # never leave an older run's
        result = dataclasses.replace(result, plot=None)
    return result


def _corpus_info(
    corpus: Corpus, paths: Sequence[str], work: tuple[int, int, int]
) -> dict[str, Any]:
    return {
        "paths": [redact(p) for p in paths],
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
    info["paths"] = [redact(p) for p in settings.paths]
    info["storage_options"] = redact_options(settings.storage_options)
    return info
