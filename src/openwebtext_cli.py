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
    """Run ``owt`` (``openwebtext.cli.main``); 130 if interrupted while it loads."""
    try:
        from openwebtext.cli import main as run
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return _EXIT_INTERRUPTED
    return run()


if __name__ == "__main__":
    sys.exit(main())
