"""One check per entry: a batches state's documents are checked against the run once where
``Loader.batches`` takes them (by the ``DocumentIterator`` it makes, told the state's next
document is in batches out), and a progress record's skips once per record read (its
``meta``, built first, checked them when it says the record's config and counts); each
refusal still names the field it did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import openwebtext.iterators as iterators_module
import openwebtext.prepare.state as state_module
from openwebtext import Loader, StateError, codec
from openwebtext.prepare.state import ProgressRecord

GOLDEN: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "prepare-2.json").read_text()
)


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[dict[str, Any]]:
    """Every call of ``module.name`` from here on, by its keyword arguments."""
    calls: list[dict[str, Any]] = []
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _batches_state(corpus: Path, batches: int, **options: Any) -> dict[str, Any]:
    with Loader(corpus, **options).batches(16, 2) as it:
        for _ in range(batches):
            next(it)
        return json.loads(json.dumps(it.state_dict()))


def test_a_batches_state_is_checked_against_the_run_once(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concat state whose next document is in batches out (``offset`` > 0) was checked by
    ``Loader.batches`` (``begun``) and again by its ``DocumentIterator`` (without)."""
    opts = {"workers": 0, "seed": 3, "tokenizer": "bytes", "epochs": 1}
    state = _batches_state(small_corpus, 3, **opts)
    assert state["offset"] > 0
    calls = _counting(monkeypatch, iterators_module, "check_in_run")
    with Loader(small_corpus, **opts).batches(16, 2, state=state) as resumed:
        assert calls == [{"begun": True}]
        next(resumed)
    assert len(calls) == 1
    state["documents"]["position"] = {"epoch": 1}  # (past the run: its begun document too)
    calls.clear()
    with pytest.raises(StateError, match="nothing left to read: the state is at epoch 1") as e:
        Loader(small_corpus, **opts).batches(16, 2, state=state)
    assert e.value.field == "documents.position.epoch" and calls == [{"begun": True}]
    calls.clear()  # (a state of the documents themselves: no batches out, never begun)
    with Loader(small_corpus, **opts).iter() as docs:
        next(docs)
        saved = docs.state_dict()
    with Loader(small_corpus, **opts).iter(state=saved):
        assert calls == [{"begun": False}]


def _edited(kind: str, record: str | None = None, meta: str | None = None) -> dict[str, Any]:
    """Golden ``kind`` with one skip more in the record's counts, its meta's, or both."""
    body = json.loads(json.dumps(GOLDEN[kind]))
    if record:
        body["counts"][record] += 1
    if meta:
        body["meta"]["counts"][meta] += 1
    return body


@pytest.mark.parametrize(
    ("body", "field", "checks"),
    [
        (_edited("progress_nanogpt_commit"), None, 1),
        (_edited("progress_hash_tokenize"), None, 1),
        (_edited("progress_hash_tokenize", record="skipped_members"), "counts", 1),
        # (the meta's counts and the record's differ: each is checked, once)
        (_edited("progress_nanogpt_commit", record="skipped_documents"), "counts", 2),
        (_edited("progress_nanogpt_commit", meta="partial_members"), "meta.counts", 1),
        (_edited("progress_nanogpt_commit", "skipped_members", "skipped_members"), "meta.counts",
         1),
    ],
)  # fmt: skip
def test_a_progress_record_s_skips_are_checked_once(
    body: dict[str, Any], field: str | None, checks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit record's skips were checked by its meta (built first, of the same config and
    counts) and again by the record. A skip under ``on_error="raise"`` is still named where
    it is said: the record's ``counts``, or its meta's."""
    calls = _counting(monkeypatch, state_module, "_check_skips")
    if field is None:
        codec.decode(body, ProgressRecord)
    else:
        with pytest.raises(StateError, match="say 1 skips, under on_error='raise'") as caught:
            codec.decode(body, ProgressRecord)
        assert caught.value.field == field
    assert len(calls) == checks


def test_a_commit_record_s_config_is_checked_once_for_each_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The record compared its config with its meta's through a copy without ``merge_of``,
    and that copy was checked again (as every record built is): the config, said twice, was
    checked three times. A meta that does not say the record's config is still refused."""
    calls = _counting(monkeypatch, state_module.RunConfig, "check")
    codec.decode(GOLDEN["progress_nanogpt_commit"], ProgressRecord)
    assert len(calls) == 2
    body = json.loads(json.dumps(GOLDEN["progress_nanogpt_commit"]))
    body["meta"]["config"]["val_seed"] = 0
    with pytest.raises(StateError, match="meta: must say the record's config") as caught:
        codec.decode(body, ProgressRecord)
    assert caught.value.field == "meta"
