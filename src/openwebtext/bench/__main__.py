"""``python -m openwebtext.bench``: ``bench`` (as ``owt bench``), ``run-one``, ``ceiling-one``."""

import sys

from openwebtext.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
