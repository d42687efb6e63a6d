"""``owt tokenize --format`` (``prepare.write_format``, issue 30): the ids of ``train.bin``
written again as Megatron, llm.c and datatrove files, read back by each format's own reader
(megatron-core's ``IndexedDataset``, datatrove's ``DatatroveFileDataset`` where they install;
llm.c's header as modded-nanogpt's loader parses it, re-implemented here from its source)
document for document; ``train.bin`` keeps its bytes; a killed pass goes on; a slice's format
is the merge's; a URL gets the files and the marker last."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus
from openwebtext.cli.command import main
from openwebtext.prepare import PrepareError, PrepareOptions, outputs, prepare, write_format
from openwebtext.prepare import convert as convert_module
from openwebtext.tokenfiles import open_token_file
from support import local_files, s3_objects

EOT = 256  # the bytes tokenizer's


def _opts(**overrides: object) -> PrepareOptions:
    base: dict[str, object] = {"tokenizer": "bytes", "workers": 0, "val_fraction": 0.2}
    return PrepareOptions(**{**base, **overrides})  # type: ignore[arg-type]


def _documents(path: Path) -> list[list[int]]:
    """train.bin's documents, cut after every end-of-text: what every format must hold."""
    ids = np.fromfile(path, dtype="<u2")
    return (
        [d.tolist() for d in np.split(ids, np.flatnonzero(ids == EOT)[:-1] + 1)] if ids.size else []
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module", params=["hash", "nanogpt"])
def run(
    request: pytest.FixtureRequest, small_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A finished run of the small corpus under each split rule, every format written."""
    out = tmp_path_factory.mktemp(f"run-{request.param}")
    prepare(Corpus.open(small_corpus), out, _opts(split_rule=request.param))
    for fmt in ("megatron", "llmc", "datatrove"):
        write_format(out, fmt, shard_tokens=20_000)
    return out


def test_train_bin_keeps_its_bytes(run: Path) -> None:
    meta = json.loads((run / "meta.json").read_text())
    for split in ("train", "val"):
        assert _sha(run / f"{split}.bin") == meta["files"][f"{split}.bin"]["sha256"]
        assert meta["counts"]["documents"][split] > 0


@pytest.mark.parametrize("split", ["train", "val"])
def test_megatron_core_reads_the_documents(run: Path, split: str) -> None:
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = indexed.IndexedDataset(str(run / split))
    want = _documents(run / f"{split}.bin")
    assert len(dataset) == len(want)
    assert [dataset[i].tolist() for i in range(len(dataset))] == want
    assert dataset.document_indices.tolist() == list(range(len(want) + 1))


@pytest.mark.parametrize("split", ["train", "val"])
def test_datatrove_reads_the_ids_and_the_document_ends(run: Path, split: str) -> None:
    dataset_module = pytest.importorskip("datatrove.utils.dataset")
    seq_len = 63
    dataset = dataset_module.DatatroveFileDataset(
        str(run / f"{split}.ds"), seq_len, token_size=2, return_positions=True
    )
    from_eot = dataset_module.DatatroveFileDataset(
        str(run / f"{split}.ds"), seq_len, return_positions=True, positions_from_eos_token_id=EOT
    )
    ids = np.fromfile(run / f"{split}.bin", dtype="<u2")
    assert len(dataset) == len(ids) // (seq_len + 1)
    for i in range(len(dataset)):
        window = ids[i * (seq_len + 1) : (i + 1) * (seq_len + 1)]
        item = dataset[i]
        assert item["input_ids"].tolist() == window.tolist()
        # Positions from our .ds.index equal those datatrove derives from the eot ids.
        assert item["positions"].tolist() == from_eot[i]["positions"].tolist()
    folder = dataset_module.DatatroveFolderDataset(
        str(run), seq_len, filename_pattern=f"{split}.ds"
    )
    assert len(folder) == len(dataset)


def _modded_nanogpt_shard(path: Path) -> np.ndarray:
    """modded-nanogpt's ``_load_data_shard``, re-implemented in NumPy from its source: a
    256-int32 header, magic 20240520, version 1, ``num_tokens``; then that many uint16."""
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520, "magic number mismatch in the data .bin file"
    assert header[1] == 1, "unsupported version"
    num_tokens = int(header[2])
    with path.open("rb", buffering=0) as f:
        f.seek(256 * 4)
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    assert len(tokens) == num_tokens, "number of tokens read does not match header"
    return tokens


@pytest.mark.parametrize("split", ["train", "val"])
def test_llmc_shards_hold_the_ids_in_whole_documents(run: Path, split: str) -> None:
    shards = sorted(run.glob(f"{split}_*.bin"))
    assert len(shards) > 1 or split == "val"
    parts = [_modded_nanogpt_shard(s) for s in shards]
    assert np.concatenate(parts).tolist() == np.fromfile(run / f"{split}.bin", "<u2").tolist()
    assert all(p.size and p[-1] == EOT for p in parts)  # no document crosses a shard
    assert all(p.size <= 20_000 or np.count_nonzero(p == EOT) == 1 for p in parts)


@pytest.mark.parametrize("fmt", ["megatron", "llmc", "datatrove"])
def test_our_reader_gives_the_same_documents(run: Path, fmt: str) -> None:
    marker = json.loads((run / f"{fmt}.json").read_text())
    for name, info in marker["files"].items():
        assert (run / name).stat().st_size == info["bytes"] and _sha(run / name) == info["sha256"]
    want = _documents(run / "train.bin")
    files = {"megatron": ["train.bin"], "datatrove": ["train.ds"]}.get(fmt)
    paths = [run / f for f in files] if files else sorted(run.glob("train_*.bin"))
    got = []
    for path in paths:
        opened = open_token_file(path, eot=EOT)
        starts = np.concatenate([[0], opened.ends[:-1]])
        got += [opened.ids[s:e].tolist() for s, e in zip(starts, opened.ends, strict=True)]
    assert got == want


def test_a_finished_format_is_not_written_again(run: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    assert write_format(run, "megatron") == json.loads((run / "megatron.json").read_text())
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before


def test_a_killed_pass_goes_on(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for out in (whole, killed):
        prepare(Corpus.open(small_corpus), out, _opts())
    write_format(whole, "llmc", shard_tokens=20_000)
    real = convert_module._write
    calls: list[Path] = []
    dead: list[bool] = []

    def dies_on_the_third(path: Path, parts: object) -> object:
        calls.append(path)
        if len(calls) == 3 and not dead:
            dead.append(True)
            raise RuntimeError("killed")
        return real(path, parts)  # type: ignore[arg-type]

    monkeypatch.setattr(convert_module, "_write", dies_on_the_third)
    with pytest.raises(RuntimeError, match="killed"):
        write_format(killed, "llmc", shard_tokens=20_000)
    assert not (killed / "llmc.json").exists()
    kept = {p: p.stat().st_mtime_ns for p in calls[:2]}
    calls.clear()
    write_format(killed, "llmc", shard_tokens=20_000)
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # not written again
    assert not set(kept) & set(calls)
    assert not (killed / ".llmc.progress.json").exists()
    assert local_files(killed) == local_files(whole)


def test_a_datatrove_pass_killed_after_its_link_leaves_no_temporary_file(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """Killed after ``train.ds`` was linked to ``train.bin`` (while hashing it, 18 GB on
    OpenWebText), the next pass linked it again: a rename onto a link to the same file does
    nothing, and ``.train.ds.link`` was left beside the finished files."""
    out = tmp_path / "out"
    prepare(Corpus.open(small_corpus), out, _opts())
    real = convert_module.sha256_file

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # (the pass's end: train.ds linked, nothing recorded)

    monkeypatch.setattr(convert_module, "sha256_file", killed)
    with pytest.raises(KeyboardInterrupt):
        write_format(out, "datatrove")
    monkeypatch.setattr(convert_module, "sha256_file", real)
    write_format(out, "datatrove")
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "damage",
    [
        lambda m: m.update(files=["train.idx"]),
        lambda m: m["files"].update({name: 3 for name in m["files"]}),
        lambda m: m["files"]["train.idx"].update(bytes="382"),
        lambda m: m.update(format="llmc"),
        lambda m: m.pop("source"),
    ],
    ids=["files a list", "a file's info a number", "bytes a string", "another format", "no source"],
)
@pytest.mark.parametrize("record", ["megatron.json", ".megatron.progress.json"])
def test_a_damaged_marker_or_progress_record_is_written_again(
    small_corpus: Path, tmp_path: Path, record: str, damage: Callable[[dict[str, Any]], None]
) -> None:
    """The marker and the record of a killed pass are read by the one codec: a damaged one
    (a field of the wrong type, missing, another format's) is not the pass's, and the files
    are written again (a list or a number where the files' object was raised TypeError)."""
    prepare(Corpus.open(small_corpus), tmp_path, _opts())
    marker = write_format(tmp_path, "megatron")
    assert marker is not None
    body = json.loads(json.dumps(marker))
    if record.startswith("."):
        del body["format"]
    damage(body)
    (tmp_path / "megatron.json").unlink()
    (tmp_path / record).write_text(json.dumps(body))
    assert write_format(tmp_path, "megatron") == marker
    assert json.loads((tmp_path / "megatron.json").read_text()) == marker
    assert not (tmp_path / ".megatron.progress.json").exists()


def test_documents_that_disagree_with_meta_are_refused(small_corpus: Path, tmp_path: Path) -> None:
    prepare(Corpus.open(small_corpus), tmp_path, _opts())
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["counts"]["documents"]["train"] += 1
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        PrepareError, match=r"train.bin: \d+ documents end at the end-of-text id 256"
    ):
        write_format(tmp_path, "megatron")
    assert not (tmp_path / "megatron.json").exists()


def test_no_run_or_a_slice_is_refused(small_corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match="holds no finished run"):
        write_format(tmp_path, "megatron")
    prepare(Corpus.open(small_corpus), tmp_path / "s", _opts(), shard=(0, 2))
    with pytest.raises(PrepareError, match="holds a slice: give the format to owt merge"):
        write_format(tmp_path / "s", "datatrove")
    with pytest.raises(ValueError, match="format must be one of"):
        write_format(tmp_path, "parquet")
    for size in (0, -3, True, 2.5, "100", 2**63):  # (was written into the marker as it was)
        with pytest.raises(ValueError, match="shard_tokens must be an int from 1 to"):
            write_format(tmp_path, "llmc", shard_tokens=size)  # type: ignore[arg-type]


def test_cli_writes_the_format_and_merge_writes_a_slices_format(
    small_corpus: Path, tmp_path: Path
) -> None:
    common = ["--tokenizer", "bytes", "-j", "0", "--val-fraction", "0.2", "-q"]
    assert (
        main(
            [
                "tokenize",
                str(small_corpus),
                "--out",
                str(tmp_path / "one"),
                *common,
                "--format",
                "megatron",
            ]
        )
        == 0
    )
    for i in range(2):
        assert (
            main(
                [
                    "tokenize",
                    str(small_corpus),
                    "--out",
                    str(tmp_path / f"s{i}"),
                    *common,
                    "--shard",
                    f"{i}/2",
                ]
            )
            == 0
        )
    slices = [str(tmp_path / f"s{i}") for i in range(2)]
    assert (
        main(["merge", *slices, "--out", str(tmp_path / "merged"), "--format", "megatron", "-q"])
        == 0
    )
    assert local_files(tmp_path / "merged") == local_files(tmp_path / "one")
    assert (tmp_path / "one" / "train.idx").is_file()


def test_cli_refuses_a_format_for_a_slice(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["tokenize", str(small_corpus), "--out", str(tmp_path), "--tokenizer", "bytes",
                 "--shard", "0/2", "--format", "llmc", "-q"])  # fmt: skip
    assert code != 0
    assert "give it to owt merge" in capsys.readouterr().err
    assert not (tmp_path / "meta.json").exists()


def test_a_url_gets_the_files_and_the_marker(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    url = "s3://owt/formats-x/"
    try:
        prepare(corpus, url, _opts())
        write_format(url, "datatrove", corpus.storage)
        prepare(corpus, tmp_path, _opts())
        write_format(tmp_path, "datatrove")
        remote = s3_objects(s3_endpoint, "formats-x/")
        local = local_files(tmp_path)
        assert remote == {k: v for k, v in local.items() if not k.startswith(".")}
        assert write_format(url, "datatrove", corpus.storage) == json.loads(
            remote["datatrove.json"]
        )
    finally:
        outputs.remove(outputs.staging(url))
        outputs.remove(outputs.staging(url, "fetch"))


@pytest.mark.ray
def test_the_ray_engine_writes_the_same_format(small_corpus: Path, tmp_path: Path) -> None:
    """``--engine ray --format llmc``: the local engine's files, format included (a private
    Ray instance, started and stopped by the command, in a temporary folder)."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    temp = Path(tempfile.mkdtemp(prefix="owt-T", dir="/tmp"))  # short: Ray's socket paths
    try:
        env = {**os.environ, "HOME": str(temp / "home"), "TMPDIR": str(temp)}
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
            env.pop(key, None)
        base = [sys.executable, "-m", "openwebtext.cli", "tokenize", str(small_corpus), "-j", "2",
                "--tokenizer", "bytes", "--format", "llmc", "-q"]  # fmt: skip
        subprocess.run([*base, "--out", str(tmp_path / "local")], env=env, check=True)
        run = subprocess.run([*base, "--out", str(tmp_path / "ray"), "--engine", "ray"],
                             env=env, capture_output=True, text=True, timeout=240)  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert local_files(tmp_path / "ray") == local_files(tmp_path / "local")
        assert (tmp_path / "ray" / "llmc.json").is_file()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_another_shard_size_writes_the_shards_again_and_leaves_no_stale_one(
    small_corpus: Path, tmp_path: Path
) -> None:
    prepare(Corpus.open(small_corpus), tmp_path, _opts())
    write_format(tmp_path, "llmc", shard_tokens=20_000)
    many = sorted(p.name for p in tmp_path.glob("train_*.bin"))
    marker = write_format(tmp_path, "llmc", shard_tokens=10**8)
    assert (
        marker is not None
        and sorted(p.name for p in tmp_path.glob("train_*.bin")) == ["train_000000.bin"] != many
    )
    whole = _modded_nanogpt_shard(tmp_path / "train_000000.bin")
    assert whole.tolist() == np.fromfile(tmp_path / "train.bin", "<u2").tolist()
