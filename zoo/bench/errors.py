"""The error of ``zoo bench``, shared by its suites, statistics, report and runners."""

from __future__ import annotations

__all__ = ["BenchError"]


class BenchError(ValueError):
    """``zoo bench`` cannot do what was asked (an unknown suite, scores that do not fit a suite,
    runs that cannot be aggregated); the message says why and what to do."""
