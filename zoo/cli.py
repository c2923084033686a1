"""The ``zoo`` command.

    zoo list [algorithms|presets|components] [PATTERN]
    zoo show NAME|FILE[:ENTRY] [--set KEY=VALUE ...]
    zoo validate FILE...

Spec errors are printed one per line (file, entry, field path, problem) with exit status 2; no
traceback. User components enter through ``--plugin MODULE`` (repeatable) or the ``ZOO_PLUGINS``
environment variable (comma-separated module names), never from inside a YAML file.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from zoo import __version__, registry, spec

__all__ = ["main"]

EXIT_SPEC_ERROR = 2


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def _cmd_list(args: argparse.Namespace) -> int:
    what, pattern = args.what, args.pattern
    if what not in ("algorithms", "presets", "components"):
        # `zoo list 'mdqn*'`: the first word is a pattern over algorithms.
        what, pattern = "algorithms", what
    if what == "algorithms":
        names = spec.algorithm_names(pattern)
        width = max((len(n) for n in names), default=0)
        for name in names:
            entry = spec.load_algorithm(name)
            print(f"{name:<{width}}  {_first_sentence(entry.summary)}")
    elif what == "presets":
        names = spec.preset_names(pattern)
        width = max((len(n) for n in names), default=0)
        for name in names:
            preset = spec.load_preset(name)
            print(f"{name:<{width}}  {_first_sentence(preset.summary)}")
    else:
        entries = list(registry.list_components(pattern))
        names = [f"{e.axis}/{e.name}" for e in entries]
        width = max((len(n) for n in names), default=0)
        for label, entry in zip(names, entries, strict=True):
            print(f"{label:<{width}}  {entry.summary}")
    if not names:
        print(f"no {what} match {pattern!r}", file=sys.stderr)
        return 1
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    overrides = spec.parse_overrides(args.set or [])
    name = args.name
    if name not in spec.algorithm_names() and name in spec.preset_names():
        preset = spec.load_preset(name)
        print(f"# preset {preset.name}: {_first_sentence(preset.summary)}")
        print(spec.describe(preset), end="")
        print("# resolved algorithm:")
        algorithm = spec.algorithm_for(preset)
        print(spec.describe(spec.load_algorithm(algorithm, overrides=overrides)), end="")
        return 0
    print(spec.describe(spec.load_algorithm(name, overrides=overrides)), end="")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            data = spec.read_yaml(path)
            if "algorithm" in data and not isinstance(data.get("algorithm"), dict):
                spec.load_preset(path)
                count = "preset"
            else:
                n = len(spec.load_algorithms_file(path))
                count = f"{n} entr{'y' if n == 1 else 'ies'}"
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


def _load_plugins(modules: Sequence[str]) -> None:
    env = [m.strip() for m in os.environ.get("ZOO_PLUGINS", "").split(",") if m.strip()]
    for module in [*env, *modules]:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise SystemExit(f"zoo: cannot import plugin module {module!r}: {e}") from None


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``zoo`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    _load_plugins(args.plugin)
    try:
        return args.func(args)
    except spec.SpecError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        return EXIT_SPEC_ERROR
    except registry.UnknownComponentError as e:
        print(f"zoo: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
