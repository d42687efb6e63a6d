"""Encrypted parquet (Parquet Modular Encryption) is refused, naming the file, under every
``on_error``: never the whole process killed.

A file with a plaintext footer (Spark's ``parquet.encryption.plaintext.footer=true``) ends with
``PAR1`` and pyarrow parses its footer, but ``RowGroupMetaData.column(i)`` of an encrypted
chunk throws a C++ exception where Python cannot catch it: SIGABRT, at ``Corpus.open`` (the
text column's chunk) or in a reader (``Footer.column_at`` walks the chunks before the text
column's). The same accessor aborts on a row group of more chunks than the schema has columns.
Everything that could abort runs in a child process, so a regression fails its test.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import openwebtext
from openwebtext.errors import CorpusError, Unsupported
from openwebtext.index.outer import LocalFile
from openwebtext.index.parquet import parse_footer, read_footer
from tables_support import write_parquet

pytest.importorskip("pyarrow")

TESTS = Path(__file__).resolve().parent


def write_encrypted(path: Path, columns: list[str], plaintext_footer: bool = True) -> Path:
    """A parquet file of ``id`` then ``text`` whose ``columns`` are encrypted with a column key
    (the footer signed, or encrypted too), as Spark writes one."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pe = pytest.importorskip(
        "pyarrow.parquet.encryption", reason="this pyarrow is built without parquet encryption"
    )

    class Kms(pe.KmsClient):  # type: ignore[misc,name-defined]
        def __init__(self, config: Any) -> None:
            super().__init__()

        def wrap_key(self, key: bytes, master_key_identifier: str) -> bytes:
            return base64.b64encode(key)

        def unwrap_key(self, wrapped: bytes, master_key_identifier: str) -> bytes:
            return base64.b64decode(wrapped)

    config = pe.EncryptionConfiguration(
        footer_key="kf",
        column_keys={"k1": columns},
        plaintext_footer=plaintext_footer,
        double_wrapping=False,
    )
    factory = pe.CryptoFactory(lambda c: Kms(c))
    properties = factory.file_encryption_properties(pe.KmsConnectionConfig(), config)
    table = pa.table({"id": [1, 2, 3], "text": ["secret one", "secret two", "secret three"]})
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, table.schema, encryption_properties=properties) as writer:
        writer.write_table(table)
    return path


def in_child(code: str) -> Any:
    """What ``code`` prints (JSON) in a Python process of its own, reading this openwebtext.

    Fails the test if the process died (a signal: pyarrow's abort) or failed."""
    src = Path(openwebtext.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(TESTS)]))
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, check=False)  # fmt: skip
    assert ran.returncode == 0, f"the child exited with {ran.returncode}: {ran.stderr[-600:]}"
    return json.loads(ran.stdout.splitlines()[-1])


#: The child's attempts: each what it raised (class and message) or the texts it read.
_ATTEMPTS = """
import json
from openwebtext import Corpus, Loader
def attempt(f):
    try:
        return ["read", f()]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
d, said = {folder!r}, {{}}
for on_error in ("skip", "raise"):
    said["open " + on_error] = attempt(lambda: len(Corpus.open(d, on_error=on_error).units))
    said["loader " + on_error] = attempt(lambda: sorted(
        x.text for x in Loader(d, shuffle=False, workers={workers}, on_error=on_error)))
print(json.dumps(said))
"""


def refused(said: dict[str, list[Any]], name: str) -> None:
    """Every attempt raised ``Unsupported`` naming the file ``name`` and why."""
    for what, (kind, message) in said.items():
        assert kind == "Unsupported", (what, kind, message)
        assert name in message and "encrypted parquet" in message, (what, message)
        assert "decrypt it first" in message, (what, message)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_folder_with_an_encrypted_text_column_is_refused_naming_it(
    tmp_path: Path, workers: int
) -> None:
    """The red team's repro: ``Corpus.open`` aborted the process (rc -6) under every on_error
    on ``RowGroupMetaData.column`` of the encrypted text chunk."""
    folder = tmp_path / "data"
    write_parquet(folder / "a.parquet", ["plain one", "plain two"])
    write_encrypted(folder / "b.parquet", ["text"])
    said = in_child(_ATTEMPTS.format(folder=str(folder), workers=workers))
    refused(said, str(folder / "b.parquet"))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_encrypted_column_before_the_text_column_is_refused_too(
    tmp_path: Path, workers: int
) -> None:
    """Its text column is plain (pyarrow reads it), so indexing passed, then the reader's walk
    over the chunks before the text column's aborted the process (workers=0) or its worker
    ("worker exited with code -6")."""
    folder = tmp_path / "data"
    write_encrypted(folder / "c.parquet", ["id"])
    said = in_child(_ATTEMPTS.format(folder=str(folder), workers=workers))
    refused(said, str(folder / "c.parquet"))


def test_a_reader_refuses_an_encrypted_footer_it_is_given(tmp_path: Path) -> None:
    """A reader parses what ``footer_of`` gives it, from the file or from the footer cache
    (a remote file indexed before): the engine's ``Footer`` refuses it before ``column_at``
    walks its chunks (which aborted the process)."""
    path = write_encrypted(tmp_path / "c.parquet", ["id"])
    code = f"""
import json, os
from openwebtext.engine.tables import Footer
from openwebtext.index import footer_of
footer = footer_of({str(path)!r}, None)
try:
    print(json.dumps(["read", repr(Footer(footer, "c.parquet").column_at(0, 4))]))
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""
    kind, message = in_child(code)
    assert kind == "Unsupported" and "c.parquet" in message and "encrypted parquet" in message


def _footer(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_footer(LocalFile(fd, os.fstat(fd).st_size), str(path))
    finally:
        os.close(fd)


def test_a_file_whose_footer_is_encrypted_is_unsupported_not_damaged(tmp_path: Path) -> None:
    """A file that begins and ends with ``PARE`` was "not parquet (no PAR1 magic)", a damaged
    file skipped under ``skip``; it is a file this installation does not read."""
    path = write_encrypted(tmp_path / "e.parquet", ["text"], plaintext_footer=False)
    assert path.read_bytes()[-4:] == b"PARE"
    with pytest.raises(Unsupported, match=r"e\.parquet: encrypted parquet .* decrypt it first"):
        _footer(path)


def test_a_folder_with_an_encrypted_footer_file_is_refused_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    write_parquet(folder / "a.parquet", ["plain one", "plain two"])
    write_encrypted(folder / "e.parquet", ["text"], plaintext_footer=False)
    refused(in_child(_ATTEMPTS.format(folder=str(folder), workers=0)), str(folder / "e.parquet"))


def test_owt_index_says_an_encrypted_file_is_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    write_parquet(folder / "a.parquet", ["plain one", "plain two"])
    write_encrypted(folder / "b.parquet", ["text"])
    src = Path(openwebtext.__file__).resolve().parents[1]
    for on_error in ("skip", "raise"):
        ran = subprocess.run(
            [sys.executable, "-c", "import sys; from openwebtext.cli import main; "
             "sys.exit(main(sys.argv[1:]))", "index", str(folder), "--on-error", on_error],
            capture_output=True, text=True, timeout=120, check=False,
            env=dict(os.environ, PYTHONPATH=str(src)),
        )  # fmt: skip
        assert ran.returncode == 1, (on_error, ran.returncode, ran.stderr[-600:])
        said = ran.stderr.strip().splitlines()[-1]
        assert said.startswith("owt: error: ") and str(folder / "b.parquet") in said, said
        assert "encrypted parquet" in said and "decrypt it first" in said, said


def _more_chunks_than_columns(footer: bytes) -> bytes:
    """``footer`` (pyarrow's, of one column, one row group and no statistics) with that row
    group's one column chunk written twice: a row group of more chunks than the schema has
    columns. (Thrift compact: a field's header byte is its id's delta and its type.)"""
    from openwebtext.thrift import read_struct

    meta = footer[:-8]
    assert meta[:4] == b"\x15\x04\x19\x2c"  # version 2; the schema, a list of 2 structs
    at = 4
    for _ in range(2):
        _, at = read_struct(meta, at)
    assert meta[at : at + 2] == b"\x16\x04"  # num_rows: 2
    at += 2
    assert meta[at : at + 4] == b"\x19\x1c\x19\x1c"  # one row group; its one column chunk
    start = at + 4
    _, end = read_struct(meta, start)
    body = meta[: at + 3] + b"\x2c" + meta[start:end] * 2 + meta[end:]  # (a list of 2)
    return body + len(body).to_bytes(4, "little") + b"PAR1"


def test_a_row_group_of_more_chunks_than_columns_is_damaged_not_an_abort(
    tmp_path: Path,
) -> None:
    """pyarrow parses such a footer, then ``row_group(0).column(1)`` aborts the process: the
    reader's walk reached it when no chunk lay where the unit said (a file changed)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"text": ["one", "two"]}), path, store_schema=False,
                   write_statistics=False)  # fmt: skip
    footer = _more_chunks_than_columns(_footer(path))
    assert pq.read_metadata(pa.BufferReader(footer)).row_group(0).num_columns == 2
    with pytest.raises(CorpusError, match="row group 0 holds 2 column chunks, not its schema's 1"):
        parse_footer(footer, "x.parquet")
