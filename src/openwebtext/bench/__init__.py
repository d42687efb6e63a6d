"""``owt bench``: loader throughput against worker count, next to the decompression ceiling.

The parts: ``children`` (the measured child processes), ``process`` (running and measuring
one), ``runs`` and ``runner`` (the configurations and rounds, :func:`run_bench`),
``summary``, ``machine``, ``report`` and ``chart`` (the outputs), ``cli``.
"""

from .chart import plot as plot
from .cli import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from .cli import add_parser, main
from .cli import default_workers as default_workers
from .common import CEILING as CEILING
from .common import LOADER as LOADER
from .common import OK as OK
from .common import STARTED_ENV as STARTED_ENV
from .common import TIMEOUT as TIMEOUT
from .common import VS as VS
from .common import BenchError
from .machine import machine_info
from .process import SAMPLE_SECONDS as SAMPLE_SECONDS
from .process import Finished as Finished
from .process import run_child as run_child
from .report import CSV_COLUMNS as CSV_COLUMNS
from .report import PLOT_HINT as PLOT_HINT
from .report import BenchResult
from .report import summary_text as summary_text
from .report import table as table
from .runner import run_bench
from .runs import Config as Config
from .runs import Run, Settings
from .summary import GOOD_ENOUGH as GOOD_ENOUGH
from .summary import Scaling as Scaling
from .summary import Summary
from .summary import recommend as recommend

__all__ = [
    "BenchError",
    "BenchResult",
    "Run",
    "Settings",
    "Summary",
    "add_parser",
    "machine_info",
    "main",
    "run_bench",
]
