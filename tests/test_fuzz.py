"""Property-based fuzzing of the ``zoo`` command (issue 10: no traceback from any command).

Two properties, each over generated inputs run in-process (``zoo.cli.main``) in a sandbox folder:

- **mutated specs**: a valid catalogue entry whose fields are replaced by values of the wrong
  type or range, deleted, joined by unknown keys or nested deeply, and whose *name* is arbitrary
  text (``a/../../x``, ``/etc``, ...), given to ``zoo validate``, ``zoo show`` and ``zoo train``;
- **mutated command lines**: ``zoo train`` (new runs, ``--resume`` of an existing run, a user's
  own folder as ``--run-dir``), ``eval``, ``compare``, ``reproduce``, ``show``, with flags and
  values drawn from valid and invalid ones.

Each case must exit 0 or 2 (1 only for a loss that became non-finite while training: a failure
of the run, not of the input), print no traceback, write nothing outside the sandbox's allowed
folders (``runs/``, ``comparison/``, ``reproduce/``, the run directories named), and leave the
existing run's files and the user's folder byte for byte as they were. Commands that would train
get tiny budgets (at most 200 transitions, an 8-unit network), and most inputs are refused.

The fast versions run :data:`FAST_EXAMPLES` cases each; the ``slow`` ones
:data:`SLOW_EXAMPLES`. Each test prints how many cases it ran.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import run_cli

import zoo
from zoo import spec

FAST_EXAMPLES = 60
SLOW_EXAMPLES = 600

#: Flags of ``zoo train`` and the values they are fuzzed with (valid ones included).
COUNT_TEXTS = ["-5", "-1", "0", "50", "200", "2147483648", "1e3", "abc", "", "nan"]
#: Budgets: invalid, below the tiny replay's min_size (50), or tiny.
STEPS_TEXTS = ["-5", "0", "1", "49", "100", "200", "1e3", "abc", "", "2147483648x"]
FLOAT_TEXTS = ["0", "-1.5", "195", "nan", "inf", "-inf", "1e308", "x"]

#: Dotted keys for ``--set``: real fields at every depth, misspellings, and nonsense.
SET_KEYS = [
    "loss.n_step",
    "loss.discount",
    "loss.td",
    "loss.td.kind",
    "optimizer.learning_rate",
    "optimizer",
    "network.hidden",
    "network.head",
    "network.torso.sizes",
    "replay.min_size",
    "replay.capacity",
    "replay.batch_size",
    "replay.sequence",
    "schedule.epsilon",
    "schedule.epsilon.end",
    "schedule",
    "loss.n_stepp",
    "nonsense",
    "a..b",
    ".",
    "",
    "name",
]
SET_VALUES = [
    "3",
    "0",
    "-1",
    "abc",
    "null",
    "[]",
    "[0]",
    "[8]",
    "[100000000, 100000000]",
    "{kind: quantile}",
    "{kind: nope}",
    ".nan",
    ".inf",
    "-.inf",
    "2.0",
    "1e-3",
    "{kind: linear, start: 1, end: 2, steps: 5}",
    "[[[[[[[[]]]]]]]]",
    "{a: {b: {c: {d: 1}}}}",
    "'quoted'",
    "{",
    "!!python/object:os.system 'echo hi'",
]
NAMES = st.sampled_from(
    ["mine", "a/../../../x", "/tmp/zoo-fuzz-escape", "..", ".hidden", "a b", "ünï", "x" * 300]
) | st.text(min_size=1, max_size=30)

#: A valid tiny training tail: a command that passes every check trains 200 transitions.
TINY = [
    "--set",
    "network.hidden=[8]",
    "--set",
    "network.torso={kind: mlp, sizes: []}",
    "--set",
    "replay.min_size=50",
    "--set",
    "replay.capacity=200",
    "--set",
    "replay.batch_size=8",
    "--eval-episodes",
    "1",
    "--eval-max-steps",
    "50",
]


# ------------------------------------------------------------------------------------ sandbox


class Sandbox:
    """A folder ``root/work`` (the working directory) holding an existing run and a user's own
    folder, with what each case may write."""

    def __init__(self, root: Path):
        self.root = root
        self.work = root / "work"
        self.work.mkdir()
        self.run = self.work / "runs" / "existing"
        self.mine = self.work / "thesis"
        self.mine.mkdir()
        (self.mine / "chapter1.tex").write_text("precious")
        # files that are not spec files (issue 37): a FIFO, an empty file, a sparse 17 MB file
        self.special = self.work / "special"
        self.special.mkdir()
        os.mkfifo(self.special / "fifo.yaml")
        (self.special / "empty.yaml").write_text("")
        with (self.special / "huge.yaml").open("wb") as f:
            f.truncate(17 * 1024 * 1024)
        (self.special / "dangling").symlink_to(self.root / "nowhere")
        with contextlib.chdir(self.work):
            _existing_run(self.run)
        self.cases = 0
        self.outcomes: collections.Counter[str] = collections.Counter()

    def report(self) -> str:
        """The outcomes so far (then forgotten), e.g. ``train exit 2: 31, train exit 0: 4``."""
        text = ", ".join(f"{k}: {n}" for k, n in sorted(self.outcomes.items()))
        self.outcomes.clear()
        return text

    def protected(self) -> dict[str, bytes]:
        """The files no case may change: the existing run's and the user's folder's."""
        out = {}
        for folder in (self.run, self.mine):
            for path in sorted(folder.rglob("*")):
                if path.is_file() and path.name != ".lock":
                    out[str(path)] = path.read_bytes()
        return out

    def outside(self) -> list[str]:
        """Every path in the sandbox outside the places a case may write. The walk does not
        enter those places: they fill with the cases' runs, and a walk through them made each
        case's check longer than the last (the 600 cases at length ran past pytest's 600 s)."""
        allowed = {self.work / "runs", self.work / "comparison", self.work / "reproduce"}
        allowed |= {self.work / "new", self.work / "out"}
        found = []
        for top, dirs, files in os.walk(self.root):  # symlinks are listed, not followed
            here = Path(top)
            dirs[:] = [d for d in dirs if here / d not in allowed]
            found += [str(here / n) for n in (*dirs, *files) if here / n not in allowed]
        return sorted(found)


def _existing_run(run: Path) -> None:
    """A run that stopped before its first checkpoint, made without training: created by
    ``zoo.train`` (stopped by ``on_start``), with records appended."""

    class Created(Exception):  # noqa: N818 - a signal, not an error
        pass

    def stop(path: Path) -> None:
        raise Created

    with pytest.raises(Created):
        zoo.train(
            "dqn_cartpole",
            total_env_steps=2000,
            run_dir=run,
            progress=False,
            on_start=stop,
        )
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(20, 401, 20):
            f.write(json.dumps({"env_steps": step, "updates": 0, "games": step // 20}) + "\n")
    (run / "eval.jsonl").write_text(json.dumps({"env_steps": 200, "mean_return": 9.0}) + "\n")


def run_case(sandbox: Sandbox, argv: list[str], files: dict[str, str] | None = None) -> None:
    """Run ``zoo ARGV`` in the sandbox and check the properties."""
    protected = sandbox.protected()
    outside = sandbox.outside()
    for name, text in (files or {}).items():
        (sandbox.work / name).write_text(text, encoding="utf-8")
    try:
        code, stdout, stderr = run_cli(*argv, cwd=sandbox.work)
    except BaseException:
        pytest.fail(f"zoo {argv!r} raised:\n{traceback.format_exc()}")
    for name in files or {}:
        (sandbox.work / name).unlink()
    sandbox.cases += 1
    sandbox.outcomes[f"{argv[0]} exit {code}"] += 1
    failed_run = code == 1 and "the loss became" in stderr
    assert code in (0, 2) or failed_run, f"zoo {argv!r} exited {code}:\n{stderr[-2000:]}"
    assert "Traceback" not in stderr + stdout, stderr
    assert sandbox.protected() == protected, f"zoo {argv!r} changed a protected file"
    assert sandbox.outside() == outside, f"zoo {argv!r} wrote outside its folders"
    assert not Path("/tmp/zoo-fuzz-escape").exists()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with tempfile.TemporaryDirectory() as root:
        yield Sandbox(Path(root))


# ---------------------------------------------------------------------------- mutated specs


def _leaves(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _leaves(item, (*prefix, key))


JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["max", "double", "quantile", "categorical", "linear", "huber", "lstm"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _deeply(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = {"kind": "mlp", "sizes": value} if depth % 2 else [value]
    return value


@st.composite
def mutated_specs(draw: st.DrawFn) -> tuple[str, str]:
    """``(entry name, YAML text)`` of a catalogue entry with a few mutations."""
    base = draw(st.sampled_from(["dqn", "mdqn", "qr_dqn", "c51", "r2d2", "rainbow"]))
    data = spec.load_algorithm(base).model_dump(mode="json", serialize_as_any=True)
    data.pop("name")
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_leaves(data))
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "extra", "deep", "junk"]))
        if action == "replace":
            parent[path[-1]] = draw(
                st.sampled_from([0, -1, 1e30, -1e-9, 2.0, "abc", None, [], {}, [0], True])
            )
        elif action == "delete":
            del parent[path[-1]]
        elif action == "extra":
            parent[draw(st.text(min_size=1, max_size=10))] = draw(JUNK)
        elif action == "deep":
            parent[path[-1]] = _deeply(draw(JUNK), draw(st.integers(1, 80)))
        else:
            parent[path[-1]] = draw(JUNK)
    if draw(st.booleans()):
        data = {"extends": base, **{k: v for k, v in data.items() if draw(st.booleans())}}
    name = draw(NAMES)
    return name, yaml.safe_dump({name: data}, allow_unicode=True, width=10_000)


def _spec_commands(name: str) -> list[list[str]]:
    return [
        ["validate", "mine.yaml"],
        ["show", "mine.yaml"],
        # every check a new run makes (spec, settings, environment) but the budget's: refused
        # at replay.min_size, before anything is written
        [
            "train",
            "mine.yaml",
            "--steps",
            "50",
            "--set",
            "replay.min_size=100",
            "--set",
            "replay.capacity=200",
            "--set",
            "replay.batch_size=8",
        ],
    ]


def _check_mutated_spec(sandbox: Sandbox, case: tuple[str, str]) -> None:
    name, text = case
    for argv in _spec_commands(name):
        run_case(sandbox, argv, files={"mine.yaml": text})


def _fuzz(sandbox: Sandbox, strategy: Any, check: Any, examples: int, fixed: bool) -> int:
    """Run ``check(sandbox, case)`` on ``examples`` cases of ``strategy``; how many ran."""
    before = sandbox.cases

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=fixed,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    def property_holds(case: Any) -> None:
        check(sandbox, case)

    property_holds()
    return sandbox.cases - before


@pytest.mark.compiled
def test_fuzz_mutated_specs(sandbox):
    ran = _fuzz(sandbox, mutated_specs(), _check_mutated_spec, FAST_EXAMPLES, fixed=True)
    print(f"zoo fuzz: {ran} invocations on {FAST_EXAMPLES} mutated specs: {sandbox.report()}")
    assert ran == 3 * FAST_EXAMPLES


@pytest.mark.long
def test_fuzz_mutated_specs_at_length(sandbox):
    ran = _fuzz(sandbox, mutated_specs(), _check_mutated_spec, SLOW_EXAMPLES, fixed=False)
    print(f"zoo fuzz: {ran} invocations on {SLOW_EXAMPLES} mutated specs: {sandbox.report()}")
    assert ran == 3 * SLOW_EXAMPLES


# ----------------------------------------------------------------------- mutated command lines


def _value(draw: st.DrawFn, flag: str) -> str:
    if flag == "--stop-at-return":
        return draw(st.sampled_from(FLOAT_TEXTS))
    if flag in ("--env",):
        return draw(st.sampled_from(["CartPole-v1", "Acrobot-v1", "CartPol-v1", "", "../x"]))
    if flag == "--protocol":
        return draw(st.sampled_from(["classic", "nature_2015", "nope", ""]))
    if flag == "--loop":
        return draw(st.sampled_from(["auto", "host", "compiled", "async", "fast"]))
    if flag in ("--actor-devices", "--learner-devices"):
        return draw(st.sampled_from(["0", "1", "cpu", "0,0", "0,x", ""]))
    if flag == "--set":
        return f"{draw(st.sampled_from(SET_KEYS))}={draw(st.sampled_from(SET_VALUES))}"
    if flag == "--steps":
        return draw(st.sampled_from(STEPS_TEXTS))
    return draw(st.sampled_from(COUNT_TEXTS))


TRAIN_FLAGS = [
    "--steps",
    "--seed",
    "--num-envs",
    "--eval-every",
    "--eval-episodes",
    "--eval-max-steps",
    "--checkpoint-every",
    "--stop-at-return",
    "--env",
    "--protocol",
    "--loop",
    "--max-lag",
    "--actor-devices",
    "--learner-devices",
    "--set",
    "--set",
]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(
        st.sampled_from(
            [
                "train",
                "train",
                "train",
                "train",
                "eval",
                "compare",
                "reproduce",
                "show",
                "list",
                "validate",
                "bench",
                "bench",
            ]
        )
    )
    if command == "list":
        what = ["algorithms", "presets", "components", "torso/*", "nonsense", "", "*"]
        argv = ["list", draw(st.sampled_from(what))]
        if draw(st.booleans()):
            argv.append(draw(st.sampled_from(["mdqn*", "[", "*", "", "x" * 300])))
        return argv
    if command == "validate":
        return ["validate", draw(SPEC_PATHS)]
    if command == "bench":
        return _bench_command_line(draw)
    if command == "train":
        where = draw(st.sampled_from(["new", "new", "existing", "resume", "mine", "none"]))
        algorithm = draw(
            st.sampled_from(["dqn_cartpole", "mdqn", "qr_dqn", "nonexistent", "runs", None])
        )
        argv = ["train"] + ([algorithm] if algorithm else [])
        if where == "new":
            argv += ["--run-dir", f"new/{draw(st.integers(0, 10**9))}"]
        elif where == "existing":
            argv += ["--run-dir", "runs/existing"]
        elif where == "resume":
            argv += ["--resume", "runs/existing"]
        elif where == "mine":
            argv += ["--run-dir", "thesis"]
        for flag in draw(st.lists(st.sampled_from(TRAIN_FLAGS), max_size=5)):
            argv += [flag, _value(draw, flag)]
        if draw(st.booleans()):
            argv += ["--restart"]
        if draw(st.booleans()):
            argv += ["--no-replay-checkpoint"]
        # whatever trains, trains little: a tiny network and replay, 200 transitions at most
        argv += TINY
        if "--steps" not in argv:
            argv += ["--steps", "100"]
        return argv
    if command == "eval":
        target = draw(st.sampled_from(["runs/existing", "thesis", "nowhere", "runs"]))
        argv = ["eval", target]
        for flag in draw(st.lists(st.sampled_from(["--episodes", "--seed", "--max-steps"]))):
            argv += [flag, draw(st.sampled_from(COUNT_TEXTS))]
        return argv
    if command == "compare":
        paths = draw(
            st.lists(st.sampled_from(["runs", "runs/existing", "thesis", "nowhere"]), max_size=3)
        )
        argv = ["compare", *paths]
        if draw(st.booleans()):
            argv += ["--out", "out"]
        if draw(st.booleans()):
            argv += ["--record", draw(st.sampled_from(["ours/x", "../../x", "/abs", ""]))]
        if draw(st.booleans()):
            argv += ["--reference", draw(st.sampled_from(["cleanrl/dqn_cartpole", "dopamine/dqn"]))]
        return argv
    if command == "reproduce":
        argv = ["reproduce", draw(st.sampled_from(["dqn_cartpole", "nope", "mine.yaml"]))]
        # budgets below the preset's replay.min_size (1,000): refused before anything is written
        argv += ["--frames", draw(st.sampled_from(["-1", "0", "10", "999", "abc"]))]
        if draw(st.booleans()):
            argv += ["--seeds", draw(st.sampled_from(COUNT_TEXTS))]
        if draw(st.booleans()):
            argv += ["--games", draw(st.sampled_from(["CartPole-v1", "nope", "../x", "/abs"]))]
        return argv
    argv = ["show", draw(st.sampled_from(["dqn", "dqn_cartpole", "mdqnn", "thesis", "runs"]))]
    if draw(st.booleans()):
        argv[1] = draw(SPEC_PATHS)
    for _ in range(draw(st.integers(0, 3))):
        argv += ["--set", _value(draw, "--set")]
    return argv


#: Paths given where a spec file belongs: devices, a FIFO, an empty file, a 17 MB file, a
#: folder, a dangling link, a missing file (issue 37: each is refused, none is read).
SPEC_PATHS = st.sampled_from(
    [
        "/dev/zero",
        "/dev/null",
        "/dev/urandom",
        "special/fifo.yaml",
        "special/empty.yaml",
        "special/huge.yaml",
        "special/dangling",
        "special",
        "thesis",
        "nowhere.yaml",
        "special/fifo.yaml:mine",
    ]
)


def _bench_command_line(draw: st.DrawFn) -> list[str]:
    """``zoo bench``: its listing, its report of folders that hold no bench, and benches whose
    budgets or names are refused before anything trains."""
    kind = draw(st.sampled_from(["list", "report", "bench"]))
    if kind == "list":
        return ["bench", "--list-suites"]
    if kind == "report":
        folder = draw(st.sampled_from(["runs", "thesis", "nowhere", "special", "/dev/null"]))
        argv = ["bench", "report", folder]
        if draw(st.booleans()):
            argv += ["--out", draw(st.sampled_from(["out", "thesis", "special/fifo.yaml"]))]
        return argv
    suite = draw(st.sampled_from(["classic", "minatar", "atari100k", "nope", ""]))
    algorithms = draw(
        st.lists(st.sampled_from(["dqn", "preset:dqn_cartpole", "nope", "/dev/zero"]), max_size=2)
    )
    argv = ["bench", suite, *algorithms, "--run-dir", draw(st.sampled_from(["out/b", "thesis"]))]
    # budgets no bench can train with (or not numbers): refused before any run starts
    argv += ["--frames", draw(st.sampled_from(["-1", "0", "abc", "1e999", ""]))]
    if draw(st.booleans()):
        argv += ["--seeds", draw(st.sampled_from(COUNT_TEXTS))]
    if draw(st.booleans()):
        argv += ["--games", draw(st.sampled_from(["CartPole-v1", "nope", "../x", "/abs"]))]
    return argv


def _check_command_line(sandbox: Sandbox, argv: list[str]) -> None:
    run_case(sandbox, argv)


@pytest.mark.run
def test_fuzz_command_lines(sandbox):
    ran = _fuzz(sandbox, command_lines(), _check_command_line, FAST_EXAMPLES, fixed=True)
    print(f"zoo fuzz: {ran} command lines: {sandbox.report()}")
    assert ran == FAST_EXAMPLES


@pytest.mark.long
def test_fuzz_command_lines_at_length(sandbox):
    ran = _fuzz(sandbox, command_lines(), _check_command_line, SLOW_EXAMPLES, fixed=False)
    print(f"zoo fuzz: {ran} command lines: {sandbox.report()}")
    assert ran == SLOW_EXAMPLES
