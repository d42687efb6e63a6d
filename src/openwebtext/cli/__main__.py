"""``python -m openwebtext.cli``: the ``owt`` command."""

import sys

from openwebtext.cli import main

sys.exit(main())
