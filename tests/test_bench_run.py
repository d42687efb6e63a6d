"""Tests of ``owt bench`` (openwebtext.bench) on a tiny corpus. No test asserts a speed."""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext import bench
from openwebtext.bench import process
from openwebtext.errors import install_hint
from openwebtext.interrupts import interruptible
from openwebtext.synth import write_corpus

PYTHON = shlex.quote(sys.executable)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: One pytest-xdist worker runs this module: its ``done`` fixture (a whole ``owt bench`` run,
#: ~8 s) is made once, not once per worker.
pytestmark = pytest.mark.xdist_group("bench_run")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "tiny corpus"  # a space, to test quoting
    write_corpus(out, subsets=1, members=4, docs=20, seed=0, workers=1)
    return out


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openwebtext.bench", "bench", *args],
        capture_output=True,
        text=True,
        timeout=100,
    )


@pytest.fixture(scope="module")
def done(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One full run: workers 1,2, one warm-up, one repeat, and a --vs command."""
    out = tmp_path_factory.mktemp("bench-out")
    vs = f"{PYTHON} -c 'import sys; assert len(sys.argv) == 3' {{workers}} {{paths}}"
    result = run_cli(str(tiny), "--workers", "1,2", "--repeat", "1", "--out", str(out), "--vs", vs)
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def load(out: Path) -> tuple[list[dict[str, str]], dict[str, Any]]:
    with open(out / "timings.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads((out / "bench.json").read_text())


def processes_mentioning(*words: str) -> list[str]:
    """Command lines of live processes that contain every word."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            line = raw.replace(b"\0", b" ").decode(errors="replace")
            if all(w in line for w in words) and "openwebtext.bench bench" not in line:
                found.append(line)
    return found


def test_csv_columns(done: tuple[Path, str], tiny: Path) -> None:
    out, _ = done
    with open(out / "timings.csv") as f:
        header = f.readline().strip().split(",")
    assert header[:3] == ["workers", "elapsed", "command"]
    assert tuple(header) == bench.CSV_COLUMNS
    rows, _ = load(out)
    # 2 rounds (warm-up + repeat) x (loader, ceiling, vs) x 2 worker counts
    assert len(rows) == 12
    assert {r["kind"] for r in rows} == {"loader", "ceiling", "vs"}
    assert all(r["status"] == "ok" and float(r["elapsed"]) > 0 for r in rows)
    vs = [r for r in rows if r["kind"] == "vs" and r["workers"] == "2"]
    assert vs[0]["command"].endswith(f" 2 {shlex.quote(str(tiny))}")
    loader = [r for r in rows if r["kind"] == "loader"]
    assert {int(r["documents"]) for r in loader} == {80}
    # The ceiling decompresses exactly the members the loader read.
    ours = [r for r in rows if r["kind"] in ("loader", "ceiling")]
    assert len({r["compressed_bytes"] for r in ours}) == 1


def test_take_stops_early_and_the_ceiling_follows(tiny: Path, tmp_path: Path) -> None:
    argv = ["--workers", "1", "--repeat", "1", "--warmup", "0", "--take", "30", "-q"]
    result = run_cli(str(tiny), *argv, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows, data = load(tmp_path)
    loader, ceiling = rows[0], rows[1]
    assert (loader["kind"], ceiling["kind"]) == ("loader", "ceiling")
    assert int(loader["documents"]) == 30 == data["corpus"]["documents"]
    assert "--units" in ceiling["command"]
    assert loader["compressed_bytes"] == ceiling["compressed_bytes"]


def test_json_schema(done: tuple[Path, str]) -> None:
    _, data = load(done[0])
    assert data["schema"] == 1
    machine = data["machine"]
    assert isinstance(machine["cpu_model"], str) and machine["cores"] >= 1
    assert machine["memory_bytes"] > 0
    assert isinstance(machine["python"], str) and isinstance(machine["liblzma"], str)
    corpus = data["corpus"]
    assert corpus["documents"] == 80 and corpus["members"] == 4
    assert corpus["text_bytes"] > 0
    assert corpus["compressed_bytes"] == corpus["compressed_bytes_read"]
    assert data["settings"]["workers"] == [1, 2] and data["settings"]["repeat"] == 1
    assert len(data["runs"]) == 12 and sum(r["warmup"] for r in data["runs"]) == 6
    for key in ("elapsed", "cpu_s", "peak_pss_bytes", "max_rss_bytes", "command", "status"):
        assert all(key in run for run in data["runs"])
    loader = [s for s in data["summaries"] if s["kind"] == "loader"]
    for s in loader:
        assert s["documents_per_s"] > 0 and s["text_mb_per_s"] > 0
        assert s["compressed_mb_per_s"] > 0 and s["cpu_s"] > 0 and s["peak_pss_bytes"] > 0
        assert 0 < s["first_document_s"] <= s["wall_s"]
    assert [row["workers"] for row in data["scaling"]] == [1, 2]
    assert data["recommended_workers"] in (1, 2)
    assert data["conditions"]["seconds"] > 0
    assert set(data["conditions"]) == {"seconds", "other_cores", "steal"}


def walls(rows: list[dict[str, str]], kind: str, workers: int) -> dict[str, float]:
    """Wall seconds of the measured runs of one configuration, by round."""
    return {
        r["round"]: float(r["elapsed"])
        for r in rows
        if r["kind"] == kind and int(r["workers"]) == workers and r["warmup"] == "False"
    }


def paired(ours: dict[str, float], theirs: dict[str, float]) -> float:
    return statistics.median(theirs[k] / ours[k] for k in ours)


def test_ratios_are_computed_from_the_numbers_in_the_files(done: tuple[Path, str]) -> None:
    rows, data = load(done[0])
    cores = data["machine"]["cores"]
    documents = data["corpus"]["documents"]
    for row in data["scaling"]:
        n = row["workers"]
        loader = walls(rows, "loader", n)
        assert row["loader_documents_per_s"] == pytest.approx(
            documents / statistics.median(loader.values())
        )
        # The ceiling decompressed the same members: throughput ratio = inverse wall ratio.
        assert row["efficiency"] == pytest.approx(
            paired(loader, walls(rows, "ceiling", min(n, cores)))
        )
        assert row["vs_speedup"] == [pytest.approx(paired(loader, walls(rows, "vs", n)))]
    best = max(row["loader_documents_per_s"] for row in data["scaling"])
    good = [r["workers"] for r in data["scaling"] if r["loader_documents_per_s"] >= 0.95 * best]
    assert data["recommended_workers"] == min(good)


def test_prints_table_with_ratios(done: tuple[Path, str]) -> None:
    _, stdout = done
    assert "| workers | wall s | docs/s |" in stdout
    assert "loader ÷ ceiling" in stdout and "loader ÷ vs1" in stdout
    assert "recommended: -j " in stdout
    assert "scaling.png" in stdout


def test_plot_is_a_png(done: tuple[Path, str]) -> None:
    path = done[0] / "scaling.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


@pytest.mark.parametrize("name", ["missing", "empty"])
def test_path_without_corpus_is_a_clear_error(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / name
    if name == "empty":
        target.mkdir()
    code = bench.main(["bench", str(target), "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("owt: error: ") and str(target) in err
    assert "Traceback" not in err


def test_failing_vs_command_is_a_clear_error(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vs = "echo first >&2; echo boom-{workers} >&2; exit 3"
    argv = ["bench", str(tiny), "--workers", "1", "--repeat", "1", "--warmup", "0"]
    code = bench.main([*argv, "--out", str(tmp_path), "-q", "--vs", vs])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("owt: error: `echo first >&2; echo boom-1 >&2; exit 3`")
    assert "exited with code 3" in err and "first\nboom-1" in err


@pytest.mark.slow  # its 5 s timeout waited out in real time
def test_a_hanging_command_times_out_and_is_reported(tiny: Path, tmp_path: Path) -> None:
    vs = f"{PYTHON} -c 'import time; time.sleep(60)' {{workers}} {{paths}}"
    argv = ["--workers", "1", "--repeat", "1", "--warmup", "1", "--timeout", "5"]
    result = run_cli(str(tiny), *argv, "--out", str(tmp_path), "--vs", vs)
    assert result.returncode == 0, result.stderr
    assert "timed out after 5 s" in result.stderr
    assert "| timeout |" in result.stdout
    rows, data = load(tmp_path)
    # It timed out in the warm-up, and was not run again.
    assert [(r["status"], r["warmup"]) for r in rows if r["kind"] == "vs"] == [("timeout", "True")]
    assert [s["status"] for s in data["summaries"] if s["kind"] == "vs"] == ["timeout"]
    assert data["scaling"][0]["vs_speedup"] == [None]
    assert not processes_mentioning("time.sleep(60)", str(tiny))


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_bench(argv: list[str]) -> subprocess.Popen[str]:
    """A child with SIGINT at its default, as at a terminal: a test run started in the
    background (``pytest &`` from a script) has it ignored, and its children would too."""
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["INT", "TERM"]
)
def test_ctrl_c_exits_promptly_and_leaves_no_child(
    signum: int, code: int, tiny: Path, tmp_path: Path
) -> None:
    vs = f"{PYTHON} -c 'import time; time.sleep(60)' {{workers}} {{paths}}"
    argv = [sys.executable, "-m", "openwebtext.bench", "bench", str(tiny), "--workers", "1"]
    argv += ["--repeat", "1", "--warmup", "0", "--out", str(tmp_path), "--vs", vs]
    proc = start_bench(argv)
    try:
        deadline = time.monotonic() + 60
        while not processes_mentioning("time.sleep(60)", str(tiny)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == code
    assert "Traceback" not in err
    if signum == signal.SIGINT:
        assert err.rstrip().endswith("interrupted")
    assert not processes_mentioning("time.sleep(60)", str(tiny))


def test_a_signal_inside_popen_still_kills_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal lands after the fork, before Popen returns (the race a busy machine hit):
    the child it started must not be left running."""
    marker = str(tmp_path / "signal-inside-popen")
    real = subprocess.Popen
    started: list[int] = []

    def popen_then_signal(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = real(*args, **kwargs)
        started.append(proc.pid)
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the call
        return proc

    monkeypatch.setattr(process.subprocess, "Popen", popen_then_signal)
    with pytest.raises(KeyboardInterrupt), interruptible():
        process.run_child([sys.executable, "-c", "import time; time.sleep(60)", marker], timeout=60)
    assert started
    deadline = time.monotonic() + 10
    while processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_mentioning(marker)


def test_without_matplotlib_csv_and_json_are_written(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    settings = bench.Settings(
        paths=(str(tiny),), workers=(1,), repeat=1, warmup=0, out=tmp_path, progress=False
    )
    result = bench.run_bench(settings)
    assert result.plot is None
    assert (tmp_path / "timings.csv").is_file() and (tmp_path / "bench.json").is_file()
    assert not (tmp_path / "scaling.png").exists()
    assert install_hint("bench") in bench.summary_text(result)


def test_add_parser_registers_bench_on_any_parser() -> None:
    parser = argparse.ArgumentParser(prog="owt")
    bench.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "a", "b", "--workers", "4,1,2,2", "--vs", "x {workers}"])
    assert args.paths == ["a", "b"] and args.workers == (1, 2, 4) and args.vs == ["x {workers}"]
    assert callable(args.run)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--workers", "0"])


def test_default_worker_counts_reach_past_the_cores() -> None:
    assert bench.default_workers(1) == (1, 2)
    assert bench.default_workers(2) == (1, 2, 4)
    assert bench.default_workers(6) == (1, 2, 4, 6, 12)
    assert bench.default_workers(16) == (1, 2, 4, 8, 16, 32)


# -- the ceiling is the fastest decoder; the legend shows the command as typed -------------


def test_the_ceiling_tries_every_decoder_and_keeps_the_faster(tiny: Path) -> None:
    """One-shot lzma.decompress and, when installed, xz -dc: the report names the faster."""
    argv = [sys.executable, "-m", "openwebtext.bench", "ceiling-one", "--workers", "1"]
    done = subprocess.run([*argv, str(tiny)], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    names = {"lzma.decompress"} | ({"xz -dc"} if shutil.which("xz") else set())
    assert set(report["decoders_s"]) == names
    assert report["decoder"] == min(report["decoders_s"], key=report["decoders_s"].get)
    assert report["decompress_s"] == report["decoders_s"][report["decoder"]]
    slower = sum(report["decoders_s"].values()) - report["decompress_s"]
    assert report["extra_s"] == pytest.approx(slower)


def test_the_ceiling_run_counts_only_its_faster_decoder(done: tuple[Path, str]) -> None:
    """The ceiling's wall time is the run's less the slower decoder's; the decoder is named."""
    out, stdout = done
    rows, _ = load(out)
    ceilings = [r for r in rows if r["kind"] == "ceiling"]
    assert ceilings and all(r["decoder"] in ("lzma.decompress", "xz -dc") for r in ceilings)
    assert all(r["decoder"] == "" for r in rows if r["kind"] != "ceiling")
    assert "ceiling: the faster decoder in each run: " in stdout


def test_legend_shows_the_command_as_typed_shortened() -> None:
    from openwebtext.bench.chart import shorten_command

    typed = "python /work/shared/seed/main.py -j {workers} {paths}"
    assert shorten_command(typed) == "python …/seed/main.py -j {workers} {paths}"
    assert shorten_command("python main.py -j {workers}") == "python main.py -j {workers}"
    long = shorten_command("python main.py " + "--flag " * 20)
    assert len(long) == 48 and long.endswith("…")


def test_an_output_that_must_not_be_replaced_is_refused_before_any_run(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "bench.json")
    argv = ["bench", str(tiny), "--workers", "1", "--repeat", "1", "--warmup", "0", "-q"]
    assert bench.main([*argv, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"owt: error: {tmp_path / 'bench.json'}: is not a regular file"), err
    assert (tmp_path / "bench.json").is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]  # nothing was run
