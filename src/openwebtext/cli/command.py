"""The ``owt`` command: the parser assembled from the command modules (each registers its
subcommand; ``bench``'s comes from ``openwebtext.bench``), and :func:`main`, which runs one
and turns how it ended (an error, Ctrl-C, SIGTERM, a closed pipe) into a message and an
exit code."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
from collections.abc import Sequence

from openwebtext import bench, interrupts
from openwebtext.cli import index, merge, stream, synth, tokenize
from openwebtext.cli.standard import messages, open_standard_streams, stdout_gone
from openwebtext.errors import OWTError, StateError, one_line
from openwebtext.interrupts import EXIT_INTERRUPTED

__all__ = ["as_flags", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``owt`` and all its subcommands (in the order ``owt --help`` lists)."""
    parser = argparse.ArgumentParser(
        prog="owt", description="Stream OpenWebText-style corpora at the speed of decompression."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    stream.add_parser(sub)
    index.add_parser(sub)
    tokenize.add_parser(sub)
    merge.add_parser(sub)
    bench.add_parser(sub)
    synth.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``owt`` with ``argv`` (default: the command line); its exit code."""
    try:
        open_standard_streams()
        _own_children()
        with messages(), interrupts.interruptible():
            parser = build_parser()  # interrupted here too: the commands' parsers import
            args = parser.parse_args(argv)
            return _run(args)
    except KeyboardInterrupt as interrupt:  # before the handler was in place, or in parsing
        return _interrupted(interrupts.exit_code(interrupt))


def _own_children() -> None:
    """Wait for our own children: a parent that ignored SIGCHLD passed that on through
    ``exec``, and then the kernel reaps them, so no worker could be waited for (a command owns
    its process; a library leaves the host's signals alone and says it: ``WorkerPool``)."""
    sigchld = getattr(signal, "SIGCHLD", None)
    if sigchld is not None and signal.getsignal(sigchld) == signal.SIG_IGN:
        with contextlib.suppress(ValueError):  # (not the main thread: in-process callers')
            signal.signal(sigchld, signal.SIG_DFL)


def _run(args: argparse.Namespace) -> int:
    """The command ``args`` names, its errors said in one line each."""
    try:
        if args.command != "stream":  # (a stream raises it as it opens: --state-out written)
            interrupts.raise_early()
        code: int = args.run(args)
        interrupts.raise_early()  # (one that ended before it opened)
        interrupts.check()  # (one whose exception something swallowed: ``interrupts``)
        return code
    except KeyboardInterrupt as interrupt:
        return _interrupted(interrupts.exit_code(interrupt))
    except Exception:
        if (signum := interrupts.owed()) is not None:  # (an interrupt something turned into
            return _interrupted(128 + signum)  # an error: numpy's import, an ImportError)
        return _failed(args)


def _interrupted(code: int) -> int:
    print("interrupted" if code == EXIT_INTERRUPTED else "terminated", file=sys.stderr)
    return code


def _failed(args: argparse.Namespace) -> int:
    """The exit code of the error being handled, said in one line (raised again: one that is
    not the command's to say)."""
    try:
        raise
    except BrokenPipeError as exc:
        if not stdout_gone():  # (another pipe's: an error like any other)
            print(f"owt: error: {one_line(str(exc))}", file=sys.stderr)
            return 1
        # The reader of our stdout went away (e.g. `owt stream --jsonl | head`).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (OWTError, OSError) as exc:
        print(f"owt: error: {as_flags(one_line(_said(exc, getattr(args, 'resume', None))))}",
              file=sys.stderr)  # fmt: skip
        return 1
    except MemoryError:  # (the machine's limit: one line, as every error)
        print("owt: error: out of memory (fewer workers, -j, need less)",
              file=sys.stderr)  # fmt: skip
        return 1
    except ValueError as exc:  # an argument refused once the command ran: as argparse's
        print(f"owt: error: {as_flags(one_line(str(exc)))}", file=sys.stderr)
        return 2


#: An option as the library's messages say it (``more than max_errors=3``, ``read it with
#: split='all'``), after the words they say it with only: never a path's or a document's name
#: (``data/split=train/``, ``(document seed=1.txt)``, ``part 'web': split=a/c.tar``).
_KEYWORD = re.compile(
    r"(?:(?<=\bthan |\bpass |\bwith )|(?<=\bpasses ))"
    r"(max_errors|max_member_bytes|max_document_bytes|split)="
    r"('?)([^\s,;:)'\"]+)\2"
)
#: The library's words that no flag rewrites: ``owt``'s for the same thing.
_PHRASES = {
    "give Options(tokenizer=...)": "give --tokenizer",
    " (a mixture's part: options={NAME: {'split': 'all'}})": " (every --mix part reads with the "
    "one --split)",
}


def as_flags(message: str) -> str:
    """``message`` with the library's keywords for options said as ``owt``'s flags."""
    for words, flags in _PHRASES.items():
        message = message.replace(words, flags)
    return _KEYWORD.sub(lambda m: f"--{m[1].replace('_', '-')} {m[3]}", message)


#: What to give to resume a state refused for a field ``--resume`` does not take from it
#: (a state's last two fields, else its last: a batches state's own), as flags; what no flag
#: gives (a mixture's weight schedule, its sampling), said so.
_GIVE = {
    "config.tokenizer": "give the --tokenizer it was saved with",
    "config.corpus": "give the corpus it was saved on (a table's with the --text-column read)",
    "config.parts": "give the --mix parts it was saved with, in that order",
    "config.weights": "give each --mix part the weight it was saved with",
    "config.by": "give the --mix-by it was saved with",
    "config.sampling": "use Python: no owt flag samples a mixture at random",
    "config.schedule": "use Python: no owt flag gives a mixture's weight schedule",
    "seq_len": "give --seq-len and --batch-size as saved",
    "batch_size": "give --seq-len and --batch-size as saved",
    "schedule": "give the --seq-len and --batch-size (or schedule) it was saved with",
    "packing": "give --pack and --window as saved",
    "window": "give --pack and --window as saved",
}
#: A state saved without a tokenizer (of text), refused with one.
_TEXT_STATE = re.compile(r"\btokenizer: saved None\b")


def _give(exc: BaseException) -> str | None:
    """``_GIVE``'s words for the field a state was refused for, as saved for other options
    (None: none; a damaged state's field is never a flag to give)."""
    if not isinstance(exc, StateError) or not exc.field or not exc.mismatch:
        return None
    steps = exc.field.split(".")
    if steps[-2:] == ["config", "tokenizer"] and _TEXT_STATE.search(str(exc)):
        return "leave out --tokenizer: it was saved of text"
    return _GIVE.get(".".join(steps[-2:])) or _GIVE.get(steps[-1])


def _said(exc: BaseException, resumed: str | None = None) -> str:
    """What ``owt`` says of ``exc``: a state's error with the ``--resume`` file it is of
    (``resumed``; one found as its documents are read said none), its options to resume it
    as flags (``owt stream --resume`` takes those not given from the state)."""
    if isinstance(exc, StateError) and resumed and not str(exc).startswith(resumed):
        exc = exc.retold(f"{resumed}: {exc}")
    if not isinstance(exc, StateError) or not exc.resume_with:
        hint = _give(exc) if resumed else None
        return f"{exc} (to resume it, {hint})" if hint else str(exc)
    names = exc.resume_with
    flags = ["--no-shuffle" if n == "shuffle" else f"--{n.replace('_', '-')}" for n in names]
    given = ", ".join(flags)
    return f"{exc.reason()} (to resume it, leave out {given}: --resume takes the state's)"
