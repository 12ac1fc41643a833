"""The ``candle`` command line.

``candle info`` is the core's; other distributions add subcommands through the
``candle_api.cli`` entry point group: each entry point is a function
``register(subparsers)`` that adds its parsers (candle-models adds ``embed``
and ``generate``). A subcommand whose distribution is missing says what to
install instead of being an unknown command.
"""

from __future__ import annotations

import argparse
import sys

CLI_GROUP = "candle_api.cli"

#: Subcommands other distributions provide, for a helpful error when they are absent.
KNOWN = {"embed": "candle-models", "generate": "candle-models", "quantize": "candle-models"}


def _info(args) -> int:
    from .info import describe

    print(describe(show_ops=not args.brief))
    return 0


def _missing(dist: str):
    def run(args) -> int:
        print(f"candle {args.command}: install {dist} for this command (pip install {dist})", file=sys.stderr)
        return 2

    return run


def build_parser() -> argparse.ArgumentParser:
    from importlib import metadata

    parser = argparse.ArgumentParser(prog="candle", description="candle-api command line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="list plugins, devices and which plugin serves each op")
    info.add_argument("--brief", action="store_true", help="plugins and devices only, without the op table")
    info.set_defaults(func=_info)
    for ep in metadata.entry_points(group=CLI_GROUP):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken extension must not take `candle info` down
            print(f"candle: ignoring subcommands of {ep.value}: {type(exc).__name__}: {exc}", file=sys.stderr)
    for name, dist in KNOWN.items():
        if name not in sub.choices:
            missing = sub.add_parser(name, help=f"(needs {dist})", add_help=False)
            missing.add_argument("rest", nargs=argparse.REMAINDER)
            missing.set_defaults(func=_missing(dist))
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
