"""``meta.json``, the marker of a finished run: how it is built (the config, the counts and
each file's size and sha256), read, and the one place that decides whether a folder already
holds the finished files of a run (``finished_run``)."""

from __future__ import annotations

from typing import Any

from openwebtext import codec
from openwebtext.codec import Disagree
from openwebtext.errors import StateError
from openwebtext.prepare import outputs
from openwebtext.prepare.config import Report
from openwebtext.prepare.state import FileInfo, FileName, Meta, PerFile, ProgressRecord, RunConfig
from openwebtext.prepare.workdir import PrepareError, Workdir, sha256_file
from openwebtext.source import Storage

__all__ = ["build_meta", "finished_run", "read_meta"]


def read_meta(folder: outputs.Location, store: Storage | None = None) -> dict[str, Any]:
    """``folder/meta.json``, or ``{}`` if it is missing or not a JSON object."""
    return outputs.read_json(folder, "meta.json", store) or {}


def finished_run(
    folder: outputs.Location, config: RunConfig, store: Storage | None = None
) -> Report | None:
    """The report of the finished files of exactly ``config``'s run that ``folder`` holds
    (``Report.already``), or None: its ``meta.json`` parses (a damaged one is not finished,
    and is written again), is of the same kind (a whole run, or which slice), every option
    that changes a byte, the tokenizer and the corpus; and the files have its sizes. A
    merge's is a whole run's (its files are byte for byte those of one run)."""
    body = read_meta(folder, store)
    try:
        meta = Meta.from_json(body)
    except StateError:
        return None
    if meta.config != codec.replace(config, merge_of=None):
        return None
    try:
        found = outputs.sizes(folder, list(meta.files), store)
    except (OSError, KeyError, TypeError):
        return None
    if any(found[name] != info.bytes for name, info in meta.files.items()):
        return None
    return Report(folder, body, already=True)


def build_meta(workdir: Workdir, record: ProgressRecord, names: tuple[FileName, ...]) -> Meta:
    """meta.json: the config (of a whole run, after a merge), the counts, each file's sha256.

    Raises:
        PrepareError: the parts do not hold what the run counted (another run's now).
    """
    workdir.guard()  # the parts are still this run's
    files: PerFile[FileInfo] = {}
    for name in names:
        path = workdir.part_path(name)
        files[name] = FileInfo(path.stat().st_size, sha256_file(path))
    config = codec.replace(record.config, merge_of=None)
    try:
        return Meta(config, record.counts, files)
    except Disagree as exc:
        raise PrepareError(
            f"{workdir.folder}: the files do not hold what the run counted ({exc}): run again "
            "with --restart"
        ) from None
