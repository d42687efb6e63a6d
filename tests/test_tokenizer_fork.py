"""Fork and spawn safety: a tokenizer loaded and used before ``os.fork()`` encodes in the child
(under a deadline: a thread pool started before the fork would hang it), nothing starts a
thread, and a spawned process gets the spec and checks the fast backend again."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import select
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from openwebtext.tokenizer import Tokenizer, load_tokenizer
from openwebtext.tokenizer.load import cached_load
from tokenizer_support import ENGLISH, HAS_SPLINTR, NON_ASCII, hf_file

__all__ = ["hf_file"]  # fixtures

#: Seconds a child gets to encode (a hung child is killed and the test fails).
DEADLINE = 60.0
TEXTS = [ENGLISH * 3, NON_ASCII, "one<|endoftext|>two", "", " \u3000 x" + " " * 2000 + "y"]

needs_fork = pytest.mark.skipif(
    not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"), reason="needs fork and /proc"
)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _thread_ids() -> set[str]:
    """This process's threads (an earlier test's may end meanwhile: only new ones count)."""
    return set(os.listdir("/proc/self/task"))


def _no_threads(self: threading.Thread) -> None:
    raise AssertionError(f"a tokenizer started a thread: {self!r}")


def _specs(hf: Path) -> list[str]:
    return ["gpt2", "gpt2@tiktoken", "bytes", f"hf:{hf}", f"hf:{hf}@tokenizers"]


def _read_with_deadline(fd: int, pid: int) -> str:
    """All of ``fd`` before ``DEADLINE`` seconds, or kill ``pid`` and fail: it hung."""
    chunks: list[bytes] = []
    end = time.monotonic() + DEADLINE
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not encode within {DEADLINE} s: it hung")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks).decode()
        chunks.append(chunk)


@needs_fork
def test_loaded_before_fork_works_in_the_child(hf_file: Path) -> None:
    tokenizers = [load_tokenizer(spec) for spec in _specs(hf_file)]
    if HAS_SPLINTR:
        backends = ["splintr", "tiktoken", "openwebtext", "splintr", "tokenizers"]
        assert [tok.backend for tok in tokenizers] == backends
    expected = [tok.encode_batch(TEXTS) for tok in tokenizers]  # used in the parent first
    packed = [tok.encode_packed(TEXTS)[0].tolist() for tok in tokenizers]

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        status = 1
        try:
            os.close(read_end)
            # Python threads would fail here; native ones show in the count below.
            threading.Thread.start = _no_threads  # type: ignore[method-assign]
            result = {
                "ids": [tok.encode_batch(TEXTS) for tok in tokenizers],
                "single": [[tok.encode(t) for t in TEXTS] for tok in tokenizers],
                "packed": [tok.encode_packed(TEXTS)[0].tolist() for tok in tokenizers],
                "threads": _threads(),  # a forked child starts with one; encoding adds none
            }
            with os.fdopen(write_end, "w") as out:
                json.dump(result, out)
            status = 0
        finally:
            os._exit(status)

    os.close(write_end)
    try:
        payload = _read_with_deadline(read_end, pid)
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result = json.loads(payload)
    assert result["ids"] == expected
    assert result["single"] == expected
    assert result["packed"] == packed
    assert result["threads"] == 1


@needs_fork
def test_loading_and_encoding_start_no_thread(hf_file: Path) -> None:
    cached_load.cache_clear()
    try:
        before = _thread_ids()
        for spec in _specs(hf_file):
            tok = load_tokenizer(spec)
            tok.encode_batch(TEXTS)
            tok.encode_packed(TEXTS)
        assert _thread_ids() <= before
    finally:
        cached_load.cache_clear()


def _in_a_spawned_process(tokenizers: list[Tokenizer]) -> dict[str, Any]:
    """Run by a spawned worker: the tokenizers arrive pickled (as their specs)."""
    before = _threads() if os.path.isdir("/proc/self/task") else 0
    result = {
        "backends": [tok.backend for tok in tokenizers],
        "ids": [tok.encode_batch(TEXTS) for tok in tokenizers],
        "packed": [tok.encode_packed(TEXTS)[0].tolist() for tok in tokenizers],
        "spec_again": [load_tokenizer(tok.spec).backend for tok in tokenizers],
    }
    result["new_threads"] = (_threads() - before) if before else 0
    return result


def test_a_spawned_process_loads_the_spec_and_encodes(hf_file: Path) -> None:
    tokenizers = [load_tokenizer(spec) for spec in _specs(hf_file)]
    expected = [tok.encode_batch(TEXTS) for tok in tokenizers]
    assert all(len(pickle.dumps(tok)) < 500 for tok in tokenizers)  # the spec, not the ranks
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        result = pool.submit(_in_a_spawned_process, tokenizers).result(timeout=DEADLINE)
    assert result["backends"] == [tok.backend for tok in tokenizers]
    assert result["ids"] == expected
    assert result["packed"] == [tok.encode_packed(TEXTS)[0].tolist() for tok in tokenizers]
    assert result["new_threads"] == 0
    if HAS_SPLINTR:
        assert result["spec_again"][0] == "splintr"
