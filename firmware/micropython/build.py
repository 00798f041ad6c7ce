"""Build MicroPython v1.28.0 for the deltachip core: ``micropython.elf``, cached.

The port is the project's own (this folder: ``mpconfigport.h``, ``mphalport.h``,
``qstrdefsport.h``, ``main.c``); MicroPython's ``py/`` core and ``shared/runtime/gchelper_generic.c``
come from the release, with the port's speed edits to ``py/parse.c``, ``py/lexer.c``,
``py/qstr.c`` and ``py/gc.c`` applied (``patches.py``: the same language and results, fewer instructions).
No make: this script does what MicroPython's ``py/mkrules.mk`` does, running MicroPython's own
generators with ``sys.executable``:

1. ``genhdr/mpversion.h`` (``py/makeversionhdr.py``, tag and commit given, no git), and the
   port's ``genhdr/parse_first.h`` (each grammar rule's FIRST set, from ``py/grammar.h``
   preprocessed with the port's config: :func:`patches.parse_first_header`);
2. the sources preprocessed with ``-DNO_QSTR`` (``py/makeqstrdefs.py pp``, zig cc ``-E``),
   then ``split``/``cat`` into the collected qstrs, modules and root pointers;
3. ``genhdr/qstrdefs.generated.h`` (``py/makeqstrdata.py`` on ``py/qstrdefs.h`` + the port's
   + the collected qstrs, put through the preprocessor with the port's flags),
   ``genhdr/moduledefs.h`` (``py/makemoduledefs.py``), ``genhdr/root_pointers.h``
   (``py/make_root_pointers.py``), the port's ``genhdr/qstr_hash_table.h``
   (:func:`patches.qstr_hash_table_header`);
4. every source compiled with zig cc (RV32IM + Zba, ilp32, soft float: the toolchain's flags,
   picolibc's headers) into ``libmicropython.a``, ``DELTACHIP_JOBS`` at a time;
5. ``main.c`` linked with it and the C SDK (picolibc, libm) by :func:`firmware.toolchain.build`.

The result is cached in ``$DELTACHIP_CACHE/micropython-<digest>/`` (``micropython.elf``,
``lib/libmicropython.a``, ``genhdr/``, ``BUILD.json``, MicroPython's ``LICENSE``), the digest
covering the source's digest, the port's files, the flags, picolibc's build and this script's
revision. Where the source comes from (:data:`SOURCE`, the C SDK's mechanism,
:class:`firmware.sdk.picolibc.VendorSource`), first found:

1. ``DELTACHIP_MICROPYTHON=PATH`` (a ``.tar.gz`` or an unpacked source folder);
2. ``../shared/vendor/micropython-1.28.0.tar.gz`` beside the checkout (the project's offline
   copy, a subset of the release; sha256 :data:`VENDOR_SHA256`);
3. the GitHub archive of tag ``v1.28.0``, downloaded once into the cache and checked by the
   commit id git-archive writes (:data:`UPSTREAM_COMMIT`).

``python -m firmware.micropython.build [-o OUT.elf]`` builds (or finds) it and prints the path.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.errors import UserError
from firmware import toolchain
from firmware.micropython import patches
from firmware.sdk import picolibc

VERSION = "1.28.0"
UPSTREAM_TAG = "v1.28.0"
UPSTREAM_COMMIT = "e0e9fbb17ed6fd06bb76e266ae554784c9c80804"
UPSTREAM_URL = f"https://github.com/micropython/micropython/archive/refs/tags/{UPSTREAM_TAG}.tar.gz"
#: sha256 of the project's subset in ../shared/vendor/ (its README.md)
VENDOR_SHA256 = "4c84fd91eb8a16cb96cc23bf1bf1f4293e4fa006807e59171743613d6904ea3c"
TARBALL_NAME = f"micropython-{VERSION}.tar.gz"
#: bump when the build below changes in a way that changes the ELF
BUILD_REVISION = 2

PORT_DIR = Path(__file__).resolve().parent
#: the port's files: all of them go into the digest; main.c is linked by the toolchain;
#: patches.py edits the release's py/ sources
PORT_FILES = ("mpconfigport.h", "mphalport.h", "qstrdefsport.h", "main.c", "patches.py")
#: MicroPython sources besides py/*.c (the register-scanning GC helper, in C)
SHARED_SOURCES = ("shared/runtime/gchelper_generic.c",)
#: the core is compiled for size (at -O2 its code overflows the 256 KiB code ROM by 19 KiB),
#: but for speed where the VM spends its time (HOT)
OPT = "-Os"
HOT_OPT = "-O2"
HOT = ("py/vm.c", "py/gc.c", "py/map.c", "py/runtime.c", "py/obj.c", "py/mpz.c",
       "py/objint_mpz.c", "py/qstr.c", "py/objfun.c", "py/bc.c", "py/objtype.c",
       "py/objlist.c", "py/objdict.c", "py/malloc.c", "py/objint.c", "py/smallint.c",
       "py/parse.c", "py/lexer.c", "py/emitbc.c", "py/compile.c", "py/scope.c")
#: MicroPython's flags on top of the toolchain's: C99 with GNU extensions, asserts off
#: (as in MicroPython's release builds)
CFLAGS = ["-std=gnu99", "-DNDEBUG", "-Wno-unused-but-set-variable", "-Wno-unused-function"]
#: the stack (bytes): the compiler and the VM recurse; the rest of RAM is the GC heap
STACK_SIZE = 6144


class MicroPythonError(UserError):
    """MicroPython could not be found, fetched or built (the text starts with ``error:``)."""

    def __init__(self, message: str):
        super().__init__(message if message.startswith("error: ") else f"error: {message}")


SOURCE = picolibc.VendorSource(
    name="micropython", env="DELTACHIP_MICROPYTHON", tarball=TARBALL_NAME, url=UPSTREAM_URL,
    tag=UPSTREAM_TAG, commit=UPSTREAM_COMMIT, markers=("py", "shared"),
    error=MicroPythonError, suffixes=(".c", ".h", ".py", ".S", ".s"))


def _log(msg: str) -> None:
    print(f"micropython: {msg}", file=sys.stderr, flush=True)


def build_key(src_digest: str, libc_dir: Path) -> str:
    port = {name: hashlib.sha256((PORT_DIR / name).read_bytes()).hexdigest()
            for name in PORT_FILES}
    blob = json.dumps({"src": src_digest, "port": port, "opt": OPT, "hot": [HOT_OPT, *HOT],
                       "cflags": CFLAGS,
                       "common": toolchain.COMMON_FLAGS, "target": toolchain.ZIG_TARGET,
                       "shared": SHARED_SOURCES, "stack": STACK_SIZE, "libc": libc_dir.name,
                       "rev": BUILD_REVISION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def elf_path() -> Path:
    """The cached ``micropython.elf``, built on first use (a few minutes on one core)."""
    src, digest = SOURCE.find()
    libc_dir = toolchain.picolibc_dir()
    dest = picolibc.cache_root() / f"micropython-{build_key(digest, libc_dir)}"
    return picolibc.cached_build(dest, "micropython.elf",
                                 lambda work: _build(src, work, libc_dir)) / "micropython.elf"


def build(output: Path) -> Path:
    """Write MicroPython's ELF to ``output`` (from the cache; built there on first use)."""
    output = Path(output)
    from common.outputs import replace_on_success
    elf = elf_path()
    with replace_on_success(output, "error: ", toolchain.ToolchainError, make_parents=True) as tmp:
        shutil.copyfile(elf, tmp)
    return output


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, **kw)
    if p.returncode != 0:
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode(errors="replace")
        out = p.stdout if isinstance(p.stdout, str) else p.stdout.decode(errors="replace")
        raise MicroPythonError(f"error: MicroPython's build: {what} failed:\n{(err + out).strip()[-4000:]}")
    return p


def _build(src: Path, work: Path, libc_dir: Path) -> None:
    start = time.monotonic()
    _log(f"building MicroPython {VERSION} for rv32im (ilp32, soft float) from {src} into the "
         "cache (once; a few minutes)")
    root = SOURCE.unpack(src, work / "src")
    patches.apply(root, MicroPythonError)
    out = work / "out"
    gen = out / "genhdr"
    gen.mkdir(parents=True)
    py = [sys.executable]
    sources = sorted((root / "py").glob("*.c")) + [root / s for s in SHARED_SOURCES]
    sources.append(PORT_DIR / "main.c")
    includes = [f"-I{d}" for d in (PORT_DIR, root, out, toolchain.RUNTIME_DIR, libc_dir / "include")]
    cflags = [*toolchain.ZIG_TARGET, *toolchain.COMMON_FLAGS, "-DDELTACHIP_SDK=1",
              *CFLAGS, *includes]
    cc = [sys.executable, "-m", "ziglang", "cc"]

    # 1. the version header (tag and commit given: no git)
    env = {**os.environ, "MICROPY_GIT_TAG": UPSTREAM_TAG, "MICROPY_GIT_HASH": UPSTREAM_COMMIT[:10]}
    _run([*py, str(root / "py" / "makeversionhdr.py"), str(gen / "mpversion.h")],
         "makeversionhdr.py", env=env)
    probe = _run([*cc, *cflags, "-DNO_QSTR", "-E", "-x", "c", "-"], "preprocessing py/grammar.h",
                 input=patches.GRAMMAR_PROBE, text=True).stdout
    (gen / "parse_first.h").write_text(patches.parse_first_header(probe))
    # 2. qstrs, modules and root pointers found in the preprocessed sources (one zig cc -E
    #    per file, as makeqstrdefs.py pp would run it: zig cc with several files at once
    #    calls clang without zig's own headers), split and collected by makeqstrdefs.py
    mk = str(root / "py" / "makeqstrdefs.py")
    last = gen / "qstr.i.last"
    jobs = max(1, int(os.environ.get("DELTACHIP_JOBS", "1")))

    def preprocess(s: Path) -> bytes:
        return _run([*cc, *cflags, "-DNO_QSTR", "-E", str(s)], f"preprocessing {s.name}").stdout

    with ThreadPoolExecutor(jobs) as ex:
        last.write_bytes(b"".join(ex.map(preprocess, sources)))
    for mode in ("qstr", "module", "root_pointer"):
        _run([*py, mk, "split", mode, str(last), str(gen / mode), "_"], f"makeqstrdefs.py split {mode}")
        _run([*py, mk, "cat", mode, "_", str(gen / mode), str(gen / f"{mode}.collected")],
             f"makeqstrdefs.py cat {mode}")
    # 3. the generated headers
    defs = "".join(p.read_text() for p in (root / "py" / "qstrdefs.h", PORT_DIR / "qstrdefsport.h",
                                           gen / "qstr.collected"))
    quoted = "\n".join(f'"{line}"' if line.startswith("Q(") else line for line in defs.splitlines())
    pre = _run([*cc, *cflags, "-E", "-x", "c", "-"], "preprocessing the qstr definitions",
               input=quoted + "\n", text=True).stdout
    unquoted = "\n".join(line[1:-1] if line.startswith('"Q(') and line.endswith('"') else line
                         for line in pre.splitlines())
    (gen / "qstrdefs.preprocessed.h").write_text(unquoted + "\n")
    for script, arg, header in (("makeqstrdata.py", "qstrdefs.preprocessed.h", "qstrdefs.generated.h"),
                                ("makemoduledefs.py", "module.collected", "moduledefs.h"),
                                ("make_root_pointers.py", "root_pointer.collected", "root_pointers.h")):
        p = _run([*py, str(root / "py" / script), str(gen / arg)], script, text=True)
        (gen / header).write_text(p.stdout)
    (gen / "qstr_hash_table.h").write_text(
        patches.qstr_hash_table_header((gen / "qstrdefs.generated.h").read_text()))
    # 4. the core, compiled into libmicropython.a
    objdir = work / "obj"
    objdir.mkdir()
    core = sources[:-1]

    commands = []
    for i, s in enumerate(core):
        opt = HOT_OPT if s.relative_to(root).as_posix() in HOT else OPT
        obj = objdir / f"{i:03d}_{s.stem}.o"
        commands.append((s.relative_to(root).as_posix(),
                         [*cc, opt, *cflags, "-c", str(s), "-o", str(obj)], obj))
    lib = out / "lib" / "libmicropython.a"
    picolibc.compile_archive(commands, lib, _log, MicroPythonError, start, every=20)
    # 5. the ELF: the port's main.c, the core, the C SDK
    warnings: list[str] = []
    toolchain.build([PORT_DIR / "main.c"], out / "micropython.elf", opt=HOT_OPT, libc="picolibc",
                    include_dirs=[PORT_DIR, root, out], defines=["NDEBUG"],
                    cflags=[c for c in CFLAGS if c.startswith("-W") or c.startswith("-std")],
                    stack_size=STACK_SIZE, libs=[lib], warnings=warnings.append)
    for lic in ("LICENSE",):
        if (root / lic).is_file():
            shutil.copy2(root / lic, out / lic)
    for p in gen.iterdir():
        if p.is_dir() or p.name.startswith("qstr.i"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    (out / "BUILD.json").write_text(json.dumps(
        {"version": VERSION, "source": str(src), "target": toolchain.ZIG_TARGET, "opt": OPT,
         "hot": {"opt": HOT_OPT, "files": HOT},
         "cflags": CFLAGS, "stack_size": STACK_SIZE, "picolibc": libc_dir.name,
         "warnings": "\n".join(warnings), "seconds": round(time.monotonic() - start, 1)},
        indent=1) + "\n")
    _log(f"built in {time.monotonic() - start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m firmware.micropython.build",
                                 description="Build (or find in the cache) MicroPython's ELF.")
    ap.add_argument("-o", "--output", type=Path, help="also copy the ELF here")
    args = ap.parse_args(argv)
    try:
        path = build(args.output) if args.output else elf_path()
    except UserError as e:
        print(str(e), file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
