"""The registry's contract, and a user's own component end to end (in-process and via the CLI).

A user component is one pydantic config plus one registered factory; after that it validates from
YAML, builds into a loss and shows in error messages, exactly like a built-in. It enters only
through an explicit import (``--plugin`` or ``ZOO_PLUGINS``), never from a YAML file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo import registry, spec
from zoo.spec import SpecError

#: Built-in names each axis must offer (more may be added).
BUILTINS = {
    "bootstrap": {"max", "double", "soft"},
    "head": {"q", "categorical", "quantile", "iqn", "fqf"},
    "head_loss": {"q", "categorical", "quantile", "iqn", "fqf"},
    "torso": {"auto", "mlp", "nature_cnn", "impala_cnn", "minatar_cnn"},
    "core": {"lstm"},
    "value_transform": {"identity", "signed_hyperbolic"},
    "regularizer": {"none", "q_value"},
    "priority": {"abs_td", "abs_loss", "max_mean"},
    "td": {"squared", "huber", "cross_entropy"},
    "optimizer": {"adam", "adamw", "rmsprop", "radam"},
    "schedule": {"constant", "linear", "exponential", "geometric"},
    "augmentation": {"random_shift"},
    "auxiliary": {"spr"},
}

MINE = "mine: {extends: dqn, loss: {td: {kind: log_cosh, scale: 2.0}}}\n"

#: A plugin module as a user would write it; JAX is imported only when the loss is built, so
#: ``zoo --plugin myplug validate`` stays as cheap as without the plugin.
PLUGIN = '''\
"""A user's plugin: the log-cosh TD loss."""
from typing import Literal

import zoo
from zoo import registry


class LogCosh(zoo.spec.Component):
    """scale · log(cosh(td))."""

    kind: Literal["log_cosh"] = "log_cosh"
    scale: float = 1.0


@registry.register("td", "log_cosh", config=LogCosh)
def log_cosh(config):
    """scale · log(cosh(td)): quadratic near 0, linear in the tails."""
    import jax.numpy as jnp

    scale = float(config.scale)
    return lambda x: scale * jnp.log(jnp.cosh(x))
'''


# ------------------------------------------------------------------------------- the tables


@pytest.mark.unit
def test_every_axis_exists() -> None:
    assert set(registry.AXES) == {*BUILTINS, "replay"}
    assert all(description.strip() for description in registry.AXES.values())


@pytest.mark.parametrize("axis", sorted(BUILTINS))
@pytest.mark.unit
def test_names_lists_builtins_with_wildcards(axis: str) -> None:
    everything = registry.names(axis)
    assert everything == sorted(everything)
    assert BUILTINS[axis] <= set(everything)
    assert registry.names(axis, "*") == everything
    for name in BUILTINS[axis]:
        assert name in registry.names(axis, name[0] + "*")
        assert registry.names(axis, name) == [name]
        assert registry.entry(axis, name).axis == axis
        assert callable(registry.get(axis, name))
    assert registry.names(axis, "no_such_component*") == []


@pytest.mark.unit
def test_replay_axis_exists() -> None:
    """The replay kinds are registered like every other axis."""
    assert "replay" in registry.AXES
    assert registry.names("replay") == ["prioritized", "uniform"]
    # the spec knows the built-in kinds without importing JAX; it must agree with the registry
    from zoo.spec.replay import BUILTIN_KINDS

    assert sorted(BUILTIN_KINDS) == registry.names("replay")
    for name, by_priority in BUILTIN_KINDS.items():
        assert registry.get("replay", name)(None).prioritized is by_priority


@pytest.mark.unit
def test_entries_carry_their_docstring_summary() -> None:
    found = registry.entry("td", "huber")
    assert (found.axis, found.name) == ("td", "huber")
    assert found.summary and "\n" not in found.summary
    assert found.summary == (found.factory.__doc__ or "").strip().splitlines()[0]


@pytest.mark.unit
def test_list_components_matches_axis_slash_name_or_name() -> None:
    by_axis = [(e.axis, e.name) for e in registry.list_components("td/*")]
    assert set(by_axis) >= {("td", n) for n in BUILTINS["td"]}
    assert all(axis == "td" for axis, _ in by_axis)
    by_name = {(e.axis, e.name) for e in registry.list_components("quantile")}
    assert by_name == {("head", "quantile"), ("head_loss", "quantile")}


@pytest.mark.unit
def test_unknown_name_suggests_and_lists_registered_names() -> None:
    with pytest.raises(registry.UnknownComponentError) as excinfo:
        registry.get("td", "hubber")
    message = str(excinfo.value)
    assert "did you mean 'huber'" in message
    assert "cross_entropy, huber, squared" in message
    assert (excinfo.value.axis, excinfo.value.name) == ("td", "hubber")
    assert isinstance(excinfo.value, KeyError)  # a lookup failure, catchable as one


@pytest.mark.parametrize(
    "call",
    [
        lambda: registry.names("tdd"),
        lambda: registry.get("tdd", "huber"),
        lambda: registry.register("tdd", "x"),
    ],
)
@pytest.mark.unit
def test_unknown_axis_suggests_and_lists_axes(call: Callable[[], object]) -> None:
    with pytest.raises(registry.UnknownComponentError) as excinfo:
        call()
    message = str(excinfo.value)
    assert "did you mean 'td'" in message
    assert all(axis in message for axis in registry.AXES)


@pytest.mark.unit
def test_no_suggestion_for_a_name_far_from_all() -> None:
    with pytest.raises(registry.UnknownComponentError) as excinfo:
        registry.get("bootstrap", "zzzzzzzz")
    assert "did you mean" not in str(excinfo.value)
    assert "double, max, soft" in str(excinfo.value)


@pytest.mark.unit
def test_suggest() -> None:
    assert registry.suggest("dubble", ["max", "double", "soft"]) == "double"
    assert registry.suggest("xyz", ["max", "double", "soft"]) is None


# ------------------------------------------------------------------- registering and removing


@pytest.fixture
def temporary_name() -> Iterator[str]:
    """A test-only td name, unregistered afterwards whatever the test did."""
    name = "_test_only_td"
    yield name
    if name in registry.names("td", load=False):
        registry.unregister("td", name)


@pytest.mark.unit
def test_registering_a_name_twice_is_an_error(temporary_name: str) -> None:
    def first(config: object) -> Callable[[jax.Array], jax.Array]:
        """The first one."""
        return jnp.abs

    def second(config: object) -> Callable[[jax.Array], jax.Array]:
        """An impostor."""
        return jnp.square

    assert registry.register("td", temporary_name)(first) is first
    with pytest.raises(registry.DuplicateComponentError, match="already registered"):
        registry.register("td", temporary_name)(second)
    assert registry.get("td", temporary_name) is first  # never silently replaced


@pytest.mark.unit
def test_registering_a_builtin_name_is_an_error() -> None:
    registry.names("td")  # built-ins loaded
    with pytest.raises(registry.DuplicateComponentError, match="'huber'"):
        registry.register("td", "huber")(lambda config: jnp.abs)
    assert registry.get("td", "huber").__module__ == "zoo.losses.components"


@pytest.mark.unit
def test_unregister_removes_and_returns_the_entry(temporary_name: str) -> None:
    registry.register("td", temporary_name)(lambda config: jnp.abs)
    removed = registry.unregister("td", temporary_name)
    assert (removed.axis, removed.name) == ("td", temporary_name)
    assert temporary_name not in registry.names("td")
    with pytest.raises(registry.UnknownComponentError):
        registry.unregister("td", temporary_name)
    registry.register("td", temporary_name)(lambda config: jnp.square)  # the name is free again


# ------------------------------------------------------------ a user component, end to end


class LogCosh(zoo.spec.Component):
    """scale · log(cosh(td))."""

    kind: Literal["log_cosh"] = "log_cosh"
    scale: float = 1.0


def log_cosh(config: LogCosh) -> Callable[[jax.Array], jax.Array]:
    """scale · log(cosh(td)): quadratic near 0, linear in the tails."""
    scale = config.scale
    return lambda x: scale * jnp.log(jnp.cosh(x))


@pytest.fixture
def log_cosh_td() -> Iterator[type[LogCosh]]:
    """``td: log_cosh`` registered for one test, removed afterwards."""
    registry.register("td", "log_cosh", config=LogCosh)(log_cosh)
    try:
        yield LogCosh
    finally:
        registry.unregister("td", "log_cosh")


class Linear(eqx.Module):
    """Q(s) = W s, on one observation (the Equinox convention)."""

    W: jax.Array

    def __call__(self, obs: jax.Array, *, key: jax.Array | None = None) -> zoo.NetworkOutput:
        return zoo.NetworkOutput(q_values=self.W @ obs)


@pytest.mark.compiled
def test_user_component_validates_and_builds_a_loss(
    tmp_path: Path, log_cosh_td: type[LogCosh]
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(MINE)
    loaded = zoo.load_algorithm(path)
    assert isinstance(loaded.loss.td, log_cosh_td)
    assert loaded.loss.td.scale == 2.0
    assert "kind: log_cosh" in zoo.describe(loaded)
    assert loaded.loss.bootstrap.kind == "max" and loaded.loss.reward_clip == 1.0

    rng = np.random.default_rng(0)
    batch_size, obs_dim, num_actions = 6, 3, 2
    w_online = rng.normal(size=(num_actions, obs_dim)).astype(np.float32)
    w_target = rng.normal(size=(num_actions, obs_dim)).astype(np.float32)
    obs = rng.normal(size=(batch_size, obs_dim)).astype(np.float32)
    next_obs = rng.normal(size=(batch_size, obs_dim)).astype(np.float32)
    action = np.array([0, 1, 1, 0, 1, 0], np.int32)
    reward = np.array([3.0, -2.5, 0.4, -0.3, 1.0, 0.0], np.float32)  # some beyond ±1
    discount = np.array([1.0, 0.0, 1.0, 1.0, 0.5, 1.0], np.float32)
    batch = zoo.Transition(
        observation=jnp.asarray(obs),
        action=jnp.asarray(action),
        reward=jnp.asarray(reward),
        discount=jnp.asarray(discount),
        next_observation=jnp.asarray(next_obs),
        probability=jnp.full((batch_size,), 1.0 / batch_size),
    )
    loss_fn = zoo.build_loss(loaded)
    loss, aux = loss_fn(
        online=Linear(jnp.asarray(w_online)),
        target=Linear(jnp.asarray(w_target)),
        batch=batch,
        key=jax.random.PRNGKey(0),
        step=0,
    )

    q_sa = (obs @ w_online.T)[np.arange(batch_size), action].astype(np.float64)
    v_next = (next_obs @ w_target.T).max(axis=1).astype(np.float64)
    td = np.clip(reward, -1.0, 1.0) + 0.99 * discount * v_next - q_sa
    expected = np.mean(2.0 * np.log(np.cosh(td)))
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    assert aux.priorities is None  # uniform replay
    np.testing.assert_allclose(float(aux.metrics["abs_td"]), np.abs(td).mean(), rtol=1e-5)


@pytest.mark.unit
def test_user_component_misspelt_suggests_it(tmp_path: Path, log_cosh_td: type[LogCosh]) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(MINE.replace("log_cosh", "log_cosj"))
    with pytest.raises(SpecError) as excinfo:
        zoo.load_algorithm(path)
    (problem,) = excinfo.value.problems
    assert (problem.entry, problem.path) == ("mine", "loss.td")
    assert "did you mean 'log_cosh'" in problem.message
    allowed = problem.message.partition("Allowed: ")[2].rstrip(".").split(", ")
    assert set(allowed) >= {"log_cosh", "squared", "huber", "cross_entropy"}


@pytest.mark.unit
def test_user_component_fields_are_validated(tmp_path: Path, log_cosh_td: type[LogCosh]) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(MINE.replace("scale: 2.0", "scale: two, sacle: 1.0"))
    with pytest.raises(SpecError) as excinfo:
        zoo.load_algorithm(path)
    paths = sorted(p.path for p in excinfo.value.problems)
    assert paths == ["loss.td.sacle", "loss.td.scale"]


@pytest.mark.unit
def test_an_unregistered_user_component_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(MINE)
    with pytest.raises(SpecError, match="unknown value 'log_cosh'"):
        zoo.load_algorithm(path)


# ------------------------------------------------------------------- the same through the CLI


def run_zoo(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m zoo.cli ARGS`` in ``cwd`` with the plugin settings of ``env``.

    ``env["PLUGIN_PATH"]`` goes in front of the ``PYTHONPATH`` that finds ``zoo`` itself.
    """
    env = dict(env)
    environ = {k: v for k, v in os.environ.items() if k != "ZOO_PLUGINS"}
    package_root = str(Path(zoo.__file__).resolve().parent.parent)
    paths = (env.pop("PLUGIN_PATH", None), package_root, os.environ.get("PYTHONPATH"))
    environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "zoo.cli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """A folder holding ``myplug.py`` and ``mine.yaml``; the command runs from another one."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "myplug.py").write_text(PLUGIN)
    (folder / "mine.yaml").write_text(MINE)
    (tmp_path / "cwd").mkdir()
    return folder


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--plugin", "myplug"], {}),
        ([], {"ZOO_PLUGINS": "myplug"}),
        ([], {"ZOO_PLUGINS": " json , myplug "}),
    ],
    ids=["--plugin", "ZOO_PLUGINS", "ZOO_PLUGINS-list"],
)
@pytest.mark.process
def test_cli_plugin_makes_a_component_usable(
    plugin_dir: Path, args: list[str], env: dict[str, str]
) -> None:
    mine = str(plugin_dir / "mine.yaml")
    result = run_zoo(
        *args,
        "validate",
        mine,
        cwd=plugin_dir.parent / "cwd",
        env={"PLUGIN_PATH": str(plugin_dir), **env},
    )
    assert result.returncode == 0, result.stderr
    assert f"{mine}: ok (1 entry: every field, the cross-field rules" in result.stdout


@pytest.mark.process
def test_cli_without_the_plugin_the_component_is_unknown(plugin_dir: Path) -> None:
    mine = str(plugin_dir / "mine.yaml")
    result = run_zoo(
        "validate", mine, cwd=plugin_dir.parent / "cwd", env={"PLUGIN_PATH": str(plugin_dir)}
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{mine}: mine: loss.td: unknown value 'log_cosh'")
    assert "Allowed: cross_entropy, huber, squared." in first


@pytest.mark.process
def test_cli_shows_a_plugin_component(plugin_dir: Path) -> None:
    result = run_zoo(
        "--plugin",
        "myplug",
        "show",
        str(plugin_dir / "mine.yaml"),
        cwd=plugin_dir.parent / "cwd",
        env={"PLUGIN_PATH": str(plugin_dir)},
    )
    assert result.returncode == 0, result.stderr
    assert "kind: log_cosh" in result.stdout and "scale: 2.0" in result.stdout


def run_console(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``zoo ARGS`` as the installed console script runs it: ``python -P`` puts neither the
    working directory nor a script's folder on ``sys.path`` (``python -m`` would add the working
    directory and hide the difference)."""
    environ = {k: v for k, v in os.environ.items() if k != "ZOO_PLUGINS"}
    package_root = str(Path(zoo.__file__).resolve().parent.parent)
    environ["PYTHONPATH"] = package_root
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-P", "-m", "zoo.cli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--plugin", "myplug"], {}), ([], {"ZOO_PLUGINS": "myplug"})],
    ids=["--plugin", "ZOO_PLUGINS"],
)
@pytest.mark.process
def test_cli_finds_a_plugin_in_the_working_directory(
    plugin_dir: Path, args: list[str], env: dict[str, str]
) -> None:
    # the README's example, run where myplug.py lies, used to say "No module named 'myplug'"
    # unless PYTHONPATH=. was set
    result = run_console(*args, "validate", "mine.yaml", cwd=plugin_dir, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("mine.yaml: ok (1 entry: every field, ")
    result = run_console(*args, "list", "components", "td/*", cwd=plugin_dir, env=env)
    assert result.returncode == 0, result.stderr
    assert "td/log_cosh" in result.stdout


@pytest.mark.process
def test_cli_imports_a_plugin_given_as_a_file(plugin_dir: Path) -> None:
    cwd = plugin_dir.parent / "cwd"
    result = run_console(
        "--plugin", "../plugins/myplug.py", "validate", "../plugins/mine.yaml", cwd=cwd, env={}
    )
    assert result.returncode == 0, result.stderr
    assert "ok (1 entry: " in result.stdout


@pytest.mark.process
def test_cli_a_plugin_elsewhere_is_not_found_and_says_where_it_looked(plugin_dir: Path) -> None:
    cwd = plugin_dir.parent / "cwd"
    result = run_console("--plugin", "myplug", "validate", "../plugins/mine.yaml", cwd=cwd, env={})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "cannot import plugin module 'myplug'" in result.stderr
    assert f"in the working directory {cwd}" in result.stderr
    assert "--plugin path/to/myplug.py" in result.stderr


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--plugin", "does_not_exist"], {}), ([], {"ZOO_PLUGINS": "does_not_exist"})],
    ids=["--plugin", "ZOO_PLUGINS"],
)
@pytest.mark.process
def test_cli_missing_plugin_is_a_clear_error(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    result = run_zoo(*args, "list", cwd=tmp_path, env=env)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "cannot import plugin module 'does_not_exist'" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------ loading never runs code

EVIL = [
    'mine: !!python/object/apply:os.system ["echo pwned > {pwned}"]\n',
    "mine:\n  extends: dqn\n  loss:\n"
    '    n_step: !!python/object/apply:os.system ["echo pwned > {pwned}"]\n',
    "mine: !!python/object/new:subprocess.Popen [[sh, -c, 'echo pwned > {pwned}']]\n",
    "mine: !!python/name:os.system\n",
]


@pytest.mark.parametrize("text", EVIL, ids=["apply", "nested-apply", "new", "name"])
@pytest.mark.unit
def test_yaml_python_tags_are_refused(tmp_path: Path, text: str) -> None:
    pwned = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(text.format(pwned=pwned))
    for load in (zoo.load_algorithm, spec.load_algorithms_file, spec.read_yaml):
        with pytest.raises(SpecError) as excinfo:
            load(path)
        (problem,) = excinfo.value.problems
        assert problem.source == str(path)
        assert "malformed YAML" in problem.message
        assert "could not determine a constructor" in problem.message
    assert not pwned.exists()


@pytest.mark.unit
def test_override_values_never_run_code(tmp_path: Path) -> None:
    """``--set`` values are YAML too, read with the same safe loader."""
    pwned = tmp_path / "pwned"
    with pytest.raises(SpecError, match="could not determine a constructor"):
        spec.parse_overrides([f"loss.n_step=!!python/object/apply:os.system ['touch {pwned}']"])
    assert not pwned.exists()


@pytest.mark.process
def test_cli_refuses_python_tags(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(EVIL[0].format(pwned=pwned))
    result = run_zoo("validate", "evil.yaml", cwd=tmp_path, env={})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("evil.yaml: malformed YAML")
    assert not pwned.exists()


@pytest.mark.process
def test_yaml_text_cannot_load_a_plugin(tmp_path: Path) -> None:
    """Naming a module in a file imports nothing: components come only from explicit plugins."""
    (tmp_path / "sneaky.py").write_text(PLUGIN + "\nopen('imported', 'w').close()\n")
    (tmp_path / "mine.yaml").write_text(
        "mine: {extends: dqn, plugin: sneaky, loss: {td: {kind: sneaky.log_cosh}}}\n"
    )
    result = run_zoo("validate", "mine.yaml", cwd=tmp_path, env={"PLUGIN_PATH": str(tmp_path)})
    assert result.returncode == 2
    assert "unknown field 'plugin'" in result.stderr
    assert "unknown value 'sneaky.log_cosh'" in result.stderr
    assert not (tmp_path / "imported").exists()


@pytest.mark.process
def test_a_plugin_cannot_claim_a_builtin_name(tmp_path: Path) -> None:
    (tmp_path / "shadow.py").write_text(
        "from zoo import registry\nregistry.register('td', 'huber')(lambda config: abs)\n"
    )
    result = run_zoo(
        "--plugin",
        "shadow",
        "list",
        "components",
        "td/*",
        cwd=tmp_path,
        env={"PLUGIN_PATH": str(tmp_path)},
    )
    assert "Traceback" not in result.stderr
    assert result.returncode != 0
    assert "'huber' is already registered" in result.stderr
