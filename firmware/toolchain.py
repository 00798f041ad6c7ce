"""Build RV32IM + Zba firmware ELFs for the deltachip CPU.

:func:`build` compiles C and assembly sources together with the runtime
(``firmware/runtime``: crt0, printf, memcpy, …) and links them with the project's memory map
(``firmware/runtime/link.ld``): code ROM at 0x0, rodata ROM at 0x40000, RAM at 0x80000.

Two compilers are supported:

* ``zig``: ``python -m ziglang cc -target riscv32-freestanding-none
  -mcpu=generic_rv32+m+zba`` from the ``ziglang`` PyPI package (a project dependency);
  zig links its compiler-rt, which provides the 64-bit division helpers (``__udivdi3`` …).
* ``gcc``: Debian's ``riscv64-unknown-elf-gcc -march=rv32im_zba -mabi=ilp32``, linked with
  ``-nostdlib`` plus the rv32im/ilp32 ``libgcc.a`` passed explicitly.

``compiler="auto"`` picks zig when the ``ziglang`` package is importable, else gcc.
A compiler failure raises :class:`ToolchainError` (a :class:`common.errors.UserError`)
carrying the compiler's own message. The ELF is written to a temporary file next to
``output`` and renamed into place, so a failed build never leaves a half-written ELF.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common.errors import UserError
from common.outputs import os_reason, replace_on_success, special_kind, temp_name_prefix

FIRMWARE_DIR = Path(__file__).resolve().parent
RUNTIME_DIR = FIRMWARE_DIR / "runtime"
PROGRAMS_DIR = FIRMWARE_DIR / "programs"
CALC_DIR = FIRMWARE_DIR / "calc"
ISA_TESTS_DIR = FIRMWARE_DIR / "isa_tests"
LINKER_SCRIPT = RUNTIME_DIR / "link.ld"
RUNTIME_SOURCES = (RUNTIME_DIR / "crt0.S", RUNTIME_DIR / "runtime.c")

OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Oz")
COMPILERS = ("auto", "zig", "gcc")
SOURCE_SUFFIXES = (".c", ".S", ".s")
GCC = "riscv64-unknown-elf-gcc"

# Flags shared by both compilers: freestanding C, no unwind tables, dead code removed.
COMMON_FLAGS = [
    "-ffreestanding", "-fno-builtin", "-fomit-frame-pointer",
    "-fno-unwind-tables", "-fno-asynchronous-unwind-tables",
    "-ffunction-sections", "-fdata-sections", "-Wall",
]
ZIG_TARGET = ["-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m+zba"]
# zig strips the symbol table at -Os/-Oz (ReleaseSmall); -g keeps it: loaders need the
# symbols (__input_buffer, __input_size), and debug sections are never loaded. At -O0 zig
# turns on UBSan, whose runtime does not fit 32 KiB of RAM: -fno-sanitize=all.
ZIG_EXTRA = ["-g", "-fno-sanitize=all"]
GCC_TARGET = ["-march=rv32im_zba", "-mabi=ilp32"]
GCC_LIBGCC_TARGET = ["-march=rv32im", "-mabi=ilp32"]


class ToolchainError(UserError):
    """The firmware could not be built: bad arguments, a missing compiler, or a compile error."""


def zig_available() -> bool:
    """True when the ``ziglang`` PyPI package is importable."""
    return importlib.util.find_spec("ziglang") is not None


def gcc_available() -> bool:
    """True when ``riscv64-unknown-elf-gcc`` is on PATH."""
    return shutil.which(GCC) is not None


def resolve_compiler(compiler: str = "auto") -> str:
    """Return ``"zig"`` or ``"gcc"`` for a requested compiler, checking it is installed."""
    if compiler not in COMPILERS:
        raise ToolchainError(f"error: unknown compiler {compiler!r} (choose from zig, gcc, auto)")
    if compiler == "auto":
        if zig_available():
            return "zig"
        if gcc_available():
            return "gcc"
        raise ToolchainError("error: no RISC-V compiler found: install the 'ziglang' package "
                             f"(pip install ziglang) or Debian's gcc-riscv64-unknown-elf")
    if compiler == "zig" and not zig_available():
        raise ToolchainError("error: zig not found: pip install ziglang")
    if compiler == "gcc" and not gcc_available():
        raise ToolchainError(f"error: {GCC} not found: apt-get install gcc-riscv64-unknown-elf")
    return compiler


def compiler_command(compiler: str, sources: list[Path], output: Path, opt: str,
                     include_dirs: list[Path]) -> list[str]:
    """The full command line that builds ``sources`` into the ELF ``output``.

    ``compiler`` is ``"zig"`` or ``"gcc"`` (already resolved); ``sources`` include the runtime.
    """
    includes = [f"-I{d}" for d in include_dirs]
    link = [f"-T{LINKER_SCRIPT}", "-Wl,--gc-sections"]
    if compiler == "zig":
        return [sys.executable, "-m", "ziglang", "cc", *ZIG_TARGET, opt, *ZIG_EXTRA, *COMMON_FLAGS,
                *includes, *link, "-o", str(output), *map(str, sources)]
    # The multilib is chosen from -march: rv32im_zba matches none, so ask for rv32im's.
    libgcc = subprocess.run([GCC, *GCC_LIBGCC_TARGET, "-print-libgcc-file-name"],
                            capture_output=True, text=True, check=False).stdout.strip()
    if not libgcc or not Path(libgcc).is_file():
        raise ToolchainError(f"error: {GCC} has no rv32im/ilp32 libgcc.a "
                             f"(-print-libgcc-file-name gave {libgcc!r})")
    return [GCC, *GCC_TARGET, opt, *COMMON_FLAGS, "-nostdlib", "-nostartfiles", *includes,
            *link, "-o", str(output), *map(str, sources), libgcc]


def build(sources: list[Path], output: Path, opt: str = "-O2", compiler: str = "auto",
          runtime: bool = True) -> Path:
    """Compile and link ``sources`` (C ``.c`` and assembly ``.S``/``.s``) into an ELF.

    Takes the source paths, the output ELF path, an optimisation flag (one of
    ``OPT_LEVELS``), the compiler (``"zig"``, ``"gcc"`` or ``"auto"``) and whether to link
    the runtime (crt0 + ``runtime.c``; without it the sources must define ``_start``).
    Returns ``output`` (the written ELF). Raises :class:`ToolchainError` on bad arguments, a
    missing compiler, or a compiler failure (the message includes the compiler's output).
    """
    sources = [Path(s) for s in sources]
    output = Path(output)
    if not sources:
        raise ToolchainError("error: no source files given")
    if opt not in OPT_LEVELS:
        raise ToolchainError(f"error: unknown optimisation level {opt!r} "
                             f"(choose from {', '.join(OPT_LEVELS)})")
    for src in sources:
        _check_source(src)
        if src.suffix not in SOURCE_SUFFIXES:
            raise ToolchainError(f"error: {src}: not a C or assembly source "
                                 f"(expected {', '.join(SOURCE_SUFFIXES)})")
    chosen = resolve_compiler(compiler)
    all_sources = ([*RUNTIME_SOURCES] if runtime else []) + sources
    include_dirs = [RUNTIME_DIR, *dict.fromkeys(s.resolve().parent for s in sources)]
    if any(output.resolve() == src.resolve() for src in sources):
        raise ToolchainError(f"error: the output {output} is one of the sources")
    with replace_on_success(output, "error: ", ToolchainError, make_parents=True) as tmp:
        # the compiler writes into a private folder beside the output (the linker makes its
        # own temporaries next to the ELF, and leaves them when it dies on a full disk);
        # the folder goes whatever happens, and sweep_stale knows its name after a kill
        try:
            work = Path(tempfile.mkdtemp(prefix=temp_name_prefix(output), dir=tmp.parent))
        except OSError as e:
            raise ToolchainError(f"error: cannot write {output}: {os_reason(e)}") from None
        try:
            elf = work / output.name
            cmd = compiler_command(chosen, all_sources, elf, opt, include_dirs)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                no_room = _no_room(elf)
                if no_room:
                    raise ToolchainError(f"error: cannot write {output}: {no_room}")
                message = (proc.stderr + proc.stdout).strip() or _status_text(proc.returncode)
                raise ToolchainError(f"error: {chosen} failed to build {output.name}:\n{message}")
            os.replace(elf, tmp)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return output


def _check_source(src: Path) -> None:
    """ToolchainError unless ``src`` is a readable regular file, saying what it is instead:
    missing, a directory, a device or FIFO (``/dev/zero``), unreadable (the OS's reason)."""
    kind = special_kind(src, follow_symlinks=True)
    if kind == "a directory":
        raise ToolchainError(f"error: {src}: is a directory; give its source files "
                             "(.c, .S, .s) or a shipped program's name "
                             "(`deltachip firmware list`)")
    if kind is not None:
        raise ToolchainError(f"error: {src}: is {kind}, not a source file")
    try:
        with open(src, "rb"):
            pass
    except FileNotFoundError:
        raise ToolchainError(f"error: {src}: no such file") from None
    except OSError as e:
        raise ToolchainError(f"error: {src}: cannot read: {os_reason(e)}") from None


def _status_text(returncode: int) -> str:
    """``exit status 1`` or, for a compiler killed by a signal, ``killed by SIGABRT``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


#: bytes a failed build tries to write where the ELF goes, to tell a full disk from a bug
ROOM_PROBE = 1 << 20


def _no_room(tmp: Path) -> str | None:
    """Why ``tmp`` cannot take an ELF (``No space left on device``, ...), or None if it can:
    a compiler that dies on a full disk often says nothing useful (zig aborts)."""
    try:
        with open(tmp, "wb") as f:
            f.write(bytes(ROOM_PROBE))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return os_reason(e)
    finally:
        try:
            os.truncate(tmp, 0)
        except OSError:
            pass
    return None


def shipped_programs() -> dict[str, list[Path]]:
    """The shipped example programs: name → source files (``firmware/programs/*.c``, calc)."""
    programs = {p.stem: [p] for p in sorted(PROGRAMS_DIR.glob("*.c"))}
    programs["calc"] = sorted(p for p in CALC_DIR.iterdir() if p.suffix in SOURCE_SUFFIXES)
    return programs


def isa_programs() -> list[str]:
    """The ISA suite's program names (``firmware/isa_tests/*.S``), sorted."""
    return sorted(p.stem for p in ISA_TESTS_DIR.glob("*.S"))


def describe(source: Path) -> str:
    """The first sentence of a source file's leading ``/* ... */`` comment ('' if none)."""
    text = Path(source).read_text(errors="replace").lstrip()
    if not text.startswith("/*"):
        return ""
    comment = text[2:text.find("*/")] if "*/" in text else text[2:]
    words = " ".join(line.strip().lstrip("*").strip() for line in comment.splitlines()).strip()
    end = words.find(". ")
    return words if end < 0 else words[:end + 1]

