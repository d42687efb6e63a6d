"""Members made of concatenated compressed streams are read whole, in linear time.
(Reliability, issue #5.)
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from pathlib import Path

import pytest

from support import (
    A,
    decoded,
    inner_tar,
    outer_tar,
    run,
    sample_docs,
    xz_member,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


@pytest.mark.parametrize("codec", ["xz", "gzip", "bzip2"])
def test_multi_stream_member_is_read_whole(codec: str, tmp_path: Path) -> None:
    """A member of concatenated streams (pbzip2, bgzip, ``cat a.xz b.xz``) is read whole."""
    codecs: dict[str, Callable[[bytes], bytes]] = {
        "xz": lzma.compress,
        "gzip": gzip.compress,
        "bzip2": bz2.compress,
    }
    compress = codecs[codec]
    docs = sample_docs("m", 10)
    data = inner_tar(docs)
    cut = 512 * 8  # a header boundary: each stream alone is a valid piece of the tar
    tar = outer_tar(tmp_path / "m.tar", [("m_data.x", compress(data[:cut]) + compress(data[cut:]))])
    outcome = run(tar, workers=1)
    assert outcome.error is None
    assert outcome.docs == decoded(docs)


def test_many_tiny_streams_take_linear_time(tmp_path: Path) -> None:
    """80,000 empty xz streams after a real one (2.5 MB): read well within a 3 s timeout."""
    member = xz_member(A) + lzma.compress(b"") * 80_000
    tar = outer_tar(tmp_path / "streams.tar", [("s_data.xz", member)])
    outcome = run(tar, workers=1, timeout=3.0)  # linear: ~0.5 s; quadratic: ~12 s
    assert outcome.error is None, repr(outcome.error)
    assert outcome.docs == decoded(A)
