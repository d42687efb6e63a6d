"""What ``owt stream`` refuses before it reads a document: a flag that would do nothing (or
that needs another), and an output that is a file the run reads (``--state-out``, the
standard output of ``--jsonl``), which it would write into."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from openwebtext.errors import CorpusError
from openwebtext.index import Corpus, file_key
from openwebtext.loader import Mixture
from openwebtext.source import is_url
from openwebtext.stream import WINDOW
from openwebtext.tokenfiles import TOKENS, companions, markers

__all__ = ["check_flags", "refuse_inputs", "refusing_stdout"]

_T = TypeVar("_T")


#: The flags that only shape something another flag asks for, with it, and their defaults.
_NEEDS = {
    "seq_len": ("--pack", 1024), "batch_size": ("--pack", 8), "window": ("--pack bestfit", WINDOW),
    "mix_by": ("--mix", "documents"), "max_errors": ("--on-error skip or warn", None),
}  # fmt: skip


def check_flags(args: argparse.Namespace) -> None:
    """Refuse a flag given without the one it shapes (it would do nothing); set the defaults
    of those not given."""
    asked = {"--pack": bool(args.pack), "--pack bestfit": args.pack == "bestfit",
             "--mix": bool(args.mix), "--on-error skip or warn": args.on_error != "raise"}
    for name, (needs, default) in _NEEDS.items():
        flag = "--" + name.replace("_", "-")
        if getattr(args, name) is not None and not asked[needs]:
            raise ValueError(f"{flag} shapes {needs}: give {needs}, or leave {flag} out")
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.shuffle is False:  # corpus order: the seed then orders best fit's rows only
        idle = [flag for flag, name in (("--seed", "seed"), ("--shuffle-buffer", "shuffle_buffer"))
                if getattr(args, name) is not None and (name, args.pack) != ("seed", "bestfit")]
        _refuse_idle(idle, "the shuffle", "leave out --no-shuffle or {}")
    if args.mix_by == "tokens" and not args.tokenizer:
        raise ValueError("--mix-by tokens weighs the parts by their ids: give --tokenizer")
    if args.resume is not None:  # (the state says the split and the ranks)
        return
    # Without the flag they shape (a launch script's --split "$S" or --world-size "$W" given,
    # whatever its value, goes on: the flags are the same for every one of its runs).
    idle = [flag for flag, name in (("--val-fraction", "val_fraction"), ("--val-seed", "val_seed"))
            if getattr(args, name) is not None and args.split is None]  # fmt: skip
    _refuse_idle(idle, "--split train or val", "give one, or leave {} out")
    if args.even is not None and args.world_size is None:
        raise ValueError("--even shapes the shares of --world-size > 1: give one, or leave "
                         "--even out")  # fmt: skip


def _refuse_idle(idle: list[str], shapes: str, fix: str) -> None:
    """Refuse the ``idle`` flags, which shape ``shapes``, saying the ``fix`` (``{}``: them)."""
    if idle:
        both = " and ".join(idle)
        raise ValueError(f"{both} shape{'s' * (len(idle) == 1)} {shapes}: {fix.format(both)}")


def refuse_inputs(source: Corpus | Mixture, state_out: Path | None, jsonl: bool) -> None:
    """Refuse, before a document is read, an output that is a file this run reads or leaves
    out (compared by ``file_key``: device and inode): ``--state-out``, which the state would
    replace, and the standard output ``--jsonl`` writes, which its lines would grow; and a
    ``--state-out`` that is standard output's file, whose lines the state would replace."""
    corpora = source.corpora.values() if isinstance(source, Mixture) else (source,)
    inputs = set()
    for corpus in corpora:
        paths = [unit.path for unit in corpus.units] + [e.path for e in corpus.skipped_files]
        ids = sorted({u.path for u in corpus.units if u.kind == TOKENS and not is_url(u.path)})
        paths += [other for path in ids for other in companions(path)]  # (read too: the index,
        paths += [str(marker) for path in ids for marker in markers(Path(path).parent)]  # the
        # meta.json and the format markers beside the ids)
        for path in dict.fromkeys(p for p in paths if p):
            with contextlib.suppress(OSError):  # (the files were just opened)
                inputs.add(file_key(path))
    out = _stdout_key()
    state = file_key(str(state_out)) if state_out is not None and state_out.exists() else None
    if state is not None and state in inputs:
        raise ValueError(f"{state_out}: --state-out names a file this run reads: the state "
                         "would replace it; write the state elsewhere")  # fmt: skip
    if jsonl and out in inputs:
        raise _into_input()
    if state is not None and state == out:  # (its rename would replace the documents written)
        raise ValueError(f"{state_out}: --state-out names the file standard output writes: the "
                         "state would replace the run's output; write the state elsewhere")


def _into_input() -> ValueError:
    """``--jsonl`` with standard output opened onto a corpus file (exit 2, as ``--state-out``)."""
    return ValueError("standard output is a file this run reads: --jsonl would write its "
                      "documents into it; write them elsewhere")  # fmt: skip


def _stdout_key() -> object:
    """The device and inode of the regular file standard output writes (None: another)."""
    try:
        out = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # (a stream without a descriptor: tests)
        return None
    return (out.st_dev, out.st_ino) if stat.S_ISREG(out.st_mode) else None


def refusing_stdout(args: argparse.Namespace, opening: Callable[[], _T]) -> _T:
    """``opening()`` (a corpus, a mixture), where a file that cannot be read being standard
    output's own (the shell made ``> corpus/out.jsonl`` empty in the corpus's folder) is
    ``--jsonl``'s refusal."""
    try:
        return opening()
    except CorpusError as exc:
        out = _stdout_key() if args.jsonl and exc.path else None
        with contextlib.suppress(OSError):
            if out is not None and file_key(str(exc.path)) == out:
                raise _into_input() from None
        raise
