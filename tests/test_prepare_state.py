"""``prepare.state``: every record round-trips through its JSON (Hypothesis), the JSON of a
record is stable (the golden records of the last release are written back byte for byte),
and a damaged record is one ``RecordError`` naming the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from openwebtext.plan import shard_range
from openwebtext.policy import COUNTERS
from openwebtext.prepare.state import (
    LENGTH,
    Counts,
    FileInfo,
    Meta,
    Phase,
    ProgressRecord,
    RecordError,
    RunConfig,
    Slice,
)

GOLDEN = Path(__file__).parent / "fixtures" / "prepare-v1"
RECORDS = sorted(GOLDEN.glob("runs/*/.owt-progress.json"))
METAS = sorted([*GOLDEN.glob("meta-*.json"), *GOLDEN.glob("runs/**/meta.json")])

counts_ = st.integers(0, 2**40)
names = st.text("abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=12).filter(
    lambda n: n[0] not in ".-"
)
sha256s = st.text("0123456789abcdef", min_size=64, max_size=64)
file_infos = st.builds(FileInfo, counts_, sha256s)


@st.composite
def slices(draw: st.DrawFn, units: int) -> Slice:
    if draw(st.booleans()):
        count = draw(st.integers(1, 64))
        index = draw(st.integers(0, count - 1))
        return Slice(*shard_range(units, index, count), (index, count))
    start = draw(st.integers(0, units))
    return Slice(start, draw(st.integers(start, units)))


@st.composite
def configs(draw: st.DrawFn, kind: str | None = None) -> RunConfig:
    """Any config; ``kind``: "whole" (no slice), "slice", or None (either)."""
    rule = draw(st.sampled_from(["hash", "nanogpt"]))
    units = draw(st.integers(0, 30_000))
    piece = None
    if kind == "slice" or (kind is None and draw(st.booleans())):
        piece = draw(slices(units))
    hashed = rule == "hash"
    merge_of = None
    if kind is None and draw(st.booleans()):
        merge_of = tuple(draw(st.lists(st.tuples(st.text(max_size=20),
                                                 st.dictionaries(names, file_infos, max_size=3)),
                                       max_size=3)))  # fmt: skip
    return RunConfig(
        split_rule=rule,  # type: ignore[arg-type]
        corpus=draw(st.text("0123456789abcdef", min_size=16, max_size=16)),
        units=units,
        tokenizer=draw(st.sampled_from(["gpt2", "bytes", "hf:gpt2", "tiktoken:cl100k_base"])),
        fingerprint=draw(st.text(max_size=16)),
        dtype=draw(st.sampled_from(["uint16", "uint32", "int32", "int64"])),
        eot=draw(counts_),
        n_vocab=draw(counts_),
        val_fraction=draw(st.floats(0, 1, exclude_min=True, exclude_max=True)),
        val_seed=draw(counts_),
        take=draw(st.none() | counts_),
        on_error=draw(st.sampled_from(["raise", "skip", "warn"])),  # type: ignore[arg-type]
        seed=draw(counts_) if hashed else None,
        shuffle=draw(st.booleans()) if hashed else None,
        slice=piece,
        merge_of=merge_of,
    )


def _counts(draw: st.DrawFn, keys: list[str]) -> Counts:
    per = st.fixed_dictionaries(dict.fromkeys(keys, counts_))
    skips = st.fixed_dictionaries(dict.fromkeys(COUNTERS, counts_))
    return Counts(draw(per), draw(per), draw(skips))


@st.composite
def any_counts(draw: st.DrawFn) -> Counts:
    return _counts(draw, draw(st.lists(names, max_size=3, unique=True)))


@st.composite
def metas(draw: st.DrawFn) -> Meta:
    """A meta.json as a run writes it: its kind's files, their bytes its counts' items."""
    config = draw(configs(kind=draw(st.sampled_from(["whole", "slice"]))))
    corpus_order = config.in_corpus_order
    counts = _counts(draw, ["all"] if corpus_order else ["train", "val"])
    itemsize = np.dtype(config.dtype).itemsize
    if corpus_order:
        sizes = {"tokens.bin": counts.tokens["all"] * itemsize,
                 "lengths.bin": counts.documents["all"] * LENGTH.itemsize}  # fmt: skip
    else:
        sizes = {f"{s}.bin": counts.tokens[s] * itemsize for s in ("train", "val")}
    files = {name: FileInfo(size, draw(sha256s)) for name, size in sizes.items()}
    return Meta(config, counts, files)


@st.composite
def records(draw: st.DrawFn) -> ProgressRecord:
    phase = draw(st.sampled_from(list(Phase)))
    meta = draw(metas()) if phase is Phase.COMMIT else None
    sizes = draw(st.dictionaries(names, counts_, max_size=4))
    config = draw(configs())
    return ProgressRecord(config, phase, draw(any_counts()), draw(counts_), sizes, meta)


def _through_json(body: dict[str, Any]) -> Any:
    return json.loads(json.dumps(body, indent=1, sort_keys=True))


@given(configs())
def test_a_config_round_trips(config: RunConfig) -> None:
    body = _through_json(config.to_json())
    assert RunConfig.from_json(body) == config
    assert RunConfig.from_json(body).to_json() == body  # its JSON is stable


@given(any_counts())
def test_counts_round_trip(counts: Counts) -> None:
    body = _through_json(counts.to_json())
    assert Counts.from_json(body) == counts
    assert Counts.from_json(body).to_json() == body


@given(metas())
def test_a_meta_round_trips(meta: Meta) -> None:
    body = _through_json(meta.to_json())
    assert Meta.from_json(body) == meta
    assert Meta.from_json(body).to_json() == body


@given(records())
def test_a_progress_record_round_trips(record: ProgressRecord) -> None:
    body = _through_json(record.to_json())
    assert ProgressRecord.from_json(body) == record
    assert ProgressRecord.from_json(body).to_json() == body


def _written(body: dict[str, Any]) -> str:
    """As ``Workdir.write_json`` writes a record or a meta.json."""
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.parent.name)
def test_a_record_of_the_last_release_is_written_back_byte_for_byte(path: Path) -> None:
    text = path.read_text()
    record = ProgressRecord.from_json(json.loads(text))
    assert _written(record.to_json()) == text


@pytest.mark.parametrize("path", METAS, ids=lambda p: str(p.relative_to(GOLDEN)))
def test_a_meta_json_of_the_last_release_is_written_back_byte_for_byte(path: Path) -> None:
    text = path.read_text()
    assert _written(Meta.from_json(json.loads(text)).to_json()) == text


def _golden(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((GOLDEN / "runs" / name / ".owt-progress.json").read_text())
    return body


RECORD_DAMAGES: dict[str, Callable[[dict[str, Any]], object]] = {
    "config": lambda r: r.update(config=[]),
    "config.format": lambda r: r["config"].update(format="openwebtext-prepare/2"),
    "config.split": lambda r: r["config"].update(split="random"),
    "config.units": lambda r: r["config"].update(units=-1),
    "config.corpus": lambda r: r["config"].update(corpus=3),
    "config.dtype": lambda r: r["config"].update(dtype="float32"),
    "config.eot": lambda r: r["config"].update(eot="50256"),
    "config.tokenizer": lambda r: r["config"].update(tokenizer=None),
    "config.val_fraction": lambda r: r["config"].update(val_fraction=1.5),
    "config.take": lambda r: r["config"].update(take=-1),
    "config.on_error": lambda r: r["config"].update(on_error="ignore"),
    "config.shuffle": lambda r: r["config"].update(shuffle=None),
    "config.seed": lambda r: r["config"].pop("seed"),
    "config.formats": lambda r: r["config"].update(formats=["megatron"]),  # a newer release's
    "phase": lambda r: r.update(phase="done"),
    "position": lambda r: r.update(position=1.0),
    "sizes.train.bin": lambda r: r["sizes"].update({"train.bin": -3}),
    "counts": lambda r: r.pop("counts"),
    "counts.documents.train": lambda r: r["counts"]["documents"].update(train=None),
    "counts.partial_members": lambda r: r["counts"].pop("partial_members"),
}


@pytest.mark.parametrize("field", list(RECORD_DAMAGES))
def test_a_damaged_record_names_its_field(field: str) -> None:
    body = _golden("hash-tokenize")
    RECORD_DAMAGES[field](body)
    with pytest.raises(RecordError) as caught:
        ProgressRecord.from_json(body)
    assert caught.value.field == field
    assert str(caught.value).startswith(field), caught.value


def test_a_record_that_is_not_an_object_says_so() -> None:
    with pytest.raises(RecordError, match=r"^the record must be an object, not list"):
        ProgressRecord.from_json([])


def test_a_commit_record_s_meta_is_checked_under_its_key() -> None:
    body = _golden("nanogpt-commit")
    body["meta"]["files"]["val.bin"]["sha256"] = "x"
    with pytest.raises(RecordError, match=r"^meta\.files\.val\.bin\.sha256 must be 64 hex"):
        ProgressRecord.from_json(body)
    body["meta"] = None
    with pytest.raises(RecordError, match=r"^meta must be an object"):
        ProgressRecord.from_json(body)


def test_a_merge_record_s_slices_are_checked() -> None:
    body = _golden("merge-permute")
    damaged = copy.deepcopy(body)
    damaged["config"]["merge_of"][1] = "s1"
    with pytest.raises(RecordError, match=r"^config\.merge_of\[1\] must be \[folder, files\]"):
        ProgressRecord.from_json(damaged)
    body["config"]["merge_of"][0][1]["tokens.bin"]["bytes"] = "17460"
    with pytest.raises(RecordError, match=r"^config\.merge_of\[0\]\.tokens\.bin\.bytes must be"):
        ProgressRecord.from_json(body)


def test_phase_keeps_its_strings() -> None:
    assert [p.value for p in Phase] == ["tokenize", "permute", "commit"]
    assert json.dumps(Phase.PERMUTE) == '"permute"'
    assert Phase("commit") is Phase.COMMIT
