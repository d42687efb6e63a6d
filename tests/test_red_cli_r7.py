"""What a red team (session 30) found in ``owt``: ``--state-out`` naming the file standard
output writes replaced every line ``--jsonl`` wrote with the state (exit 0); a rerun of a
finished ``owt tokenize`` with ``--format`` wrote the format's files and said "nothing to
do"; a resume refused for an option ``--resume`` does not take from the state (the
tokenizer, the text column, the packing) did not say what to give."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openwebtext import Loader, Mixture
from openwebtext.cli import main
from openwebtext.synth import write_corpus
from support import Owt


def _corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "c", subsets=1, members=2, docs=5, seed=0, workers=1).path


def test_a_state_out_onto_standard_output_s_file_is_refused(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    out = tmp_path / "out.jsonl"
    for state_out in (out, Path("/dev/stdout")):
        with out.open("w") as f:
            ran = subprocess.run(
                [sys.executable, "-m", "openwebtext.cli", "stream", str(corpus), "--jsonl",
                 "--state-out", str(state_out)],
                stdout=f, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
            )  # fmt: skip
        assert ran.returncode == 2, ran.stderr
        assert "--state-out names the file standard output writes" in ran.stderr
    with out.open("w") as f:  # (elsewhere: the lines and the state)
        subprocess.run([sys.executable, "-m", "openwebtext.cli", "stream", str(corpus), "--jsonl",
                        "--state-out", str(tmp_path / "s.json")], stdout=f, check=True,
                       stderr=subprocess.DEVNULL, timeout=120)  # fmt: skip
    assert len(out.read_text().splitlines()) == 10


def test_a_format_written_on_a_finished_run_is_not_said_as_nothing_to_do(
    owt: Owt, tmp_path: Path
) -> None:
    corpus, out = _corpus(tmp_path), tmp_path / "o"
    assert owt("tokenize", str(corpus), "--out", str(out), "--tokenizer", "bytes",
               "-q").returncode == 0  # fmt: skip
    again = owt("tokenize", str(corpus), "--out", str(out), "--tokenizer", "bytes", "--format",
                "megatron", "-q")  # fmt: skip
    assert again.returncode == 0 and (out / "train.idx").exists()
    assert "already holds these files (meta.json): not run again; megatron's files are beside " \
        "them" in again.stderr  # fmt: skip
    assert "nothing to do" not in again.stderr
    third = owt("tokenize", str(corpus), "--out", str(out), "--tokenizer", "bytes", "-q")
    assert "nothing to do" in third.stderr


def test_a_resume_refused_for_an_option_not_taken_from_the_state_says_what_to_give(
    owt: Owt, tmp_path: Path
) -> None:
    corpus = _corpus(tmp_path)
    state = tmp_path / "s.json"
    ran = owt("stream", str(corpus), "--tokenizer", "bytes", "--take", "3", "--state-out",
              str(state), "-q")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    refused = owt("stream", str(corpus), "--resume", str(state), "-q")
    assert refused.returncode == 1
    assert "(to resume it, give the --tokenizer it was saved with)" in refused.stderr
    packed = tmp_path / "p.json"
    ran = owt("stream", str(corpus), "--tokenizer", "bytes", "--pack", "bestfit", "--seq-len",
              "16", "--batch-size", "2", "--window", "5", "--take", "3", "--state-out",
              str(packed), "-q")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(packed.read_text())["window"] == 5
    refused = owt("stream", str(corpus), "--tokenizer", "bytes", "--pack", "bestfit", "--seq-len",
                  "16", "--batch-size", "2", "--resume", str(packed), "-q")  # fmt: skip
    assert refused.returncode == 1
    assert "(to resume it, give --pack and --window as saved)" in refused.stderr


def test_a_damaged_state_gets_no_flags_to_give(owt: Owt, tmp_path: Path) -> None:
    """The review: an edited best-fit state ("packing": "concat") resumed with the flags it was
    saved with was told to give them."""
    corpus = _corpus(tmp_path)
    packed = tmp_path / "p.json"
    flags = ["--tokenizer", "bytes", "--pack", "bestfit", "--seq-len", "16", "--batch-size", "2",
             "--window", "5"]  # fmt: skip
    assert owt("stream", str(corpus), *flags, "--take", "3", "--state-out", str(packed),
               "-q").returncode == 0  # fmt: skip
    state = json.loads(packed.read_text())
    packed.write_text(json.dumps({**state, "packing": "concat"}))
    refused = owt("stream", str(corpus), *flags, "--resume", str(packed), "-q")
    assert refused.returncode == 1 and "bad batches state" in refused.stderr
    assert "to resume it" not in refused.stderr


@pytest.mark.parametrize(("saved", "says"), [
    ({"schedule": [(4, {"a": 0.9, "b": 0.1})]},
     "use Python: no owt flag gives a mixture's weight schedule"),
    ({"sampling": "random"}, "use Python: no owt flag samples a mixture at random"),
    ({"by": "tokens"}, "give the --mix-by it was saved with"),
    ({"weights": {"a": 0.2, "b": 0.8}}, "give each --mix part the weight it was saved with"),
])  # fmt: skip
def test_a_mixture_s_state_refused_says_what_to_give_or_that_no_flag_gives_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], saved: dict, says: str
) -> None:
    # A mixture's schedule was told the batches' --seq-len and --batch-size (keyed by its
    # last name); a random sampling's and a by-tokens' had no word.
    a, b, state = tmp_path / "a", tmp_path / "b", tmp_path / "mix.json"
    write_corpus(a, subsets=1, members=2, docs=5, seed=0)
    write_corpus(b, subsets=1, members=2, docs=5, seed=1)
    weights = saved.pop("weights", {"a": 0.5, "b": 0.5})
    by = {"tokenizer": "bytes"} if saved.get("by") == "tokens" else {}
    with Loader(Mixture({"a": a, "b": b}, weights, **saved), workers=0, **by).iter() as docs:
        next(docs)
        state.write_text(json.dumps(docs.state_dict()))
    mix = ["--mix", f"a={a}:0.5", "--mix", f"b={b}:0.5"]
    assert main(["stream", *mix, "--resume", str(state), "-q", "-j", "0", *(
        ["--tokenizer", "bytes"] if by else [])]) == 1  # fmt: skip
    assert f"(to resume it, {says})" in capsys.readouterr().err


def test_a_text_state_resumed_with_a_tokenizer_is_told_to_leave_it_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, state = _corpus(tmp_path), tmp_path / "s.json"
    assert main(["stream", str(corpus), "--take", "2", "--state-out", str(state), "-q"]) == 0
    argv = ["stream", str(corpus), "--resume", str(state), "--tokenizer", "bytes", "-q"]
    assert main(argv) == 1
    assert "(to resume it, leave out --tokenizer: it was saved of text)" in capsys.readouterr().err
