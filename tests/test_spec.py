"""The spec: loading, extends, overrides, and every kind of bad input giving a readable error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from zoo import spec
from zoo.spec import SpecError

pytestmark = pytest.mark.unit

REFERENCE = ["dqn", "dqn_reg", "mdqn", "prioritized_ddqn", "prioritized_c51", "qr_dqn", "r2d2"]
PAPERS = ["double_dqn", "c51", "rainbow", "der", "iqn", "m_iqn", "drq_eps"]
NOVEL = ["munchausen_qr_dqn", "munchausen_c51", "r2d2_qr", "r2d2_iqn"]


def write(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(excinfo: pytest.ExceptionInfo[SpecError]) -> list[str]:
    return [str(p) for p in excinfo.value.problems]


# ------------------------------------------------------------------------------- the catalogue


def test_catalogue_has_every_required_entry_with_a_summary():
    names = spec.algorithm_names()
    for name in REFERENCE + PAPERS + NOVEL:
        assert name in names
        entry = spec.load_algorithm(name)
        assert entry.name == name
        assert len(entry.summary) > 40, name
        assert entry.paper and entry.paper.startswith("https://"), name


def test_wildcard_listing():
    assert spec.algorithm_names("prioritized_*") == ["prioritized_c51", "prioritized_ddqn"]
    assert spec.algorithm_names("nothing*") == []


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("dqn", {"loss.td.kind": "squared", "loss.td.scale": 1.0, "loss.reward_clip": 1.0}),
        (
            "dqn_reg",
            {"loss.td.scale": 0.5, "loss.reward_clip": None, "loss.regularizer.coeff": 0.1},
        ),
        (
            "mdqn",
            {
                "loss.temperature": 0.03,
                "loss.munchausen.alpha": 0.9,
                "loss.munchausen.clip_min": -1.0,
                "loss.td.delta": 1.0,
            },
        ),
        ("prioritized_ddqn", {"loss.bootstrap.kind": "double", "replay.priority_exponent": 0.6}),
        ("qr_dqn", {"network.head.num_quantiles": 200, "loss.reward_clip": None}),
        (
            "r2d2",
            {
                "loss.discount": 0.997,
                "loss.n_step": 5,
                "loss.importance_eps": 1e-6,
                "loss.priority.eta": 0.9,
                "replay.priority_exponent": 0.9,
                "replay.sequence.burn_in": 40,
                "replay.sequence.trace_length": 80,
                "replay.sequence.period": 40,
                "schedule.target_update_period": 2500,
                "loss.value_transform.eps": 1e-3,
            },
        ),
    ],
)
def test_reference_hyperparameters(name, values):
    entry = spec.load_algorithm(name)
    for dotted, expected in values.items():
        value = entry
        for part in dotted.split("."):
            value = getattr(value, part)
        assert value == expected, dotted


def test_resolved_entries_are_frozen():
    entry = spec.load_algorithm("dqn")
    with pytest.raises(Exception, match="frozen"):
        entry.loss.n_step = 3  # type: ignore[misc]


# ------------------------------------------------------------------------ extends and overrides


def test_dotted_overrides_are_typed_and_validated():
    entry = spec.load_algorithm(
        "dqn", overrides=spec.parse_overrides(["loss.n_step=3", "loss.reward_clip=null"])
    )
    assert entry.loss.n_step == 3 and isinstance(entry.loss.n_step, int)
    assert entry.loss.reward_clip is None
    entry = spec.load_algorithm("double_dqn", overrides={"loss.td.delta": 2.0})
    assert entry.loss.td.kind == "huber" and entry.loss.td.delta == 2.0
    # A bare name in the base becomes {kind: name}, so a parameter override merges into it.
    entry = spec.load_algorithm(
        "dqn",
        overrides={
            "loss.value_transform.eps": 0.01,
            "loss.value_transform.kind": "signed_hyperbolic",
        },
    )
    assert entry.loss.value_transform.eps == 0.01


def test_changing_kind_replaces_the_component_whole():
    # double_dqn's td is huber{delta}; switching to squared must not carry delta along.
    entry = spec.load_algorithm("double_dqn", overrides={"loss.td": {"kind": "squared"}})
    assert entry.loss.td.kind == "squared" and entry.loss.td.scale == 1.0


def test_extends_deep_merges_and_lists_replace(tmp_path):
    path = write(
        tmp_path,
        """
        small:
          extends: dqn
          summary: small dqn
          network: {hidden: [64]}
          loss: {discount: 0.9}
        smaller:
          extends: small
          network: {hidden: [8, 8]}
        """,
    )
    specs = spec.load_algorithms_file(path)
    assert specs["small"].network.hidden == [64]
    assert specs["smaller"].network.hidden == [8, 8]
    assert specs["smaller"].loss.discount == 0.9  # inherited through the chain
    assert specs["smaller"].optimizer.learning_rate.value == 6.25e-5  # from the catalogue
    assert spec.load_algorithm(f"{path}:smaller") == specs["smaller"]


def test_user_entry_may_extend_the_catalogue_entry_of_its_own_name(tmp_path):
    path = write(tmp_path, "dqn:\n  extends: dqn\n  loss: {discount: 0.95}\n")
    assert spec.load_algorithm(path).loss.discount == 0.95


def test_null_resolves_to_the_neutral_component(tmp_path):
    path = write(
        tmp_path,
        """
        plain:
          extends: r2d2
          network: {core: null}
          replay: {sequence: null}
          loss: {value_transform: null, regularizer: null, priority: null, n_step: 1}
        """,
    )
    entry = spec.load_algorithm(path)
    assert entry.loss.value_transform.kind == "identity"
    assert entry.loss.regularizer.kind == "none"
    assert entry.loss.priority.kind == "abs_td"
    assert entry.network.core is None


def test_schedules_accept_a_number_or_a_mapping():
    entry = spec.load_algorithm("dqn", overrides={"schedule.epsilon": 0.05})
    assert entry.schedule.epsilon.kind == "constant" and entry.schedule.epsilon.value == 0.05
    entry = spec.load_algorithm("prioritized_ddqn")
    beta = entry.loss.importance_exponent
    assert (beta.kind, beta.start, beta.end) == ("linear", 0.4, 1.0)


def test_describe_round_trips_every_field():
    text = spec.describe(spec.load_algorithm("rainbow"))
    assert "n_step: 3  # n of n-step returns" in text
    assert "noisy: true" in text
    # every field of every model carries a description
    for model in (
        spec.AlgorithmSpec,
        spec.NetworkSpec,
        spec.LossSpec,
        spec.ReplaySpec,
        spec.SequenceSpec,
        spec.ScheduleSpec,
        spec.Adam,
        spec.RmsProp,
        spec.CategoricalHead,
        spec.LinearSchedule,
        spec.Munchausen,
    ):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


# ------------------------------------------------------------------------------- bad input


def test_malformed_yaml(tmp_path):
    path = write(tmp_path, "x: {loss: [1, 2\n")
    with pytest.raises(SpecError) as e:
        spec.load_algorithms_file(path)
    (message,) = problems(e)
    assert str(path) in message and "malformed YAML: line 2" in message


def test_duplicate_key_is_refused(tmp_path):
    path = write(tmp_path, "x:\n  extends: dqn\nx:\n  extends: mdqn\n")
    with pytest.raises(SpecError, match="duplicate key 'x'"):
        spec.load_algorithms_file(path)


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        spec.load_algorithm(tmp_path / "absent.yaml")
    path = write(tmp_path, "- a\n- b\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        spec.load_algorithm(path)


def test_unknown_key_suggests_the_closest(tmp_path):
    path = write(tmp_path, "x:\n  extends: dqn\n  loss: {n_sep: 3}\n")
    with pytest.raises(SpecError) as e:
        spec.load_algorithm(path)
    (message,) = problems(e)
    assert message.startswith(f"{path}: x: loss.n_sep: unknown field 'n_sep'")
    assert "did you mean 'n_step'?" in message and "Allowed: bootstrap," in message


def test_unknown_nested_key_in_a_component(tmp_path):
    path = write(tmp_path, "x:\n  extends: double_dqn\n  loss: {td: {kind: huber, dleta: 1}}\n")
    with pytest.raises(SpecError) as e:
        spec.load_algorithm(path)
    assert problems(e) == [
        f"{path}: x: loss.td.dleta: unknown field 'dleta'; did you mean 'delta'? "
        "Allowed: delta, kind."
    ]


def test_wrong_type(tmp_path):
    path = write(tmp_path, "x:\n  extends: dqn\n  loss: {n_step: three}\n")
    with pytest.raises(SpecError) as e:
        spec.load_algorithm(path)
    (message,) = problems(e)
    assert "x: loss.n_step: Input should be a valid integer" in message
    assert "(got 'three')" in message


def test_value_out_of_range():
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides={"loss.discount": 1.5, "replay.batch_size": 0})
    text = "\n".join(problems(e))
    assert "loss.discount: Input should be less than or equal to 1 (got 1.5)" in text
    assert "replay.batch_size: Input should be greater than or equal to 1 (got 0)" in text


def test_unknown_algorithm_and_component_names():
    with pytest.raises(SpecError, match="unknown algorithm 'mdqnn'; did you mean 'mdqn'"):
        spec.load_algorithm("mdqnn")
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides={"loss.bootstrap": "dubble"})
    assert problems(e)[0].endswith(
        "loss.bootstrap: unknown value 'dubble'; did you mean 'double'? Allowed: double, max, soft."
    )
    with pytest.raises(SpecError, match="unknown value 'adamv'; did you mean 'adam'"):
        spec.load_algorithm("dqn", overrides={"optimizer.kind": "adamv"})


def test_unknown_extends_target(tmp_path):
    path = write(tmp_path, "x:\n  extends: dqm\n")
    with pytest.raises(SpecError, match="extends: unknown entry 'dqm'; did you mean 'dqn'"):
        spec.load_algorithm(path)


def test_cyclic_extends(tmp_path):
    path = write(tmp_path, "a: {extends: b}\nb: {extends: c}\nc: {extends: a}\n")
    with pytest.raises(SpecError) as e:
        spec.load_algorithms_file(path)
    assert f"{path}: a: extends: cyclic extends: a -> b -> c -> a" in problems(e)
    self_cycle = write(tmp_path, "a: {extends: a}\n", "self.yaml")
    # an entry naming itself extends the catalogue, which has no `a`
    with pytest.raises(SpecError, match="an entry cannot extend itself"):
        spec.load_algorithm(self_cycle)


@pytest.mark.parametrize(
    ("overrides", "path", "fragment"),
    [
        ({"network.head": "categorical"}, "loss.td", "trained with cross-entropy"),
        ({"loss.td": "cross_entropy"}, "loss.td", "needs a categorical head"),
        ({"network.head": "quantile"}, "loss.td", "quantile Huber loss"),
        ({"loss.bootstrap": "soft"}, "loss.temperature", "soft bootstrap needs a temperature"),
        ({"loss.munchausen": {"alpha": 0.9}}, "loss.temperature", "Munchausen bonus needs"),
        ({"network.core": {"kind": "lstm"}}, "replay.sequence", "recurrent core needs sequence"),
        ({"replay.sequence": {"burn_in": 2}}, "network.core", "recurrent core needs sequence"),
        ({"loss.n_step": 3}, "loss.reward_clip", "would clip the n-step return"),
        ({"loss.importance_exponent": 0.5}, "loss.importance_exponent", "uniform replay"),
        ({"replay.min_size": 10}, "replay.min_size", "smaller than batch_size"),
        ({"replay.capacity": 100}, "replay.min_size", "exceeds capacity"),
        (
            {
                "network.head": {"kind": "categorical", "v_min": 1, "v_max": -1},
                "loss.td": "cross_entropy",
            },
            "network.head",
            "needs v_min < v_max",
        ),
    ],
)
def test_incompatible_combinations(overrides, path, fragment):
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides=overrides)
    matching = [p for p in e.value.problems if p.path == path and fragment in p.message]
    assert matching, problems(e)


def test_n_step_longer_than_the_stored_trace():
    with pytest.raises(
        SpecError, match=r"n_step=9 is longer than replay\.sequence\.trace_length=4"
    ):
        spec.load_algorithm("r2d2", overrides={"loss.n_step": 9, "replay.sequence.trace_length": 4})


def test_all_problems_of_all_entries_are_reported_at_once(tmp_path):
    path = write(
        tmp_path,
        """
        a:
          extends: dqn
          loss: {discount: 2, bootstrap: maks}
        b:
          extends: dqn
          replay: {kind: uniformm}
        good:
          extends: dqn
        """,
    )
    with pytest.raises(SpecError) as e:
        spec.load_algorithms_file(path)
    entries = sorted((p.entry, p.path) for p in e.value.problems)
    assert entries == [("a", "loss.bootstrap"), ("a", "loss.discount"), ("b", "replay.kind")]


def test_several_entries_need_a_name(tmp_path):
    path = write(tmp_path, "a: {extends: dqn}\nb: {extends: dqn}\n")
    with pytest.raises(SpecError, match=r"holds 2 entries \(a, b\); pick one as"):
        spec.load_algorithm(path)
    with pytest.raises(SpecError, match="no such entry; did you mean 'a'"):
        spec.load_algorithm(f"{path}:aa")


def test_bad_override_syntax():
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        spec.parse_overrides(["loss.n_step"])
    with pytest.raises(SpecError, match="unknown field 'n_stp'"):
        spec.load_algorithm("dqn", overrides=spec.parse_overrides(["loss.n_stp=3"]))


def test_preset_prefix_names_the_preset_where_a_catalogue_entry_shares_its_name():
    """``c51`` is the catalogue entry; ``preset:c51`` the dqn_zoo preset (other values)."""
    assert not spec.is_preset("c51") and spec.is_preset("preset:c51")
    preset = spec.load_preset("preset:c51")
    assert preset.name == "c51" and preset.env.protocol == "nature_2015"
    entry, pinned = spec.load_algorithm("c51"), spec.algorithm_for(preset)
    assert entry.name == pinned.name == "c51"
    assert entry != pinned  # the preset's published values differ from the entry's defaults


# ------------------------------------------------------------------ rules live with the parts


def test_axis_paths_are_read_off_the_axis_declarations():
    # the paths the error translator uses to list registered user components of an axis
    assert spec.axis_paths(spec.AlgorithmSpec) == {
        ("network", "torso"): "torso",
        ("network", "core"): "core",
        ("network", "head"): "head",
        ("loss", "bootstrap"): "bootstrap",
        ("loss", "td"): "td",
        ("loss", "value_transform"): "value_transform",
        ("loss", "regularizer"): "regularizer",
        ("loss", "importance_exponent"): "schedule",
        ("loss", "priority"): "priority",
        ("augmentation",): "augmentation",
        ("auxiliary",): "auxiliary",
        ("optimizer",): "optimizer",
        ("schedule", "epsilon"): "schedule",
        ("schedule", "n_step"): "schedule",
        ("schedule", "discount"): "schedule",
    }


def test_a_users_head_states_its_own_td_rule_and_the_composer_rules_apply_to_it():
    from typing import ClassVar, Literal

    from zoo import registry

    class MedianHead(spec.Head):
        """A user's head trained only by the squared loss (a made-up rule for the test)."""

        output: ClassVar[str] = "values"
        td_losses: ClassVar[tuple[str, ...] | None] = ("squared",)
        trained_with: ClassVar[str] = "the squared loss"
        td_fix: ClassVar[str] = "`loss.td: squared`"
        kind: Literal["median_test"] = "median_test"

    registry.register("head", "median_test", config=MedianHead)(lambda config: None)
    try:
        ok = spec.load_algorithm("dqn", overrides={"network.head": "median_test"})
        assert isinstance(ok.network.head, MedianHead)
        with pytest.raises(SpecError) as e:
            spec.load_algorithm(
                "dqn", overrides={"network.head": "median_test", "loss.td": "huber"}
            )
        assert [(p.path, p.message) for p in e.value.problems] == [
            (
                "loss.td",
                "a median_test head is trained with the squared loss; got 'huber', "
                "set `loss.td: squared`",
            )
        ]
        # cross_entropy asks the head for a distribution, whichever head it is
        with pytest.raises(SpecError, match="cross_entropy needs a categorical head, the head is "):
            spec.load_algorithm(
                "dqn", overrides={"network.head": "median_test", "loss.td": "cross_entropy"}
            )
    finally:
        registry.unregister("head", "median_test")


def test_every_problem_comes_from_the_part_that_states_it():
    # one spec breaking rules of five parts: all are reported at once, each at its field
    with pytest.raises(SpecError) as e:
        spec.load_algorithm(
            "dqn",
            overrides={
                "loss.bootstrap": "soft",
                "network.head": "quantile",
                "replay.min_size": 10,
                "schedule.epsilon": 1.5,
                "optimizer.learning_rate": 0,
            },
        )
    paths = sorted(p.path for p in e.value.problems)
    assert paths == [
        "loss.td",
        "loss.temperature",
        "optimizer.learning_rate",
        "replay.min_size",
        "schedule.epsilon",
    ]
