"""Test-session settings.

JAX's persistent compilation cache, shared by the session and the processes its tests start:
many tests compile the same programs (each seed of a run, the same preset in several tests, a
trainer and its resume, every ``zoo`` subprocess), and the cache compiles each once. Its key
covers the program, the JAX and XLA versions, the backend, the devices and the compile options,
so a hit is the executable XLA would have built. A session starts with an empty cache in a
temporary folder, removed at its end; set ``JAX_COMPILATION_CACHE_DIR`` to share one between
sessions (``.ci/run`` shares one between its concurrent pytest sessions).
"""

from __future__ import annotations

import os
import shutil
import tempfile

# before anything imports jax: JAX reads these when it is first imported
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


def pytest_unconfigure(config: object) -> None:
    """Remove the session's own cache folder."""
    if _OWN_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
