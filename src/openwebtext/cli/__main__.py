"""``python -m openwebtext.cli``: the ``owt`` command."""

import sys

from openwebtext.cli import main

if __name__ == "__main__":
    sys.exit(main())
