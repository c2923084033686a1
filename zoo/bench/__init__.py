"""``zoo bench``: suites, aggregate statistics (rliable) and the benchmark report.

See ``docs/bench.md``. :mod:`zoo.bench.suites` (suites as data), :mod:`zoo.bench.stats`
(normalisation, IQM and friends with bootstrap CIs), :mod:`zoo.bench.published` (published
per-run scores), :mod:`zoo.bench.report` (``collect``, ``write_report``).
"""

from zoo.bench.errors import BenchError
from zoo.bench.suites import SUITES, Suite, format_suites, get_suite

__all__ = ["SUITES", "BenchError", "Suite", "format_suites", "get_suite"]
