"""What a red team (session 31) found on the input kinds beside tars."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from openwebtext import Loader
from openwebtext.errors import CorruptMember
from tables_support import sample_texts, write_jsonl


def _gzipped_tar(path: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


@pytest.mark.parametrize("name", ["x.json.gz", "x.jsonl.gz"])
def test_a_gzipped_tar_named_json_lines_is_said_as_a_tar(tmp_path: Path, name: str) -> None:
    """It was read line by line, its first said as "not a JSON object with a string 'text'"
    (and under skip each of its lines was a skipped document)."""
    _gzipped_tar(tmp_path / name)
    with pytest.raises(CorruptMember, match=r"named gzip JSON lines, but its gzip data holds "
                       r"tar, not JSON lines") as info:  # fmt: skip
        list(Loader(str(tmp_path), workers=0))
    assert info.value.member == name
    write_jsonl(tmp_path / "b.jsonl", sample_texts(3))
    documents = Loader(str(tmp_path), workers=0, on_error="skip").iter()
    assert len(list(documents)) == 3
    assert (documents.stats.skipped_members, documents.stats.skipped_documents) == (1, 0)
