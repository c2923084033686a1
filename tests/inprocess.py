"""``zoo`` commands run in the test's own process (the ``cli`` fixture of ``conftest.py``).

A subprocess costs a Python start, JAX's import and every program's trace again; a test that is
not about the process itself runs the command here, as the console script would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os


@dataclasses.dataclass(frozen=True)
class CliResult:
    """What ``zoo ARGV`` did, named as :class:`subprocess.CompletedProcess` names it; unpacks as
    ``(returncode, stdout, stderr)``."""

    returncode: int
    stdout: str
    stderr: str

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))


def run_cli(*argv: object, cwd: str | os.PathLike[str] | None = None) -> CliResult:
    """``zoo ARGV`` in this process, from ``cwd`` if given (argparse's exits become the status it
    would exit with; any other exception propagates)."""
    from zoo import cli

    out, err = io.StringIO(), io.StringIO()
    where = contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext()
    with where, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return CliResult(code, out.getvalue(), err.getvalue())
