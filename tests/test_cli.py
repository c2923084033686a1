"""The ``zoo`` command, run from a folder outside the repository.

Every command runs in-process (``zoo.cli.main``, as the console script calls it) from
``tmp_path``, so these tests also prove that the catalogue is found from any working directory.
Spec errors must come out as one line per problem with exit status 2 and never a traceback. The
tests about the process itself run one: the console script, an installed copy of the package,
and ``list``/``show``/``validate`` starting without JAX.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import yaml
from inprocess import CliResult, run_cli

import zoo
from zoo import cli, spec
from zoo.spec import AlgorithmSpec

#: Catalogue names docs/design.md names (reference losses, paper algorithms, novel compositions).
REQUIRED = {
    "dqn",
    "dqn_reg",
    "mdqn",
    "prioritized_ddqn",
    "prioritized_c51",
    "qr_dqn",
    "r2d2",
    "double_dqn",
    "c51",
    "rainbow",
    "der",
    "munchausen_qr_dqn",
    "munchausen_c51",
    "r2d2_qr",
}

#: Where ``zoo`` is imported from, so the subprocesses find the same package from any folder.
PACKAGE_ROOT = str(Path(zoo.__file__).resolve().parent.parent)


def run_zoo(*args: str, cwd: Path) -> CliResult:
    """``zoo ARGS`` in-process from ``cwd``, with no plugins."""
    with mock.patch.dict(os.environ):
        os.environ.pop("ZOO_PLUGINS", None)
        return run_cli(*args, cwd=cwd)


def assert_no_traceback(result: CliResult | subprocess.CompletedProcess[str]) -> None:
    """Errors are for users: a message, never a Python traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout


def write(folder: Path, name: str, text: str) -> Path:
    """Write dedented ``text`` to ``folder/name``."""
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def listed(stdout: str) -> dict[str, str]:
    """``NAME  summary`` lines of ``zoo list`` as a mapping."""
    rows = [line.split(maxsplit=1) for line in stdout.splitlines() if line.strip()]
    assert all(len(row) == 2 for row in rows), stdout
    return {name: summary for name, summary in rows}


# ------------------------------------------------------------------------------------- list


@pytest.mark.unit
def test_list_shows_every_catalogue_entry_with_a_one_line_summary(tmp_path: Path) -> None:
    result = run_zoo("list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = listed(result.stdout)
    assert list(rows) == spec.algorithm_names()
    assert set(rows) >= REQUIRED
    assert len(rows) >= 14
    for name, summary in rows.items():
        full = " ".join(spec.load_algorithm(name).summary.split())
        assert summary and full.startswith(summary.removesuffix(".")), name


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["list", "prioritized_*"], ["prioritized_c51", "prioritized_ddqn"]),
        (["list", "algorithms", "mdqn"], ["mdqn"]),
        (["list", "algorithms", "*qr*"], ["munchausen_qr_dqn", "qr_dqn", "r2d2_qr"]),
    ],
)
@pytest.mark.unit
def test_list_filters_by_wildcard(tmp_path: Path, args: list[str], expected: list[str]) -> None:
    result = run_zoo(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(listed(result.stdout)) == expected


@pytest.mark.unit
def test_list_components_by_axis_wildcard(tmp_path: Path) -> None:
    result = run_zoo("list", "components", "td/*", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = listed(result.stdout)
    assert set(rows) >= {"td/squared", "td/huber", "td/cross_entropy"}
    assert all(name.startswith("td/") for name in rows)
    assert all(summary.strip() for summary in rows.values())


@pytest.mark.unit
def test_list_prints_plain_text_not_docstring_markup(tmp_path: Path) -> None:
    # summaries come from docstrings, whose ``literal`` markup showed on the terminal
    result = run_zoo("list", "components", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "``" not in result.stdout
    rows = listed(result.stdout)
    assert rows["head/quantile"] == "num_quantiles quantile values per action (QR-DQN)."
    assert "``" not in run_zoo("list", cwd=tmp_path).stdout


@pytest.mark.parametrize(
    "args",
    [["list", "nothing_like_this*"], ["list", "algorithms", "zz*"], ["list", "presets", "zz*"]],
)
@pytest.mark.unit
def test_list_without_a_match_is_refused_with_a_message(tmp_path: Path, args: list[str]) -> None:
    # exit 2 like every other refusal (docs/reliability.md), with the command that lists them all
    result = run_zoo(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert "lists them all" in result.stderr
    assert result.stdout == ""
    assert "match" in result.stderr and args[-1] in result.stderr
    assert_no_traceback(result)


# ------------------------------------------------------------------------------------- show


@pytest.mark.unit
def test_show_prints_commented_yaml_that_round_trips(tmp_path: Path) -> None:
    result = run_zoo("show", "mdqn", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    commented = [line for line in lines if "  # " in line]
    assert len(commented) > len(lines) // 2, "fields carry their descriptions as comments"
    assert any("temperature: 0.03  # " in line for line in lines)
    # The comments are YAML comments: a safe loader drops them.
    data = yaml.safe_load(result.stdout)
    assert AlgorithmSpec.model_validate(data) == zoo.load_algorithm("mdqn")


@pytest.mark.parametrize("name", spec.algorithm_names())
@pytest.mark.unit
def test_show_round_trips_every_catalogue_entry(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (cheap): ``zoo show NAME`` re-validates to the same spec for every entry."""
    assert cli.main(["show", name]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert AlgorithmSpec.model_validate(data) == zoo.load_algorithm(name)


@pytest.mark.unit
def test_show_hides_the_settings_an_algorithm_never_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """PQN has no replay and no update period; a network without noise has no σ₀."""
    assert cli.main(["show", "pqn"]) == 0
    out = capsys.readouterr().out
    data = yaml.safe_load(out)
    assert "replay" not in data and "update_period" not in data["schedule"]
    assert "noisy_sigma0" not in data["network"] and "rollout" in data
    hidden = [line for line in out.splitlines() if line.startswith("# not read by this")]
    assert hidden == [
        "# not read by this algorithm, so not shown: loss.importance_eps, "
        "loss.importance_exponent, loss.priority, network.noisy_sigma0, network.shared_hidden, "
        "replay, schedule.cycle, schedule.update_period, schedule.updates_per_period"
    ]
    assert cli.main(["show", "rainbow"]) == 0  # noisy and prioritized: everything is read
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["network"]["noisy_sigma0"] == 0.5 and data["replay"]["priority_exponent"] == 0.5


@pytest.mark.unit
def test_show_of_a_preset_states_its_own_differences_and_marks_what_it_sets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pqn_atari: its differences from purejaxql (the protocol's named one filled in from the
    protocol's comparison), each field the preset sets marked with the catalogue's value, and
    the catalogue's summary and notes marked as the catalogue entry's."""
    assert cli.main(["show", "pqn_atari"]) == 0
    out = capsys.readouterr().out
    assert "# differs from its source in (4, reference.differences):" in out
    life = next(line for line in out.splitlines() if "env.protocol.life_loss_terminal:" in line)
    assert "episodic_life True" in life and "here: discount 0 on the step where lives drop" in life
    assert "  init: he_normal  # set by the preset (catalogue pqn: default); initialisation" in out
    assert "  truncation: terminal  # set by the preset (catalogue pqn: bootstrap)" in out
    notes = next(line for line in out.splitlines() if line.startswith("notes: '\"No target"))
    assert "# the catalogue entry pqn's, before the preset's settings (marked)" in notes
    assert "the protocol (not a preset) differs from mttga/purejaxql" in out
    assert "replay:" not in out.split("# resolved algorithm")[1]  # PQN reads no replay


@pytest.mark.unit
def test_a_preset_difference_must_name_both_sides_or_a_protocol_difference(
    tmp_path: Path,
) -> None:
    base = "extends: pqn_atari\nalgorithm: pqn\nreference:\n  differences:\n"
    write(tmp_path, "vague.yaml", base + "    network.torso: {why: it differs}\n")
    write(tmp_path, "wrong.yaml", base + "    env.protocol.noop_max: {}\n")
    result = run_zoo("validate", "vague.yaml", "wrong.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert_no_traceback(result)
    assert "'network.torso' needs `source` (what the source does) and `here`" in result.stderr
    assert (
        "'env.protocol.noop_max' is not a named difference of protocol 'purejaxql_atari' "
        "(it names: life_loss_terminal, evaluation)" in result.stderr
    )


@pytest.mark.unit
def test_show_applies_overrides(tmp_path: Path) -> None:
    result = run_zoo(
        "show", "dqn", "--set", "loss.n_step=3", "--set", "loss.reward_clip=null", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load(result.stdout)
    assert data["loss"]["n_step"] == 3
    assert data["loss"]["reward_clip"] is None
    expected = zoo.load_algorithm("dqn", overrides={"loss.n_step": 3, "loss.reward_clip": None})
    assert AlgorithmSpec.model_validate(data) == expected


@pytest.mark.unit
def test_show_a_user_file_from_another_folder(tmp_path: Path) -> None:
    write(tmp_path, "mine.yaml", "mine: {extends: mdqn, loss: {n_step: 3, reward_clip: null}}\n")
    result = run_zoo("show", "mine.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load(result.stdout)
    assert data["name"] == "mine"
    assert data["loss"]["n_step"] == 3
    assert data["loss"]["temperature"] == 0.03


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A ``site-packages`` folder holding zoo as ``pip install .`` lays it out: the package with
    ``algorithms.yaml`` and ``presets/`` as package data in ``zoo/_data``."""
    site = tmp_path / "site-packages"
    package = Path(zoo.__file__).resolve().parent
    shutil.copytree(package, site / "zoo", ignore=shutil.ignore_patterns("__pycache__", "_data"))
    (site / "zoo" / "_data").mkdir()
    shutil.copy(spec.catalogue_path(), site / "zoo" / "_data" / "algorithms.yaml")
    shutil.copytree(spec.presets_dir(), site / "zoo" / "_data" / "presets")
    return site


def run_installed(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``zoo ARGS`` of the copy in ``site`` (``-P``: as the console script, no cwd on the path)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("ZOO_PLUGINS", "PYTHONPATH")}
    environ["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-P", "-m", "zoo.cli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.process
def test_show_says_when_an_entry_is_the_installed_copy(installed: Path, tmp_path: Path) -> None:
    # after `pip install .`, edits to a clone's algorithms.yaml changed nothing, silently
    clone = tmp_path / "clone"
    clone.mkdir()
    text = spec.catalogue_path().read_text(encoding="utf-8")
    (clone / "algorithms.yaml").write_text(text.replace("dqn:\n", "dqn:  # edited\n", 1))
    result = run_installed(installed, "show", "dqn", cwd=clone)
    assert result.returncode == 0, result.stderr
    catalogue = installed / "zoo" / "_data" / "algorithms.yaml"
    hint = result.stdout.splitlines()[-3:]
    assert hint[0] == f"# from the installed package: {catalogue}"
    assert hint[1] == "# ./algorithms.yaml here differs from it and is not read by zoo"
    assert "take effect with an editable install (pip install -e .)" in hint[2]
    assert "a file of your own (zoo show mine.yaml:NAME, zoo train mine.yaml:NAME)" in hint[2]
    data = yaml.safe_load(result.stdout)  # the hints are YAML comments
    assert AlgorithmSpec.model_validate(data) == zoo.load_algorithm("dqn")
    # an unedited copy, or none, is not reported as different; the hint stays
    (clone / "algorithms.yaml").write_text(text)
    result = run_installed(installed, "show", "dqn", cwd=clone)
    assert "here differs from it" not in result.stdout and "pip install -e ." in result.stdout
    # a preset sharing a catalogue name: shown by name, not by a path into site-packages
    result = run_installed(installed, "show", "mdqn", cwd=clone)
    assert "# 'mdqn' is also a preset (a paper's settings): zoo show preset:mdqn" in result.stdout
    result = run_installed(installed, "show", "preset:mdqn", cwd=clone)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# preset mdqn: ")
    preset = installed / "zoo" / "_data" / "presets" / "mdqn.yaml"
    assert f"# from the installed package: {preset}" in result.stdout
    assert "edits to a clone's presets take effect with an editable install" in result.stdout


@pytest.mark.unit
def test_train_preset_prefix_trains_the_preset_not_the_catalogue_entry(tmp_path: Path) -> None:
    # `zoo train mdqn` is the catalogue entry; `preset:mdqn` the paper's settings, whose Atari
    # protocol shows which one was taken (from any folder: no path into a clone needed)
    protocol = zoo.load_preset("mdqn").env.protocol
    result = run_zoo("train", "preset:mdqn", "--env", "CartPole-v1", cwd=tmp_path)
    assert result.returncode == 2
    assert f"protocol '{protocol}' is for atari environments" in result.stderr
    assert_no_traceback(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.unit
def test_show_from_a_clone_or_editable_install_has_no_hint(tmp_path: Path) -> None:
    if spec.catalogue_path().parent.name == "_data":
        pytest.skip("these tests run against an installed copy")
    result = run_zoo("show", "dqn", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "installed package" not in result.stdout
    result = run_zoo(
        "show", "mine.yaml", cwd=write(tmp_path, "mine.yaml", "mine: {extends: dqn}\n").parent
    )
    assert "installed package" not in result.stdout


@pytest.mark.unit
def test_show_misspelt_name_suggests_without_traceback(tmp_path: Path) -> None:
    result = run_zoo("show", "mdqnn", cwd=tmp_path)
    assert result.returncode == 2
    assert "did you mean 'mdqn'" in result.stderr
    assert result.stdout == ""
    assert_no_traceback(result)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("loss.n_step=0", "loss.n_step"),
        ("loss.n_stepp=3", "did you mean 'n_step'"),
        ("loss.n_step", "expected KEY=VALUE"),
    ],
)
@pytest.mark.unit
def test_show_rejects_bad_overrides(tmp_path: Path, override: str, fragment: str) -> None:
    result = run_zoo("show", "dqn", "--set", override, cwd=tmp_path)
    assert result.returncode == 2
    assert fragment in result.stderr
    assert_no_traceback(result)


# --------------------------------------------------------------------------------- validate


@pytest.mark.unit
def test_validate_a_good_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        "good.yaml",
        """\
        three_step:
          extends: dqn
          loss: {n_step: 3, reward_clip: null}
        quantile_mdqn:
          extends: mdqn
          network: {head: {kind: quantile, num_quantiles: 32}}
        """,
    )
    result = run_zoo("validate", "good.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout and "good.yaml" in result.stdout
    assert result.stderr == ""


BAD = """\
unknown_key:
  extends: dqn
  loss: {n_stpe: 3}
wrong_type:
  extends: dqn
  replay: {batch_size: many}
out_of_range:
  extends: dqn
  loss: {discount: 1.5}
unknown_component:
  extends: dqn
  loss: {bootstrap: dubble}
cycle_a:
  extends: cycle_b
cycle_b:
  extends: cycle_a
incompatible:
  extends: c51
  loss: {td: squared}
fine:
  extends: dqn
"""

BROKEN = """\
broken:
  extends: dqn
  loss: {n_step: [1, 2
"""

#: (file, entry, field path, text) of each problem ``zoo validate`` must report, one line each.
EXPECTED_PROBLEMS = [
    ("bad.yaml", "unknown_key", "loss.n_stpe", "did you mean 'n_step'"),
    ("bad.yaml", "wrong_type", "replay.batch_size", "'many'"),
    ("bad.yaml", "out_of_range", "loss.discount", "1.5"),
    ("bad.yaml", "unknown_component", "loss.bootstrap", "did you mean 'double'"),
    ("bad.yaml", "cycle_a", "extends", "cyclic extends: cycle_a -> cycle_b -> cycle_a"),
    ("bad.yaml", "cycle_b", "extends", "cyclic extends: cycle_b -> cycle_a -> cycle_b"),
    ("bad.yaml", "incompatible", "loss.td", "cross_entropy"),
]


@pytest.mark.unit
def test_validate_of_a_preset_says_what_it_checked_and_refuses_an_unknown_protocol(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "mine.yaml",
        "extends: dqn_cartpole\nalgorithm: dqn\nenv: {protocol: nature_2051}\n",
    )
    result = run_zoo("validate", "preset:dqn_cartpole", "mine.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert_no_traceback(result)
    assert result.stdout.startswith(
        "preset:dqn_cartpole: ok (preset: its fields and protocol, and its algorithm's every field"
    )
    assert "env.protocol" in result.stderr and "unknown protocol 'nature_2051'" in result.stderr
    assert "nature_2015" in result.stderr  # the known ones are listed


@pytest.mark.unit
def test_validate_reports_every_problem_one_line_each(tmp_path: Path) -> None:
    write(tmp_path, "good.yaml", "mine: {extends: dqn}\n")
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "broken.yaml").write_text(BROKEN)
    result = run_zoo("validate", "good.yaml", "bad.yaml", "broken.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert_no_traceback(result)
    # it says what it checked, and what waits for a run
    assert (
        "good.yaml: ok (1 entry: every field, the cross-field rules of every axis, the layers "
        "against this machine's memory; the environment, its observation shapes and the "
        "replay's memory are checked when a run starts)\n" in result.stdout
    )
    lines = result.stderr.splitlines()
    problems = len(EXPECTED_PROBLEMS) + 1  # + the malformed YAML of broken.yaml
    assert len(lines) == problems + 1, result.stderr
    assert lines[-1] == f"{problems} problems found"
    for source, entry, path, text in EXPECTED_PROBLEMS:
        prefix = f"{source}: {entry}: {path}: "
        hits = [line for line in lines if line.startswith(prefix)]
        assert len(hits) == 1, (prefix, result.stderr)
        assert text in hits[0], hits[0]
    (yaml_line,) = [line for line in lines if line.startswith("broken.yaml: ")]
    assert "malformed YAML" in yaml_line and "line 4" in yaml_line
    assert not any(line.startswith("bad.yaml: fine:") for line in lines)


@pytest.mark.unit
def test_validate_a_missing_file(tmp_path: Path) -> None:
    result = run_zoo("validate", "missing.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["missing.yaml: no such file", "1 problem found"]


@pytest.mark.unit
def test_validate_a_non_string_entry_name(tmp_path: Path) -> None:
    write(tmp_path, "numbers.yaml", "1: {extends: dqn}\n")
    result = run_zoo("validate", "numbers.yaml", cwd=tmp_path)
    assert_no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "1 problem found"


# ------------------------------------------------------------------------- startup and usage


@pytest.mark.process
def test_list_show_and_validate_do_not_import_jax(tmp_path: Path) -> None:
    """``zoo list``/``show``/``validate`` stay instant: nothing on their path imports JAX."""
    write(tmp_path, "good.yaml", "mine: {extends: mdqn, network: {head: quantile}}\n")
    write(tmp_path, "bad.yaml", "mine: {extends: mdqn, loss: {td: hubber}}\n")
    program = textwrap.dedent(
        """\
        import contextlib, io, json, sys
        import zoo.cli
        out = {}
        for argv in (["list"], ["list", "algorithms", "m*"], ["show", "r2d2"],
                     ["validate", "good.yaml"], ["validate", "bad.yaml"]):
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                rc = zoo.cli.main(argv)
            out[" ".join(argv)] = [rc, "jax" in sys.modules]
        print(json.dumps(out))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == {
        "list": [0, False],
        "list algorithms m*": [0, False],
        "show r2d2": [0, False],
        "validate good.yaml": [0, False],
        "validate bad.yaml": [2, False],
    }


@pytest.mark.unit
def test_version(tmp_path: Path) -> None:
    result = run_zoo("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"zoo {zoo.__version__}"


@pytest.mark.unit
def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    result = run_zoo(cwd=tmp_path)
    assert result.returncode == 2
    assert "usage: zoo" in result.stderr
    assert_no_traceback(result)


@pytest.mark.unit
def test_unknown_command_is_a_usage_error(tmp_path: Path) -> None:
    result = run_zoo("trian", cwd=tmp_path)
    assert result.returncode == 2
    assert "usage: zoo" in result.stderr and "'trian'" in result.stderr
    assert_no_traceback(result)


@pytest.mark.process
def test_console_script(tmp_path: Path) -> None:
    """The installed ``zoo`` script (next to this interpreter) is the same command."""
    script = shutil.which("zoo", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("no `zoo` console script next to this interpreter")
    result = subprocess.run(
        [script, "list", "mdqn"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert list(listed(result.stdout)) == ["mdqn"]


# ------------------------------------------------------------------------------------- help

#: ``zoo train|reproduce|bench --help`` as recorded before the run settings became one table
#: (issue 35), bench's with report's --include since (issue 40) and train's with --seeds (issue
#: 39), at 100 columns; argparse's layout is Python 3.11's (the version CI runs).
HELP_FILES = Path(__file__).parent / "help"


@pytest.mark.unit
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="help recorded with Python 3.11")
@pytest.mark.parametrize("command", ["train", "reproduce", "bench"])
def test_help_of_the_run_commands_is_unchanged(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out == (HELP_FILES / f"{command}.txt").read_text()
