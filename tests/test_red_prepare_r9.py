"""What a red team of ``owt tokenize``'s work folder (session 32) found: a progress record
edited within its bounds (a position one unit on or back, phase ``permute`` before pass 1
ended) resumed a run that skipped or repeated a unit, or committed part of one; a commit cut
short whose part was then lost kept an earlier run's file of the name under this run's
``meta.json``. A record is now sealed by a hash of its fields (``Workdir.save``), and a commit
takes a file in a part's place only if it is this run's (its size and sha256)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, prepare
from openwebtext.prepare import workdir as workdir_module
from openwebtext.prepare.workdir import PROGRESS, SEAL, seal_of

GOLDEN = Path(__file__).parent / "fixtures" / "prepare-2"


def _options(rule: str, **more: Any) -> PrepareOptions:
    return PrepareOptions(split_rule=rule, tokenizer="gpt2", workers=0, val_fraction=0.25, **more)  # type: ignore[arg-type]


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    return Corpus.open(shutil.copytree(GOLDEN / "corpus", tmp_path / "corpus"))


@pytest.mark.parametrize(
    ("run", "rule", "edit"),
    [
        ("hash-tokenize", "hash", lambda r: r.update(position=r["position"] + 1)),
        ("nanogpt-tokenize", "nanogpt", lambda r: r.update(position=r["position"] - 1)),
        ("nanogpt-tokenize", "nanogpt", lambda r: r.update(phase="permute", position=0)),
        ("hash-tokenize", "hash", lambda r: r.pop(SEAL)),
    ],
    ids=["position+1", "position-1", "phase", "no-seal"],
)
def test_a_progress_record_changed_since_it_was_written_is_refused(
    corpus: Corpus, tmp_path: Path, run: str, rule: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    """Each edit is within the record's bounds and its fields agree: the run resumed from
    it and finished with a unit's documents lost or twice (a whole nanogpt run committed as
    the documents of pass 1 so far), exit 0; then said "nothing to do"."""
    out = shutil.copytree(GOLDEN / "runs" / run, tmp_path / "out")
    body = json.loads((out / PROGRESS).read_text())
    edit(body)
    (out / PROGRESS).write_text(json.dumps(body))
    with pytest.raises(PrepareError, match=r"was changed since this run wrote it.*--restart$"):
        prepare(corpus, out, _options(rule))
    assert not (out / "meta.json").exists()
    whole = prepare(corpus, tmp_path / "whole", _options(rule))
    assert prepare(corpus, out, _options(rule), restart=True).meta == whole.meta


def test_a_record_sealed_again_after_its_edit_is_checked_as_before(
    corpus: Corpus, tmp_path: Path
) -> None:
    """The seal comes after the fields' checks: a field out of bounds is still named."""
    out = shutil.copytree(GOLDEN / "runs" / "hash-tokenize", tmp_path / "out")
    body = {k: v for k, v in json.loads((out / PROGRESS).read_text()).items() if k != SEAL}
    body["position"] = 99
    (out / PROGRESS).write_text(json.dumps(body | {SEAL: seal_of(body)}))
    with pytest.raises(PrepareError, match=r"bad progress record: position: is 99"):
        prepare(corpus, out, _options("hash"))


class _Cut(BaseException):
    pass


def _cut_at_rename(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """A commit cut short at its ``nth`` rename of a part into place (a kill there)."""
    real, seen = os.replace, [0]

    def replace(a: Any, b: Any) -> None:
        if str(a).endswith(".part"):
            seen[0] += 1
            if seen[0] >= nth:
                raise _Cut
        real(a, b)

    monkeypatch.setattr(workdir_module.os, "replace", replace)


def _cut_over_an_earlier_run(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nth: int
) -> Path:
    """A folder finished by an earlier run (another seed: files of the same sizes), then a
    run of seed 0 into it cut at its ``nth`` rename."""
    out = tmp_path / "out"
    prepare(corpus, out, _options("hash", seed=1))
    with monkeypatch.context() as patch:
        _cut_at_rename(patch, nth)
        with pytest.raises(_Cut):
            prepare(corpus, out, _options("hash"))
    return out


def test_a_lost_part_is_not_replaced_by_an_earlier_runs_file(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier run (another seed: files of the same sizes) finished in the folder; this
    run is cut before its first rename, and its train part is lost: the rerun kept the
    earlier train.bin under this run's meta.json, and said "nothing to do" after."""
    out = _cut_over_an_earlier_run(corpus, tmp_path, monkeypatch, 1)
    (out / ".train.bin.part").unlink()
    with pytest.raises(PrepareError, match=r"\.train\.bin\.part is gone, and train\.bin is not "
                       r"this run's \(its size or sha256\): run again with --restart"):  # fmt: skip
        prepare(corpus, out, _options("hash"))
    assert not (out / "meta.json").exists()


def test_a_commit_cut_after_its_first_rename_finishes(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The part renamed before the cut is this run's file: it is kept, the run finishes."""
    out = _cut_over_an_earlier_run(corpus, tmp_path, monkeypatch, 2)
    assert sorted(p.name for p in out.glob(".*.part")) == [".val.bin.part"]
    finished = prepare(corpus, out, _options("hash"))
    assert finished.resumed
    assert finished.meta == prepare(corpus, tmp_path / "whole", _options("hash")).meta
    for name in ("train.bin", "val.bin"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


@pytest.mark.parametrize(("stray", "source"), [("train_000099.bin", "val_000000.bin"),
                                               ("val.ds", "val.ds")])  # fmt: skip
def test_a_format_file_its_marker_does_not_name_is_not_the_runs(
    token_run: Path, tmp_path: Path, stray: str, source: str
) -> None:
    """A shard copied in beside ``llmc.json`` (another run's, or the val shard under a train
    name) was read as the run's: a trainer's ``train_*.bin`` took the val documents into
    train; and ``--format llmc`` again said "nothing to do", keeping it. A ``.ds`` the
    datatrove marker does not name is refused the same way."""
    from openwebtext.prepare import write_format
    from openwebtext.tokenfiles import TokenFileError

    out = shutil.copytree(token_run, tmp_path / "run")
    fmt = "llmc" if stray.endswith(".bin") else "datatrove"
    marker = json.loads((out / f"{fmt}.json").read_text())
    if stray in marker["files"]:  # (a datatrove marker names val.ds: name it no more)
        del marker["files"][stray]
        (out / "datatrove.json").write_text(json.dumps(marker))
    else:
        shutil.copy(out / source, out / stray)
    with pytest.raises(TokenFileError, match=rf"{stray}: a file of .* does not name"):
        Corpus.open_tokens(out / stray)
    if stray.endswith(".bin"):
        assert write_format(out, "llmc", shard_tokens=40_000) is not None
        assert not (out / stray).exists()
        shards = sorted(out.glob("train_*.bin"))
        named = json.loads((out / "llmc.json").read_text())["files"]
        assert {p.name for p in shards} <= set(named)
        Corpus.open_tokens(shards)


def test_a_format_written_to_a_url_leaves_no_shard_its_marker_does_not_name(
    token_run: Path,
) -> None:
    """Behind a URL the pass is made in a local copy, and only its files were uploaded: the
    shards of an earlier pass at another size stayed beside the new ``llmc.json`` (a
    trainer's ``train_*.bin`` read documents twice), and a shard copied in stayed too."""
    import fsspec

    from openwebtext.prepare import write_format

    fs, url = fsspec.filesystem("memory"), "memory://r9-formats/run"
    try:
        for name in ("meta.json", "train.bin", "val.bin"):
            fs.pipe(f"{url}/{name}", (token_run / name).read_bytes())

        def shards() -> set[str]:
            return {p.rsplit("/", 1)[1] for p in fs.ls(url, detail=False) if "_0" in p}

        many = write_format(url, "llmc", shard_tokens=40_000)
        assert many is not None and shards() == set(many["files"]) and len(shards()) > 2
        few = write_format(url, "llmc", shard_tokens=10**8)
        assert few is not None and shards() == set(few["files"]) == {
            "train_000000.bin", "val_000000.bin"}  # fmt: skip
        fs.pipe(f"{url}/train_000099.bin", fs.cat(f"{url}/val_000000.bin"))
        assert write_format(url, "llmc", shard_tokens=10**8) == few
        assert shards() == set(few["files"])
    finally:
        fs.rm(url.removesuffix("/run"), recursive=True)
