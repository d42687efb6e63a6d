"""What a red team of the Ray client (session 32) found: ``read_openwebtext`` of paths under
``skip`` refused a folder holding a file that is no corpus file (a ``Loader`` skips it); a
``SkipLog`` counted a skip once per pass over the dataset; a slice task whose worker died
ended ``owt tokenize --engine ray`` with Ray's traceback (it is now run again, and a failure
Ray raises is an ``EngineError``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.prepare import PrepareOptions, prepare
from support import damage, member_offset, read_members

ray = pytest.importorskip(
    "ray", reason="the ray extra is not installed (from the clone: pip install -e '.[ray]')"
)

from openwebtext import ray as owt_ray  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    with owt_ray.local_ray(num_cpus=2):
        yield


def test_paths_under_skip_leave_out_a_file_that_is_no_corpus_file(
    ray_instance: None, small_corpus: Path, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(small_corpus, tmp_path / "corpus"))
    (folder / "urlsf_subset05.tar").write_bytes(os.urandom(4096))
    with Loader(folder, workers=0, on_error="skip").iter() as it:
        documents = sum(1 for _ in it)
    log = owt_ray.SkipLog()
    rows = owt_ray.read_openwebtext(folder, on_error="skip", skips=log).take_all()
    assert len(rows) == documents == 120
    assert len(log.messages()) == 1 and "urlsf_subset05.tar" in log.messages()[0]


def test_a_skip_log_counts_each_skip_once_however_often_the_dataset_is_read(
    ray_instance: None, small_corpus: Path, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(small_corpus, tmp_path / "corpus"))
    tar = sorted(folder.glob("*.tar"))[0]
    member = sorted(read_members([tar]))[1][1]
    offset, size = member_offset(tar, member)
    damage(tar, offset + size // 2, b"\xff" * 16)
    log = owt_ray.SkipLog()
    dataset = owt_ray.read_openwebtext(folder, on_error="skip", skips=log)
    for _ in range(2):
        assert sum(len(b["text"]) for b in dataset.iter_batches(batch_size=64)) == 100
        assert log.count() == 1 and member in log.messages()[0]


def test_a_slice_task_whose_worker_dies_runs_again(
    ray_instance: None, small_corpus: Path, tmp_path: Path
) -> None:
    """The worker of the first slice task seen is killed while it runs: the run finishes, with
    the local engine's files (it ended with Ray's ``WorkerCrashedError``)."""
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(workers=0, val_fraction=0.1)
    killed: list[int] = []

    def kill_a_slice_task() -> None:
        for _ in range(400):
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if f.read().startswith(b"ray::_slice_task"):
                            os.kill(int(pid), signal.SIGKILL)
                            killed.append(int(pid))
                            return
                except OSError:
                    continue
            time.sleep(0.01)

    killer = threading.Thread(target=kill_a_slice_task, daemon=True)
    killer.start()
    report = owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=2,
                              checkpoint_seconds=0)
    killer.join(timeout=10)
    local = prepare(corpus, tmp_path / "local", options)
    assert killed, "no slice task was seen to kill"
    assert report.meta == local.meta
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


def test_a_private_folder_that_cannot_be_removed_whole_keeps_its_owner_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C near a run's end: a Ray process still writing keeps a file of the session from
    removal. The folder was left without its owner file (removed first), which the next
    start's sweep passes by for ever; now the owner file goes last, and stays with it."""
    from openwebtext.ray import cluster

    temp = tmp_path / "owt-ray-x"
    (temp / "session" / "sockets").mkdir(parents=True)
    (temp / "session" / "sockets" / "held").write_bytes(b"")
    (temp / "session" / "log").write_bytes(b"x")
    (temp / cluster.OWNER).write_text("{}")

    def rmtree_but_held(path: str | os.PathLike[str], ignore_errors: bool = False) -> None:
        for root, folders, files in os.walk(path, topdown=False):
            for name in files:
                if name != "held":
                    os.unlink(os.path.join(root, name))
            for name in folders:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, name))
        with contextlib.suppress(OSError):
            os.rmdir(path)

    monkeypatch.setattr(cluster.shutil, "rmtree", rmtree_but_held)
    cluster._remove_temp(str(temp))
    assert (temp / cluster.OWNER).exists() and not (temp / "session" / "log").exists()
    (temp / "session" / "sockets" / "held").unlink()
    cluster._remove_temp(str(temp))
    assert not temp.exists()
