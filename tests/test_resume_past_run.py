"""A state that lies past the epochs a run reads is refused, by the library as by ``owt
stream --resume`` (one check, ``stream.check_in_run``): never a run that yields nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader
from openwebtext.errors import StateError
from support import Owt


def _endless_state(corpus: Path, documents: int, **options: Any) -> dict[str, Any]:
    loader = Loader(corpus, workers=0, epochs=None, **options)
    with loader.iter() as it:
        for _ in range(documents):
            next(it)
        return it.state_dict()


@pytest.mark.parametrize("epochs_in", [1, 2])
def test_an_endless_state_of_a_later_epoch_is_refused(small_corpus: Path, epochs_in: int) -> None:
    state = _endless_state(small_corpus, 120 * epochs_in + 7)  # 120 documents an epoch
    assert state["position"]["epoch"] == epochs_in
    with pytest.raises(StateError, match=rf"epoch {epochs_in}.*epochs={epochs_in + 1}"):
        Loader(small_corpus, workers=0).iter(state=state)
    resumed = Loader(small_corpus, workers=0, epochs=epochs_in + 1).iter(state=state)
    assert len(list(resumed)) == 120 - 7


def test_a_finished_run_s_state_reads_nothing(small_corpus: Path) -> None:
    with Loader(small_corpus, workers=0).iter() as it:
        assert len(list(it)) == 120
        state = it.state_dict()
    assert list(Loader(small_corpus, workers=0).iter(state=state)) == []


def test_the_command_line_says_the_same(small_corpus: Path, tmp_path: Path, owt: Owt) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(_endless_state(small_corpus, 130)))
    done = owt("stream", str(small_corpus), "--resume", str(path), "--epochs", "1", "-q")
    assert done.returncode != 0  # (without --epochs: on without end, as its run went)
    assert "nothing left to read" in done.stderr and "--epochs 2" in done.stderr


def test_a_state_before_the_run_s_first_epoch_is_refused(
    small_corpus: Path, tmp_path: Path, owt: Owt
) -> None:
    """A state of epoch 0 resumed with ``epoch=5`` read the rest of epoch 0 and epochs 1 to 5:
    epochs not asked for, without a word (one past them is refused: the same check)."""
    state = _endless_state(small_corpus, 3)
    with pytest.raises(StateError, match=r"at epoch 0, before the first epoch this run reads "
                       r"\(5\); give epoch=0 or less") as caught:  # fmt: skip
        Loader(small_corpus, workers=0, epoch=5).iter(state=state)
    assert caught.value.field == "position.epoch"
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    done = owt("stream", str(small_corpus), "--resume", str(path), "--epoch", "5", "-q")
    assert done.returncode == 1 and "is at epoch 0, before the first epoch this run reads (5)" in (
        done.stderr
    ), done.stderr
    assert "give --epoch 0 or less" in done.stderr and "epoch=" not in done.stderr  # (flags)
    assert len(list(Loader(small_corpus, workers=0, epoch=0).iter(state=state))) == 117
