"""Build picolibc (the C library of embedded RISC-V toolchains) for the deltachip core.

The library is built with the project's own toolchain (zig cc, RV32IM + Zba, ilp32, soft
float) by this script, without meson: the source lists are read from picolibc's own
``CMakeLists.txt`` files (``picolibc_sources(...)``), for the folders in :data:`LIBC_DIRS`
and :data:`LIBM_DIRS`, and ``picolibc.h`` (the configuration header meson would generate) is
written from :data:`CONFIG`. The result is cached under
``$DELTACHIP_CACHE/picolibc-<digest>/`` (``include/``, ``lib/libc.a``, ``lib/libm.a``),
the digest covering the source tarball's sha256, the configuration, the flags and this
script's version, so a change to any of them builds a new copy; an interrupted build leaves
nothing half-written (it builds in a temporary folder renamed into place).

Where the source comes from (:func:`source_tarball`), first found wins:

1. ``DELTACHIP_PICOLIBC=PATH`` (a ``.tar.gz`` or an unpacked source folder);
2. ``../shared/vendor/picolibc-1.8.12.tar.gz`` beside the checkout (the project's offline
   copy, a subset of the release: ``libc/``, ``libm/``, ``picocrt/``, the build files and
   the licenses; sha256 :data:`VENDOR_SHA256`);
3. the upstream release, downloaded once into the cache: the GitHub archive of tag
   :data:`UPSTREAM_TAG` (commit :data:`UPSTREAM_COMMIT`), checked against
   :data:`UPSTREAM_SHA256` when that is set, or else by the commit id that git archives
   carry in the gzip comment / pax header (``git get-tar-commit-id``).

``python -m firmware.sdk.picolibc`` builds (or finds) the library and prints its folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

VERSION = "1.8.12"
UPSTREAM_TAG = "1.8.12"
UPSTREAM_COMMIT = "2ae376c6cdf4fef90ca2388ecf7a07457fa63cff"
UPSTREAM_URL = f"https://github.com/picolibc/picolibc/archive/refs/tags/{UPSTREAM_TAG}.tar.gz"
#: sha256 of the full upstream archive; None: checked by its embedded commit id instead
UPSTREAM_SHA256: str | None = None
#: sha256 of the project's subset in ../shared/vendor/ (its README.md)
VENDOR_SHA256 = "ca0c245072717494f1480a198ac5c1b3bbe7604f8c3d1f880349eb5da8f65aed"
TARBALL_NAME = f"picolibc-{VERSION}.tar.gz"
#: bump when the build below changes in a way that changes the library
BUILD_REVISION = 1

SDK_DIR = Path(__file__).resolve().parent
REPO_ROOT = SDK_DIR.parent.parent

#: libc folders built (relative to libc/); the machine folder comes first, as in meson
LIBC_DIRS = ["machine/riscv", "ctype", "errno", "misc", "search", "signal", "stdio",
             "stdlib", "string", "time", "locale"]
#: libm folders built (relative to libm/); no long double (ld) and no complex
LIBM_DIRS = ["machine/riscv", "math", "common", "fenv"]
#: sources listed by the CMake files that do not build (or make no sense) here
EXCLUDE: set[str] = set()
#: the switches picolibc's CMake files test with if(...)
CMAKE_VARS = {"__IO_FLOAT_EXACT": True, "POSIX_CONSOLE": False, "ENABLE_MALLOC": True}

#: picolibc.h: what meson would generate for this configuration (None: #undef)
CONFIG: dict[str, object] = {
    "__TINY_STDIO": 1,
    "__IO_DEFAULT": "'d'",           # printf/scanf with double (%f %e %g) by default
    "__IO_C99_FORMATS": 1,
    "__IO_LONG_LONG": 1,
    "__IO_FLOAT_EXACT": 1,
    "__IO_SMALL_ULTOA": 1,
    "__SINGLE_THREAD": 1,            # one hart, no locks
    "__ASSERT_VERBOSE": 1,           # assert prints file, line, function and expression
    "__IEEE_LIBM": 1,                # libm returns IEEE results, does not set errno
    "__FAST_STRCMP": 1,
    "__HAVE_BITFIELDS_IN_PACKED_STRUCTS": 1,
    "__IEEEFP_FUNCS": 1,
    "__OBSOLETE_MATH_FLOAT": 0,
    "__OBSOLETE_MATH_DOUBLE": 0,
    "_NEWLIB_VERSION": '"4.3.0"',
    "__NEWLIB_VERSION__": '"4.3.0"',
    "__NEWLIB__": 4, "__NEWLIB_MINOR__": 3, "__NEWLIB_PATCHLEVEL__": 0,
    "_PICOLIBC_VERSION": f'"{VERSION}"', "__PICOLIBC_VERSION__": f'"{VERSION}"',
    "_PICOLIBC__": 1, "_PICOLIBC_MINOR__": 8,
    "__PICOLIBC__": 1, "__PICOLIBC_MINOR__": 8, "__PICOLIBC_PATCHLEVEL__": 12,
}

TARGET = ["-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m+zba"]
CFLAGS = ["-O2", "-g0", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
          "-fno-sanitize=all", "-ffunction-sections", "-fdata-sections",
          "-fno-unwind-tables", "-fno-asynchronous-unwind-tables", "-fno-common",
          "-std=gnu18", "-D_LIBC", "-U_FORTIFY_SOURCE", "-w"]


def _log(msg: str) -> None:
    print(f"picolibc: {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """``$DELTACHIP_CACHE`` or ``~/.cache/deltachip``."""
    env = os.environ.get("DELTACHIP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "deltachip"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: the files of an unpacked source folder that its digest covers
TREE_SUFFIXES = (".c", ".h", ".S", ".s", ".in", ".txt", ".build")


def _tree_digest(folder: Path, suffixes: tuple[str, ...] = TREE_SUFFIXES) -> str:
    """A digest of an unpacked source folder (the files with one of ``suffixes``)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix in suffixes:
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class VendorSource:
    """A third-party release the project builds from source (picolibc here, MicroPython in
    ``firmware/micropython``), found as the module's docstring says: the folder or tarball in
    the environment variable ``env``, else ``../shared/vendor/<tarball>`` beside the checkout,
    else the upstream archive of ``tag`` downloaded once into ``$DELTACHIP_CACHE/downloads/``
    and checked (``upstream_sha256`` when set, else the commit id git-archive writes)."""
    name: str                       # "picolibc"
    env: str                        # "DELTACHIP_PICOLIBC"
    tarball: str                    # the vendor copy's file name
    url: str                        # the upstream archive of the tag
    tag: str
    commit: str
    markers: tuple[str, ...]        # folders that mark the unpacked source's root
    error: type = Exception         # raised when the source cannot be found or fetched
    upstream_sha256: str | None = None
    suffixes: tuple[str, ...] = TREE_SUFFIXES   # what a source folder's digest covers

    def find(self) -> tuple[Path, str]:
        """(the source: a tarball or folder, its digest)."""
        env = os.environ.get(self.env)
        if env:
            path = Path(env).expanduser()
            if path.is_dir():
                return path, _tree_digest(path, self.suffixes)
            if path.is_file():
                return path, sha256_of(path)
            raise self.error(f"{self.env}={env}: no such file or folder")
        vendor = REPO_ROOT.parent / "shared" / "vendor" / self.tarball
        if vendor.is_file():
            return vendor, sha256_of(vendor)
        return self.download(), self.commit

    def download(self) -> Path:
        """The upstream release tarball, fetched once into the cache and checked."""
        dest = cache_root() / "downloads" / f"{self.name}-{self.tag}-{self.commit[:12]}.tar.gz"
        if dest.is_file():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        print(f"{self.name}: downloading {self.url} (set {self.env}=PATH to use a local copy)",
              file=sys.stderr, flush=True)
        tmp = dest.with_suffix(".part")
        try:
            with urllib.request.urlopen(self.url, timeout=60) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise self.error(f"cannot download {self.name} {self.tag} from {self.url}: {e}; "
                             f"set {self.env} to a local tarball or folder") from None
        if self.upstream_sha256 is not None:
            got = sha256_of(tmp)
            if got != self.upstream_sha256:
                tmp.unlink(missing_ok=True)
                raise self.error(f"{self.url}: sha256 {got}, expected {self.upstream_sha256}")
        else:
            commit = archive_commit(tmp)
            if commit != self.commit:
                tmp.unlink(missing_ok=True)
                raise self.error(f"{self.url}: archive of commit {commit}, expected tag "
                                 f"{self.tag} = {self.commit}")
        os.replace(tmp, dest)
        return dest

    def unpack(self, src: Path, into: Path) -> Path:
        """The unpacked source root (the folder holding every one of ``markers``)."""
        if src.is_dir():
            if all((src / m).is_dir() for m in self.markers):
                return src
            raise self.error(f"{src}: not {self.name}'s source (no "
                             f"{', '.join(m + '/' for m in self.markers)} inside)")
        try:
            with tarfile.open(src, "r:gz") as tf:
                try:
                    tf.extractall(into, filter="data")
                except TypeError:  # Python without extraction filters
                    tf.extractall(into)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise self.error(f"{src}: cannot unpack it as a .tar.gz: {e}") from None
        for cand in [into, *sorted(into.iterdir())]:
            if all((cand / m).is_dir() for m in self.markers):
                return cand
        raise self.error(f"{src}: no {', '.join(m + '/' for m in self.markers)} folders inside")


def cached_build(dest: Path, ready: str, build) -> Path:
    """``dest``, built by ``build(work)`` (which fills ``work / "out"``) unless the file
    ``dest / ready`` exists: built in a temporary folder beside it and renamed into place
    under a lock, so concurrent first builds wait for one another and an interrupted one
    leaves nothing."""
    if (dest / ready).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock = dest.with_name(dest.name + ".lock")
    import fcntl
    with open(lock, "w") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        if (dest / ready).is_file():
            return dest
        work = Path(tempfile.mkdtemp(prefix=dest.name + ".tmp-", dir=dest.parent))
        try:
            build(work)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(work / "out", dest)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return dest


def compile_archive(commands: list[tuple[str, list[str], Path]], archive: Path, log, error,
                    start: float, every: int = 50) -> None:
    """Run the compiler ``commands`` (``(name, argv, object file)``), ``DELTACHIP_JOBS`` at
    a time (default 1), saying ``N/M compiled (S s)`` through ``log`` every ``every`` files,
    then archive the objects into ``archive`` with zig's ar; ``error`` (an exception class)
    with the compiler's messages when some fail."""
    def compile_one(cmd: tuple[str, list[str], Path]) -> Path | str:
        name, argv, obj = cmd
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode != 0:
            return f"{name}:\n{(p.stderr + p.stdout).strip()}"
        return obj

    jobs = max(1, int(os.environ.get("DELTACHIP_JOBS", "1")))
    objs, failed = [], []
    with ThreadPoolExecutor(jobs) as ex:
        for n, obj in enumerate(ex.map(compile_one, commands), 1):
            (objs if isinstance(obj, Path) else failed).append(obj)
            if n % every == 0 or n == len(commands):
                log(f"{n}/{len(commands)} compiled ({time.monotonic() - start:.0f} s)")
    if failed:
        raise error(f"{len(failed)} sources of {archive.name} failed to compile:\n"
                    + "\n".join(failed))
    archive.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([sys.executable, "-m", "ziglang", "ar", "rcs", str(archive),
                        *map(str, objs)], capture_output=True, text=True)
    if p.returncode != 0:
        raise error(f"ar failed for {archive.name}: {p.stderr.strip()}")


class PicolibcError(Exception):
    """picolibc could not be found, fetched or built."""


SOURCE = VendorSource(name="picolibc", env="DELTACHIP_PICOLIBC", tarball=TARBALL_NAME,
                      url=UPSTREAM_URL, tag=UPSTREAM_TAG, commit=UPSTREAM_COMMIT,
                      markers=("libc", "libm"), error=PicolibcError,
                      upstream_sha256=UPSTREAM_SHA256)


def source_tarball() -> tuple[Path, str]:
    """(the source: a tarball or folder, its digest); see the module's docstring."""
    return SOURCE.find()


def download() -> Path:
    """The upstream release tarball, fetched once into the cache and checked."""
    return SOURCE.download()


def archive_commit(path: Path) -> str | None:
    """The commit id git-archive writes into a tarball's pax global header, or None."""
    try:
        with tarfile.open(path, "r:gz") as tf:
            comment = tf.pax_headers.get("comment")
            if comment:
                return comment.strip()
            first = tf.next()
            return (first.pax_headers.get("comment") or "").strip() or None if first else None
    except (OSError, tarfile.TarError):
        return None


def _unpack(src: Path, into: Path) -> Path:
    """The unpacked source root (the folder holding ``libc/``)."""
    return SOURCE.unpack(src, into)


_CALL = re.compile(r"(\w+)\s*\(([^()]*)\)", re.S)


def cmake_sources(folder: Path, vars: dict[str, bool] = CMAKE_VARS) -> list[tuple[Path, list[str]]]:
    """The (source, extra flags) pairs a picolibc ``CMakeLists.txt`` lists, following
    ``add_subdirectory`` and ``if(VAR)``/``else()``/``endif()`` on :data:`CMAKE_VARS`."""
    cml = folder / "CMakeLists.txt"
    if not cml.is_file():
        return []
    text = re.sub(r"#[^\n]*", "", cml.read_text())
    out: list[tuple[Path, list[str]]] = []
    active = [True]
    for name, args in _CALL.findall(text):
        name = name.lower()
        words = args.split()
        if name == "if":
            active.append(active[-1] and bool(vars.get(args.strip(), False)))
        elif name == "else":
            parent = active[-2] if len(active) > 1 else True
            active[-1] = parent and not active[-1]
        elif name == "endif":
            active.pop()
        elif not active[-1]:
            continue
        elif name == "add_subdirectory":
            out += cmake_sources(folder / words[0], vars)
        elif name == "picolibc_sources":
            out += [(folder / w, []) for w in words]
        elif name == "picolibc_sources_flags":
            flags = re.findall(r'"([^"]*)"', args)
            files = [w for w in words if not w.startswith('"')]
            out += [(folder / w, " ".join(flags).split()) for w in files]
    return out


def picolibc_h() -> str:
    lines = ["/* picolibc configuration for the deltachip core (firmware/sdk/picolibc.py) */",
             "#pragma once"]
    for key, value in CONFIG.items():
        lines.append(f"#define {key} {value}" if value is not None else f"#undef {key}")
    return "\n".join(lines) + "\n"


def zig_cc() -> list[str]:
    return [sys.executable, "-m", "ziglang", "cc"]


def build_key(src_digest: str) -> str:
    blob = json.dumps({"src": src_digest, "config": CONFIG, "cflags": CFLAGS, "target": TARGET,
                       "libc": LIBC_DIRS, "libm": LIBM_DIRS, "exclude": sorted(EXCLUDE),
                       "vars": CMAKE_VARS, "rev": BUILD_REVISION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def library_dir() -> Path:
    """The cached build (``include/``, ``lib/libc.a``, ``lib/libm.a``), built on first use."""
    src, digest = source_tarball()
    dest = cache_root() / f"picolibc-{build_key(digest)}"
    return cached_build(dest, "lib/libm.a", lambda work: _build(src, work))


def _build(src: Path, work: Path) -> None:
    start = time.monotonic()
    _log(f"building picolibc {VERSION} for rv32im (ilp32, soft float) from {src} "
         f"into the cache (once; a few minutes)")
    root = _unpack(src, work / "src")
    out = work / "out"
    inc = out / "include"
    shutil.copytree(root / "libc" / "include", inc,
                    ignore=shutil.ignore_patterns("*.txt", "*.build", "*.in"))
    for h in (root / "libc" / "machine" / "riscv" / "machine").glob("*.h"):
        shutil.copy2(h, inc / "machine" / h.name)
    (inc / "picolibc.h").write_text(picolibc_h())
    for lic in ("COPYING.picolibc", "README.md"):
        if (root / lic).is_file():
            shutil.copy2(root / lic, out / lic)
    (out / "lib").mkdir()
    for lib, top, dirs, extra_inc in (
            ("libc", root / "libc", LIBC_DIRS, []),
            ("libm", root / "libm", LIBM_DIRS, [root / "libm" / "common"])):
        pairs = []
        for d in dirs:
            pairs += [(s, f) for s, f in cmake_sources(top / d)
                      if str(s.relative_to(root)) not in EXCLUDE]
        objdir = work / "obj" / lib
        objdir.mkdir(parents=True)
        # -I, not -isystem: zig's own -isystem (its limits.h, ...) would come first
        incs = [f"-I{d}" for d in (*extra_inc, root / "libc" / "machine" / "riscv",
                                   root / "libc" / "locale", root / "libc" / "stdio",
                                   root / "libc" / "stdlib")]

        commands = []
        for i, (s, flags) in enumerate(pairs):
            obj = objdir / f"{i:04d}_{s.stem}.o"
            commands.append((str(s.relative_to(root)), [
                *zig_cc(), *TARGET, *CFLAGS, *flags, f"-I{s.parent}", *incs, f"-I{inc}",
                "-c", str(s), "-o", str(obj)], obj))
        _log(f"{lib}: {len(pairs)} sources")
        compile_archive(commands, out / "lib" / f"{lib}.a", lambda m: _log(f"{lib}: {m}"),
                        PicolibcError, start, every=50)
    (out / "BUILD.json").write_text(json.dumps(
        {"version": VERSION, "source": str(src), "target": TARGET, "cflags": CFLAGS,
         "config": CONFIG, "seconds": round(time.monotonic() - start, 1)}, indent=1) + "\n")
    _log(f"built in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    try:
        print(library_dir())
    except PicolibcError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
