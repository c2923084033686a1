"""The run job's layout holds (issue 35), read from the source as Python's own parser sees it.

The package ``zoo/runs/`` reads top to bottom: no file over 500 lines and a pipeline module under
200; at most 5 imports inside functions in the whole run job; no import circle among the loop
body, the drivers, the replay, the learn step, the rollout store and the data; and the loop body
imports no run directory, checkpointer, process group, logger or trainer. Imports under
``if TYPE_CHECKING:`` count as imports here: a circle of annotations is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ZOO = Path(__file__).resolve().parent.parent / "zoo"
RUN_JOB = [*sorted((ZOO / "runs").glob("*.py")), ZOO / "run.py"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ZOO.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ZOO.rglob("*.py")}


def zoo_imports(path: Path) -> set[str]:
    """The zoo modules ``path`` imports anywhere (top level, functions, TYPE_CHECKING)."""
    found: set[str] = set()

    def resolve(name: str) -> str | None:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        found.update(r for r in map(resolve, names) if r is not None)
    found.discard(module_name(path))
    return found


def function_local_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    out.append(f"{path.name}:{inner.lineno}: {ast.unparse(inner)}")
    return out


def test_the_run_job_files_are_short_and_its_pipeline_shorter():
    lines = {p.name: len(p.read_text().splitlines()) for p in (ZOO / "runs").glob("*.py")}
    assert {name: n for name, n in lines.items() if n > 500} == {}
    assert lines["__init__.py"] < 200
    # the pipeline is there to read: each step named in the order it runs
    source = (ZOO / "runs" / "__init__.py").read_text()
    steps = ["join_run(", "open_run(", "envs.make(", "train_opened(", "append_history("]
    at = [source.index(step, source.index("def _train(")) for step in steps]
    assert at == sorted(at)


def test_the_run_job_has_at_most_five_function_local_imports():
    local = [line for path in RUN_JOB for line in function_local_imports(path)]
    assert len(local) <= 5, "\n".join(local)


def test_no_import_circle_among_the_loop_and_its_parts():
    parts = {"zoo.loop", "zoo.learn", "zoo.rollout", "zoo.data", "zoo.learner"}
    parts = (parts & MODULES.keys()) | {
        m for m in MODULES if m.startswith(("zoo.drivers", "zoo.replay"))
    }
    graph = {m: zoo_imports(MODULES[m]) & parts for m in parts}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            for n in graph[m] - seen:
                if n == goal:
                    return True
                seen.add(n)
                todo.append(n)
        return False

    # a package imports its own modules; a circle is a module that reaches itself otherwise
    circles = sorted(
        m for m in parts if reaches(m, m) and not all(n.startswith(m) for n in graph[m])
    )
    assert circles == []
    # and the replay package imports none of the parts that learn from it
    for m in (m for m in parts if m.startswith("zoo.replay")):
        assert graph[m] <= {n for n in parts if n.startswith("zoo.replay")}, m


def test_the_loop_body_imports_nothing_of_the_run_job():
    imported = zoo_imports(ZOO / "loop.py")
    assert {m for m in imported if m.startswith("zoo.runs") or m == "zoo.run"} == set()


def test_the_steps_up_to_opening_a_run_need_no_jax():
    """``zoo train --resume`` of a finished run, and every refusal up to opening, answer
    without starting JAX: the request, the settings, opening and creating import none of it."""
    import subprocess
    import sys

    code = (
        "import sys; import zoo.cli, zoo.runs, zoo.runs.open, zoo.runs.create, zoo.runs.flags, "
        "zoo.runs.join, zoo.runs.group; "
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
