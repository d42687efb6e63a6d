"""Fakes of the Hugging Face Hub and of Google Cloud Storage's JSON API, on 127.0.0.1 only.

Each serves files of a local folder through the endpoints its client library
calls, and nothing more (read from the libraries' own sources):

- ``FakeHub``, for huggingface_hub's ``HfFileSystem`` (``endpoint=`` its URL):
  ``GET /api/datasets/<repo>[/revision/<rev>]`` (repo info), ``GET
  /api/datasets/<repo>/tree/<rev>[/<path>]`` (a folder's listing, paged by a
  ``Link: <…>; rel="next"`` header, as the Hub does), ``POST
  /api/datasets/<repo>/paths-info/<rev>``, and ``GET|HEAD
  /datasets/<repo>/resolve/<rev>/<path>``, which redirects to a signed CDN URL
  (``/cdn/<sha256>?Signature=…``, on a port of its own, as the Hub's CDN is
  another host) that serves the bytes, with one ``Range``. Errors
  carry the Hub's ``X-Error-Code`` (``RepoNotFound``, ``EntryNotFound``…). A
  repo can be private: then every request must carry ``Authorization: Bearer
  <token>``, and one without gets the Hub's 401.
- ``FakeGCS``, for gcsfs (``endpoint_url=`` its URL, ``token="anon"``):
  ``GET /storage/v1/b/<bucket>/o`` (a prefix's listing with ``delimiter``,
  ``prefix``, ``maxResults`` and ``pageToken``), ``GET
  /storage/v1/b/<bucket>/o/<object>`` (an object's metadata: size, etag,
  generation, md5Hash), ``GET /storage/v1/b/<bucket>`` and ``GET
  /download/storage/v1/b/<bucket>/o/<object>?alt=media`` with one ``Range`` (and
  ``generation=``: 404 unless it is the object's, as a bucket without versioning answers).

Both count requests (by kind) and bytes sent, keep a log of ``(method, path)``,
and inject faults on the requests that send file bytes (``remote_servers.Faults``:
503s, dropped connections, bodies cut short of their ``Content-Length``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tempfile
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from remote_servers import Faults, Loopback, send_bytes

REVISION = "0123456789abcdef0123456789abcdef01234567"


class _Server(Loopback):
    """A threaded HTTP server on 127.0.0.1 that hands requests to ``self.route``."""

    def __init__(self) -> None:
        self.faults = Faults()
        self.counts: Counter[str] = Counter()
        self.log: list[tuple[str, str]] = []
        self.headers_seen: list[str] = []  # every request's headers, as text
        self.bytes_sent = 0
        self.injected = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_HEAD(self) -> None:
                server._handle(self, "HEAD")

            def do_POST(self) -> None:
                server._handle(self, "POST")

        self.handler = Handler
        self._bind(Handler)

    @property
    def requests(self) -> int:
        return len(self.log)

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()
            self.log.clear()
            self.headers_seen.clear()
            self.bytes_sent = self.injected = 0

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        body = b""
        if method == "POST":
            body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self._lock:
            self.log.append((method, parsed.path))
            self.headers_seen.append(str(h.headers))
        self.route(h, method, urllib.parse.unquote(parsed.path), query, body)

    def route(
        self,
        h: BaseHTTPRequestHandler,
        method: str,
        path: str,
        query: dict[str, str],
        body: bytes,
    ) -> None:
        raise NotImplementedError

    def count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    # -- answers ----------------------------------------------------------------------

    def send_json(
        self,
        h: BaseHTTPRequestHandler,
        value: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
        head: bool = False,
    ) -> None:
        body = json.dumps(value).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for key, val in (headers or {}).items():
            h.send_header(key, val)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def send_empty(
        self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str] | None = None
    ) -> None:
        h.send_response(status)
        h.send_header("Content-Length", "0")
        for key, val in (headers or {}).items():
            h.send_header(key, val)
        h.end_headers()

    def send_file(
        self,
        h: BaseHTTPRequestHandler,
        path: Path,
        head: bool,
        headers: dict[str, str],
    ) -> None:
        """Bytes of ``path`` (one ``Range`` honoured), with the faults drawn for this request."""
        fault = self.faults.draw()
        if fault is not None:
            with self._lock:
                self.injected += 1
        if fault == "status":
            self.send_empty(h, self.faults.status or 500)
            return
        if fault == "503":
            self.send_json(h, {"error": "Service Unavailable"}, status=503)
            return
        if fault == "drop":
            h.close_connection = True
            h.connection.shutdown(2)
            return
        send_bytes(h, path, head, fault, headers, self._sent)

    def _sent(self, n: int) -> None:
        with self._lock:
            self.bytes_sent += n


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class FakeHub(_Server):
    """Dataset repos of the Hugging Face Hub: ``repos`` maps ``owner/name`` to a folder.

    ``page_size`` entries per page of a tree listing (the Hub: 1000), so that
    pages are followed even for a small folder. ``tokens`` maps a private repo to
    the token that opens it.

    The CDN listens on a port of its own, as the Hub's is another host
    (huggingface_hub stops at a redirect that leaves the Hub's origin, and never
    sends the token there). It accepts only the current ``signature``:
    ``expire()`` changes it, and URLs signed before then get a 403, as an
    expired signed URL does. With ``redirect=False``, ``resolve/`` serves the
    bytes itself (as the Hub does for small files kept in git).
    """

    def __init__(
        self, repos: dict[str, Path], page_size: int = 2, tokens: dict[str, str] | None = None
    ) -> None:
        super().__init__()
        self.repos = repos
        self.page_size = page_size
        self.tokens = tokens or {}
        self.signature = "cdn-s3cr3t-1"
        self.redirect = True
        self.etags: dict[str, str] = {}
        """File (path in its repo) -> the ETag the Hub claims for it (a stale or lying one)."""
        self.blobs = Path(tempfile.mkdtemp(prefix="fake-hub-cdn-"))
        self.cdn = Loopback.serving(self.handler)  # another host, as the Hub's CDN is

    @property
    def cdn_url(self) -> str:
        return self.cdn.url

    def expire(self) -> None:
        """Sign new URLs differently: those signed before get a 403 from now on."""
        number = int(self.signature.rsplit("-", 1)[1])
        self.signature = f"cdn-s3cr3t-{number + 1}"

    def __enter__(self) -> Any:
        self.cdn.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.cdn.__exit__(*exc)
        shutil.rmtree(self.blobs, ignore_errors=True)

    def _allowed(self, h: BaseHTTPRequestHandler, repo: str) -> bool:
        token = self.tokens.get(repo)
        return token is None or h.headers.get("Authorization") == f"Bearer {token}"

    def _repo(self, h: BaseHTTPRequestHandler, rest: str, head: bool = False) -> tuple[str, str]:
        """Split ``owner/name/<rest>``; answer the Hub's 401/404 and return ("", "") if none."""
        parts = rest.split("/", 2)
        repo = "/".join(parts[:2])
        if len(parts) < 2 or repo not in self.repos or not self._allowed(h, repo):
            # A private repo without its token: 401, as the Hub answers.
            status = 401 if repo in self.tokens else 404
            self.send_json(
                h,
                {"error": "Repository not found"},
                status=status,
                headers={
                    "X-Error-Code": "RepoNotFound",
                    "X-Error-Message": "Repository not found",
                },
                head=head,
            )
            return "", ""
        return repo, parts[2] if len(parts) > 2 else ""

    def _entry(self, repo: str, root: Path, path: Path) -> dict[str, Any]:
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            return {"type": "directory", "oid": hashlib.sha1(rel.encode()).hexdigest(), "path": rel}
        size = path.stat().st_size
        sha = _sha256(path)
        return {
            "type": "file",
            "oid": hashlib.sha1(sha.encode()).hexdigest(),
            "size": size,
            "path": rel,
            "lfs": {"oid": sha, "size": size, "pointerSize": 134},
        }

    def route(
        self,
        h: BaseHTTPRequestHandler,
        method: str,
        path: str,
        query: dict[str, str],
        body: bytes,
    ) -> None:
        head = method == "HEAD"
        if path.startswith("/api/datasets/"):
            self._api(h, method, path[len("/api/datasets/") :], query, body)
        elif path.startswith("/datasets/") and "/resolve/" in path:
            self.count("resolve")
            repo, rest = self._repo(h, path[len("/datasets/") :], head)
            if not repo:
                return
            _, _, after = rest.partition("/")  # resolve/<rev>/<path>
            _, _, file = after.partition("/")
            target = self.repos[repo] / file
            if not target.is_file():
                self.send_json(
                    h,
                    {"error": "Entry not found"},
                    status=404,
                    headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": REVISION},
                    head=head,
                )
                return
            sha = _sha256(target)
            if not self.redirect:
                self.send_file(h, target, head, {"X-Repo-Commit": REVISION, "ETag": f'"{sha}"'})
                return
            blob = self.blobs / sha  # the CDN serves content by its hash, as the Hub's does
            if not blob.exists():
                shutil.copyfile(target, blob)
            location = f"{self.cdn_url}/cdn/{sha}?Expires=1&Signature={self.signature}"
            self.send_empty(
                h,
                302,
                {
                    "Location": location,
                    "X-Repo-Commit": REVISION,
                    "ETag": f'"{hashlib.sha1(sha.encode()).hexdigest()}"',
                    "X-Linked-ETag": f'"{self.etags.get(file, sha)}"',
                    "X-Linked-Size": str(target.stat().st_size),
                },
            )
        elif path.startswith("/cdn/"):
            self.count("cdn")
            sha = path[len("/cdn/") :]
            target = self.blobs / sha
            if query.get("Signature") != self.signature or "/" in sha or not target.is_file():
                self.count("cdn-refused")
                self.send_empty(h, 403)
                return
            # The CDN's ETag is of what it serves (a truthful CDN, whatever its URL says).
            self.send_file(h, target, head, {"ETag": f'"{_sha256(target)}"'})
        else:
            self.count("other")
            self.send_json(h, {"error": "not served by the fake Hub"}, status=404, head=head)

    def _api(
        self, h: BaseHTTPRequestHandler, method: str, rest: str, query: dict[str, str], body: bytes
    ) -> None:
        repo, tail = self._repo(h, rest)
        if not repo:
            self.count("api-refused")
            return
        root = self.repos[repo]
        kind, _, after = tail.partition("/")
        if kind in ("", "revision"):  # repo info
            self.count("info")
            if kind == "revision" and after not in ("main", REVISION):
                self.send_json(
                    h,
                    {"error": "Revision not found"},
                    status=404,
                    headers={"X-Error-Code": "RevisionNotFound"},
                )
                return
            self.send_json(h, {"id": repo, "sha": REVISION, "private": repo in self.tokens})
        elif kind == "tree":
            self.count("tree")
            revision, _, inner = after.partition("/")
            folder = root / inner
            if revision not in ("main", REVISION) or not folder.is_dir():
                self.send_json(
                    h,
                    {"error": "Entry not found"},
                    status=404,
                    headers={"X-Error-Code": "EntryNotFound"},
                )
                return
            if query.get("recursive", "").lower() == "true":
                found = sorted(p for p in folder.rglob("*"))
            else:
                found = sorted(folder.iterdir())
            entries = [self._entry(repo, root, p) for p in found]
            cursor = int(query.get("cursor") or 0)
            page = entries[cursor : cursor + self.page_size]
            headers = {}
            if cursor + self.page_size < len(entries):
                params = dict(query, cursor=str(cursor + self.page_size))
                path = f"/api/datasets/{repo}/tree/{after}"
                nxt = f"{self.url}{urllib.parse.quote(path)}?{urllib.parse.urlencode(params)}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            self.send_json(h, page, headers=headers)
        elif kind == "paths-info" and method == "POST":
            self.count("paths-info")
            form = urllib.parse.parse_qs(body.decode())
            out = [
                self._entry(repo, root, root / p)
                for p in form.get("paths", [])
                if (root / p).exists()
            ]
            self.send_json(h, out)
        else:
            self.count("other")
            self.send_json(h, {"error": "not served by the fake Hub"}, status=404)


class FakeGCS(_Server):
    """Buckets of Google Cloud Storage's JSON API: ``buckets`` maps a name to a folder.

    A listing page holds ``page_size`` entries at most (GCS: 1000), so that pages
    are followed (``nextPageToken``) even for a small folder.
    """

    def __init__(self, buckets: dict[str, Path], page_size: int = 2) -> None:
        super().__init__()
        self.buckets = buckets
        self.page_size = page_size

    def _object(self, bucket: str, root: Path, path: Path) -> dict[str, Any]:
        data = path.read_bytes()
        st = path.stat()
        generation = str(st.st_mtime_ns // 1000)
        return {
            "kind": "storage#object",
            "bucket": bucket,
            "name": path.relative_to(root).as_posix(),
            "size": str(len(data)),
            "generation": generation,
            "metageneration": "1",
            "etag": base64.b64encode(hashlib.md5(data + generation.encode()).digest()).decode(),
            "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
            "contentType": "application/x-tar",
            "updated": "2026-01-01T00:00:00.000Z",
            "timeCreated": "2026-01-01T00:00:00.000Z",
        }

    def _missing(self, h: BaseHTTPRequestHandler, what: str) -> None:
        self.send_json(h, {"error": {"code": 404, "message": f"No such {what}"}}, status=404)

    def route(
        self,
        h: BaseHTTPRequestHandler,
        method: str,
        path: str,
        query: dict[str, str],
        body: bytes,
    ) -> None:
        head = method == "HEAD"
        media = path.startswith("/download/storage/v1/b/")
        base = "/download/storage/v1/b/" if media else "/storage/v1/b/"
        if not path.startswith(base):
            self.count("other")
            self._missing(h, "endpoint")
            return
        rest = path[len(base) :]
        bucket, _, tail = rest.partition("/")
        root = self.buckets.get(bucket)
        if root is None:
            self.count("no-bucket")
            self._missing(h, "bucket")
            return
        if media:
            self.count("media")
            name = tail[len("o/") :]
            target = root / name
            if query.get("alt") != "media" or not target.is_file():
                self._missing(h, "object")
                return
            obj = self._object(bucket, root, target)
            wanted = query.get("generation")
            if wanted is not None and wanted != obj["generation"]:
                self.count("media-other-generation")
                self._missing(h, "object")  # a bucket without versioning keeps the last only
                return
            self.send_file(
                h,
                target,
                head,
                {"ETag": obj["etag"], "X-Goog-Generation": obj["generation"]},
            )
        elif tail == "":
            self.count("bucket")
            self.send_json(h, {"kind": "storage#bucket", "name": bucket, "id": bucket})
        elif tail == "o":
            self.count("list")
            self._list(h, bucket, root, query)
        elif tail.startswith("o/"):
            self.count("object")
            target = root / tail[len("o/") :]
            if not target.is_file():
                self._missing(h, "object")
                return
            self.send_json(h, self._object(bucket, root, target))
        else:
            self.count("other")
            self._missing(h, "endpoint")

    def _list(
        self, h: BaseHTTPRequestHandler, bucket: str, root: Path, query: dict[str, str]
    ) -> None:
        prefix = query.get("prefix") or ""
        delimiter = query.get("delimiter") or ""
        names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        items: list[str] = []
        prefixes: list[str] = []
        for name in names:
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                sub = prefix + rest.split(delimiter, 1)[0] + delimiter
                if sub not in prefixes:
                    prefixes.append(sub)
            else:
                items.append(name)
        entries: list[tuple[str, str]] = sorted(
            [("item", n) for n in items] + [("prefix", p) for p in prefixes], key=lambda e: e[1]
        )
        start = int(query.get("pageToken") or 0)
        size = min(int(query.get("maxResults") or 1000), self.page_size)
        page = entries[start : start + size]
        out: dict[str, Any] = {"kind": "storage#objects"}
        listed = [self._object(bucket, root, root / n) for k, n in page if k == "item"]
        if listed:
            out["items"] = listed
        subs = [n for k, n in page if k == "prefix"]
        if subs:
            out["prefixes"] = subs
        if start + size < len(entries):
            out["nextPageToken"] = str(start + size)
        self.send_json(h, out)
