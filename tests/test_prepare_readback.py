"""What a run reads back from a folder is checked before it is relied on (issue 19): every
field of a slice's ``meta.json`` and of a progress record, and the sha256 of a slice's files
(``merge(verify=)``); a local copy of a remote slice that does not match its ``meta.json``
is fetched again, never merged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, Progress, merge, prepare
from openwebtext.prepare.workdir import PROGRESS
from support import Owt


def _opts(**overrides: object) -> PrepareOptions:
    base: dict[str, object] = {"tokenizer": "bytes", "workers": 0, "val_fraction": 0.1}
    return PrepareOptions(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.fixture
def slices(small_corpus: Path, tmp_path: Path) -> list[Path]:
    corpus = Corpus.open(small_corpus)
    folders = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(folders):
        prepare(corpus, folder, _opts(), shard=(i, 2))
    return folders


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body))


DAMAGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "files": lambda m: m.pop("files"),
    "files must be an object": lambda m: m.update(files=["train.bin"]),
    "files.train.bin.bytes": lambda m: m["files"]["train.bin"].update(bytes="12"),
    "files.val.bin.sha256": lambda m: m["files"]["val.bin"].update(sha256=None),
    "counts.documents": lambda m: m["counts"].update(documents=None),
    "counts.tokens.train": lambda m: m["counts"]["tokens"].update(train=1.5),
    "config.slice.start": lambda m: m["config"]["slice"].update(start="0"),
    "config.slice.shard.index": lambda m: m["config"]["slice"]["shard"].update(index=3),
    "counts.skipped_members": lambda m: m["counts"].update(skipped_members=-1),
    "config.dtype": lambda m: m["config"].update(dtype="float32"),
    "config.units": lambda m: m["config"].pop("units"),
}


@pytest.mark.parametrize("field", list(DAMAGES))
def test_a_damaged_slice_meta_is_one_clear_error(
    slices: list[Path], tmp_path: Path, field: str
) -> None:
    _edit(slices[1] / "meta.json", DAMAGES[field])
    with pytest.raises(PrepareError) as caught:
        merge(slices, tmp_path / "out")
    message = str(caught.value)
    assert str(slices[1] / "meta.json") in message and field.split(" ")[0] in message, message
    assert not (tmp_path / "out" / "train.bin").exists()


def test_owt_merge_of_a_meta_without_files_says_so_in_one_line(
    owt: Owt, slices: list[Path], tmp_path: Path
) -> None:
    _edit(slices[0] / "meta.json", DAMAGES["files"])
    result = owt("merge", *map(str, slices), "--out", str(tmp_path / "out"), "-q")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "KeyError" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(slices[0] / "meta.json") in lines[0], result.stderr


class _Stop(KeyboardInterrupt):
    pass


def _stop(event: Progress) -> None:
    if event.phase == "tokenize" and event.done > 0:
        raise _Stop


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("position", lambda r: r.update(position="3")),
        ("sizes.train.bin", lambda r: r["sizes"].update({"train.bin": None})),
        ("counts", lambda r: r.pop("counts")),
        ("skipped_documents", lambda r: r["counts"].update(skipped_documents="x")),
        ("phase", lambda r: r.update(phase="done")),
    ],
)
def test_a_damaged_progress_record_is_one_clear_error(
    small_corpus: Path, tmp_path: Path, field: str, change: Callable[[dict[str, Any]], None]
) -> None:
    corpus = Corpus.open(small_corpus)
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path, _opts(), progress=_stop, checkpoint_seconds=0)
    _edit(tmp_path / PROGRESS, change)
    with pytest.raises(PrepareError, match=rf"is not a progress record .*{field}.*--restart"):
        prepare(corpus, tmp_path, _opts())


def test_a_slice_changed_in_place_is_not_merged(
    small_corpus: Path, slices: list[Path], tmp_path: Path
) -> None:
    train = slices[1] / "train.bin"
    data = bytearray(train.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit
    train.write_bytes(bytes(data))
    with pytest.raises(PrepareError, match=r"sha256 .*--no-verify") as caught:
        merge(slices, tmp_path / "out")
    assert str(train) in str(caught.value)
    assert not (tmp_path / "out" / "train.bin").exists()
    report = merge(slices, tmp_path / "out", verify=False)  # knowingly
    assert (tmp_path / "out" / "train.bin").stat().st_size == report.meta["files"]["train.bin"][
        "bytes"
    ]


def _s3_slices(corpus: Corpus, prefix: str) -> list[str]:
    urls = [f"s3://owt/{prefix}/{i}" for i in range(2)]
    for i, url in enumerate(urls):
        prepare(corpus, url, _opts(split_rule="nanogpt"), shard=(i, 2))
    return urls


@pytest.mark.parametrize("damage", ["shorter", "longer", "same size"])
def test_a_bad_local_copy_of_a_remote_slice_is_fetched_again(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path, damage: str
) -> None:
    """A merge cut short keeps its local copies of remote slices; one that no longer matches
    its meta.json (cut by a crash, grown, changed) is downloaded again, not merged."""
    from openwebtext.prepare import outputs
    from support import local_files, s3_objects

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    urls = _s3_slices(corpus, f"copies-{damage.replace(' ', '-')}")
    out = f"s3://owt/copies-merged-{damage.replace(' ', '-')}/"

    def stop(event: Progress) -> None:
        if event.phase == "permute" and event.done > 0:
            raise _Stop

    try:
        with pytest.raises(_Stop):
            merge(urls, out, progress=stop, checkpoint_seconds=0, storage=corpus.storage)
        copy = outputs.staging(urls[1], "fetch") / "tokens.bin"
        data = copy.read_bytes()
        changed = {"shorter": data[: len(data) // 2], "longer": data + b"\0\0",
                   "same size": bytes([data[0] ^ 1]) + data[1:]}[damage]  # fmt: skip
        copy.write_bytes(changed)
        merge(urls, out, storage=corpus.storage)
    finally:
        for url in [out, *urls]:
            outputs.remove(outputs.staging(url))
            outputs.remove(outputs.staging(url, "fetch"))
    prepare(corpus, tmp_path / "local", _opts(split_rule="nanogpt"))
    assert s3_objects(s3_endpoint, out.split("/", 3)[3]) == local_files(tmp_path / "local")


def test_a_remote_slice_changed_in_place_is_not_merged(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    import boto3

    from openwebtext.prepare import outputs

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    urls = _s3_slices(corpus, "changed-in-place")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    key = "changed-in-place/0/tokens.bin"
    data = client.get_object(Bucket="owt", Key=key)["Body"].read()
    client.put_object(Bucket="owt", Key=key, Body=bytes([data[0] ^ 1]) + data[1:])
    try:
        with pytest.raises(PrepareError, match=f"s3://owt/{key}: its sha256"):
            merge(urls, tmp_path / "out", storage=corpus.storage)
    finally:
        for url in urls:
            outputs.remove(outputs.staging(url, "fetch"))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda m: m["slice"].update(stop=9, shard=None), r"slice: \[3, 9\) is not within"),
        (lambda m: m["slice"].update(start=4, stop=9), r"slice: \[4, 9\) is not within"),
        (lambda m: m["slice"]["shard"].update(index=0), r"slice: \[3, 6\) is not shard 0/2"),
    ],
)
def test_a_slice_whose_positions_do_not_fit_its_units_is_named_as_damaged(
    slices: list[Path], tmp_path: Path, change: Callable[[dict[str, Any]], None], said: str
) -> None:
    """Not "a slice is missing: units [9, 6)", nor an overlap of two shards 0/2 (issue 27)."""
    _edit(slices[1] / "meta.json", lambda m: change(m["config"]))
    damaged = f"{slices[1] / 'meta.json'} is damaged: bad meta.json: config"
    with pytest.raises(PrepareError, match=rf"{damaged}\.{said}"):
        merge(slices, tmp_path / "out")
    assert not (tmp_path / "out" / "train.bin").exists()


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_a_slice_file_whose_bytes_are_not_its_count_of_items_is_refused(
    small_corpus: Path, tmp_path: Path, split: str
) -> None:
    """A file with one byte more, its meta.json's size and sha256 edited to fit: merged, it
    made a train.bin that ``np.memmap(dtype=uint16)`` refuses (issue 31)."""
    import hashlib

    corpus = Corpus.open(small_corpus)
    options = _opts(split_rule=split, tokenizer="gpt2")
    folders = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(folders):
        prepare(corpus, folder, options, shard=(i, 2))
    name = "train.bin" if split == "hash" else "tokens.bin"
    damaged = folders[1] / name
    damaged.write_bytes(damaged.read_bytes() + b"\0")
    sha = hashlib.sha256(damaged.read_bytes()).hexdigest()
    size = damaged.stat().st_size
    _edit(folders[1] / "meta.json", lambda m: m["files"][name].update(bytes=size, sha256=sha))
    damaged = rf"is damaged: bad meta.json: files\.{name}\.bytes: is {size}, not"
    with pytest.raises(PrepareError, match=damaged):
        merge(folders, tmp_path / "out")
    assert not (tmp_path / "out" / "train.bin").exists()


@pytest.mark.timeout(60)
def test_a_slice_file_that_is_missing_or_a_fifo_is_said_so(
    small_corpus: Path, tmp_path: Path
) -> None:
    """A slice's file that is missing, or a FIFO in place of an empty ``val.bin`` (whose size 0
    its meta.json says) is said so (session 28: "holds -1 bytes"); never read."""
    import os

    corpus = Corpus.open(small_corpus)
    folders = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(folders):
        prepare(corpus, folder, _opts(val_fraction=1e-9), shard=(i, 2))
    val = folders[1] / "val.bin"
    assert val.stat().st_size == 0
    val.unlink()
    os.mkfifo(val)
    said = "is missing or not a regular file, not the"
    for verify in (True, False):
        with pytest.raises(PrepareError, match=rf"val\.bin {said} 0 bytes"):
            merge(folders, tmp_path / "out", verify=verify)
    (folders[0] / "train.bin").unlink()
    with pytest.raises(PrepareError, match=rf"train\.bin {said} \d+ bytes"):
        merge(folders, tmp_path / "out")
