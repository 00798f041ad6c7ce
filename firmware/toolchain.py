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
import re
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
LIBC_CHOICES = ("auto", "picolibc", "none")
SDK_DIR = FIRMWARE_DIR / "sdk"
SDK_RUNTIME_SOURCES = (RUNTIME_DIR / "crt0.S", SDK_DIR / "sdk_runtime.c")
#: headers the compiler itself provides (freestanding C): including only these (and the
#: project's own) keeps a program on the small runtime; any other <header> means picolibc
FREESTANDING_HEADERS = frozenset({
    "stdint.h", "stddef.h", "stdbool.h", "stdarg.h", "limits.h", "float.h", "iso646.h",
    "stdalign.h", "stdnoreturn.h", "stdatomic.h", "deltachip.h"})

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
# zig cc also defines NDEBUG at -O1 and above, which silently turns assert() off: -UNDEBUG
# (a user's -DNDEBUG comes later and wins).
ZIG_EXTRA = ["-g", "-fno-sanitize=all", "-UNDEBUG"]
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
                     include_dirs: list[Path], extra: list[str] = (),
                     libs: list[Path] = ()) -> list[str]:
    """The full command line that builds ``sources`` into the ELF ``output``.

    ``compiler`` is ``"zig"`` or ``"gcc"`` (already resolved); ``sources`` include the runtime;
    ``extra`` are flags (-D, user flags) placed after the project's; ``libs`` are archives
    linked after the sources (picolibc's libc.a and libm.a).
    """
    includes = [f"-I{d}" for d in include_dirs]
    link = [f"-T{LINKER_SCRIPT}", "-Wl,--gc-sections"]
    if compiler == "zig":
        return [sys.executable, "-m", "ziglang", "cc", *ZIG_TARGET, opt, *ZIG_EXTRA, *COMMON_FLAGS,
                *includes, *extra, *link, "-o", str(output), *map(str, sources),
                *map(str, libs)]
    # The multilib is chosen from -march: rv32im_zba matches none, so ask for rv32im's.
    libgcc = subprocess.run([GCC, *GCC_LIBGCC_TARGET, "-print-libgcc-file-name"],
                            capture_output=True, text=True, check=False).stdout.strip()
    if not libgcc or not Path(libgcc).is_file():
        raise ToolchainError(f"error: {GCC} has no rv32im/ilp32 libgcc.a "
                             f"(-print-libgcc-file-name gave {libgcc!r})")
    return [GCC, *GCC_TARGET, opt, *COMMON_FLAGS, "-nostdlib", "-nostartfiles", *includes,
            *extra, *link, "-o", str(output), *map(str, sources), *map(str, libs), libgcc]


_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def uses_libc(sources: list[Path], include_dirs: list[Path] = ()) -> bool:
    """True when a source, or a project header it includes with ``"..."``, includes a C
    library header (``<stdio.h>``, ``<math.h>``, ...: anything but the compiler's own
    freestanding headers, :data:`FREESTANDING_HEADERS`)."""
    seen: set[Path] = set()
    todo = [Path(s) for s in sources]
    while todo:
        path = todo.pop()
        try:
            key = path.resolve()
            if key in seen:
                continue
            seen.add(key)
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for kind, name in _INCLUDE.findall(text):
            if kind == "<" and name not in FREESTANDING_HEADERS:
                return True
            if kind == '"' and Path(name).name != "deltachip.h":
                for d in (path.parent, *include_dirs):
                    if (Path(d) / name).is_file():
                        todo.append(Path(d) / name)
                        break
    return False


def picolibc_dir() -> Path:
    """The built picolibc (``include/``, ``lib/``), built into the cache on first use."""
    from firmware.sdk import picolibc
    try:
        return picolibc.library_dir()
    except picolibc.PicolibcError as e:
        raise ToolchainError(f"error: the C SDK: {e}") from None


def build(sources: list[Path], output: Path, opt: str = "-O2", compiler: str = "auto",
          runtime: bool = True, defines: list[str] = (), include_dirs: list[Path] = (),
          cflags: list[str] = (), libc: str = "auto", stack_size: int | None = None,
          warnings=None, libs: list[Path] = ()) -> Path:
    """Compile and link ``sources`` (C ``.c`` and assembly ``.S``/``.s``) into an ELF.

    Takes the source paths, the output ELF path, an optimisation flag (one of
    ``OPT_LEVELS``), the compiler (``"zig"``, ``"gcc"`` or ``"auto"``) and whether to link
    the runtime (crt0 + ``runtime.c``; without it the sources must define ``_start``);
    ``defines`` (``NAME`` or ``NAME=VALUE``, passed as ``-D``), ``include_dirs`` (``-I``,
    searched before the sources' folders), ``cflags`` (extra compiler/linker flags, after
    the project's), ``libc`` (``"picolibc"``: the C SDK, crt0 + ``firmware/sdk/sdk_runtime.c``
    + picolibc's libc.a and libm.a, built into the cache on first use; ``"none"``: the small
    runtime; ``"auto"``: picolibc when a source includes a C library header, see
    :func:`uses_libc`), ``libs`` (static archives linked after the sources, before the C
    library: MicroPython's core), ``stack_size`` (bytes; default the linker script's 8 KiB) and
    ``warnings`` (called with the compiler's warnings when a build succeeds with some;
    default: printed to stderr). Returns ``output`` (the written ELF). Raises
    :class:`ToolchainError` on bad arguments, a missing compiler, or a compiler failure (the
    message includes the compiler's output).
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
    if libc not in LIBC_CHOICES:
        raise ToolchainError(f"error: unknown libc {libc!r} (choose from {', '.join(LIBC_CHOICES)})")
    user_dirs = [Path(d) for d in include_dirs]
    for d in user_dirs:
        if not d.is_dir():
            raise ToolchainError(f"error: -I {d}: no such folder")
    extra = [f"-D{d}" for d in defines]
    if stack_size is not None:
        if stack_size < 1024 or stack_size % 16:
            raise ToolchainError(f"error: stack size {stack_size}: must be a multiple of 16, "
                                 "at least 1024")
    extra += list(cflags)
    sdk = runtime and (libc == "picolibc" or (libc == "auto" and uses_libc(sources, user_dirs)))
    libs = [Path(lib) for lib in libs]
    if sdk:
        if chosen != "zig":
            raise ToolchainError("error: the C SDK (picolibc) is built with zig: use "
                                 "--compiler zig (pip install ziglang)")
        lib = picolibc_dir()
        user_dirs.append(lib / "include")
        extra.insert(0, "-DDELTACHIP_SDK=1")
        libs += [lib / "lib" / "libc.a", lib / "lib" / "libm.a"]
    runtime_sources = [*SDK_RUNTIME_SOURCES] if sdk else [*RUNTIME_SOURCES]
    all_sources = (runtime_sources if runtime else []) + sources
    include_dirs = [RUNTIME_DIR, *user_dirs, *dict.fromkeys(s.resolve().parent for s in sources)]
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
            if stack_size is not None:
                # zig's linker driver takes no --defsym: an absolute symbol from assembly
                stack = work / "stack_size.S"
                stack.write_text(f".globl __stack_size\n.set __stack_size, {stack_size}\n")
                all_sources = [*all_sources, stack]
            cmd = compiler_command(chosen, all_sources, elf, opt, include_dirs, extra, libs)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                no_room = _no_room(elf)
                if no_room:
                    raise ToolchainError(f"error: cannot write {output}: {no_room}")
                message = (proc.stderr + proc.stdout).strip() or _status_text(proc.returncode)
                if "RAM overflow" in message or "will not fit in region 'RAM'" in message:
                    message += RAM_HINT
                raise ToolchainError(f"error: {chosen} failed to build {output.name}:\n{message}")
            os.replace(elf, tmp)
            shown = (proc.stderr + proc.stdout).strip()
            if shown:
                if warnings is None:
                    print(shown, file=sys.stderr)
                else:
                    warnings(shown)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return output


RAM_HINT = ("\nnote: RAM is 32 KiB (0x80000-0x88000): the stack (8 KiB unless set with "
            "--stack-size), the 1 KiB input buffer, .data and .bss must fit in it, and the "
            "heap for malloc is what is left (docs/firmware.md)")


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

