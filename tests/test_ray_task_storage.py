"""What a Ray task of ``read_openwebtext`` reads with, tested without Ray: the read function
is unpickled for every task, and every task of one process must share the one copy of each
storage it carries, whose filesystems (and Hub resolutions) are made once per process."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus
from openwebtext.ray.dataset import _ReadGroup
from support import plain_read

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
pytestmark = pytest.mark.remote


def test_the_tasks_of_one_process_make_one_filesystem(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec

    from remote_servers import RangeServer

    made: list[str] = []
    real = fsspec.filesystem

    def counted(protocol: str, **options: Any) -> Any:
        made.append(protocol)
        return real(protocol, **options)

    monkeypatch.setattr(fsspec, "filesystem", counted)
    with RangeServer(small_corpus) as server:
        corpus = Corpus.open(server.url + "/", storage_options={"block_size": 1 << 16})
        made.clear()  # (the driver's, indexing)
        units = tuple((unit,) for unit in corpus.units)
        read = _ReadGroup(units, (corpus.storage,) * len(units), None, "raise", None,
                          1 << 30, 64 << 20)  # fmt: skip
        shipped = pickle.dumps(read)
        names = []
        for group in range(len(units)):  # each task unpickles the function anew
            task = pickle.loads(shipped)
            names += list(task({"group": np.array([group])})["name"].to_pylist())
    assert sorted(names) == sorted(plain_read(sorted(small_corpus.glob("*.tar"))))
    assert made == ["http"]  # one filesystem for the six tasks, not one each
