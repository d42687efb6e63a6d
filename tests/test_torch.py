"""PyTorch: DataLoader workers split the stream; StatefulDataLoader resumes it exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext.torch import OpenWebTextDataset  # noqa: E402

DataLoader = torch.utils.data.DataLoader


def names(loader: object) -> list[str]:
    return [doc.name for doc in loader]  # type: ignore[attr-defined]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_reads_every_document_once(
    small_corpus: Path, small_docs: dict[str, str], num_workers: int
) -> None:
    dataset = OpenWebTextDataset(small_corpus, seed=1, workers=2)
    got = names(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert sorted(got) == sorted(small_docs)
    again = names(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert again == got


def test_set_epoch_changes_the_order(small_corpus: Path) -> None:
    dataset = OpenWebTextDataset(small_corpus, seed=1)
    first = names(DataLoader(dataset, batch_size=None, num_workers=2))
    dataset.set_epoch(1)
    second = names(DataLoader(dataset, batch_size=None, num_workers=2))
    assert first != second and sorted(first) == sorted(second)


RESUME = textwrap.dedent(
    """
    import json, sys
    from torchdata.stateful_dataloader import StatefulDataLoader
    from openwebtext.torch import OpenWebTextDataset
    corpus, state_file = sys.argv[1], sys.argv[2]
    loader = StatefulDataLoader(
        OpenWebTextDataset(corpus, seed=3, shuffle_buffer=30), batch_size=None, num_workers=2
    )
    loader.load_state_dict(json.load(open(state_file)))
    print(json.dumps([doc.name for doc in loader]))
    """
)


@pytest.mark.parametrize("cut", [1, 37, 64])
def test_stateful_dataloader_resumes_in_a_new_process(
    small_corpus: Path, tmp_path: Path, cut: int
) -> None:
    def make() -> object:
        dataset = OpenWebTextDataset(small_corpus, seed=3, shuffle_buffer=30)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=2)

    full = names(make())
    loader = make()
    head = []
    for doc in loader:  # type: ignore[attr-defined]
        head.append(doc.name)
        if len(head) == cut:
            break
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))  # type: ignore[attr-defined]
    del loader
    proc = subprocess.run(
        [sys.executable, "-c", RESUME, str(small_corpus), str(state_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rest = json.loads(proc.stdout)
    assert head + rest == full
