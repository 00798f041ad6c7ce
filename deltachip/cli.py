"""The ``deltachip`` command line.

Each subcommand lives in its own module under ``deltachip.commands`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int`` as default.
The driver catches :class:`deltachip.errors.UserError` and prints it: bad input never shows
a Python traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from deltachip import __version__
from deltachip.errors import UserError

# In pipeline order; each is deltachip/commands/<name>.py.
COMMANDS = ["sim", "firmware", "run", "compile", "check"]

EPILOG = """examples:
  deltachip sim examples/counter/counter.hdl
  deltachip firmware build firmware/programs/hello.c -o hello.elf
  deltachip run hello.elf
  deltachip compile examples/counter/counter.hdl -o build/counter
  deltachip check build/counter --steps 64
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltachip",
        description="Compile synchronous circuits into Qwen3.5 transformer weights and run them.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"deltachip {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"deltachip.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"deltachip.commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("deltachip: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
