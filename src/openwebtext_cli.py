"""The ``owt`` console entry point, outside the package: Ctrl-C ends it with 130 from its
first instant.

Importing ``openwebtext.cli`` first imports the package (numpy, the records, the
loader…): a second or more on a busy machine, before :func:`openwebtext.cli.main` can take
the signal (``interrupts.interruptible``). A KeyboardInterrupt in those imports would print
a traceback and end the process by the signal itself. This module imports nothing heavy, so
that such an interrupt is caught here and said as a command's Ctrl-C is: ``interrupted``,
exit status 130 (128 + SIGINT).
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main"]

#: 128 + SIGINT, as ``openwebtext.interrupts.EXIT_INTERRUPTED`` (not imported: it is heavy).
_EXIT_INTERRUPTED = 128 + signal.SIGINT


def main() -> int:
    """Run ``owt`` (``openwebtext.cli.main``); 130 if interrupted while it loads.

    SIGINT is held (blocked) while the package imports: an interrupt inside an extension
    module's import can surface as an ``ImportError`` (numpy's), not a KeyboardInterrupt.
    A SIGINT that came meanwhile is taken, said, and ends the command with 130.
    """
    hold = hasattr(signal, "pthread_sigmask")
    if hold:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        from openwebtext.cli import main as run
    except KeyboardInterrupt:
        return _interrupted()
    finally:
        if hold:
            came = signal.SIGINT in signal.sigpending()
            if came:
                signal.sigwait({signal.SIGINT})  # taken here, not raised at the unblock
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if hold and came:
        return _interrupted()
    return run()


def _interrupted() -> int:
    print("interrupted", file=sys.stderr)
    return _EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
