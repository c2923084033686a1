"""Scripts the tests start in subprocesses (XLA flags and jax.distributed need a fresh process)."""
