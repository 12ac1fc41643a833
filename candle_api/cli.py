"""The ``candle`` command line."""

from __future__ import annotations

import argparse
import sys


def _info(args) -> int:
    from .info import describe

    print(describe(show_ops=not args.brief))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="candle", description="candle-api command line")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="list plugins, devices and which plugin serves each op")
    info.add_argument("--brief", action="store_true", help="plugins and devices only, without the op table")
    info.set_defaults(func=_info)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
