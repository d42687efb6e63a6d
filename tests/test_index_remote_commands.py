"""The owt commands over URLs: owt index and stream over HTTP, owt bench on URLs, and
owt tokenize / merge with their outputs on S3 (moto's server, on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import remote_servers
from openwebtext import Corpus, Loader, source
from openwebtext.prepare.workdir import PrepareError
from openwebtext.source.membercache import FOLDER
from remote_servers import RangeServer
from support import Owt, Ran, local_files, s3_objects

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

http = remote_servers.http  # fixtures
isolated_storage = remote_servers.isolated_storage


def test_cli_index_and_stream_over_http(
    owt: Owt, small_corpus: Path, http: RangeServer, tmp_path: Path
) -> None:
    url = http.url + "/"
    index = owt("index", url, "-j", "1", "-q", "--storage-option", "block_size=0")
    assert index.returncode == 0, index.stderr
    assert "120 documents in 6 members" in index.stderr
    counts = list((Path(os.environ["OWT_CACHE_DIR"]) / "counts").glob("owt-counts-*.json"))
    assert len(counts) == 1 and json.loads(counts[0].read_text())["total"] == 120
    stream = owt("stream", url, "--jsonl", "-q", "-j", "2",
                 "--seed", "3", "--world-size", "2", "--rank", "1")  # fmt: skip
    assert stream.returncode == 0, stream.stderr
    remote = [json.loads(line)["text"] for line in stream.stdout.splitlines()]
    copy = shutil.copytree(small_corpus, tmp_path / "c")  # its counts are cached beside it
    local = [d.text for d in Loader(str(copy), seed=3, world_size=2, rank=1)]
    assert remote == local and remote


def test_cli_missing_url_is_one_line(owt: Owt, http: RangeServer) -> None:
    run = owt("index", http.url + "/nothing.tar", "-q")
    assert run.returncode == 1
    assert run.stderr.strip() == f"owt: error: {http.url}/nothing.tar: no such file, key or bucket"


# -- owt bench on URLs --------------------------------------------------------------


def owt_bench(owt: Owt, *args: str) -> Ran:
    return owt("bench", *args, "--workers", "1", "--repeat", "1", "--warmup", "0",
               "--take", "25", "-q")  # fmt: skip


def bench_rows(out: Path) -> tuple[list[dict[str, str]], dict[str, Any]]:
    import csv

    with open(out / "timings.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads((out / "bench.json").read_text())


def check_bench(out: Path, local: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The loader read what it reads locally; the ceiling fetched and decompressed."""
    rows, data = bench_rows(out)
    assert [(r["kind"], r["status"], r["exit_code"]) for r in rows] == [
        ("loader", "ok", "0"),
        ("ceiling", "ok", "0"),
    ]
    it = Loader(local, seed=0, take=25, workers=0).iter()
    with it:
        for _ in it:
            pass
    loader, ceiling = rows
    assert int(loader["documents"]) == 25 == it.stats.documents == data["corpus"]["documents"]
    assert int(loader["text_bytes"]) == it.stats.text_bytes == data["corpus"]["text_bytes"]
    assert loader["compressed_bytes"] == ceiling["compressed_bytes"]
    assert "--units" in ceiling["command"] and ceiling["decoder"]
    return rows, data


def test_owt_bench_over_http(
    owt: Owt, small_corpus: Path, http: RangeServer, tmp_path: Path
) -> None:
    url = http.url + "/urlsf_subset00.tar?X-Amz-Signature=s3cr3t"
    out = tmp_path / "out"
    done = owt_bench(
        owt, url, "--out", str(out), "--storage-option", 'headers={"X-Token": "hunter2"}'
    )
    assert done.returncode == 0, done.stderr
    _, data = check_bench(out, str(small_corpus / "urlsf_subset00.tar"))
    assert data["corpus"]["paths"] == [http.url + "/urlsf_subset00.tar"]
    assert data["settings"]["storage_options"] == {"headers": "***"}
    assert "ceiling: fetch + decompress" in done.stdout
    assert f"corpus: {http.url}/urlsf_subset00.tar (25 documents" in done.stdout
    written = (out / "timings.csv").read_text() + (out / "bench.json").read_text()
    for secret in ("s3cr3t", "hunter2", "Signature"):
        assert secret not in written and secret not in done.stdout + done.stderr


# ~25 s (a bench's runs are processes, each reading S3 through moto); the default run covers
# owt bench on a URL with storage options over HTTP (above), S3 reads by every other test here.
@pytest.mark.slow
def test_owt_bench_on_s3_with_storage_options(
    owt: Owt, small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    out, members = tmp_path / "out", tmp_path / "members"
    done = owt_bench(
        owt,
        "s3://owt/data/",
        "--out", str(out),
        "--storage-option", f"endpoint_url={s3_endpoint}",
        "--cache-dir", str(members),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _, data = check_bench(out, str(small_corpus))
    assert data["settings"]["storage_options"] == {"endpoint_url": s3_endpoint}
    assert list((members / FOLDER).glob("*/*"))  # the children read with the cache they were given


# -- output to S3 (owt tokenize --out s3://…, owt merge) -------------------------


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_tokenize_to_s3_writes_the_local_files(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path, split: str
) -> None:
    """The local engine with an S3 output: the same three files as a local output, byte for
    byte, and nothing else (no progress record, no part) there or in the staging folder."""
    from openwebtext.prepare import PrepareOptions, outputs, prepare

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = PrepareOptions(split_rule=split, workers=2, val_fraction=0.1)  # type: ignore[arg-type]
    url = f"s3://owt/out-{split}/"
    report = prepare(corpus, url, options)
    local = prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_endpoint, f"out-{split}/") == local_files(tmp_path / "local")
    assert report.out == url.rstrip("/") and report.meta == local.meta
    assert not outputs.staging(url.rstrip("/")).exists()
    assert prepare(corpus, url, options).already


def test_interrupted_tokenize_to_s3_goes_on(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after half the bytes (some of the 6 members), then again while uploading
    (after train.bin and val.bin, before meta.json): nothing remote looks finished; each rerun
    goes on where the last stopped, and the result is one run's."""
    from openwebtext.prepare import PrepareOptions, Progress, outputs, prepare

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = PrepareOptions(workers=0, val_fraction=0.1)
    url = "s3://owt/stopped"

    class Stop(Exception):
        pass

    first: list[Progress] = []

    def stop_halfway(event: Progress) -> None:
        first.append(event)
        if event.phase == "tokenize" and event.done >= sum(u.size for u in corpus.units) // 2:
            raise Stop

    try:
        with pytest.raises(Stop):
            prepare(corpus, url, options, progress=stop_halfway, checkpoint_seconds=0)
        assert 0 < len(first) < 6
        assert s3_objects(s3_endpoint, "stopped/") == {}
        fs = source.filesystem(url, corpus.storage)  # the output's: the corpus's options
        put = fs.put_file

        def fail_on_meta(source: str, target: str, **kwargs: Any) -> Any:
            if target.endswith("meta.json"):
                raise PermissionError("injected")
            return put(source, target, **kwargs)

        monkeypatch.setattr(fs, "put_file", fail_on_meta)
        events: list[Progress] = []
        with pytest.raises(PrepareError, match=r"stopped/meta\.json: access refused"):
            prepare(corpus, url, options, progress=events.append)
        assert len(first) + len(events) == 6  # the members the first run did not do
        assert sorted(s3_objects(s3_endpoint, "stopped/")) == ["train.bin", "val.bin"]
        monkeypatch.undo()
        events.clear()
        report = prepare(corpus, url, options, progress=events.append)
        assert not report.already and events == []  # uploaded again, nothing tokenized again
    finally:
        outputs.remove(outputs.staging(url))
    prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_endpoint, "stopped/") == local_files(tmp_path / "local")


def test_cli_shards_to_s3_and_merge_from_s3(
    owt: Owt, small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    """`owt tokenize --shard i/n --out s3://…` for every i, then `owt merge s3://… --out
    s3://…` (the endpoint given by --storage-option): the files of one local run."""
    endpoint = ["--storage-option", f"endpoint_url={s3_endpoint}"]
    common = ["--split", "nanogpt", "--val-fraction", "0.1", "-j", "1", "-q", *endpoint]
    for i in range(2):
        run = owt("tokenize", str(small_corpus), "--shard", f"{i}/2",
                  "--out", f"s3://owt/shards/{i}", *common)  # fmt: skip
        assert run.returncode == 0, run.stderr
    slices = [f"s3://owt/shards/{i}/" for i in (1, 0)]
    run = owt("merge", *slices, "--out", "s3://owt/merged/", "-q", *endpoint)
    assert run.returncode == 0, run.stderr
    local = owt("tokenize", str(small_corpus), "--out", str(tmp_path / "local"), *common)
    assert local.returncode == 0, local.stderr
    assert s3_objects(s3_endpoint, "merged/") == local_files(tmp_path / "local")


def test_interrupted_merge_from_s3_goes_on(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    """nanogpt slices in S3, the merge into S3 stopped during the permutation: the rerun goes
    on from its checkpoint (and the slices' local copies), and writes one run's files."""
    from openwebtext.prepare import PrepareOptions, Progress, merge, outputs, prepare

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = PrepareOptions(split_rule="nanogpt", workers=0, val_fraction=0.1)
    slices = [f"s3://owt/nano/{i}" for i in range(3)]
    for i, url in enumerate(slices):
        prepare(corpus, url, options, shard=(i, 3))

    class Stop(Exception):
        pass

    def stop(event: Progress) -> None:
        if event.phase == "permute" and event.done > 0:
            raise Stop

    out = "s3://owt/nano-merged/"
    try:
        with pytest.raises(Stop):
            merge(slices, out, progress=stop, checkpoint_seconds=0, storage=corpus.storage)
        assert s3_objects(s3_endpoint, "nano-merged/") == {}
        report = merge(slices, out, storage=corpus.storage)
        assert report.resumed
        assert [u for u in slices if outputs.staging(u, "fetch").exists()] == []  # copies gone
    finally:
        for url in [out, *slices]:  # local staging folders
            outputs.remove(outputs.staging(url))
            outputs.remove(outputs.staging(url, "fetch"))
    prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_endpoint, "nano-merged/") == local_files(tmp_path / "local")
    try:  # into a local folder: the slices' local copies go too once it is done
        merge(slices, tmp_path / "merged", storage=corpus.storage)
        assert [u for u in slices if outputs.staging(u, "fetch").exists()] == []
    finally:
        for url in slices:
            outputs.remove(outputs.staging(url, "fetch"))
    assert local_files(tmp_path / "merged") == local_files(tmp_path / "local")
