"""The ``zoo`` command.

    zoo list [algorithms|presets|components] [PATTERN]
    zoo show NAME|FILE[:ENTRY] [--set KEY=VALUE ...]
    zoo validate FILE...
    zoo train ALGORITHM|PRESET|FILE [--env ID] [--steps N] [--seed S] [--set KEY=VALUE ...]
              [--run-dir DIR] [--resume DIR [--restart]] [--seeds N] [--progress WHEN] ...
    zoo eval RUN_DIR [--episodes N] [--progress WHEN]
    zoo compare RUN_DIR... [--reference SERIES] [--out DIR] [--record ours/NAME]
    zoo compare --list-series [PATTERN]
    zoo reproduce PRESET [--games G ...] [--seeds N] [--frames N] [--run-dir DIR]
    zoo bench SUITE ALGORITHM|PRESET... [--seeds N] [--frames F] [--run-dir DIR] [--jobs N]
              [--launcher local|ray] [--set KEY=VALUE ...] [--progress WHEN] ...
    zoo bench report DIR [--suite S] [--out DIR]
    zoo bench --list-suites

Exit status: 0 done; 2 refused before anything was done or written (a spec error, printed one
per line with file, entry, field path and problem; an invalid value; a run directory that is not
empty or in use; a resume that would change the run; runs that cannot be compared); 1 failed
while running (a non-finite loss, a full disk, no intact checkpoint); 130 interrupted (Ctrl-C,
checkpoint saved). Never a traceback.

User components enter through ``--plugin MODULE`` (repeatable) or the ``ZOO_PLUGINS`` environment
variable (comma-separated module names), never from inside a YAML file; a module is looked for on
the Python path and then in the working directory, and ``--plugin path/to/file.py`` names a file.

Progress goes to stderr: on a terminal one line redrawn in place, otherwise (``nohup``, a
scheduler, CI) a line every 30 s; ``--progress`` or ``ZOO_PROGRESS`` changes it
(``zoo.runs.metrics``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import typing
from collections.abc import Sequence
from pathlib import Path

from zoo import __version__, registry, spec, stops
from zoo.fileio import UnsafeFileError, write_atomic
from zoo.runs import flags as run_flags
from zoo.runs.flags import finite, whole
from zoo.runs.progress import PROGRESS_VARIABLE, ProgressMode, ProgressModeError
from zoo.runs.settings import MAX_NUM_ENVS, MAX_SEED, MAX_SEEDS

__all__ = ["main"]

EXIT_SPEC_ERROR = 2


def _first_sentence(text: str) -> str:
    text = _plain(" ".join(text.split()))
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def _plain(text: str) -> str:
    """Docstring markup read on a terminal: reStructuredText's ``literal`` becomes literal."""
    return re.sub(r"``(.+?)``", r"\1", text)


def _cmd_list(args: argparse.Namespace) -> int:
    what, pattern = args.what, args.pattern
    if what not in ("algorithms", "presets", "components"):
        # `zoo list 'mdqn*'`: the first word is a pattern over algorithms.
        what, pattern = "algorithms", what
    if what == "algorithms":
        rows = [
            (n, _first_sentence(spec.load_algorithm(n).summary))
            for n in spec.algorithm_names(pattern)
        ]
    elif what == "presets":
        rows = [
            (n, _first_sentence(spec.load_preset(n).summary)) for n in spec.preset_names(pattern)
        ]
    else:
        rows = [
            (
                f"{e.axis}/{e.name}",
                _plain(e.summary) or "(no summary: its function has no docstring)",
            )
            for e in registry.list_components(pattern)
        ]
    width = max((len(name) for name, _ in rows), default=0)
    for name, text in rows:
        print(f"{name:<{width}}  {text}")
    if not rows:
        everything = (
            f"zoo list {what}" if what in ("algorithms", "presets") else "zoo list components"
        )
        print(f"no {what} match {pattern!r}; `{everything}` lists them all", file=sys.stderr)
        return EXIT_SPEC_ERROR
    return 0


def _leaf_paths(tree: typing.Any, prefix: str = "") -> list[str]:
    """Dotted paths of what a nested override mapping sets: its leaves, and each component it
    names (``network.torso``) besides its parameters."""
    paths = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            if "kind" in value:
                paths.append(path)
            paths.extend(_leaf_paths({k: v for k, v in value.items() if k != "kind"}, path + "."))
        else:
            paths.append(path)
    return paths


def _preset_marks(preset: typing.Any, resolved: typing.Any) -> dict[str, str]:
    """What ``zoo show PRESET`` notes beside the resolved algorithm: each field the preset sets,
    with the catalogue's value, and that the summary and notes are the catalogue entry's."""
    from zoo.spec.fidelity import value_at

    catalogue = spec.load_algorithm(preset.algorithm)
    marks = {
        path: f"set by the preset (catalogue {preset.algorithm}: {value_at(catalogue, path)})"
        for path in _leaf_paths(spec.apply_overrides({}, preset.overrides))
        if value_at(catalogue, path) != value_at(resolved, path)
    }
    whose = f"the catalogue entry {preset.algorithm}'s, before the preset's settings (marked)"
    marks["summary"] = marks["notes"] = whose
    return marks


def _print_preset_differences(preset: typing.Any) -> None:
    """The preset's own differences from its own source (``reference.differences``)."""
    differences = preset.differences()
    if not differences:
        print("# differs from its source in: nothing recorded (reference.differences)")
        return
    print(f"# differs from its source in ({len(differences)}, reference.differences):")
    for setting, source, here, why in differences:
        print(f"#   {setting}: the source: {source}; here: {here}" + (f" ({why})" if why else ""))


def _cmd_show(args: argparse.Namespace) -> int:
    overrides = spec.parse_overrides(args.set or [])
    name = args.name
    if spec.is_preset(name):
        preset = spec.load_preset(name)
        print(f"# preset {preset.name}: {_first_sentence(preset.summary)}")
        print(
            spec.describe(preset, hide=["reference.differences"], hidden="printed below"),
            end="",
        )
        _print_preset_differences(preset)
        from zoo.envs import get_protocol

        summary = get_protocol(preset.env.protocol).summary()
        print("".join(f"# {line}\n" for line in summary.splitlines()), end="")
        print(
            f"# resolved algorithm: the catalogue entry {preset.algorithm} with the preset's "
            "settings"
        )
        resolved = spec.load_algorithm(spec.algorithm_for(preset), overrides=overrides)
        marks = _preset_marks(preset, resolved)
        hide = spec.unused_settings(resolved)
        print(spec.describe(resolved, hide=hide, marks=marks), end="")
        shipped = name.removeprefix(spec.PRESET_PREFIX)
        if not spec.looks_like_path(shipped):
            _installed_hint(spec.presets_dir() / f"{shipped}.yaml", "presets")
        return 0
    resolved = spec.load_algorithm(name, overrides=overrides)
    print(spec.describe(resolved, hide=spec.unused_settings(resolved)), end="")
    if name in spec.preset_names():
        print(
            f"# {name!r} is also a preset (a paper's settings): zoo show {spec.PRESET_PREFIX}{name}"
        )
    if not spec.looks_like_path(name):
        _installed_hint(spec.catalogue_path(), "algorithms.yaml")
    return 0


def _installed(path: Path) -> bool:
    """Whether ``path`` is package data of an installed (not editable) zoo."""
    return spec.is_package_data(path)


def _installed_hint(path: Path, what: str) -> None:
    """Say where a catalogue entry came from when it is the installed package's copy: editing a
    clone's ``algorithms.yaml`` or ``presets/`` then changes nothing."""
    if not _installed(path):
        return
    print(f"# from the installed package: {path}")
    local = Path(what) if what == "algorithms.yaml" else Path(what) / path.name
    if local.is_file() and local.read_bytes() != path.read_bytes():
        print(f"# ./{local} here differs from it and is not read by zoo")
    print(
        f"# edits to a clone's {what} take effect with an editable install "
        "(pip install -e .); or put entries of your own in a file of your own "
        "(zoo show mine.yaml:NAME, zoo train mine.yaml:NAME)"
    )


#: What ``zoo validate`` checks of an algorithm entry, and what it leaves to the run.
VALIDATE_CHECKS = (
    "every field, the cross-field rules of every axis, the layers against this machine's memory; "
    "the environment, its observation shapes and the replay's memory are checked when a run "
    "starts"
)


def _cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            if spec.is_preset(path):
                spec.load_preset(path)
                count = f"preset: its fields and protocol, and its algorithm's {VALIDATE_CHECKS}"
            else:
                n = len(spec.load_algorithms_file(path))
                count = f"{n} entr{'y' if n == 1 else 'ies'}: {VALIDATE_CHECKS}"
        except spec.SpecError as e:
            failed += len(e.problems)
            for problem in e.problems:
                print(problem, file=sys.stderr)
            continue
        print(f"{path}: ok ({count})")
    if failed:
        print(f"{failed} problem{'s' * (failed != 1)} found", file=sys.stderr)
        return EXIT_SPEC_ERROR
    return 0


def _evaluation_summary(evaluation: dict) -> str:
    """``evaluation return M ± S over N games``, or what it reports when no game finished."""
    if evaluation.get("mean_return") is None:
        return "evaluation: " + (evaluation.get("note") or "no game finished")
    return (
        f"evaluation return {evaluation['mean_return']:.1f} ± {evaluation['std_return']:.1f} "
        f"over {evaluation['episodes']} games"
    )


def _cmd_train(args: argparse.Namespace) -> int:
    from zoo.runs import RunError, RunRefusedError, train
    from zoo.runs.open import seed_members

    _set_progress(args.progress)
    if args.algorithm is None and args.resume is None:
        print("zoo train: name an algorithm or preset, or --resume RUN_DIR", file=sys.stderr)
        return EXIT_SPEC_ERROR
    if args.seeds is not None or (args.resume is not None and seed_members(args.resume)):
        return _cmd_train_seeds(args)
    from zoo.runs import group as groups

    try:
        # the ZOO_* variables stand in for the flags not given
        group = groups.requested(args.coordinator, args.num_processes, args.process_id)
    except ValueError as e:
        print(f"zoo train: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    try:
        result = train(
            args.algorithm,
            overrides=spec.parse_overrides(args.set or []),
            run_dir=args.run_dir,
            resume=args.resume,
            restart=args.restart,
            coordinator=group.coordinator,
            num_processes=group.num_processes,
            process_id=group.process_id,
            distributed=args.distributed,
            on_start=lambda path: print(f"run directory: {path}", file=sys.stderr),
            **run_flags.given(args, "train"),
        )
    except RunRefusedError as e:
        print(f"zoo train: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except RunError as e:
        print(f"zoo train: {e}", file=sys.stderr)
        return 1
    final = result.final_eval
    if result.interrupted:
        print(
            f"interrupted at env step {result.env_steps:,} (checkpoint saved there). "
            f"Continue with: zoo train --resume {result.run_dir}"
            + (
                " on every process, with --num-processes, --process-id and --coordinator"
                if group.given and group.num_processes != 1
                else ""
            ),
            file=sys.stderr,
        )
        return 130
    if final is not None:
        best = result.best_return
        target = args.stop_at_return
        reached = final.get("mean_return")
        early = target is not None and reached is not None and reached >= target
        print(
            (f"reached --stop-at-return {target:g}: " if early else "")
            + f"finished {result.env_steps:,} env steps, {result.updates:,} updates; "
            f"{_evaluation_summary(final)}" + (f" (best {best:.1f})" if best is not None else "")
        )
    print(f"results: {result.run_dir} (metrics.jsonl, eval.jsonl, tb/, checkpoints/)")
    print(f"curves: {_tensorboard_hint(result.run_dir)}")
    return 0


def _cmd_train_seeds(args: argparse.Namespace) -> int:
    """``zoo train --seeds N`` (or ``--resume`` of a group of seeds)."""
    from zoo.runs import RunError, RunRefusedError
    from zoo.runs.seeds import train_seeds

    one_run = {"--restart": args.restart, "--distributed": args.distributed}
    one_run.update(
        {
            "--coordinator": args.coordinator is not None,
            "--num-processes": args.num_processes is not None,
            "--process-id": args.process_id is not None,
        }
    )
    given = [flag for flag, on in one_run.items() if on]
    if given:
        print(
            f"zoo train: {', '.join(given)} applies to one run, not to a group of seeds "
            "(use it on one seed's directory, RUN_DIR/seed<S>)",
            file=sys.stderr,
        )
        return EXIT_SPEC_ERROR
    settings = run_flags.given(args, "train")
    first = settings.pop("seed", None)
    try:
        results = train_seeds(
            args.algorithm,
            seed=first,
            seeds=args.seeds,
            overrides=spec.parse_overrides(args.set or []),
            run_dir=args.run_dir,
            resume=args.resume,
            **settings,
        )
    except RunRefusedError as e:
        print(f"zoo train: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except RunError as e:
        print(f"zoo train: {e}", file=sys.stderr)
        return 1
    group = results[0].run_dir.parent
    for result in results:
        final = result.final_eval
        said = f"{_evaluation_summary(final)}" if final is not None else "no evaluation"
        print(
            f"{result.run_dir.name}: {result.env_steps:,} env steps, {result.updates:,} "
            f"updates; {said}"
        )
    if any(r.interrupted for r in results):
        print(
            f"interrupted (each seed's checkpoint saved). Continue with: zoo train --resume "
            f"{group}",
            file=sys.stderr,
        )
        return 130
    names = ", ".join(r.run_dir.name for r in results)
    print(f"results: {group} (one run directory per seed: {names})")
    print(f"curves: tensorboard --logdir {group}")
    return 0


def _tensorboard_hint(run_dir: Path) -> str:
    """How to open the run's TensorBoard events (and how to get TensorBoard if it is missing)."""
    import importlib.util

    command = f"tensorboard --logdir {run_dir.parent}"
    if importlib.util.find_spec("tensorboard") is None:
        return f"{command} (TensorBoard is not installed: pip install 'zoo-rl[tensorboard]')"
    return command


def _set_progress(text: str | None) -> None:
    """``--progress``: checked, then set for this process (training and evaluation read it)."""
    if text is not None:
        os.environ[PROGRESS_VARIABLE] = text


def _cmd_eval(args: argparse.Namespace) -> int:
    from zoo.runs import RunError, RunRefusedError
    from zoo.runs.evaluate import evaluate_run

    _set_progress(args.progress)
    try:
        result = evaluate_run(
            args.run_dir,
            episodes=args.episodes,
            seed=args.seed,
            max_steps=args.max_steps,
            num_envs=args.envs,
            progress=True,
        )
    except RunRefusedError as e:
        print(f"zoo eval: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except RunError as e:
        print(f"zoo eval: {e}", file=sys.stderr)
        return 1
    how = (
        f"checkpoint at {result['checkpoint_env_steps']:,} env steps, protocol "
        f"{result['protocol']}, ε {result['epsilon']:g}, seed {result['seed']}; recorded in "
        "posthoc_eval.jsonl"
    )
    if result["mean_return"] is None:
        print(f"{result['run_dir']}: {result['note']} ({how})")
        return 0
    print(
        f"{result['run_dir']}: return {result['mean_return']:.2f} ± {result['std_return']:.2f} "
        f"(min {result['min_return']:.1f}, max {result['max_return']:.1f}) over "
        f"{result['episodes']} games ({how})"
    )
    return 0


def _reference_error(command: str, error: Exception) -> int:
    """A refused comparison (protocol mismatch, unknown series): one line, exit status 2."""
    print(f"zoo {command}: {error}", file=sys.stderr)
    return EXIT_SPEC_ERROR


def _cmd_compare(args: argparse.Namespace) -> int:
    from zoo import compare as compare_lib
    from zoo import reference as ref_lib

    if args.list_series:
        pattern = args.run_dirs[0] if args.run_dirs else None
        rows = []
        for series_id in ref_lib.series_ids(pattern):
            s = ref_lib.load_series(series_id)
            rows.append((series_id, s.protocol, s.statistic, s.kind_label, s.label))
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)), row[4])
        return 0 if rows else 1
    if not args.run_dirs:
        print("zoo compare: name run directories (or folders holding them)", file=sys.stderr)
        return EXIT_SPEC_ERROR
    try:
        comparison = compare_lib.compare(args.run_dirs, reference=args.reference)
    except compare_lib.CompareError as e:
        print(f"zoo compare: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except (ref_lib.ProtocolMismatchError, ref_lib.UnknownSeriesError) as e:
        return _reference_error("compare", e)
    runs = [r.path for g in comparison.groups for r in g.runs]
    out = args.out or compare_lib.default_out_dir(runs)
    paths = compare_lib.write_outputs(comparison, out)
    print(compare_lib.format_table(comparison), end="")
    print(f"wrote {paths['md']}, {paths['json'].name}, {paths['png'].name}")
    if args.record:
        import yaml

        try:
            entry = compare_lib.record_series(
                comparison, args.record, source=args.record_source or ", ".join(map(str, runs))
            )
        except (compare_lib.CompareError, ValueError) as e:
            return _reference_error("compare", e)
        from zoo.runs.rundir import safe_component

        target = Path(out) / f"series-{safe_component(args.record, fallback='ours')}.yaml"
        write_atomic(target, yaml.safe_dump(entry, sort_keys=False))
        print(
            f"recorded {args.record} in {target} (compare with --reference {target}; ship it "
            "as zoo/reference_data/ours/NAME.yaml)"
        )
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from zoo import reference as ref_lib
    from zoo.compare import CompareError, format_table
    from zoo.reproduce import ReproduceError, reproduce
    from zoo.runs import RunError, RunRefusedError

    _set_progress(args.progress)
    try:
        result = reproduce(
            args.preset,
            games=args.games,
            seeds=args.seeds,
            frames=args.frames,
            run_dir=args.run_dir,
            reference=args.reference,
            overrides=spec.parse_overrides(args.set or []),
            **run_flags.given(args, "reproduce"),
        )
    except (ref_lib.ProtocolMismatchError, ref_lib.UnknownSeriesError) as e:
        return _reference_error("reproduce", e)
    except (ReproduceError, RunRefusedError, CompareError) as e:
        print(f"zoo reproduce: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except RunError as e:
        print(f"zoo reproduce: {e}", file=sys.stderr)
        return 1
    if result.interrupted or result.comparison is None:
        return 130  # reproduce said which run stopped and how to resume
    print(format_table(result.comparison), end="")
    outputs = result.outputs
    print(f"wrote {outputs['md']}, {outputs['json'].name}, {outputs['png'].name}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from zoo.bench.errors import BenchError
    from zoo.runs import RunError

    if args.list_suites:
        from zoo.bench.suites import format_suites

        print(format_suites(), end="")
        return 0
    if args.suite is None:
        print(
            "zoo bench: name a suite and algorithms (zoo bench SUITE ALGO...), "
            "report DIR, or --list-suites",
            file=sys.stderr,
        )
        return EXIT_SPEC_ERROR
    try:
        if args.suite == "report":
            return _bench_report(args)
        if not args.algorithms:
            print(
                f"zoo bench: name the algorithms or presets to run on {args.suite} "
                f"(zoo bench {args.suite} dqn preset:NAME ...; zoo list, zoo list presets)",
                file=sys.stderr,
            )
            return EXIT_SPEC_ERROR
        return _bench_run(args)
    except BenchError as e:
        print(f"zoo bench: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except RunError as e:
        print(f"zoo bench: {e}", file=sys.stderr)
        return 1


def _bench_report(args: argparse.Namespace) -> int:
    from zoo.bench.errors import BenchError
    from zoo.bench.runner import write_report_for

    if len(args.algorithms) != 1:
        raise BenchError("zoo bench report takes one folder: zoo bench report DIR [--suite S]")
    root = Path(args.algorithms[0])
    if args.out is not None or args.include:
        from zoo.bench.report import write_report

        paths = write_report(
            root, out=args.out, suite=args.report_suite, reps=args.reps, include=args.include
        )
    else:
        paths = write_report_for(root, args.report_suite, reps=args.reps)
    print(f"report: {paths['md']} ({', '.join(p.name for k, p in paths.items() if k != 'md')})")
    return 0


def _bench_run(args: argparse.Namespace) -> int:
    from zoo.bench.runner import bench, summary

    if args.out is not None or args.report_suite is not None or args.include:
        print(
            "zoo bench: --out, --suite and --include belong to zoo bench report DIR; a bench "
            "writes its report into --run-dir",
            file=sys.stderr,
        )
        return EXIT_SPEC_ERROR
    result = bench(
        args.suite,
        args.algorithms,
        seeds=args.seeds,
        frames=args.frames,
        games=args.games,
        run_dir=args.run_dir,
        jobs=args.jobs,
        launcher=args.launcher,
        ray_address=args.ray_address,
        overrides=spec.parse_overrides(args.set or []),
        cpus_per_run=args.cpus_per_run,
        gpus_per_run=args.gpus_per_run,
        progress=args.progress,
        reps=args.reps,
        log=lambda line: print(line, flush=True),
        **run_flags.given(args, "bench"),
    )
    print(summary(result))
    if result.report:
        paths = result.report
        print(f"report: {paths['md']} ({', '.join(p.name for k, p in paths.items() if k != 'md')})")
    if result.interrupted:
        return 130
    return 1 if result.failed else 0


#: Counts (at least 1), seeds (31 bits) and environment counts on the command line.
_COUNT = whole(1)
_SEED = whole(0, MAX_SEED)
_NUM_ENVS = whole(1, MAX_NUM_ENVS)


def _progress(text: str) -> str:
    """An argparse type: a progress mode (see :class:`zoo.runs.progress.ProgressMode`)."""
    try:
        ProgressMode.parse(text)
    except ProgressModeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        type=_progress,
        metavar="WHEN",
        help="progress on stderr: auto (default: redrawn on a terminal, else a line every 30s), "
        f"bar, off, a period (30s, 2m) or a share of the budget (10%%); also {PROGRESS_VARIABLE}",
    )


def _load_plugins(modules: Sequence[str]) -> None:
    """Import the plugin modules of ``ZOO_PLUGINS`` and ``--plugin``.

    A module is found as ``python -m`` finds one: on ``sys.path``, then in the working directory
    (a ``myplug.py`` beside the user's YAML works without ``PYTHONPATH=.``). The working directory
    goes last, so a file there never shadows an installed package. ``--plugin path/to/file.py``
    imports that file.
    """
    env = [m.strip() for m in os.environ.get("ZOO_PLUGINS", "").split(",") if m.strip()]
    names = [*env, *modules]
    if names:
        here = os.getcwd()
        if not any(os.path.abspath(p or os.curdir) == here for p in sys.path):
            sys.path.append(here)
    for module in names:
        try:
            if module.endswith(".py"):
                _import_file(Path(module))
            else:
                importlib.import_module(module)
        except ImportError as e:
            _refuse(_plugin_import_message(module, e))
        except registry.DuplicateComponentError as e:
            _refuse(f"zoo: plugin module {module!r}: {e}")
        except Exception as e:  # the plugin's own code failed (a SyntaxError included)
            _refuse(_plugin_failure_message(module, e))


def _refuse(message: str) -> typing.NoReturn:
    """Print ``message`` and exit with 2 (refused before anything was done)."""
    print(message, file=sys.stderr)
    raise SystemExit(EXIT_SPEC_ERROR)


def _plugin_failure_message(module: str, error: Exception) -> str:
    """One line: which plugin failed, how and where, and the way out."""
    import traceback

    if isinstance(error, SyntaxError):
        where = f"{error.filename}, line {error.lineno}"
        what = f"SyntaxError: {error.msg}"
    else:
        frames = traceback.extract_tb(error.__traceback__)
        last = frames[-1] if frames else None
        where = f"{last.filename}, line {last.lineno}" if last else module
        what = f"{type(error).__name__}: {error}".rstrip(": ")
    return (
        f"zoo: plugin module {module!r} failed while importing ({where}): {what}; fix the module "
        "or leave it out of --plugin and ZOO_PLUGINS"
    )


def _import_file(path: Path) -> None:
    """Import a plugin given as a file (``--plugin plugins/myplug.py``) as module ``myplug``."""
    import importlib.util

    if not path.is_file():
        raise ImportError(f"no such file: {path}")
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[path.stem] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[path.stem]
        raise


def _plugin_import_message(module: str, error: ImportError) -> str:
    """Why a plugin did not import, with where it was looked for when it was not found."""
    message = f"zoo: cannot import plugin module {module!r}: {error}"
    if isinstance(error, ModuleNotFoundError) and error.name == module:
        message += (
            f" (looked on the Python path and in the working directory {os.getcwd()}; "
            f"give a file as --plugin path/to/{module}.py)"
        )
    return message


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoo", description="A declarative zoo of value-based deep RL algorithms in JAX."
    )
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, so the components it registers are usable from YAML",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list algorithms, presets or registered components")
    p.add_argument(
        "what", nargs="?", default="algorithms", help="algorithms | presets | components"
    )
    p.add_argument("pattern", nargs="?", default="*", help="shell-style wildcard, e.g. 'mdqn*'")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="print an entry fully resolved, with field descriptions")
    p.add_argument("name", help="catalogue name, preset name, FILE.yaml or FILE.yaml:ENTRY")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="dotted override, e.g. loss.n_step=3"
    )
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("validate", help="check YAML files of algorithms or presets")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("train", help="train an algorithm or preset; writes a run directory")
    p.add_argument("algorithm", nargs="?", help="catalogue name, preset, FILE.yaml[:ENTRY]")
    run_flags.add_flags(p, "train", ["env", "total_env_steps", "seed"])
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="dotted override, e.g. loss.n_step=3"
    )
    p.add_argument(
        "--run-dir",
        help="a new or empty run directory (default runs/NAME-ENV-sSEED-TIME)",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its newest intact checkpoint, with the spec and settings it "
        "was created with (only --steps may change: the budget)",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="with --resume: start a run that stopped before its first checkpoint over from "
        "scratch, with its own spec and settings",
    )
    p.add_argument(
        "--seeds",
        type=whole(1, MAX_SEEDS),
        metavar="N",
        help="train N runs, seeds SEED..SEED+N-1, in one compiled program, each in "
        "RUN_DIR/seed<S> (each resumes, evaluates and compares as a single run); --resume "
        "RUN_DIR continues them together",
    )
    run_flags.add_flags(p, "train")  # the other settings, in the table's order
    p.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="train as one of several processes joined by jax.distributed: process 0's address "
        "(default: $ZOO_COORDINATOR, else JAX's detection of the cluster); start every process "
        "with the same arguments and --run-dir",
    )
    p.add_argument(
        "--num-processes",
        type=_COUNT,
        help="processes in the run (default: $ZOO_NUM_PROCESSES, else the cluster's); each "
        "steps --num-envs environments and keeps a replay shard of capacity / processes",
    )
    p.add_argument(
        "--process-id",
        type=int,
        help="this process's index, 0 owning the run directory (default: $ZOO_PROCESS_ID)",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="join the process group JAX detects from the cluster's environment (SLURM, Open "
        "MPI, Kubernetes, Cloud TPU), with the three flags above where given",
    )
    _progress_option(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="evaluate a run's checkpoint under its protocol")
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=_COUNT, default=10, help="games to play")
    p.add_argument("--seed", type=_SEED, default=12345, help="evaluation seed")
    p.add_argument("--max-steps", type=_COUNT, help="cap on agent steps")
    p.add_argument(
        "--envs",
        type=_NUM_ENVS,
        help="environments played at once, each with its share of the games (default: one per "
        "game, at most 16)",
    )
    _progress_option(p)
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser(
        "compare",
        help="compare runs with reference series (table, comparison.md/.json/.png)",
        description="Group runs by (preset or algorithm, environment, protocol), summarise each "
        "at its final budget with the statistic of each reference series (greedy evaluation, or "
        "the mean return of the training games in the series' window), and compare with the "
        "reference at the same number of frames. A series of another protocol is refused.",
    )
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="runs, or folders of runs")
    p.add_argument(
        "--reference",
        metavar="SERIES",
        help="series id (see --list-series) or series file; default: each preset's series",
    )
    p.add_argument(
        "--out",
        help="where comparison.md/.json/.png go (default: the deepest folder holding all runs "
        "if it lies under the working directory, else ./comparison)",
    )
    p.add_argument(
        "--list-series",
        action="store_true",
        help="list the reference series (RUN_DIR is then a pattern) and exit",
    )
    p.add_argument(
        "--record",
        metavar="ours/NAME",
        help="also write these runs as a reference series of ours (not published)",
    )
    p.add_argument("--record-source", help="the source line of a recorded series")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser(
        "reproduce",
        help="train a preset on games x seeds (reusing finished runs), then compare",
        description="Train PRESET under its protocol for each game and seed into "
        "RUN_DIR/<preset>/<game>/seed<k>, reusing finished runs and resuming partial ones, then "
        "write the comparison with the preset's reference series into RUN_DIR.",
    )
    p.add_argument("preset", help="preset name or file")
    p.add_argument("--games", nargs="+", help="games or env ids (default: the preset's)")
    p.add_argument("--seeds", type=whole(1, 1000), default=1, help="seeds 0..N-1 (default 1)")
    p.add_argument(
        "--frames",
        type=_COUNT,
        help="budget in frames (agent steps = frames / frame skip); default: the preset's",
    )
    p.add_argument("--run-dir", default="reproduce", help="output folder (default ./reproduce)")
    p.add_argument("--reference", metavar="SERIES", help="compare with this series instead")
    run_flags.add_flags(p, "reproduce", ["eval_episodes", "eval_every", "checkpoint_every"])
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="dotted override of the preset for new runs, e.g. replay.capacity=400000 (recorded "
        "in each run's spec; comparisons note the runs that differ from the preset)",
    )
    run_flags.add_flags(p, "reproduce")  # the other settings it offers
    _progress_option(p)
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser(
        "bench",
        help="run algorithms on a benchmark suite's games x seeds, then write its report",
        description="Train each ALGORITHM (a catalogue entry, trained under the suite's "
        "protocol) or PRESET (which must use the suite's protocol) on each of SUITE's games for "
        "each seed into RUN_DIR/<algorithm>/<game>/seed<k> (finished runs reused, partial ones "
        "resumed, as zoo reproduce), several at once within the cores and memory (or on a Ray "
        "cluster), then write bench.md, bench.json and plots into RUN_DIR. "
        "`zoo bench report DIR` writes the report of existing runs; "
        "`zoo bench --list-suites` lists the suites.",
    )
    p.add_argument("suite", nargs="?", help="suite name (--list-suites), or: report")
    p.add_argument(
        "algorithms",
        nargs="*",
        metavar="ALGORITHM",
        help="catalogue names, presets (preset:NAME) or files; after report: the folder",
    )
    p.add_argument("--list-suites", action="store_true", help="list the suites and exit")
    p.add_argument("--seeds", type=whole(1, 1000), default=1, help="seeds 0..N-1 (default 1)")
    p.add_argument(
        "--frames",
        type=_COUNT,
        help="budget per run in frames (agent steps = frames / frame skip); default: the suite's",
    )
    p.add_argument("--games", nargs="+", help="a subset of the suite's games (default: all)")
    p.add_argument("--run-dir", default="bench", help="output folder (default ./bench)")
    p.add_argument(
        "--jobs",
        type=_COUNT,
        help="most runs at once (local launcher; default: as many as the cores and memory hold)",
    )
    p.add_argument(
        "--launcher",
        choices=["local", "ray"],
        default="local",
        help="local: child processes on this machine (default); ray: tasks on a running Ray "
        "cluster (RUN_DIR on a filesystem every node shares)",
    )
    p.add_argument(
        "--ray-address",
        default="auto",
        help="the Ray cluster to join (default auto: the one this machine belongs to)",
    )
    p.add_argument(
        "--cpus-per-run",
        type=_COUNT,
        default=1,
        help="CPU cores each run claims (local runs at once are pinned to theirs)",
    )
    p.add_argument(
        "--gpus-per-run",
        type=finite,
        default=0.0,
        help="GPUs each run claims on Ray (fractions share a GPU; default 0)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="dotted override for every new run, e.g. replay.capacity=400000",
    )
    run_flags.add_flags(
        p,
        "bench",
        ["eval_episodes", "eval_every", "eval_max_steps", "checkpoint_every", "num_envs", "loop"],
    )
    p.add_argument(
        "--reps", type=_COUNT, default=50000, help="bootstrap resamples of the report's intervals"
    )
    p.add_argument(
        "--suite",
        dest="report_suite",
        help="with report: the suite the runs belong to (its games and normalisation)",
    )
    p.add_argument("--out", help="with report: where the report goes (default: DIR)")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="BENCH_JSON",
        help="with report: an earlier report's bench.json whose finished runs join DIR's where "
        "DIR has not finished them (a benchmark made in several sessions); repeatable",
    )
    _progress_option(p)
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``zoo`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    _load_plugins(args.plugin)
    try:
        with stops.raise_on_stop():
            return args.func(args)
    except spec.SpecError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        return EXIT_SPEC_ERROR
    except registry.UnknownComponentError as e:
        print(f"zoo: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except UnsafeFileError as e:  # a link, a device or a file where zoo reads or writes
        print(f"zoo: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except KeyboardInterrupt as e:
        # a stop signal outside a training loop (which takes them over and saves a checkpoint):
        # during a command's setup, a restore or an evaluation, or a second signal while a run
        # stops; a run keeps its last checkpoint
        print(f"zoo: interrupted ({e.args[0] if e.args else 'Ctrl-C'})", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `zoo show dqn | head`: the reader left; exit quietly as other command-line tools do
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
