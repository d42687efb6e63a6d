"""``owt bench``: loader throughput against worker count, next to the decompression ceiling.

The parts: ``children`` (the measured child processes), ``process`` (running and measuring
one), ``runs`` and ``runner`` (the configurations and rounds, :func:`run_bench`),
``summary``, ``machine``, ``report`` and ``chart`` (the outputs), ``cli``.
"""

from openwebtext.bench.chart import plot as plot
from openwebtext.bench.cli import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from openwebtext.bench.cli import add_parser, main
from openwebtext.bench.cli import default_workers as default_workers
from openwebtext.bench.common import CEILING as CEILING
from openwebtext.bench.common import LOADER as LOADER
from openwebtext.bench.common import OK as OK
from openwebtext.bench.common import STARTED_ENV as STARTED_ENV
from openwebtext.bench.common import TIMEOUT as TIMEOUT
from openwebtext.bench.common import VS as VS
from openwebtext.bench.common import BenchError
from openwebtext.bench.machine import machine_info
from openwebtext.bench.process import SAMPLE_SECONDS as SAMPLE_SECONDS
from openwebtext.bench.process import Finished as Finished
from openwebtext.bench.process import run_child as run_child
from openwebtext.bench.report import CSV_COLUMNS as CSV_COLUMNS
from openwebtext.bench.report import BenchResult
from openwebtext.bench.report import summary_text as summary_text
from openwebtext.bench.report import table as table
from openwebtext.bench.runner import run_bench
from openwebtext.bench.runs import Config as Config
from openwebtext.bench.runs import Run, Settings
from openwebtext.bench.summary import GOOD_ENOUGH as GOOD_ENOUGH
from openwebtext.bench.summary import Scaling as Scaling
from openwebtext.bench.summary import Summary
from openwebtext.bench.summary import recommend as recommend

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
