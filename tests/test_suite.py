"""The test suite's own machinery: the xdist groups that keep tests apart.

Tests that must not overlap (the GiB Atari replays, the tests that time processes) and modules
whose tests share one module-scoped fixture (trained runs) carry an ``xdist_group``;
``--dist loadgroup`` (pyproject.toml's addopts) sends each group to one worker. pytest-xdist
marks a grouped test by renaming its id to end in ``@GROUP``; pytest 9.2 computes a test's id
from another field, so under it the renaming, and with it every group, silently stops
(pyproject.toml pins pytest below 9.2). This test fails, naming the cause, if grouping stops.
"""

from __future__ import annotations

import pytest


@pytest.mark.unit
@pytest.mark.xdist_group("groups_probe")
def test_an_xdist_group_sends_its_tests_to_one_worker(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("one process (-n 0), or not --dist loadgroup: there are no groups to keep")
    assert request.node.nodeid.endswith("@groups_probe"), (
        f"pytest-xdist's --dist loadgroup did not group this test under pytest "
        f"{pytest.__version__} (its id is {request.node.nodeid!r}): groups' tests would run at "
        "once on several workers; install the test extra's pytest (pip install '.[test]')"
    )
