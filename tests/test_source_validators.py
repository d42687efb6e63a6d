"""What a response says about the file it comes from: weak ETags (never sent in
``If-Match``), servers that ignore ``If-Match`` (every response's ETag and Last-Modified
compared with the indexed ones), over HTTP and S3."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus
from openwebtext.errors import OWTError
from remote_servers import RangeServer, local_stream
from support import texts

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

http = remote_servers.http  # fixtures
isolated_storage = remote_servers.isolated_storage


def _replace_member_bytes(path: Path, offset: int, size: int) -> None:
    """Other bytes in ``[offset, offset + size)`` of ``path``, the same size, a later mtime."""
    data = bytearray(path.read_bytes())
    for k in range(offset + 64, offset + size - 64, 97):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_weak_etag_is_never_sent_in_if_match(small_corpus: Path, http: RangeServer) -> None:
    http.misbehave.weak_etag = True  # 412 to every If-Match but the strong tag
    corpus = Corpus.open(http.url + "/")
    assert texts(corpus, seed=2, workers=0) == local_stream(small_corpus, seed=2)
    assert texts(corpus, seed=2, workers=2) == local_stream(small_corpus, seed=2)
    assert http.refused_if_match == 0


@pytest.mark.parametrize("weak", [False, True])
def test_a_file_replaced_on_a_server_that_ignores_if_match_is_an_error(
    small_corpus: Path, tmp_path: Path, weak: bool
) -> None:
    root = tmp_path / "served"
    shutil.copytree(small_corpus, root)
    with RangeServer(root) as server:
        server.misbehave.ignore_if_match = True
        server.misbehave.weak_etag = weak
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar")
        unit = corpus.units[0]
        _replace_member_bytes(root / "urlsf_subset00.tar", unit.offset, unit.size)
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
        assert "corrupt" not in str(info.value)


def test_a_file_replaced_on_a_server_without_etag_is_told_by_last_modified(
    small_corpus: Path, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(small_corpus, root)
    with RangeServer(root) as server:
        server.misbehave.ignore_if_match = True
        server.misbehave.etag = False
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar")
        unit = corpus.units[0]
        _replace_member_bytes(root / "urlsf_subset00.tar", unit.offset, unit.size)
        with pytest.raises(OWTError, match="changed since it was indexed"):
            texts(corpus, seed=0, workers=0)


def test_an_s3_object_replaced_on_a_store_that_ignores_ifmatch_is_an_error(
    small_corpus: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    from openwebtext.source import fetching

    monkeypatch.setattr(fetching, "strong_etag", lambda known: None)  # as if IfMatch were ignored
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    key = "ignoring/urlsf_subset00.tar"
    data = (small_corpus / "urlsf_subset00.tar").read_bytes()
    client.put_object(Bucket="owt", Key=key, Body=data)
    try:
        corpus = Corpus.open(f"s3://owt/{key}", storage_options={"endpoint_url": s3_endpoint})
        unit = corpus.units[0]
        changed = bytearray(data)
        for k in range(unit.offset + 64, unit.offset + unit.size - 64, 97):
            changed[k] ^= 0x5A
        client.put_object(Bucket="owt", Key=key, Body=bytes(changed))
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
        assert "corrupt" not in str(info.value)
    finally:
        client.delete_object(Bucket="owt", Key=key)


def test_an_etag_weakened_on_the_way_is_the_same_tag(small_corpus: Path, http: RangeServer) -> None:
    """A CDN may send a HEAD's ETag strong and a GET's weak (or the other way): RFC 9110's
    weak comparison makes them the same file, not a changed one."""
    http.misbehave.weak_etag_on_get = True
    corpus = Corpus.open(http.url + "/")
    assert texts(corpus, seed=2, workers=0) == local_stream(small_corpus, seed=2)
    assert http.refused_if_match == 0
