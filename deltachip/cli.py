"""The ``deltachip`` command line.

Each subcommand lives in its own module under ``deltachip.commands`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int`` as default.
The driver catches :class:`common.errors.UserError` and prints it: bad input never shows
a Python traceback. SIGTERM is handled like Ctrl-C (SIGINT): the command unwinds, so every
temporary output is removed and nothing the user owns is left half-written (exit 143; 130
for Ctrl-C). An ``OSError`` that no stage turned into a UserError (standard output on a full
disk, ...) is printed with its path (standard output when it has none) and reason (exit 1).
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import signal
import sys
import threading

from deltachip import __version__
from common.errors import UserError
from common.outputs import os_reason

# In pipeline order; each is deltachip/commands/<name>.py ('-' in a name is '_' there).
COMMANDS = ["sim", "check-rules", "firmware", "run", "compile", "check", "explain", "merge",
            "chat"]

EPILOG = """examples:
  deltachip sim examples/counter/counter.hdl
  deltachip check-rules examples/counter/counter.hdl
  deltachip firmware build firmware/programs/hello.c -o hello.elf
  deltachip run hello.elf
  deltachip compile examples/counter/counter.hdl -o build/counter
  deltachip check build/counter --steps 64
  deltachip explain build/counter --source examples/counter/counter.hdl:14
  deltachip merge BASE_DIR build/merged --chip build/counter
  deltachip chat build/merged-calc --prompt 'What is 2**100?' --show-trace
"""


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM, so the command unwinds as on Ctrl-C."""


class Parser(argparse.ArgumentParser):
    """argparse with one more hint: an option whose value starts with '-' (``--input
    -7//2``) must be written ``--input=-7//2``."""

    def error(self, message: str):
        m = re.fullmatch(r"argument (-[^: ]+): expected one argument", message)
        if m:
            opt = m.group(1).split("/")[-1]       # the long form of -o/--output
            message += f" (a value that starts with '-' must be attached with '=': {opt}=VALUE)"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="deltachip",
        description="Compile synchronous circuits into Qwen3.5 transformer weights and run them.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"deltachip {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module_name = f"deltachip.commands.{name.replace('-', '_')}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == module_name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    problem = _bad_argument(sys.argv[1:] if argv is None else argv)
    if problem is None and sys.stdout is None:      # started with standard output closed
        problem = ("standard output is closed (started with >&-); give the command an "
                   "output, such as >/dev/null")
    if problem is not None:
        if sys.stderr is not None:
            print(f"deltachip: error: {problem}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = _catch_sigterm()
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("deltachip: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("deltachip: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        return 0
    except RuntimeError as e:
        m = re.fullmatch(r"Symlink loop from (.*)", str(e))     # Path.resolve's, uncaught
        if m is None:
            raise
        print(f"deltachip: error: {m.group(1).strip(chr(39))}: Too many levels of symbolic "
              "links (a symbolic link loop)", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{e.filename}: " if e.filename is not None else ""
        if e.filename is None and _stdout_fails(e):
            where = "standard output: "
        print(f"deltachip: error: {where}{os_reason(e)}", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stdout_fails(e: OSError) -> bool:
    """Whether ``e`` (an OSError with no file name) came from writing standard output: every
    file the commands write is named in their errors, so one of the write errors with no name
    (a full disk or /dev/full, a quota, an I/O error) is standard output's. What waits in its
    buffer is dropped with it, so the exit's own flush says nothing more."""
    if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return False
    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass
    return True


def _bad_argument(argv: list[str]) -> str | None:
    """Why a command-line argument cannot be taken: one that is not valid UTF-8 (Python
    holds its bytes as surrogate escapes, which no name, text or number of deltachip's can
    be, and which standard output cannot print); None when all are fine."""
    for i, arg in enumerate(argv):
        if any("\udc80" <= c <= "\udcff" for c in arg):
            attached = arg.startswith("--") and "=" in arg
            shown = os.fsencode(arg.split("=", 1)[1] if attached else arg).decode(
                "utf-8", "backslashreplace")
            prev = argv[i - 1] if i else ""
            what = (f"the value of {arg.split('=')[0]}" if attached
                    else f"the value of {prev}" if prev.startswith("-") and "=" not in prev
                    and not _is_number(prev) else f"argument {i + 1}")
            return (f"{what} ('{shown}') is not valid UTF-8; deltachip takes names and text "
                    "in UTF-8 (rename the file, or fix the text's encoding)")
    return None


def _is_number(arg: str) -> bool:
    try:
        float(arg)
        return True
    except ValueError:
        return False


def _catch_sigterm():
    """Make SIGTERM raise :class:`Terminated` (main thread only); returns the handler to
    restore afterwards, or None when none was installed."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_term(signum, frame):
        raise Terminated()
    return signal.signal(signal.SIGTERM, on_term)


if __name__ == "__main__":
    sys.exit(main())
