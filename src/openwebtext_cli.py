"""The ``owt`` console entry point, outside the package: Ctrl-C and SIGTERM end it as a
command's (130, 143, ``--state-out`` written) from its first instant.

Importing ``openwebtext.cli`` first imports the package (numpy, the records, the
loader…): a second or more on a busy machine, before :func:`openwebtext.cli.main` can take
the signals (``interrupts.interruptible``). A KeyboardInterrupt in those imports would print
a traceback, and SIGTERM would end the process by the signal itself (-15, no state written).
This module imports nothing heavy: it holds both signals while the package loads, and hands
one that came meanwhile to the command, which raises it where it can end as it would have
(``interrupts.came_early``).
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main"]

#: 128 + SIGINT, as ``openwebtext.interrupts.EXIT_INTERRUPTED`` (not imported: it is heavy).
_EXIT_INTERRUPTED = 128 + signal.SIGINT


def main() -> int:
    """Run ``owt`` (``openwebtext.cli.main``); a signal that came while it loaded ends it.

    SIGINT and SIGTERM are held (blocked) while the package imports: an interrupt inside an
    extension module's import can surface as an ``ImportError`` (numpy's), not a
    KeyboardInterrupt. They stay held until the command's handler is in place
    (``interrupts.hand_over``: unblocked here, a SIGTERM in between ended the process by the
    signal itself); one that came meanwhile is raised by the command once it can end cleanly
    (a resumed ``owt stream`` writes ``--state-out``, as if it came then).
    """
    # (one the caller ignores stays ignored: blocked, it would be pending all the same)
    held = {s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) != signal.SIG_IGN}
    hold = hasattr(signal, "pthread_sigmask") and bool(held)
    if hold:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        from openwebtext import interrupts
        from openwebtext.cli import main as run
    except BaseException as exc:
        if hold:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        if isinstance(exc, KeyboardInterrupt):
            return _interrupted()
        raise
    if hold:
        interrupts.hand_over(held)
    return run()


def _interrupted() -> int:
    print("interrupted", file=sys.stderr)
    return _EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
