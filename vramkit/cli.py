"""`vramkit` command line: one module per subcommand under vramkit/commands/.

Each command module defines `register(subparsers)` which adds its parser and sets
`func(args) -> int`. `main(argv)` is what tests call; it turns every VramkitError into one
line on stderr and its exit code, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NoReturn

from vramkit import __version__
from vramkit.errors import Exit, VramkitError, exit_code_lines

# Order is the order `vramkit --help` lists them.
COMMAND_MODULES = [
    "vramkit.commands.plan",
    "vramkit.commands.pull",
    "vramkit.commands.launch",
    "vramkit.commands.placement",
    "vramkit.commands.monitor",
    "vramkit.commands.vram_safe",
    "vramkit.commands.host",
    "vramkit.commands.bench",
    "vramkit.commands.embed",
    "vramkit.commands.dashboard",
    "vramkit.commands.service",
    "vramkit.commands.client",
]


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is vramkit's one line and exit 64 (BAD_INPUT), not argparse's 2:
    2 means CRITICAL to `vramkit vram-safe`'s callers, so a typo must not look like an over-budget GPU."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("vramkit").strip()
        self.exit(int(Exit.BAD_INPUT), f"vramkit: {where + ': ' if where else ''}{message} "
                                       f"-> see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vramkit",
        description="Plan, launch, watch and tune SGLang on a GPU too small for the model.",
        epilog="exit codes (vramkit/errors.py; each failure is one line on stderr):\n  "
               + "\n  ".join(exit_code_lines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"vramkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()       # reads config/ (preset names in the help): a bad file is one line too
    except VramkitError as err:
        print(err.line(), file=sys.stderr)
        return int(err.code)
    args, unknown = parser.parse_known_args(argv)
    if unknown:       # said by the command's own parser, so the line points at its --help
        subparsers: Any = parser._subparsers._group_actions[0] if parser._subparsers else None
        command = subparsers.choices.get(args.command) if args.command and subparsers else None
        (command or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return int(Exit.BAD_INPUT)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command: a VramkitError becomes its one line and exit code, never a traceback."""
    try:
        return int(args.func(args) or 0)
    except VramkitError as err:
        print(err.line(), file=sys.stderr)
        return int(err.code)
    except KeyboardInterrupt:
        print("vramkit: interrupted", file=sys.stderr)
        return int(Exit.INTERRUPTED)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
