"""The run job (``zoo train``'s): its settings as one table (:mod:`zoo.runs.settings`) and its
errors (:mod:`zoo.runs.errors`). Neither needs JAX."""
