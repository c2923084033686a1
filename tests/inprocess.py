"""``zoo`` commands run in the test's own process (the ``cli`` fixture of ``conftest.py``).

A subprocess costs a Python start, JAX's import and every program's trace again; a test that is
not about the process itself runs the command here, as the console script would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io


@dataclasses.dataclass(frozen=True)
class CliResult:
    """What ``zoo ARGV`` did: its exit status and what it wrote to stdout and stderr."""

    code: int
    out: str
    err: str

    def __iter__(self):  # unpacks as (code, out, err)
        return iter((self.code, self.out, self.err))


def run_cli(*argv: str) -> CliResult:
    """``zoo ARGV`` in this process (argparse's exits become the status it would exit with)."""
    from zoo import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return CliResult(code, out.getvalue(), err.getvalue())
