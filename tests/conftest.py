"""Shared fixtures: small generated corpora, an independent reference reader, process checks.

Also the Hypothesis profiles. ``ci`` (chosen when ``CI`` is set, or by
``HYPOTHESIS_PROFILE=ci``) fails fast: it stops at the first failing example
without shrinking it (a shrink of a test that starts workers once took over 250 s),
reports one bug, prints the blob to reproduce it, and bounds the examples and the
time of each. ``dev``, the default, is Hypothesis's own (it shrinks). A test's own
``@settings`` still wins for the fields it names (e.g. ``max_examples``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings

from openwebtext import Corpus
from openwebtext.engine import Reader
from openwebtext.stream import count_documents
from openwebtext.synth import write_corpus
from support import Members, Ran, fault_on, no_leaks, plain_read, read_members, run_owt

settings.register_profile(
    "ci",
    max_examples=30,
    deadline=timedelta(seconds=5),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrink, no explain
    report_multiple_bugs=False,
    print_blob=True,
)
settings.register_profile("dev")
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

#: Deadline of a test marked ``waits_on_workers``: far above a legitimate run over a tiny
#: corpus, far below the suite's 120 s default, so that a hang fails fast. Such tests also
#: give the loader a short ``timeout=``, so that a hung worker surfaces first as the
#: library's own ``WorkerError``; this deadline catches a hang in the consumer itself.
WORKER_TEST_DEADLINE = 30


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"waits_on_workers: the test waits on worker processes; it fails after "
        f"{WORKER_TEST_DEADLINE} s (unless it has its own timeout mark)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("waits_on_workers") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(WORKER_TEST_DEADLINE))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Say plainly why a ``waits_on_workers`` test that ran out of time failed."""
    outcome = yield
    report = outcome.get_result()
    if (
        report.failed
        and item.get_closest_marker("waits_on_workers")
        and "Timeout" in str(report.longrepr)
    ):
        report.sections.append(
            (
                "waits_on_workers",
                "HANG: the test got no result from the loader within its deadline, and the "
                "loader's own timeout= did not turn it into a WorkerError: the consumer "
                "waits for, or loops on, something that never comes (see the stack above).",
            )
        )


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 subsets x 3 members x 20 documents (120), seed 0. Read-only: copy it to damage it."""
    out = tmp_path_factory.mktemp("corpus") / "small"
    write_corpus(out, subsets=2, members=3, docs=20, seed=0, workers=1)
    return out


@pytest.fixture(autouse=True)
def _small_corpus_stays_as_made(request: pytest.FixtureRequest) -> Iterator[None]:
    """The shared corpus is read-only: a test that leaves anything in it (a counts cache
    beside it) changes what every later test copies, and fails here, by name."""
    if "small_corpus" not in request.fixturenames:
        yield
        return
    corpus: Path = request.getfixturevalue("small_corpus")

    def files() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in corpus.iterdir()}

    before = files()
    yield
    after = files()
    changed = sorted(n for n in after.keys() | before.keys() if after.get(n) != before.get(n))
    assert not changed, (
        f"the test changed {changed} in the shared small_corpus (read-only for all "
        "tests: copy it to damage it or to count it)"
    )


@pytest.fixture
def owt(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """``owt(*args)``: the ``owt`` command run in this process (``support.run_owt``), its
    exit code, stdout and stderr."""
    return lambda *args: run_owt(capsys, *args)


@pytest.fixture(scope="session")
def small_docs(small_corpus: Path) -> dict[str, str]:
    return plain_read(sorted(small_corpus.glob("*.tar")))


@pytest.fixture(scope="session")
def small_names(small_docs: dict[str, str]) -> tuple[str, ...]:
    """The names of the small corpus's documents (short enough for Hypothesis to print)."""
    return tuple(small_docs)


@pytest.fixture(scope="session")
def indexed(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Path:
    """A copy of the small corpus with its counts file beside it (for even sharding), counted
    for nanoGPT's split and for ``val_fraction=0.2, val_seed=7``."""
    path = Path(shutil.copytree(small_corpus, tmp_path_factory.mktemp("indexed") / "c"))
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=2, splits=((0.0005, 2357), (0.2, 7))))
    return path


@pytest.fixture(scope="session")
def token_run(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``owt tokenize`` of the small corpus (bytes tokenizer, val_fraction 0.2) in all four
    formats: train.bin/val.bin with their .idx, llm.c shards, datatrove .ds. Read-only."""
    from openwebtext.prepare import PrepareOptions, prepare, write_format

    out = tmp_path_factory.mktemp("token-run")
    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.2)
    prepare(Corpus.open(small_corpus), out, options)
    for fmt in ("megatron", "llmc", "datatrove"):
        write_format(out, fmt, shard_tokens=40_000)
    return out


@pytest.fixture(scope="module")
def s3_endpoint(small_corpus: Path) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 for the module, stopped after: bucket ``owt`` holds the
    small corpus under ``data/`` (and a ``data/_SUCCESS``); credentials ``testing``."""
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="owt")
        for path in sorted(small_corpus.glob("*.tar")):
            client.upload_file(str(path), "owt", f"data/{path.name}")
        client.put_object(Bucket="owt", Key="data/_SUCCESS", Body=b"")
        yield endpoint
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def worker_fault(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Path]:
    """Make the worker die, hang or raise on a member: ``worker_fault(member, action,
    times=None)`` patches ``Reader.read`` with ``support.fault_on`` (before the pool forks:
    the workers inherit it) and returns the file where each attempt at the member is written.

    ``action`` is ``"kill"``, ``"hang"`` or a callable (e.g. one that raises); ``member`` a
    member name or a collection of them; ``times``: fail only the first ``times`` attempts.
    """
    made = 0

    def make(
        member: str | Collection[str], action: str | Callable[[], object], times: int | None = None
    ) -> Path:
        nonlocal made
        made += 1
        attempts = tmp_path / f"attempts-{made}"
        monkeypatch.setattr(
            Reader, "read", fault_on(member, action, attempts=attempts, times=times)
        )
        return attempts

    return make


@pytest.fixture
def leaves_nothing_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The leak guard: the test runs under ``support.no_leaks`` (the reliability suite's files
    use it for every test, with ``pytestmark``)."""
    with no_leaks(tmp_path_factory.mktemp("guard") / "private-tmp") as private:
        yield private


@pytest.fixture(scope="module")
def pristine(small_corpus: Path) -> Members:
    """The small corpus's documents per member, read without the library."""
    return read_members(sorted(small_corpus.glob("*.tar")))
