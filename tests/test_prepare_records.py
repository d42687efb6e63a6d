"""The prepare side's records on real folders: runs interrupted at each phase (golden
fixtures, their records in format 2) resume and finish to the same bytes, the same options
write the same meta.json, and a damaged record is one clear error naming its file and field."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare
from openwebtext.prepare.workdir import PROGRESS, SEAL, seal_of

GOLDEN = Path(__file__).parent / "fixtures" / "prepare-2"
METAS = json.loads((Path(__file__).parent / "data" / "prepare-2.json").read_text())


def _options(rule: str) -> PrepareOptions:
    return PrepareOptions(split_rule=rule, tokenizer="gpt2", workers=0, val_fraction=0.25)  # type: ignore[arg-type]


def _golden_meta(name: str) -> dict[str, object]:
    """A ``meta.json`` pinned in ``tests/data/prepare-2.json`` (``meta_hash_slice``, ...)."""
    meta: dict[str, object] = METAS[name]
    return meta


def sealed(body: dict[str, Any]) -> dict[str, Any]:
    """A progress record's fields sealed again, as a run writes them (``Workdir.save``)."""
    fields = {k: v for k, v in body.items() if k != SEAL}
    return fields | {SEAL: seal_of(fields)}


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    return Corpus.open(shutil.copytree(GOLDEN / "corpus", tmp_path / "corpus"))


@pytest.mark.parametrize(
    ("run", "rule"),
    [("hash-tokenize", "hash"), ("nanogpt-tokenize", "nanogpt"),
     ("nanogpt-permute", "nanogpt"), ("nanogpt-commit", "nanogpt")],
)  # fmt: skip
def test_a_folder_of_the_last_release_resumes_to_its_files(
    corpus: Corpus, tmp_path: Path, run: str, rule: str
) -> None:
    out = shutil.copytree(GOLDEN / "runs" / run, tmp_path / "out")
    report = prepare(corpus, out, _options(rule))
    assert report.resumed
    assert json.loads((out / "meta.json").read_text()) == _golden_meta(f"meta_{rule}")
    assert _hidden(out) == []


def test_a_merge_of_the_last_release_resumes_to_its_files(tmp_path: Path) -> None:
    slices = shutil.copytree(GOLDEN / "runs" / "slices", tmp_path / "slices").resolve()
    out = shutil.copytree(GOLDEN / "runs" / "merge-permute", tmp_path / "out")
    record = out / PROGRESS
    body = json.loads(record.read_text().replace("{SLICES}", str(slices)))
    record.write_text(json.dumps(sealed(body)))  # (of the folders it names)
    report = merge([slices / "s1", slices / "s0"], out)
    assert report.resumed
    assert json.loads((out / "meta.json").read_text()) == _golden_meta("meta_nanogpt")
    assert _hidden(out) == []


@pytest.mark.parametrize("rule", ["hash", "nanogpt"])
def test_meta_json_is_the_last_release_s(corpus: Corpus, tmp_path: Path, rule: str) -> None:
    """Pinned: the same options write the same meta.json, byte for byte in its fields."""
    whole = prepare(corpus, tmp_path / "whole", _options(rule))
    assert whole.meta == _golden_meta(f"meta_{rule}")
    piece = prepare(corpus, tmp_path / "piece", _options(rule), shard=(1, 2))
    assert piece.meta == _golden_meta(f"meta_{rule}_slice")


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("config.eot", lambda r: r["config"].update(eot="50256")),
        ("config.take", lambda r: r["config"].update(take=-1)),
        ("config.formats", lambda r: r["config"].update(formats=["megatron"])),
        ("counts.documents.val", lambda r: r["counts"]["documents"].update(val=[])),
        ("phase", lambda r: r.update(phase="Permute")),
    ],
)  # fmt: skip
def test_a_damaged_record_of_the_last_release_is_one_line_naming_file_and_field(
    corpus: Corpus, tmp_path: Path, field: str, change: Callable[[dict[str, Any]], None]
) -> None:
    """Before the typed record, a damaged config read as "another run's options" (or, for an
    unknown key, as this run's own); now it is the record's own field."""
    out = shutil.copytree(GOLDEN / "runs" / "hash-tokenize", tmp_path / "out")
    body = json.loads((out / PROGRESS).read_text())
    change(body)
    (out / PROGRESS).write_text(json.dumps(body))
    with pytest.raises(PrepareError) as caught:
        prepare(corpus, out, _options("hash"))
    message = str(caught.value)
    said = f"{out / PROGRESS} is not a progress record (bad progress record: {field}: "
    assert message.startswith(said), message
    assert message.endswith("run again with --restart") and "\n" not in message
    assert prepare(corpus, out, _options("hash"), restart=True).meta == _golden_meta("meta_hash")


def _sizes(**sizes: int) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.update(sizes={**r["sizes"], **sizes})


@pytest.mark.parametrize(
    ("run", "field", "change", "shard"),
    [
        ("hash-tokenize", "position", lambda r: r.update(position=10**6), None),
        ("hash-tokenize", "position", lambda r: (r["config"].update(slice={
            "start": 2, "stop": 4, "shard": {"index": 1, "count": 2}}), r.update(position=0)),
         (1, 2)),
        ("nanogpt-permute", "position", lambda r: r.update(position=13), None),
        ("hash-tokenize", "sizes.train.bin", _sizes(**{"train.bin": 6134}), None),
        ("nanogpt-tokenize", "sizes.lengths.bin", _sizes(**{"lengths.bin": 0}), None),
        ("nanogpt-tokenize", "sizes.lengths.bin", _sizes(**{"lengths.bin": 47}), None),
        ("nanogpt-tokenize", "sizes.lengths.bin", lambda r: r["sizes"].pop("lengths.bin"), None),
        ("nanogpt-tokenize", "sizes.tokens.bin", _sizes(**{"tokens.bin": 17462}), None),
        ("hash-tokenize", "counts.documents", lambda r: r["counts"]["documents"].update(
            train=10**6), None),
    ],
)  # fmt: skip
def test_a_record_whose_fields_disagree_is_refused_naming_the_field(
    corpus: Corpus,
    tmp_path: Path,
    run: str,
    field: str,
    change: Callable[[dict[str, Any]], None],
    shard: tuple[int, int] | None,
) -> None:
    """Each field well typed, the record not what a run writes: a position past the units (or
    before its slice's), sizes of the parts that are not the documents counted, more documents
    than ids. Each was taken: units left out, another shard's tokenized, parts cut to what
    their size said (or ``OSError`` from ``os.pread``), meta.json counting a million documents."""
    rule = "hash" if run.startswith("hash") else "nanogpt"
    out = shutil.copytree(GOLDEN / "runs" / run, tmp_path / "out")
    body = json.loads((out / PROGRESS).read_text())
    change(body)
    (out / PROGRESS).write_text(json.dumps(body))
    with pytest.raises(PrepareError) as caught:
        prepare(corpus, out, _options(rule), shard=shard)
    said = f"{out / PROGRESS} is not a progress record (bad progress record: {field}: "
    assert str(caught.value).startswith(said), caught.value


def test_a_record_in_a_phase_its_run_does_not_have_is_refused(
    corpus: Corpus, tmp_path: Path
) -> None:
    out = shutil.copytree(GOLDEN / "runs" / "hash-tokenize", tmp_path / "out")
    body = json.loads((out / PROGRESS).read_text())
    (out / PROGRESS).write_text(json.dumps(sealed({**body, "phase": "permute"})))
    with pytest.raises(PrepareError, match=r"is in phase permute, which a run of its config"):
        prepare(corpus, out, _options("hash"))


def test_a_complete_run_is_not_merged_as_a_slice(tmp_path: Path) -> None:
    (tmp_path / "whole").mkdir()
    (tmp_path / "whole" / "meta.json").write_text(json.dumps(METAS["meta_hash"]))
    with pytest.raises(PrepareError, match=r"whole is not a slice of .*\(a complete run\)$"):
        merge([tmp_path / "whole"], tmp_path / "out")


@pytest.mark.parametrize("found", ["openwebtext-prepare/1", 2, ["openwebtext-prepare/2"]], ids=repr)
def test_a_slice_whose_meta_json_is_of_another_format_says_the_format(
    tmp_path: Path, found: object
) -> None:
    """A merge's slice with a meta.json of another format says so by its field (it was "no
    meta.json of one", as for a folder with none)."""
    slices = shutil.copytree(GOLDEN / "runs" / "slices", tmp_path / "slices")
    meta = slices / "s1" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format": found}))
    with pytest.raises(PrepareError) as caught:
        merge([slices / "s0", slices / "s1"], tmp_path / "out")
    said = "meta.json is damaged: bad meta.json: format: not 'openwebtext-prepare/2' "
    assert said + f"(found {found!r})" in str(caught.value)
    meta.unlink()
    with pytest.raises(PrepareError, match=r"s1 is not a slice of .* \(no meta.json of one\)$"):
        merge([slices / "s0", slices / "s1"], tmp_path / "out")
