"""The ``candle`` command line.

``candle info`` is the core's; other distributions add subcommands through the
``candle_api.cli`` entry point group: each entry point is a function
``register(subparsers)`` that adds its parsers (candle-models adds ``embed``
and ``generate``). A subcommand whose distribution is missing says what to
install instead of being an unknown command.

Every way a command ends is settled here, the same for all of them: a failure
is one line on stderr, ``candle COMMAND: error: ...``, with status 1 (2 for
arguments argparse refuses, 130 for Ctrl-C), and a reader that closed the pipe
ends the command quietly.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .errors import CandleError

CLI_GROUP = "candle_api.cli"

#: The subcommands of candle-models, for a helpful error when it is absent. It is not on PyPI: it
#: installs from a checkout of candle-api.
MODELS_COMMANDS = ("embed", "generate", "quantize", "serve", "transcribe")


class Parser(argparse.ArgumentParser):
    """Refuses arguments in one line, with the same prefix as every other error (argparse would print
    the whole usage first). Subparsers are made of the same class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _info(args) -> int:
    from .info import describe

    print(describe(show_ops=not args.brief))
    return 0


def _missing(args) -> int:
    raise CandleError("this command comes with candle-models: pip install ./models (in a checkout of candle-api)")


def build_parser() -> argparse.ArgumentParser:
    from importlib import metadata

    parser = Parser(prog="candle", description="candle-api command line")
    parser.add_argument("--version", action="version", version=f"candle-api {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="list plugins, devices and which plugin serves each op")
    info.add_argument("--brief", action="store_true", help="plugins and devices only, without the op table")
    info.set_defaults(func=_info)
    from .bench import add_parser as add_bench

    add_bench(sub)
    for ep in metadata.entry_points(group=CLI_GROUP):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken extension must not take `candle info` down
            print(f"candle: warning: ignoring subcommands of {ep.value}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
    for name in MODELS_COMMANDS:
        if name not in sub.choices:
            missing = sub.add_parser(name, help="(needs candle-models)", add_help=False)
            missing.add_argument("rest", nargs=argparse.REMAINDER)
            missing.set_defaults(func=_missing)
    for command in sub.choices.values():  # arguments left over are the subcommand's, not candle's
        command.set_defaults(parser=command)
    return parser


def main(argv=None) -> int:
    prog = "candle"
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:
            args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        prog = f"candle {args.command}"
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe fails here, where it is handled, not as Python exits
        return status
    except KeyboardInterrupt:
        print(f"{prog}: error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _drop_stdout()
        return 141  # 128 + SIGPIPE: the status of a writer the closed pipe ended
    except SystemExit:  # --help, --version, argparse's errors: their text is flushed here, not as Python exits
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _drop_stdout()
        raise
    except Exception as exc:  # MemoryError included: a command line answers any failure in one line
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """The reader is gone (`candle info | head`): nothing is left to say. What stdout still buffers
    goes to /dev/null, or Python's flush at exit would fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _one_line(exc: Exception) -> str:
    """The error's message, on one line; the exception's type too where the message may not say
    what kind of failure it is."""
    text = str(exc).replace("\n", " ")
    if isinstance(exc, MemoryError):
        return f"out of memory ({text})" if text else "out of memory"
    if isinstance(exc, (CandleError, ValueError, OSError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
