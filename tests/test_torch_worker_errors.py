"""Errors raised in a PyTorch ``DataLoader`` worker keep their attributes in the main process.

torch rebuilds an error raised in a worker from its type and the text of its traceback alone
(``ExceptionWrapper.reraise``: ``exc_type(text)``), so ``path``, ``member``, ``document``,
``part`` and a ``StateError``'s ``field`` were None there (pytorch/pytorch#34130; a known gap
until session 27). The dataset's pass notes them in the error (``errors.carry``, PEP 678: the
text holds its notes) and the error's constructor reads them back: the error in the main process
is the one the worker raised (its message, its attributes), the worker's traceback a note of it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from openwebtext import CorruptDocument, Mixture, StateError, WorkerError  # noqa: E402
from openwebtext.errors import CorruptMember, carry  # noqa: E402
from openwebtext.torch import OpenWebTextDataset  # noqa: E402

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="notes (PEP 678): 3.11+")
WORKER = "in DataLoader worker process 0"


def _folder(root: Path, bad: bool) -> Path:
    root.mkdir()
    lines = [json.dumps({"text": f"{root.name}{k} text"}) for k in range(3)]
    (root / "a.jsonl").write_text("\n".join(lines + (["{not json"] if bad else [])) + "\n")
    return root


def _raised(data: Any, num_workers: int) -> BaseException:
    loader = torch.utils.data.DataLoader(OpenWebTextDataset(data, workers=0), batch_size=None,
                                         num_workers=num_workers)  # fmt: skip
    with pytest.raises(CorruptDocument) as info:
        for _ in loader:
            pass
    return info.value


def _said(error: BaseException) -> tuple[Any, ...]:
    keys = ("path", "member", "document", "part", "message")
    return (type(error), str(error), *(getattr(error, k, None) for k in keys))


def test_a_corrupt_document_in_a_worker_keeps_its_attributes(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "web", bad=True)
    inline, worker = _raised(str(folder), 0), _raised(str(folder), 1)
    assert _said(worker) == _said(inline)
    assert worker.path == str(folder / "a.jsonl") and worker.document  # (not None: carried)
    notes = getattr(worker, "__notes__", [])
    assert len(notes) == 1 and WORKER in notes[0] and "Traceback" in notes[0]


def test_a_mixture_part_s_error_in_a_worker_names_its_part(tmp_path: Path) -> None:
    mixture = Mixture({"clean": str(_folder(tmp_path / "c", bad=False)),
                       "books": str(_folder(tmp_path / "b", bad=True))})  # fmt: skip
    worker = _raised(mixture, 1)
    assert worker.part == "books" and _said(worker) == _said(_raised(mixture, 0))
    assert str(worker).startswith("part 'books': ")


def _rebuilt(error: BaseException) -> BaseException:
    """``error`` raised in a worker and rebuilt as torch rebuilds it in the main process."""
    from torch.utils.data._utils import ExceptionWrapper

    try:
        raise error
    except BaseException as exc:
        carry(exc)
        wrapper = ExceptionWrapper(sys.exc_info(), where=WORKER)
    with pytest.raises(type(error)) as info:
        wrapper.reraise()
    return info.value


@pytest.mark.parametrize("error", [
    StateError("bad state: position.block: is 9", "position.block", ("seed",)),
    StateError("the state was saved for packing='concat'", "packing", mismatch=True),
    WorkerError("worker 1 died reading f.tar[m.xz]", "f.tar", "m.xz"),
    CorruptMember("corrupt xz data: openwebtext error: {\"message\": \"x\"}", "f.tar", "m.xz"),
    CorruptDocument("invalid UTF-8\nsecond line", "f.tar", "m.xz", "doc 7"),
], ids=["state", "mismatch", "worker", "marker-in-message", "document"])  # fmt: skip
def test_every_error_torch_rebuilds_is_the_one_raised(error: BaseException) -> None:
    got = _rebuilt(error)
    assert _said(got) == _said(error)
    assert getattr(got, "field", None) == getattr(error, "field", None)
    assert getattr(got, "resume_with", ()) == getattr(error, "resume_with", ())
    assert getattr(got, "mismatch", None) == getattr(error, "mismatch", None)


def test_an_error_without_the_note_is_rebuilt_as_torch_does(tmp_path: Path) -> None:
    """A text with no note, or a damaged one, is the message as before (attributes None)."""
    plain = CorruptMember("Caught CorruptMember in DataLoader worker process 0.\nOriginal ...")
    assert plain.path is None and "Caught" in str(plain)
    damaged = CorruptMember("Caught ...\nopenwebtext error: {\"message\": 5}\n")
    assert damaged.path is None and damaged.message.startswith("Caught")
    assert StateError("Caught ...\nopenwebtext error: [1]").field is None
    said = '\nopenwebtext error: {"message": "m", "path": "/etc/x"}'
    assert CorruptMember(f"a document's text{said}").path is None  # (not torch's text)
    assert CorruptMember(f"Caught ...{said}\nmore").path is None  # (not its last line)
    assert CorruptMember(f"Caught ...{said}\n").path == "/etc/x"


def test_a_state_refused_as_a_worker_s_pass_starts_keeps_its_attributes(tmp_path: Path) -> None:
    """A state refused where a worker's pass starts (not inside ``next()``): the library's
    message, ``field`` and ``resume_with`` reach the main process (red team, session 29)."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    folder = _folder(tmp_path / "web", bad=False)

    def refused(num_workers: int) -> StateError:
        loader = stateful.StatefulDataLoader(OpenWebTextDataset(str(folder), workers=0, seed=0),
                                             batch_size=None, num_workers=num_workers)  # fmt: skip
        next(iter(loader))
        state = loader.state_dict()
        other = stateful.StatefulDataLoader(OpenWebTextDataset(str(folder), workers=0, seed=1),
                                            batch_size=None, num_workers=num_workers)  # fmt: skip
        other.load_state_dict(state)
        with pytest.raises(StateError) as info:
            next(iter(other))
        return info.value

    inline, worker = refused(0), refused(1)
    assert (str(worker), worker.field, worker.resume_with) == (
        str(inline), inline.field, inline.resume_with) == (str(inline), "config.seed", ("seed",))
