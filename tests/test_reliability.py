"""Issue 10: runs that cannot be corrupted, names that cannot escape, no traceback from any command.

One test (or a few) per reproduction of the issue, each of which failed before the fix. Most need
only spec validation or the CLI's argument checks; the runs are a few hundred CartPole
transitions with a tiny network.
"""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import pytest

from zoo import cli, spec
from zoo.spec import SpecError


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``zoo ARGV`` in-process: (exit status, stdout, stderr); argparse's exits become a status."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def messages(excinfo: pytest.ExceptionInfo[SpecError]) -> list[str]:
    return [str(p) for p in excinfo.value.problems]


# ------------------------------------------------------------------ spec values that cannot train


@pytest.mark.parametrize(
    ("overrides", "path", "fragment"),
    [
        ({"optimizer.learning_rate": float("nan")}, "optimizer.learning_rate", "finite number"),
        ({"optimizer.learning_rate": float("inf")}, "optimizer.learning_rate", "finite number"),
        ({"optimizer.learning_rate": -1e-3}, "optimizer.learning_rate", "must not be negative"),
        ({"optimizer.learning_rate": 0}, "optimizer.learning_rate", "never changes the network"),
        (
            {"optimizer.learning_rate": {"kind": "linear", "start": 1e-3, "end": -1, "steps": 9}},
            "optimizer.learning_rate.end",
            "must not be negative",
        ),
        ({"schedule.epsilon": 2.0}, "schedule.epsilon", "probability in [0, 1], got 2.0"),
        (
            {"schedule.epsilon": {"kind": "linear", "start": 1.0, "end": -0.1, "steps": 10}},
            "schedule.epsilon.end",
            "probability in [0, 1]",
        ),
        ({"network.hidden": [0]}, "network.hidden.0", "greater than 0"),
        ({"network.hidden": [64, -3]}, "network.hidden.1", "greater than 0"),
        ({"network.torso": {"kind": "mlp", "sizes": [0]}}, "network.torso.sizes.0", "than 0"),
        ({"loss.discount": float("nan")}, "loss.discount", "finite number"),
        (
            {"network.head": {"kind": "categorical", "v_max": float("inf")}},
            "network.head.v_max",
            "finite",
        ),
    ],
)
def test_spec_values_that_cannot_train_are_refused(overrides, path, fragment):
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides=overrides)
    lines = messages(e)
    assert any(f" {path}: " in line and fragment in line for line in lines), lines


def test_a_network_that_cannot_fit_in_memory_is_refused_at_validation():
    # validation used to pass and JAX failed after reaching 16 GB
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides={"network.hidden": [100_000_000, 100_000_000]})
    (line,) = messages(e)
    assert ": network: the layers hold at least 1e+16 parameters" in line
    assert "of memory; use smaller layers" in line


def test_set_problems_name_set_not_the_installed_catalogue():
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides={"loss.n_step": "abc"})
    (line,) = messages(e)
    assert line.startswith("--set: dqn: loss.n_step: ") and "'abc'" in line
    assert "algorithms.yaml" not in line
    code, _, err = run_cli("show", "dqn", "--set", "loss.n_step=abc")
    assert code == 2 and err.startswith("--set: dqn: loss.n_step: ")


def test_an_entry_extending_itself_is_not_offered_itself(tmp_path):
    # used to say "unknown entry 'self'; did you mean 'self'?"
    with pytest.raises(SpecError) as e:
        spec.load_algorithm(write(tmp_path, "self.yaml", "self: {extends: self}\n"))
    (line,) = messages(e)
    assert "cannot extend itself" in line and "did you mean" not in line


@pytest.mark.parametrize("reverse", [False, True])
def test_a_1000_entry_extends_chain_is_refused_quickly_without_recursion_error(tmp_path, reverse):
    # used to end in a RecursionError after 45 s (500 entries took 10 s)
    lines = ["e0: {extends: dqn}"] + [f"e{i}: {{extends: e{i - 1}}}" for i in range(1, 1000)]
    path = write(tmp_path, "chain.yaml", "\n".join(reversed(lines) if reverse else lines) + "\n")
    with pytest.raises(SpecError) as e:
        spec.load_algorithms_file(path)
    deep = messages(e)
    # dqn, e0 .. e62 is 64 entries: e63 and every later one are too deep
    assert len(deep) == 1000 - 63
    assert all("extends chain is" in line and "more than 64" in line for line in deep)
    assert all(f"{path}: e{i}: extends:" in "\n".join(deep) for i in (63, 500, 999))
    # 60 entries deep is fine
    ok = write(tmp_path, "ok.yaml", "\n".join(lines[:60]) + "\n")
    assert len(spec.load_algorithms_file(ok)) == 60
