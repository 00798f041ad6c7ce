"""``deltachip firmware``: build RV32IM + Zba firmware ELFs and list the shipped programs.

``deltachip firmware build SRC... -o OUT.elf [-O2] [-D NAME[=VALUE]] [-I DIR]
[--cflag=FLAG] [--libc auto|picolibc|none] [--stack-size N] [--compiler zig|gcc|auto]`` compiles C and assembly sources with the runtime (or the C SDK: picolibc, when
a source includes a C library header) and the project's memory map
(:mod:`firmware.toolchain`); a shipped program's name (``hello``, ``calc``, …) may stand
for its sources. The compiler's warnings are printed on stderr when the build succeeds.
``deltachip firmware list`` prints the shipped programs and their sources.
Exit status 0 on success, 2 on a build error (the compiler's message is printed).
"""
from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """examples:
  deltachip firmware build firmware/programs/hello.c -o hello.elf
  deltachip firmware build calc -o calc.elf            # a shipped program by name
  deltachip firmware build micropython -o mp.elf       # MicroPython (built once, cached)
  deltachip firmware build main.c util.c start.S -o prog.elf -Os --compiler gcc
  deltachip firmware build bench.c -o bench.elf -DITERATIONS=10 -I include -O3
  deltachip firmware build app.c -o app.elf --stack-size 16384 --cflag=-Wextra
  deltachip firmware list

A program that includes a C library header (<stdio.h>, <math.h>, ...) is linked with the
C SDK, picolibc (printf with %f, malloc, qsort, libm, setjmp, ...), built into the cache
on first use. Memory map, runtime, the C SDK and the input buffer: docs/firmware.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "firmware", help="build firmware ELFs for the RV32IM+Zba CPU",
        description="Build C/assembly firmware for the deltachip CPU (code ROM 0x0, rodata "
                    "ROM 0x40000, RAM 0x80000), or list the shipped programs.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="firmware_command", metavar="ACTION")
    b = sub.add_parser("build", help="compile and link sources into an ELF",
                       description="Compile C (.c) and assembly (.S) sources together with the "
                                   "runtime (crt0, printf, memcpy, ...) into an ELF.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("sources", nargs="+", metavar="SRC",
                   help="source files (.c, .S, .s), or the name of a shipped program")
    b.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.elf",
                   help="the ELF to write (written atomically)")
    b.add_argument("-O", dest="opt", default="2", choices=["0", "1", "2", "3", "s", "z"],
                   help="optimisation level (default -O2)")
    b.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="define a preprocessor macro (repeatable)")
    b.add_argument("-I", dest="include_dirs", action="append", default=[], type=Path,
                   metavar="DIR", help="add a folder to the include path (repeatable)")
    b.add_argument("--cflag", dest="cflags", action="append", default=[], metavar="FLAG",
                   help="an extra compiler or linker flag, e.g. --cflag=-Wextra or "
                        "--cflag=-Wl,--print-memory-usage (repeatable)")
    b.add_argument("--libc", default="auto", choices=["auto", "picolibc", "none"],
                   help="the C library: picolibc (the C SDK), none (the small runtime), or "
                        "auto (picolibc when a source includes a C library header; default)")
    b.add_argument("--stack-size", type=int, default=None, metavar="BYTES",
                   help="the stack's size (default 8192; a multiple of 16): the stack is at "
                        "the bottom of RAM and an overflow faults")
    b.add_argument("--compiler", default="auto", choices=["auto", "zig", "gcc"],
                   help="zig (python -m ziglang cc), gcc (riscv64-unknown-elf-gcc), or auto "
                        "(zig when installed, else gcc)")
    b.set_defaults(func=build_command)
    ls = sub.add_parser("list", help="list the shipped programs",
                        description="List the shipped firmware programs and their sources.",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.set_defaults(func=list_command)
    p.set_defaults(func=lambda args: _no_action(p))


def _no_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _resolve_sources(names: list[str]) -> list[Path]:
    """Paths as given; a bare name of a shipped program (no such file) expands to its sources."""
    from firmware import toolchain
    programs = toolchain.shipped_programs()
    sources: list[Path] = []
    for name in names:
        path = Path(name)
        if not path.exists() and name in programs:
            sources.extend(programs[name])
        else:
            sources.append(path)
    return sources


#: shipped programs built by their own build script, not from sources: name -> its module
BUILT_PROGRAMS = {"micropython": "firmware.micropython.build"}


def build_command(args: argparse.Namespace) -> int:
    from firmware import toolchain
    if len(args.sources) == 1 and args.sources[0] in BUILT_PROGRAMS \
            and not Path(args.sources[0]).exists():
        return _build_program(args)
    sources = _resolve_sources(args.sources)
    from common.clobber import refuse_inputs_as_outputs
    refuse_inputs_as_outputs([("-o", args.output)],
                             [("a source file", s) for s in sources if Path(s).is_file()])
    out = toolchain.build(sources, args.output, opt=f"-O{args.opt}", compiler=args.compiler,
                          defines=args.defines, include_dirs=args.include_dirs,
                          cflags=args.cflags, libc=args.libc,
                          stack_size=args.stack_size)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


def _build_program(args: argparse.Namespace) -> int:
    """A program with a build script of its own (MicroPython): its flags are fixed."""
    import importlib
    from common.errors import UserError
    name = args.sources[0]
    if (args.opt != "2" or args.defines or args.include_dirs or args.cflags
            or args.libc != "auto" or args.stack_size is not None or args.compiler == "gcc"):
        raise UserError(f"error: {name} is built with fixed flags (docs/firmware.md): "
                        "-O, -D, -I, --cflag, --libc, --stack-size and --compiler do not apply")
    out = importlib.import_module(BUILT_PROGRAMS[name]).build(args.output)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


def list_command(args: argparse.Namespace) -> int:
    from firmware import toolchain
    root = toolchain.FIRMWARE_DIR.parent
    for name, sources in toolchain.shipped_programs().items():
        shown = " ".join(str(s.relative_to(root)) if s.is_relative_to(root) else str(s)
                         for s in sources)
        main = next((s for s in sources if s.stem == name), sources[0])
        print(f"{name:<10} {toolchain.describe(main)}\n{'':<10} {shown}")
    print(f"{'micropython':<10} MicroPython 1.28.0: runs the Python program in the input "
          f"buffer.\n{'':<10} firmware/micropython/ (built by firmware/micropython/build.py)")
    return 0
