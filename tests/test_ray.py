"""The Ray engine (openwebtext.ray): owt tokenize --engine ray, read_openwebtext.

One local Ray instance per module (2 CPUs, its folder under /tmp: Ray's unix sockets need a
short path, no dashboard, HOME pointed at an empty folder that must stay empty).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember, TooManyErrors
from openwebtext.prepare import PrepareOptions, outputs, prepare, slice_folders
from support import (
    corrupt_member,
    cut_member,
    damage,
    local_files,
    member_offset,
    outer_tar,
    plain_read,
    read_members,
    s3_objects,
    sample_docs,
    xz_member,
)

ray = pytest.importorskip(
    "ray", reason="the ray extra is not installed (from the clone: pip install -e '.[ray]')"
)

from openwebtext import ray as owt_ray  # noqa: E402
from openwebtext.ray.slices import SLICES  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    # Ray Data 2.60's own DataContext sets fields it deprecated, on first use.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty home folder for the module; it must still be empty at the end."""
    folder = tmp_path_factory.mktemp("home")
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(folder)
    yield folder
    if saved is not None:
        os.environ["HOME"] = saved
    assert list(folder.iterdir()) == []


@pytest.fixture(scope="module")
def ray_instance(home: Path) -> Iterator[None]:
    """The library's private local instance, as ``owt tokenize --engine ray`` starts it."""
    with owt_ray.local_ray(num_cpus=2):
        yield


def _files(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in ("train.bin", "val.bin", "meta.json")}


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_ray_engine_writes_the_local_engines_files(
    ray_instance: None, small_corpus: Path, tmp_path: Path, split: str
) -> None:
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(split_rule=split, workers=0, val_fraction=0.1)  # type: ignore[arg-type]
    local = prepare(corpus, tmp_path / "local", options)
    # 6 units in slices of 4: two tasks of unequal size.
    report = owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=4)
    assert _files(tmp_path / "ray") == _files(tmp_path / "local")
    assert report.meta == local.meta
    assert not (tmp_path / "ray" / SLICES).exists()
    again = owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=4)
    assert again.already


def test_ray_engine_keeps_the_slices_already_done(
    ray_instance: None, small_corpus: Path, tmp_path: Path
) -> None:
    """A rerun after an interruption keeps finished slices: here slice 0 of 3 was done by an
    earlier run and is damaged on purpose, so that the output shows it was not redone."""
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(workers=0, val_fraction=0.1)
    local = prepare(corpus, tmp_path / "local", options)
    first = slice_folders(tmp_path / "ray", SLICES, 3)[0]
    prepare(corpus, first, options, shard=(0, 3))
    kept = (first / "train.bin").read_bytes()
    out = owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=2)
    train = (tmp_path / "ray" / "train.bin").read_bytes()
    assert train.startswith(kept) and train == (tmp_path / "local" / "train.bin").read_bytes()
    assert out.meta == local.meta


def _corrupt_copy(small_corpus: Path, folder: Path) -> tuple[Path, str]:
    shutil.copytree(small_corpus, folder)
    tar = sorted(folder.glob("*.tar"))[0]
    member = sorted(read_members([tar]))[1][1]
    offset, size = member_offset(tar, member)
    damage(tar, offset + size // 2, b"\xff" * 16)
    return tar, member


def test_ray_engine_corrupt_member(ray_instance: None, small_corpus: Path, tmp_path: Path) -> None:
    tar, member = _corrupt_copy(small_corpus, tmp_path / "corpus")
    corpus = Corpus.open(tmp_path / "corpus")
    with pytest.raises(CorruptMember) as caught:
        owt_ray.tokenize(corpus, tmp_path / "out", PrepareOptions(workers=0), units_per_task=2)
    assert caught.value.path == str(tar) and caught.value.member == member
    skip = PrepareOptions(workers=0, on_error="skip")
    report = owt_ray.tokenize(corpus, tmp_path / "skip", skip, units_per_task=2, restart=True)
    local = prepare(corpus, tmp_path / "local", skip)
    assert report.meta["counts"]["skipped_members"] == 1 and report.meta == local.meta
    assert len(report.skipped) == 1 and member in report.skipped[0]


@pytest.fixture(scope="module")
def cut_and_corrupt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six members: the second cut short (a partial member), the fifth corrupt (skipped)."""
    folder = tmp_path_factory.mktemp("cut-and-corrupt")
    members = []
    for k in range(6):
        docs = sample_docs(f"m{k}", 8)
        data = cut_member(docs) if k == 1 else corrupt_member(docs) if k == 4 else xz_member(docs)
        members.append((f"urlsf_subset00-{k}_data.xz", data))
    outer_tar(folder / "urlsf_subset00.tar", members)
    return folder


@pytest.mark.parametrize("max_errors", [1, 2])
def test_both_engines_bound_skips_alike(
    ray_instance: None, cut_and_corrupt: Path, tmp_path: Path, max_errors: int
) -> None:
    """A cut member and a corrupt member are two skips on either engine (``policy``): at
    max_errors=2 both write the same files, at 1 both refuse, though on the Ray engine each
    slice (3 units: one bad member each) stays within the bound on its own."""
    corpus = Corpus.open(cut_and_corrupt)
    options = PrepareOptions(
        workers=0, shuffle=False, on_error="skip", max_errors=max_errors, tokenizer="bytes"
    )
    if max_errors == 1:
        with pytest.raises(TooManyErrors, match="2 skipped, more than max_errors=1"):
            prepare(corpus, tmp_path / "local", options)
        with pytest.raises(TooManyErrors, match="2 skipped, more than max_errors=1"):
            owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=3)
        assert not (tmp_path / "ray" / "meta.json").exists()
        return
    local = prepare(corpus, tmp_path / "local", options)
    report = owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=3)
    counts = local.meta["counts"]
    assert counts["partial_members"] == 1 and counts["skipped_members"] == 1
    assert report.meta == local.meta
    assert _files(tmp_path / "ray") == _files(tmp_path / "local")


def test_a_second_run_into_the_output_of_a_ray_run_is_refused_at_once(
    small_corpus: Path, tmp_path: Path
) -> None:
    """The Ray engine holds its output's lock for the whole run (slices and merge), so a
    second run is refused before any slice is started, naming the run that holds it."""
    from openwebtext.prepare import lock_output

    corpus = Corpus.open(small_corpus)
    errors: list[str] = []
    with lock_output(tmp_path / "out"):  # as a run of another thread or process would
        other = threading.Thread(target=lambda: errors.append(_refusal(corpus, tmp_path / "out")))
        other.start()
        other.join(60)
    assert len(errors) == 1 and f"pid {os.getpid()}" in errors[0], errors
    assert list((tmp_path / "out").iterdir()) == []  # no slice was started


def _refusal(corpus: Corpus, out: Path) -> str:
    from openwebtext.prepare import PrepareError

    try:
        owt_ray.tokenize(corpus, out, PrepareOptions(workers=0), units_per_task=2)
    except PrepareError as exc:
        return str(exc)
    return "not refused"


def test_read_openwebtext_every_document_once(ray_instance: None, small_corpus: Path) -> None:
    tars = sorted(small_corpus.glob("*.tar"))
    expected = {  # (the member's file name, as ``Document.member``: red team, session 29)
        (file.split(".")[0], os.path.basename(member), name): text
        for (file, member), docs in read_members(tars).items()
        for name, text in docs.items()
    }
    rows = owt_ray.read_openwebtext(small_corpus, units_per_task=2).take_all()
    got = [((r["subset"], r["member"], r["name"]), r["text"]) for r in rows]
    assert len(got) == len(expected)
    assert dict(got) == expected
    loader = {(d.subset, d.member, d.name): d.text for d in Loader(small_corpus, workers=0)}
    assert loader == expected


def test_read_openwebtext_of_a_mixture_says_each_rows_part(
    ray_instance: None, small_corpus: Path, tmp_path: Path
) -> None:
    from openwebtext import Mixture
    from tables_support import sample_texts, write_jsonl

    write_jsonl(tmp_path / "a.jsonl", sample_texts(30, seed=2))
    mixture = Mixture({"web": small_corpus, "js": tmp_path / "a.jsonl"}, {"web": 0.9, "js": 0.1})
    rows = owt_ray.read_openwebtext(mixture, units_per_task=2).take_all()
    by_part = {n: sorted(r["name"] for r in rows if r["source"] == n) for n in mixture.names}
    assert by_part["web"] == sorted(plain_read(sorted(small_corpus.glob("*.tar"))))
    assert len(by_part["js"]) == len(set(by_part["js"])) == 30
    # a part's file that is not what its name says: raised, or under skip counted and said
    folder = tmp_path / "pq"
    folder.mkdir()
    write_jsonl(folder / "b.jsonl", sample_texts(5, seed=3))
    (folder / "a.parquet").write_text("version https://git-lfs.github.com/spec/v1\n")
    damaged = Mixture({"web": small_corpus, "pq": folder})
    with pytest.raises(CorpusError, match=r"a\.parquet"):
        owt_ray.read_openwebtext(damaged)
    log = owt_ray.SkipLog()
    rows = owt_ray.read_openwebtext(damaged, on_error="skip", skips=log).take_all()
    assert sum(r["source"] == "pq" for r in rows) == 5
    assert len(log.messages()) == 1 and "a.parquet" in log.messages()[0]


def test_read_openwebtext_reads_each_part_with_its_own_storage(
    ray_instance: None,
    small_corpus: Path,
    s3_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mixture's part opened with its own storage options (an S3 endpoint on 127.0.0.1):
    the tasks, in Ray's own worker processes, read it with them, not with the default."""
    from openwebtext import Mixture

    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    remote = Corpus.open("s3://owt/data/", storage_options=options)
    mixture = Mixture({"s3": remote, "local": small_corpus})
    rows = owt_ray.read_openwebtext(mixture, units_per_task=2).take_all()
    expected = sorted(plain_read(sorted(small_corpus.glob("*.tar"))))
    for part in mixture.names:
        assert sorted(r["name"] for r in rows if r["source"] == part) == expected
    with pytest.raises(ValueError, match="storage_options: a Mixture's parts"):
        owt_ray.read_openwebtext(mixture, storage_options=options)


def test_read_openwebtext_token_ids(ray_instance: None, small_corpus: Path) -> None:
    from openwebtext.tokenizer import load_tokenizer

    enc = load_tokenizer("gpt2")
    docs = {name: text for d in read_members(sorted(small_corpus.glob("*.tar"))).values()
            for name, text in d.items()}  # fmt: skip
    rows = owt_ray.read_openwebtext(small_corpus, tokenizer="gpt2").take_all()
    assert sorted(r["name"] for r in rows) == sorted(docs)
    for row in rows:
        assert list(row["ids"]) == [*enc.encode(docs[row["name"]]), enc.eot]


def test_read_openwebtext_corrupt_member(
    ray_instance: None, small_corpus: Path, tmp_path: Path
) -> None:
    tar, member = _corrupt_copy(small_corpus, tmp_path / "corpus")
    dataset = owt_ray.read_openwebtext(tmp_path / "corpus")
    with pytest.raises(CorruptMember, match=member):
        dataset.take_all()
    with pytest.raises(CorruptMember) as caught, owt_ray.library_errors():
        dataset.take_all()
    assert type(caught.value) is CorruptMember
    assert caught.value.path == str(tar) and caught.value.member == member
    log = owt_ray.SkipLog()
    rows = owt_ray.read_openwebtext(tmp_path / "corpus", on_error="skip", skips=log).take_all()
    assert len(rows) == 120 - 20 and member not in {r["member"] for r in rows}
    assert log.count() == 1 and member in log.messages()[0]


def test_read_openwebtext_leaves_out_a_bad_document_and_reads_the_rest_right(
    ray_instance: None, tmp_path: Path
) -> None:
    """Under skip, a document of invalid UTF-8 and one over max_document_bytes are left out
    (and logged); every other document is read from its own bytes, as text and as ids."""
    docs = sample_docs("m", 6)
    docs["m-001.txt"] = b"bad \xff\xfe utf-8\n"
    docs["m-003.txt"] = b"x" * 5000
    second = sample_docs("n", 3)
    outer_tar(tmp_path / "urlsf_subset00.tar",
              [("urlsf_subset00-1_data.xz", xz_member(docs)),
               ("urlsf_subset00-2_data.xz", xz_member(second))])  # fmt: skip
    bad = ("m-001.txt", "m-003.txt")
    good = {n: d.decode() for n, d in {**docs, **second}.items() if n not in bad}
    for tokenizer in (None, "bytes"):
        log = owt_ray.SkipLog()
        rows = owt_ray.read_openwebtext(
            tmp_path, on_error="skip", skips=log, tokenizer=tokenizer, max_document_bytes=4096
        ).take_all()
        if tokenizer is None:
            got = {r["name"]: r["text"] for r in rows}
        else:
            got = {r["name"]: bytes(r["ids"][:-1]).decode() for r in rows}
            assert {r["ids"][-1] for r in rows} == {256}
        assert len(got) == len(rows) == len(good) and got == good
        messages = log.messages()
        assert len(messages) == 2, messages
        assert any("m-001.txt" in m and "UTF-8" in m for m in messages), messages
        assert any("m-003.txt" in m and "max_document_bytes" in m for m in messages), messages


def test_cli_engine_ray_starts_and_stops_its_own_instance(
    small_corpus: Path, tmp_path: Path, home: Path
) -> None:
    """Without --address: a private instance in a temporary folder, gone at the end (no
    process, no file), and the same files as the local engine."""
    temp = Path(tempfile.mkdtemp(prefix="owt-T", dir="/tmp"))  # short: Ray's socket paths
    try:
        env = {**os.environ, "HOME": str(home), "TMPDIR": str(temp)}
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
            env.pop(key, None)
        base = [sys.executable, "-m", "openwebtext.cli", "tokenize", str(small_corpus), "-j", "2"]
        subprocess.run([*base, "--out", str(tmp_path / "local"), "-q"], env=env, check=True)
        run = subprocess.run(
            [*base, "--out", str(tmp_path / "ray"), "--engine", "ray"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert _files(tmp_path / "ray") == _files(tmp_path / "local")
        assert "M tokens/s" in run.stderr  # the progress bar, as the local engine shows it
        # (tiktoken's data-gym-cache may live there too: it is the tokenizer's, not Ray's)
        assert [p.name for p in temp.iterdir() if p.name.startswith("owt-ray-")] == []
        assert list(home.iterdir()) == []
        assert _processes_mentioning(str(temp)) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def _in_group(group: int) -> list[str]:
    """The live processes of process group ``group``, by command line (Ray's agents call
    themselves ``ray::…``: no folder of theirs names them)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if int(fields[2]) == group and fields[0] != b"Z":
            found.append(line[:60])
    return found


def _ray_env(home: Path, temp: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(temp)}
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        env.pop(key, None)
    return env


@pytest.mark.timeout(240)
def test_the_folder_of_a_killed_driver_is_swept_at_the_next_start(home: Path) -> None:
    """SIGKILL leaves a private instance's /tmp/owt-ray-* behind (nothing runs to remove
    it); the next start removes it, and leaves alone the folder of a live driver."""
    temp = Path(tempfile.mkdtemp(prefix="owt-T", dir="/tmp"))
    env = _ray_env(home, temp)
    kill = ("import os, signal\nfrom openwebtext.ray import local_ray\n"
            "with local_ray(num_cpus=1):\n    os.killpg(0, signal.SIGKILL)\n")  # fmt: skip
    start = "from openwebtext.ray import local_ray\nwith local_ray(num_cpus=1):\n    pass\n"
    live = temp / "owt-ray-live"
    live.mkdir()
    (live / "owt-owner.json").write_text(json.dumps({"pid": os.getpid(), "host": os.uname()[1]}))
    try:
        killed = subprocess.run([sys.executable, "-c", kill], env=env, start_new_session=True,
                                capture_output=True, timeout=100, check=False)  # fmt: skip
        assert killed.returncode == -9, killed.stderr
        left = [p for p in temp.iterdir() if p.name.startswith("owt-ray-") and p != live]
        assert len(left) == 1
        for pid in _processes_mentioning(str(left[0])):  # Ray's own, if any outlived it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        again = subprocess.run([sys.executable, "-c", start], env=env, capture_output=True,
                               text=True, timeout=100, check=False)  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert [p for p in temp.iterdir() if p.name.startswith("owt-ray-")] == [live]
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(owt_ray.EngineError, match=r"pip install -e '\.\[ray\]'"):
        owt_ray.read_openwebtext("nowhere")


def test_remote_corpus_over_http(
    ray_instance: None, small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus behind a URL (127.0.0.1): the tasks read it with the driver's storage options."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from openwebtext.source import configure
    from remote_servers import RangeServer

    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    tars = sorted(small_corpus.glob("*.tar"))
    expected = {name: text for docs in read_members(tars).values() for name, text in docs.items()}
    try:
        with RangeServer(small_corpus) as server:
            # Passed to the tasks too (HTTP needs none, so this does not show they arrive).
            options = {"block_size": 1 << 16}
            rows = owt_ray.read_openwebtext(
                server.url + "/", storage_options=options, units_per_task=3
            ).take_all()
            assert sorted(r["name"] for r in rows) == sorted(expected)
            assert {r["name"]: r["text"] for r in rows} == expected
            corpus = Corpus.open(server.url + "/", storage_options=options)
            prepare_options = PrepareOptions(workers=0, val_fraction=0.1)
            owt_ray.tokenize(
                corpus, tmp_path / "ray", prepare_options, units_per_task=4,
                storage_options=options,
            )  # fmt: skip
    finally:
        configure(None)
    local = prepare(Corpus.open(small_corpus), tmp_path / "local", prepare_options)
    assert _files(tmp_path / "ray")["train.bin"] == _files(tmp_path / "local")["train.bin"]
    assert _files(tmp_path / "ray")["val.bin"] == _files(tmp_path / "local")["val.bin"]
    ray_meta = json.loads(_files(tmp_path / "ray")["meta.json"])
    assert local.meta["counts"]["tokens"] == ray_meta["counts"]["tokens"]


def test_a_file_changed_after_indexing_is_said_by_the_tasks(
    ray_instance: None, small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tasks know each file's identity from the driver's index: a tar rewritten (same
    size, other bytes) before the dataset is read is "changed since it was indexed", not
    read as it now is."""
    pytest.importorskip("aiohttp")
    from remote_servers import RangeServer

    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "served"
    shutil.copytree(small_corpus, folder)
    with RangeServer(folder) as server:
        dataset = owt_ray.read_openwebtext(server.url + "/", storage_options={})
        tar = sorted(folder.glob("*.tar"))[0]
        start, size = member_offset(tar, "openwebtext/urlsf_subset00-1_data.xz")
        damage(tar, start + size // 2, b"\xff" * 8)  # inside the first member's xz stream
        os.utime(tar, ns=(1, 1))  # another Last-Modified and ETag
        with pytest.raises(CorpusError, match="changed since it was indexed"):
            dataset.take_all()


def test_cli_interrupted_then_run_again_continues(tmp_path: Path, home: Path) -> None:
    """Ctrl-C (SIGINT to the whole group) once some slices are done: exit 130, nothing left
    running, finished slices and checkpoints kept; the same command again finishes them into
    the local engine's files.

    Its waits share one budget (100 s) inside the suite's 120 s per-test timeout, so that a slow
    machine fails here, saying which wait ran out, rather than as a timeout.
    """
    import glob
    import signal
    import time

    from openwebtext.synth import write_corpus

    end = time.monotonic() + 100  # the suite's timeout is 120 s; the last check needs ~10

    def left(what: str) -> float:
        remaining = end - time.monotonic()
        assert remaining > 0, f"the test's 100 s ran out before {what}"
        return remaining

    corpus = tmp_path / "corpus"
    write_corpus(corpus, subsets=2, members=10, docs=300, seed=1, workers=1)
    temp = Path(tempfile.mkdtemp(prefix="owt-T", dir="/tmp"))
    out = tmp_path / "ray"
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(temp)}
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        env.pop(key, None)
    command = [sys.executable, "-m", "openwebtext.cli", "tokenize", str(corpus), "-j", "2",
               "--out", str(out), "--engine", "ray", "--units-per-task", "1", "-q"]  # fmt: skip
    try:
        proc = subprocess.Popen(
            command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        try:
            done = out / SLICES / "*" / "meta.json"
            while len(glob.glob(str(done))) < 2 and left("two slices were done") > 0:
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=left("the interrupted run ended"))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 130, err
        kept = len(glob.glob(str(done)))
        assert 2 <= kept < 20 and not (out / "train.bin").exists()
        time.sleep(1)
        assert _processes_mentioning(str(temp)) == []
        # (session 30: Ray's agents, orphaned by the raylet's end, ignore SIGTERM: left running)
        assert _in_group(proc.pid) == []
        assert [p.name for p in temp.iterdir() if p.name.startswith("owt-ray-")] == []
        again = subprocess.run(command, env=env, capture_output=True, text=True,
                               timeout=left("the second run"))  # fmt: skip
        assert again.returncode == 0, again.stderr
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    local = prepare(Corpus.open(corpus), tmp_path / "local", PrepareOptions(workers=0))
    assert _files(out) == _files(tmp_path / "local")
    assert json.loads(_files(out)["meta.json"]) == local.meta



def test_cli_interrupted_as_ray_starts_leaves_no_process(tmp_path: Path, home: Path) -> None:
    """Ctrl-C to the whole group as soon as Ray's agents run (session 30's red team): the
    signal ends the raylet before it stops its agents, which ignore SIGTERM and were left
    running, orphaned, in the command's group."""
    import signal
    import time

    from openwebtext.synth import write_corpus

    corpus = tmp_path / "corpus"
    write_corpus(corpus, subsets=1, members=10, docs=300, seed=1, workers=1)
    temp = Path(tempfile.mkdtemp(prefix="owt-T", dir="/tmp"))
    command = [sys.executable, "-m", "openwebtext.cli", "tokenize", str(corpus), "-j", "2",
               "--out", str(tmp_path / "ray"), "--engine", "ray", "-q"]  # fmt: skip
    try:
        proc = subprocess.Popen(
            command, env=_ray_env(home, temp), stderr=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        try:
            end = time.monotonic() + 60
            while not any(p.startswith("ray::") for p in _in_group(proc.pid)):
                assert time.monotonic() < end and proc.poll() is None, "Ray's agents never ran"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 130, err
        time.sleep(1)
        left = _in_group(proc.pid)
        for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()):
            with contextlib.suppress(OSError):  # (the test's own cleanup: never left behind)
                if os.getpgid(pid) == proc.pid:
                    os.kill(pid, signal.SIGKILL)
        assert left == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)

# -- output to S3 (moto's server on 127.0.0.1, the s3_endpoint fixture) ---------------------


@pytest.fixture
def s3_options(s3_endpoint: str) -> Iterator[dict[str, str]]:
    """Storage options for moto, set in this process too. The credentials are options, not
    variables: the Ray workers were started before the fixture set them."""
    from openwebtext.source import configure

    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    configure(options)
    yield options
    configure(None)


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_ray_engine_to_s3_writes_the_local_engines_files(
    ray_instance: None, small_corpus: Path, tmp_path: Path, s3_options: dict[str, str], split: str
) -> None:
    """Each task uploads its slice; the merge reads them from S3 and uploads the files: the
    local engine's, byte for byte, and nothing else left under the prefix."""
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(split_rule=split, workers=0, val_fraction=0.1)  # type: ignore[arg-type]
    url = f"s3://owt/ray-{split}"
    report = owt_ray.tokenize(corpus, url, options, units_per_task=4, storage_options=s3_options)
    slices = slice_folders(url, SLICES, 2)
    local = prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_options["endpoint_url"], f"ray-{split}/") == local_files(
        tmp_path / "local"
    )
    assert report.meta == local.meta
    staged = [outputs.staging(url), *(outputs.staging(str(f), "fetch") for f in slices)]
    assert [p for p in staged if p.exists()] == []  # the local copies are gone


def test_ray_engine_to_s3_keeps_the_slices_already_there(
    ray_instance: None, small_corpus: Path, tmp_path: Path, s3_options: dict[str, str]
) -> None:
    """As after an interruption: slice 0 of 3 is finished in S3 (and altered on purpose, same
    size, so that the output shows it was used and not redone); slice 1 has a train.bin but
    no meta.json (a task killed while uploading), so it is redone."""
    import boto3

    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(workers=0, val_fraction=0.1)
    url = "s3://owt/ray-resume"
    first, second, _ = slice_folders(url, SLICES, 3)
    prepare(corpus, first, options, shard=(0, 3))
    client = boto3.client("s3", endpoint_url=s3_options["endpoint_url"], region_name="us-east-1")
    key = f"{str(first).removeprefix('s3://owt/')}/train.bin"
    kept = client.get_object(Bucket="owt", Key=key)["Body"].read()
    client.put_object(Bucket="owt", Key=key, Body=bytes([kept[0] ^ 0xFF]) + kept[1:])
    client.put_object(Bucket="owt", Key=f"{str(second).removeprefix('s3://owt/')}/train.bin",
                      Body=b"half an upload")  # fmt: skip
    # verify=False: the merge would refuse slice 0, changed after it was written (sha256).
    owt_ray.tokenize(
        corpus, url, options, units_per_task=2, storage_options=s3_options, verify=False
    )
    local = prepare(corpus, tmp_path / "local", options)
    got = s3_objects(s3_options["endpoint_url"], "ray-resume/")
    assert sorted(got) == ["meta.json", "train.bin", "val.bin"]
    train = (tmp_path / "local" / "train.bin").read_bytes()
    assert got["train.bin"] == bytes([train[0] ^ 0xFF]) + train[1:]
    assert got["val.bin"] == (tmp_path / "local" / "val.bin").read_bytes()
    assert json.loads(got["meta.json"])["counts"] == local.meta["counts"]


def test_ray_engine_to_s3_restart_drops_a_nodes_staged_progress(
    ray_instance: None, small_corpus: Path, tmp_path: Path, s3_options: dict[str, str]
) -> None:
    """A task cut short left its progress in this node's staging folder; the user changes an
    option and passes restart: that progress is thrown away too, not refused as another run's."""
    from openwebtext.prepare import Progress

    corpus = Corpus.open(small_corpus)
    url = "s3://owt/ray-restart"
    (only,) = slice_folders(url, SLICES, 1)

    def stop(event: Progress) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        old = PrepareOptions(workers=0, val_fraction=0.2)
        prepare(corpus, only, old, shard=(0, 1), progress=stop, checkpoint_seconds=0)
    assert (outputs.staging(str(only)) / ".owt-progress.json").is_file()
    options = PrepareOptions(workers=0, val_fraction=0.1)
    owt_ray.tokenize(
        corpus, url, options, units_per_task=8, restart=True, storage_options=s3_options
    )
    prepare(corpus, tmp_path / "local", options)
    got = s3_objects(s3_options["endpoint_url"], "ray-restart/")
    assert got == local_files(tmp_path / "local")
    assert not outputs.staging(str(only)).exists()


# -- parquet inputs: the same engine, units are row groups ----------------------------------


@pytest.fixture(scope="module")
def parquet_folder(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from openwebtext import Loader
    from tables_support import write_parquet

    texts = [d.text for d in Loader(small_corpus, shuffle=False, workers=0)]
    folder = tmp_path_factory.mktemp("parquet")
    write_parquet(folder / "train-00000-of-00002.parquet", texts[:70], row_group=9)
    write_parquet(folder / "train-00001-of-00002.parquet", texts[70:], row_group=9)
    return folder


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_ray_engine_on_parquet_writes_the_local_engines_files(
    ray_instance: None, parquet_folder: Path, tmp_path: Path, split: str
) -> None:
    corpus = Corpus.open(parquet_folder)
    assert len(corpus.units) == 14  # row groups: 8 + 6
    options = PrepareOptions(split_rule=split, workers=0, val_fraction=0.1)  # type: ignore[arg-type]
    local = prepare(corpus, tmp_path / "local", options)
    report = owt_ray.tokenize(corpus, tmp_path / "ray", options, units_per_task=4)
    assert _files(tmp_path / "ray") == _files(tmp_path / "local")
    assert report.meta == local.meta and local.meta["counts"]["documents"]["train"] > 0


def test_read_openwebtext_on_parquet_every_row_once(
    ray_instance: None, parquet_folder: Path, small_corpus: Path
) -> None:
    from openwebtext import Loader

    rows = owt_ray.read_openwebtext(parquet_folder, units_per_task=3).take_all()
    texts = [d.text for d in Loader(small_corpus, shuffle=False, workers=0)]
    assert sorted(r["text"] for r in rows) == sorted(texts)
    assert len({r["name"] for r in rows}) == len(texts) == 120

# -- found by the red team of session 32 (docs/testing.md): ``read_openwebtext`` of paths under
# ``skip`` refused a file of no corpus; a ``SkipLog`` counted a skip once per pass; a slice task
# whose worker died ended the run with Ray's traceback; a private folder lost its owner file
# first, so that the next start's sweep passed it by.


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
