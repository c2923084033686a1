"""Fail unless the fast tiers cover enough of the lines of zoo/ that the whole of CI covers.

Usage: python .ci/coverage_share.py FAST_DATA CI_DATA [MINIMUM]

FAST_DATA is the coverage data of the README's test command alone, CI_DATA that of every tier
(docs/testing.md, "Coverage"). Prints both figures and the fast tiers' share of CI's covered
statements; exits 1 if the share is under MINIMUM (default 0.85).
"""

from __future__ import annotations

import sys

import coverage


def covered(data_file: str) -> tuple[dict[str, set[int]], int]:
    """Covered statements per file of ``data_file``, and the statements of every measured file."""
    cov = coverage.Coverage(data_file=data_file)
    cov.load()
    lines: dict[str, set[int]] = {}
    statements = 0
    for path in cov.get_data().measured_files():
        _, stmts, _, missing, _ = cov.analysis2(path)
        lines[path] = set(stmts) - set(missing)
        statements += len(stmts)
    return lines, statements


def main(argv: list[str]) -> int:
    """Print the figures; 0 if the fast tiers' share reaches the minimum, else 1."""
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    fast, _ = covered(argv[0])
    full, statements = covered(argv[1])
    minimum = float(argv[2]) if len(argv) == 3 else 0.85
    in_ci = sum(len(v) for v in full.values())
    in_fast = sum(len(v & fast.get(path, set())) for path, v in full.items())
    share = in_fast / in_ci
    print(
        f"coverage of zoo/: CI {in_ci:,} of {statements:,} statements ({in_ci / statements:.1%}); "
        f"the fast tiers {in_fast:,} of those ({share:.1%}; at least {minimum:.0%} required)"
    )
    return 0 if share >= minimum else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
