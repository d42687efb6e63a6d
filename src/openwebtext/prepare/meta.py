"""``meta.json``, the marker of a finished run: how it is built (the config, the counts and
each file's size and sha256), read, and checked against the run a caller wants."""

from __future__ import annotations

from typing import Any

from openwebtext.prepare import outputs
from openwebtext.prepare.workdir import Workdir, sha256_file
from openwebtext.source import Storage

__all__ = ["build_meta", "is_finished", "read_meta"]


def read_meta(folder: outputs.Location, store: Storage | None = None) -> dict[str, Any]:
    """``folder/meta.json``, or ``{}`` if it is missing or not a JSON object."""
    return outputs.read_json(folder, "meta.json", store) or {}


def is_finished(
    folder: outputs.Location, config: dict[str, Any], store: Storage | None = None
) -> bool:
    """Whether ``folder`` holds the finished files of ``config`` (their sizes checked)."""
    meta = read_meta(folder, store)
    if {k: meta.get(k) for k in config} != config or not isinstance(meta.get("files"), dict):
        return False
    try:
        found = outputs.sizes(folder, list(meta["files"]), store)
        return all(found[name] == info["bytes"] for name, info in meta["files"].items())
    except (OSError, KeyError, TypeError):
        return False


def build_meta(workdir: Workdir, record: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """meta.json: the config (of a whole run, after a merge), the counts, each file's sha256."""
    files = {}
    for name in names:
        path = workdir.part_path(name)
        files[name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    config = {k: v for k, v in record["config"].items() if k != "merge_of"}
    return {**config, **record["counts"], "files": files}
