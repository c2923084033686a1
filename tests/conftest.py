"""Test-session settings: the tiers, the shared fixtures and JAX's compilation cache.

**Tiers.** Every test carries exactly one tier marker (declared in ``pyproject.toml``; what each
holds, its command and what it takes: ``docs/testing.md``): ``unit``, ``compiled``, ``run`` (the
fast tiers, the README's ``pytest``), ``process``, ``long`` and ``learning`` (CI's). A module of
one tier says so once (``pytestmark``); in a mixed module each test carries its own. A test with
no tier or with two is refused at collection, so no test falls outside every command. Modules are
run heaviest tier first, so that on several workers the long tests start early instead of
ending the session alone.

**Shared fixtures.** ``cli`` runs ``zoo`` in-process (a subprocess only where a test is about a
process); ``finished_run`` is a copy of one small finished run trained once per test process
(each test may resume or damage its copy); ``tests/tiny.py`` names the overrides that make a
preset train in seconds on CartPole.

**Compilation cache.** JAX's persistent compilation cache is shared by the session, its xdist
workers and the processes its tests start: many tests compile the same programs (each seed of a
run, the same preset in several tests, a trainer and its resume, every ``zoo`` subprocess), and
the cache compiles each once. Its key covers the program, the JAX and XLA versions, the backend,
the devices and the compile options, so a hit is the executable XLA would have built. A session
starts with an empty cache in a temporary folder, removed at its end; set
``JAX_COMPILATION_CACHE_DIR`` to share one between sessions (``.ci/run`` shares one between its
pytest sessions).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess import CliResult, run_cli
from tiny import FINISHED_RUN

# before anything imports jax: JAX reads these when it is first imported. xdist's workers start
# after the controller has read this file, and inherit its environment (one cache for all).
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="zoo-tests-jax-cache-")
# every program, however quick to compile (the default caches only those over a second)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# No size bound: a bound turns on eviction, whose every write stats every entry under a lock
# between processes (0.3 s per write at 2,300 entries, quadratic over a suite). Unbounded, two
# processes may write one entry at once; a reader that meets a partly written entry fails to
# decompress it, warns and compiles (jax._src.compiler._cache_read), so nothing is wrong, only slow.

#: The tiers, fastest first (pyproject.toml declares each with its description).
TIERS = ("unit", "compiled", "run", "process", "long", "learning")
#: What a plain ``pytest`` runs (the README's test command) when no ``-m`` is given.
FAST_TIERS = ("unit", "compiled", "run")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's own cache folder (xdist workers inherit it: the controller owns it)."""
    if _OWN_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def tier_of(item: pytest.Item) -> list[str]:
    """The tier markers of a test, its module's ``pytestmark`` included (one if well marked)."""
    return sorted({m.name for m in item.iter_markers() if m.name in TIERS})


def _named(config: pytest.Config) -> set[str]:
    """The test ids the command line names (``tests/test_runs.py::test_x``), rootdir-relative."""
    named = set()
    for arg in config.args:
        if "::" in arg:
            path, rest = arg.split("::", 1)
            with contextlib.suppress(ValueError):
                path = Path(path).resolve().relative_to(config.rootpath).as_posix()
            named.add(f"{path}::{rest}")
    return named


def _deselect_slow_tiers(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``-m``, keep the fast tiers and the tests the command line names by id (so that
    ``pytest tests/test_runs.py::test_sigint_saves_and_exits_cleanly`` runs that test)."""
    if config.option.markexpr:
        return
    named = _named(config)
    keep, drop = [], []
    for item in items:
        base = item.nodeid.split("[")[0]
        wanted = tier_of(item)[0] in FAST_TIERS or item.nodeid in named or base in named
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Refuse a test with no tier or several before any is deselected; keep the fast tiers when
    no ``-m`` is given; then order the selected tests' modules by their heaviest tier, heaviest
    first, keeping each module's tests together and in order (its module-scoped fixtures are
    built once)."""
    problems = [
        f"{item.nodeid}: {', '.join(tiers) or 'no tier'}"
        for item in items
        if len(tiers := tier_of(item)) != 1
    ]
    if problems:
        raise pytest.UsageError(
            "every test needs exactly one tier marker out of "
            f"{', '.join(TIERS)} (pyproject.toml, docs/testing.md):\n  " + "\n  ".join(problems)
        )
    _deselect_slow_tiers(config, items)
    result = yield
    rank = {tier: i for i, tier in enumerate(TIERS)}
    heaviest: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        heaviest[module] = max(heaviest.get(module, 0), rank[tier_of(item)[0]])
    items.sort(key=lambda item: -heaviest[item.nodeid.split("::")[0]])
    return result


# ------------------------------------------------------------------------------ the CLI in-process


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    """``cli("train", "dqn", ...)``: ``zoo`` in-process; returns :class:`CliResult`."""
    return run_cli


# ------------------------------------------------------------------------- one finished run


@pytest.fixture(scope="session")
def finished_run_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished run, trained once per test process; tests use a copy (``finished_run``)."""
    import zoo

    run = tmp_path_factory.mktemp("finished") / "dqn"
    result = zoo.train(**FINISHED_RUN, run_dir=run, progress=False)
    assert result.env_steps == FINISHED_RUN["total_env_steps"]
    return run


@pytest.fixture
def finished_run(finished_run_template: Path, tmp_path: Path) -> Path:
    """A copy of the finished run of :data:`FINISHED_RUN`, the test's own to resume or damage."""
    return Path(shutil.copytree(finished_run_template, tmp_path / "finished"))
