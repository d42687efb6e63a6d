"""Hostile HTTP servers a red team (session 30) found said wrongly: a connection reset while a
file is opened said "no such file" (and skipped the file as missing), an option aiohttp
refuses said the same, a ``Content-Length`` short of its body said "HTTP 400" and stopped at
once, a redirect loop said "HTTP 0"; fsspec's DEBUG log wrote a URL's password and
signature; the index walk of a signed URL sent no ``If-Match``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus
from openwebtext.errors import CorpusError
from remote_servers import RangeServer
from support import texts

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

isolated_storage = remote_servers.isolated_storage  # fixtures
http = remote_servers.http

TAR = "urlsf_subset00.tar"


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_connections_reset_as_a_file_is_opened_are_retried(
    http: RangeServer, small_corpus: Path, on_error: str
) -> None:
    """fsspec's ``info`` says a failed GET (after a failed HEAD) as ``FileNotFoundError``: it
    was taken as a missing file, never retried, and under skip the file was left out."""
    http.faults.next_drop = 4  # HEAD and GET, twice: a server restarting
    corpus = Corpus.open(f"{http.url}/{TAR}", on_error=on_error)
    assert corpus.skipped_files == ()
    local = Corpus.open(str(small_corpus / TAR))
    assert texts(corpus, seed=3) == texts(local, seed=3)


def test_an_option_the_http_client_refuses_is_said_as_such(http: RangeServer) -> None:
    url = http.url.replace("http://", "http://user:pw@") + f"/{TAR}"
    options = {"headers": {"Authorization": "Bearer x"}}
    with pytest.raises(CorpusError) as caught:
        Corpus.open(url, storage_options=options)
    said = str(caught.value)
    assert "Cannot combine AUTHORIZATION header" in said and "no such file" not in said
    assert "pw" not in said and http.requests == 0


def test_a_content_length_short_of_its_body_is_retried_not_http_400(
    http: RangeServer, small_corpus: Path
) -> None:
    """aiohttp gave the connection back with the rest of the body on it; the next request read
    it as a status line, said as HTTP 400 (no server sent one) and not retried."""
    corpus = Corpus.open(f"{http.url}/{TAR}")
    http.misbehave.understate = 10
    with pytest.raises(Exception) as caught:
        texts(corpus, workers=0)
    said = str(caught.value)
    assert "HTTP 400" not in said and "failed 6 times" in said, said
    http.misbehave.understate = 0
    assert texts(corpus, seed=1) == texts(Corpus.open(str(small_corpus / TAR)), seed=1)


def test_a_redirect_loop_is_said_as_one(http: RangeServer) -> None:
    http.misbehave.redirect_loop = True
    with pytest.raises(CorpusError, match="too many redirects") as caught:
        Corpus.open(f"{http.url}/{TAR}")
    assert "HTTP 0" not in str(caught.value)


def test_debug_logs_of_the_http_library_never_show_credentials_or_signatures(
    http: RangeServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = http.url.replace("http://", "http://user:PASSWD@") + f"/{TAR}?X-Amz-Signature=SIGSECRET"
    with caplog.at_level(logging.DEBUG):
        assert texts(Corpus.open(url), workers=0)
    assert "fsspec" in caplog.text  # (its records were there to redact)
    assert "PASSWD" not in caplog.text and "SIGSECRET" not in caplog.text


def test_the_index_walk_of_a_signed_url_is_checked_against_its_identity(
    http: RangeServer,
) -> None:
    """The walk fetched by the real URL, whose identity is noted under its alias: no
    ``If-Match``, a file changed between its HEAD and its walk cached as the old one's."""
    Corpus.open(f"{http.url}/{TAR}?sig=abc")
    assert http.if_matches and None not in http.if_matches
