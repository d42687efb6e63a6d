"""``owt stream --pack``: the documents packed into batches as ``Loader.batches`` packs them;
the summary says what packing did (padding ids, documents cut and their pieces), a run cut by
``--take`` and resumed sums to the whole one, and a state of one kind is refused by the other
kind of run with what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from openwebtext import Loader, reshard
from support import Owt

SHAPE = ("--tokenizer", "bytes", "--seq-len", "64", "--batch-size", "2")


def figures(stderr: str) -> tuple[int, int, int, int]:
    """``(batches, padding ids, documents cut, pieces)`` of the summary's packing line."""
    found = re.search(
        r"packed \(\w+\) into ([\d,]+) batch(?:es)? of 2 x 65 ids: ([\d,]+) padding ids? "
        r"\([\d.]+%\), ([\d,]+) documents? cut into ([\d,]+) pieces?",
        stderr,
    )
    assert found, stderr
    a, b, c, d = (int(g.replace(",", "")) for g in found.groups())
    return a, b, c, d


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_the_summary_says_what_packing_did_and_a_resume_sums_to_the_whole(
    packing: str, small_corpus: Path, owt: Owt, tmp_path: Path
) -> None:
    kw = ("--window", "16") if packing == "bestfit" else ()
    args = ("stream", str(small_corpus), "--pack", packing, *SHAPE, *kw, "-q", "--seed", "4")
    whole = owt(*args)
    assert whole.returncode == 0, whole.stderr
    loader = Loader(small_corpus, workers=0, seed=4, tokenizer="bytes")
    window = {"window": 16} if packing == "bestfit" else {}
    with loader.batches(64, 2, packing=packing, **window) as batches:  # type: ignore[arg-type]
        made = sum(1 for _ in batches)
        stats = batches.stats
    want = (made, stats.padding_ids, stats.cut_documents, stats.pieces)
    assert figures(whole.stderr) == want
    # The documents line says it counts what was read: the packer reads runs ahead of the rows.
    said = re.search(r"^read ([\d,]+) documents \(with those read ahead of the batches\), ",
                     whole.stderr, re.M)  # fmt: skip
    assert said and int(said[1].replace(",", "")) == stats.documents, whole.stderr
    assert want[2] > 0 and (want[1] > 0) == (packing == "bestfit")
    state = tmp_path / "state.json"
    first = owt(*args, "--take", "40", "--state-out", str(state))
    rest = owt(*args[:-2], "--resume", str(state))  # the seed comes from the state
    assert first.returncode == rest.returncode == 0, first.stderr + rest.stderr
    a, b = figures(first.stderr), figures(rest.stderr)
    assert a[0] > 0 and b[0] > 0
    assert tuple(x + y for x, y in zip(a, b, strict=True)) == want  # (best fit's windows too)
    plain = owt("stream", str(small_corpus), "--resume", str(state))
    assert plain.returncode == 1 and "a state of --pack: resume it with --pack" in plain.stderr


def test_what_pack_refuses(small_corpus: Path, owt: Owt, tmp_path: Path) -> None:
    no_tokenizer = owt("stream", str(small_corpus), "--pack", "concat")
    assert no_tokenizer.returncode == 2 and "give --tokenizer" in no_tokenizer.stderr
    jsonl = owt("stream", str(small_corpus), "--pack", "concat", *SHAPE, "--jsonl")
    assert jsonl.returncode == 2 and "leave --tokenizer and --pack out" in jsonl.stderr
    state = tmp_path / "documents.json"
    owt("stream", str(small_corpus), "--take", "3", "--state-out", str(state), "-q")
    resumed = owt("stream", str(small_corpus), "--pack", "concat", *SHAPE, "--resume", str(state))
    assert resumed.returncode == 1 and "not of --pack batches" in resumed.stderr
    # A finished best-fit run's state, resumed by concat: the packing is said first, not that
    # nothing is left to read (red team, session 28).
    owt("stream", str(small_corpus), "--pack", "bestfit", *SHAPE, "--state-out", str(state), "-q")
    resumed = owt("stream", str(small_corpus), "--pack", "concat", *SHAPE, "--resume", str(state))
    assert resumed.returncode == 1, resumed.stderr
    assert "saved for packing='bestfit', window=4096; now packing='concat'" in resumed.stderr


def test_a_mixture_packed_sums_up_per_part(small_corpus: Path, owt: Owt, tmp_path: Path) -> None:
    other = tmp_path / "other"
    Path(other).mkdir()
    owt("synth", str(other), "--subsets", "1", "--members", "1", "--docs", "9", "--seed", "1")
    mix = ("--mix", f"a={small_corpus}:0.7", "--mix", f"b={other}:0.3")
    ran = owt("stream", *mix, "--pack", "concat", *SHAPE, "-q")
    assert ran.returncode == 0, ran.stderr
    assert figures(ran.stderr)[0] > 0
    assert re.search(r"^  a: 120 documents", ran.stderr, re.M), ran.stderr
    assert re.search(r"^  b: \d+ documents", ran.stderr, re.M), ran.stderr
    # A resumed run's lines per part count what it read and cut, as its own lines do (the
    # document its state is inside read again): they add up to them.
    state = tmp_path / "state.json"
    first = owt("stream", *mix, "--pack", "concat", *SHAPE, "-q", "--take", "20",
                "--state-out", str(state))  # fmt: skip
    rest = owt("stream", *mix, "--pack", "concat", *SHAPE, "-q", "--resume", str(state))
    for run in (ran, first, rest):
        read = re.search(r"^read ([\d,]+) documents", run.stderr, re.M)
        each = re.findall(r"^  \w+: ([\d,]+) documents?, .*; ([\d,]+) documents? cut into "
                          r"([\d,]+) pieces?$", run.stderr, re.M)  # fmt: skip
        assert read and len(each) == 2, run.stderr
        parts = [[int(n.replace(",", "")) for n in line] for line in each]
        assert sum(p[0] for p in parts) == int(read[1].replace(",", "")), run.stderr
        assert [sum(p[k] for p in parts) for k in (1, 2)] == list(figures(run.stderr)[2:])


def test_a_state_found_wrong_as_its_documents_are_read_names_its_file(
    indexed: Path, owt: Owt, tmp_path: Path
) -> None:
    """A resharded concat state whose old rank's cut lies past its document's end is found
    wrong only when that document is read: the error named no file (``bad state: reshard:
    …``). (An ``offset`` so edited in a state never resharded is refused as it enters.)"""
    saved = tmp_path / "state.json"
    args = ("stream", str(indexed), "--pack", "concat", *SHAPE, "-q")  # (counted: a rest)
    assert owt(*args, "--take", "3", "--state-out", str(saved)).returncode == 0
    (state,) = reshard([json.loads(saved.read_text())], 1)
    state["documents"]["reshard"]["ranks"][0]["cut"] = 10**9
    saved.write_text(json.dumps(state))
    ran = owt(*args, "--resume", str(saved))
    assert ran.returncode == 1, ran.stderr
    said = f"owt: error: {saved}: bad state: reshard: a cut of 999999999 ids lies past"
    assert said in ran.stderr
