"""The observable survivors of session 29's seeded-bug round (resharding, rests, epochs, plan,
prepare's record): each test fails on its mutant (docs/testing.md, "Later rounds").

- R7: a best-fit window dealt again that ran into the lap is refused at its end also when the
  rank resumes from a state at the window's start (``Rest.least_repeats``, ``at >= progress``).
- R13: a mixture's best-fit states under ``even="drop"`` with no skip reshard (``_window_slots``:
  slots passed beyond the documents handed out, ``>``, not ``>=``).
- H2, H5, RS5: reshard chains of documents and concat batches against pinned digests (a lap's
  repeat of a concat cut's document is whole; a finished old rank's ``pad`` repeats counted
  once; a last old rank past the epoch counted its own ``drop``).
- RC2: ``prepare`` raises past ``max_errors`` at the skip that passes it, as the stream does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, StateError, reshard
from openwebtext.errors import TooManyErrors
from openwebtext.index import Counts
from openwebtext.prepare import PrepareOptions, prepare
from tables_support import write_jsonl, write_parquet

LINES = {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5, "g": 6}


def _corpus(root: Path, bad: set[str]) -> Corpus:
    folder = root / ("-".join(sorted(bad)) or "none")
    if not folder.exists():
        folder.mkdir(parents=True)
        for n, k in LINES.items():
            lines = []
            for i in range(k):
                d = f"{n}{i}"
                text = (d + " ") * (3 + (i * 7 + ord(n)) % 23)
                lines.append(b"{not json" if d in bad else json.dumps({"text": text}).encode())
            (folder / f"{n}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    corpus = Corpus.open(folder, on_error="skip")
    names = [Path(u.path).name.split(".")[0] for u in corpus.units]
    return corpus.with_counts(Counts(tuple(LINES[n] for n in names)))


def _trial(root: Path, mode: str, seed: int) -> str:
    """A random reshard chain (drawn from ``seed``): the digest of what every rank of every
    world size handed out (documents or batches) and its counts."""
    rnd = random.Random(seed)
    every = [f"{n}{i}" for n, k in LINES.items() for i in range(k)]
    corpus = _corpus(root, set(rnd.sample(every, rnd.choice([0, 0, 1, 2, 3, 5]))))
    even = rnd.choice([None, "drop", "pad"])
    base = dict(workers=0, seed=seed % 7, shuffle=rnd.random() < 0.7, even=even,
                shuffle_buffer=rnd.choice([1, 2, 4, 8]), on_error="skip", epochs=2)  # fmt: skip
    worlds = [rnd.randint(1, 4) for _ in range(rnd.choice([2, 2, 3]))]
    if mode == "concat":
        base["tokenizer"] = "bytes"
        shape = dict(seq_len=rnd.choice([8, 16, 32]), batch_size=1)
    digest, states = hashlib.sha256(), [None] * worlds[0]
    for k, world in enumerate(worlds):
        last, made = k + 1 == len(worlds), []
        for r in range(world):
            stop = None if last else rnd.randint(0, {"docs": 40, "concat": 12}[mode])
            if not last and rnd.random() < 0.15:
                stop = None
            loader = Loader(corpus, **base, rank=r, world_size=world)
            out: list[Any] = []
            running = loader.iter(state=states[r]) if mode == "docs" else loader.batches(
                **shape, state=states[r])  # fmt: skip
            with running as it:
                for item in it if stop != 0 else ():
                    out.append(item.name if mode == "docs" else np.asarray(item).tobytes().hex())
                    if stop is not None and len(out) >= stop:
                        break
                made.append(json.loads(json.dumps(it.state_dict())))
                s = it.stats
            said = (s.documents, s.epoch_documents, s.tokens, s.repeated_documents,
                    s.dropped_documents, s.skipped_documents)  # fmt: skip
            digest.update(repr((k, r, out, said)).encode())
        if not last:
            states = reshard(made, worlds[k + 1], even=even)
    return digest.hexdigest()[:16]


@pytest.mark.parametrize(
    ("mode", "seed", "pinned"),
    # (session 30: concat-0 and docs-35 re-pinned when a pass repeating a share after skips
    # stopped counting them again; their digests without skipped_documents are unchanged)
    [("concat", 0, "57ea0bebddf0dde3"), ("docs", 3, "2ac63218dbeec117"),
     ("docs", 35, "b1691978f781f2bd")],
)  # fmt: skip
def test_reshard_chains_hand_out_and_count_as_pinned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str, seed: int, pinned: str
) -> None:
    caplog.set_level(logging.ERROR, "openwebtext")
    assert _trial(tmp_path, mode, seed) == pinned


def test_a_mixture_s_best_fit_states_under_drop_reshard(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [f"DOC-a{i} " + "x" * (20 + 7 * i) for i in range(13)])
    b = write_parquet(tmp_path / "b.parquet",
                      [f"DOC-b{i} " + "y" * (30 + 11 * i) for i in range(30)])  # fmt: skip
    mixture = Mixture({"a": str(a), "b": str(b)}, {"a": 0.5, "b": 0.5})
    shape = {"seq_len": 256, "batch_size": 1, "packing": "bestfit", "segments": True, "window": 6}

    def run(rank: int, world: int, state: Any = None, n: int | None = None) -> Any:
        loader = Loader(mixture, workers=0, seed=0, tokenizer="bytes", epochs=2, even="drop",
                        rank=rank, world_size=world)  # fmt: skip
        with loader.batches(state=state, **shape) as it:
            for k, _ in enumerate(it, 1):
                if n is not None and k >= n:
                    break
            return json.loads(json.dumps(it.state_dict()))

    for first in (8, 9, 10, 11):  # (the stops the mutant refused)
        states = [run(0, 2, None, first), run(1, 2, None, 4)]
        for r, state in enumerate(reshard(states, 3, even="drop")):
            run(r, 3, state)


def test_prepare_raises_at_the_skip_past_max_errors(tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"document {i} " * 5}).encode() for i in range(10)]
    lines[3] = lines[7] = b"{not json"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    corpus = Corpus.open(tmp_path / "c", on_error="skip")
    with pytest.raises(TooManyErrors, match="2 skipped, more than max_errors=1"):
        list(Loader(corpus, workers=0, on_error="skip", max_errors=1))
    options = PrepareOptions(tokenizer="bytes", workers=0, on_error="skip", max_errors=1)
    with pytest.raises(TooManyErrors, match="2 skipped, more than max_errors=1"):
        prepare(corpus, tmp_path / "out", options)


def test_a_window_into_the_lap_is_refused_from_a_state_at_its_start() -> None:
    from support import bestfit_doc_names
    from test_red_bestfit_reshard_skips import Case, _layout, _loader
    from test_red_bestfit_reshard_twice import _twice

    case = Case(2, 3, "many", False, "pad", 0, 3, 1, 24, 8)
    with tempfile.TemporaryDirectory() as root:
        layout = _layout(Path(root), case)
        middles, _, _, _ = _twice(layout, case, ((1, 2), (4, 3, 5)), 2)
        news = reshard(middles, 2, even=case.even)
        shape = dict(seq_len=24, batch_size=1, packing="bestfit", window=3, segments=True)
        loader = _loader(layout, case, 0, 2)
        states = [news[0]]
        with pytest.raises(StateError), loader.batches(state=news[0], **shape) as it:
            for batch in it:
                bestfit_doc_names(batch)
                states.append(json.loads(json.dumps(it.state_dict())))
        assert len(states) > 1
        for state in states:  # each state before the refusal resumes into it
            with pytest.raises(StateError), loader.batches(state=state, **shape) as it:
                for _ in it:
                    pass
