"""``meta.json``, the marker of a finished run: how it is built (the config, the counts and
each file's size and sha256), read, and checked against the run a caller wants."""

from __future__ import annotations

from typing import Any

from openwebtext.prepare import outputs
from openwebtext.prepare.config import CONFIG_KEYS
from openwebtext.prepare.schema import check_meta
from openwebtext.prepare.workdir import Workdir, sha256_file
from openwebtext.source import Storage

__all__ = ["build_meta", "is_finished", "read_meta", "same_run"]


def read_meta(folder: outputs.Location, store: Storage | None = None) -> dict[str, Any]:
    """``folder/meta.json``, or ``{}`` if it is missing or not a JSON object."""
    return outputs.read_json(folder, "meta.json", store) or {}


def same_run(meta: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether ``meta`` is of exactly the run of ``config``: its kind (a whole run, or which
    slice), every option that changes a byte of the files, the tokenizer and the corpus.

    Every key of ``CONFIG_KEYS`` is compared, a missing one included: a slice's meta.json
    (which has ``slice``) is never a whole run's, nor one slice another's. A merge's is a
    whole run's (its files are byte for byte those of one run).
    """
    return all(meta.get(k) == config.get(k) for k in CONFIG_KEYS if k != "merge_of")


def is_finished(
    folder: outputs.Location, config: dict[str, Any], store: Storage | None = None
) -> bool:
    """Whether ``folder`` holds the finished files of exactly ``config``'s run (``same_run``;
    their sizes checked)."""
    meta = read_meta(folder, store)
    if not same_run(meta, config):
        return False
    try:
        check_meta(meta)
    except ValueError:  # damaged: not finished, and written again
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
