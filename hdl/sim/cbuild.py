"""Build generated C into a shared library (cached by source hash) and load it with cffi.

Takes: C source text (from :func:`hdl.sim.codegen.c_source`). Gives: a cffi library object
exposing the functions of :data:`hdl.sim.codegen.C_DECLS`, or raises :class:`NoCompiler`.

The compiler is ``$CC`` if set, else the first of ``gcc``, ``cc``, ``clang`` on the PATH, else
``python -m ziglang cc`` (the ``ziglang`` package is a project dependency). Built libraries are
cached as ``<cache>/<sha256 of compiler, flags and source>.so`` where ``<cache>`` is
``$DELTACHIP_CACHE/sim`` or ``~/.cache/deltachip/sim``; a second build of the same circuit
only loads the file (and within one process, not even that). Flags: ``-O1`` unless
``$DELTACHIP_SIM_CFLAGS`` says otherwise.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import cffi

from common import cachedir
from hdl.sim.codegen import C_DECLS

_FFI = cffi.FFI()
_FFI.cdef(C_DECLS)


class NoCompiler(RuntimeError):
    """No C compiler was found (the "auto" backend then falls back to Python)."""


class BuildError(RuntimeError):
    """The C compiler, which builds a trivial library fine, rejected generated code: a bug in
    the code generator, never a fallback. (A compiler that builds nothing raises
    :class:`NoCompiler` instead.)"""


def ffi() -> cffi.FFI:
    """The one cffi FFI object every generated library is loaded with."""
    return _FFI


@functools.cache
def find_compiler() -> tuple[str, ...] | None:
    """The compiler command (argv prefix) to use, or None when there is none."""
    env = os.environ.get("CC")
    if env:
        return tuple(env.split())
    for name in ("gcc", "cc", "clang"):
        path = shutil.which(name)
        if path:
            return (path,)
    if importlib.util.find_spec("ziglang") is not None:
        return (sys.executable, "-m", "ziglang", "cc")
    return None


def cache_dir() -> Path:
    """``sim`` under the cache folder (:func:`common.cachedir.cache_dir`): a
    ``DELTACHIP_CACHE`` that cannot be used is a CacheDirError naming it; when the variable
    is unset and ``~/.cache`` is not writable, a folder in the system's temporary folder."""
    try:
        return cachedir.cache_dir("sim")
    except cachedir.CacheDirError:
        if os.environ.get(cachedir.ENV):
            raise
    d = Path(tempfile.gettempdir()) / "deltachip-sim"
    d.mkdir(parents=True, exist_ok=True)
    return d


_LOADED: dict[str, Any] = {}


def _flags(opt: Sequence[str] | None = None) -> list[str]:
    """Compiler flags: ``opt`` if given, else ``$DELTACHIP_SIM_CFLAGS`` if set, else -O1 (see
    codegen.C_CHUNK)."""
    if opt is None:
        opt = os.environ.get("DELTACHIP_SIM_CFLAGS", "-O1").split()
    return [*opt, "-shared", "-fPIC", "-w"]


@functools.cache
def _compiler_works(cc: tuple[str, ...], flags: tuple[str, ...]) -> bool:
    """Whether ``cc`` builds a trivial shared library with ``flags``: tells a broken or
    unsuitable compiler (``CC=false``, a cross compiler: like no compiler at all) from
    generated code that it rejects (a bug)."""
    with tempfile.TemporaryDirectory() as d:
        src, lib = Path(d) / "probe.c", Path(d) / "probe.so"
        src.write_text("int deltachip_probe(void) { return 0; }\n")
        try:
            r = subprocess.run([*cc, *flags, "-o", str(lib), str(src)], capture_output=True)
        except OSError:
            return False
        return r.returncode == 0 and lib.exists()


def build(source: str, ffi: cffi.FFI | None = None, flags: Sequence[str] | None = None) -> Any:
    """Compile ``source`` (or reuse the cached build) and return the library loaded with
    ``ffi`` (default: the simulator's, :func:`ffi`); ``flags``: the optimisation flags
    (default :func:`_flags`'s)."""
    cc = find_compiler()
    if cc is None:
        raise NoCompiler("no C compiler found (set CC, or install gcc)")
    flags = _flags(flags)
    key = hashlib.sha256("\0".join([*cc, *flags, source]).encode()).hexdigest()[:32]
    if key in _LOADED:
        return _LOADED[key]
    d = cache_dir()
    lib = d / f"{key}.so"
    if not lib.exists():
        fd, tmp_c = tempfile.mkstemp(suffix=".c", dir=d)
        with os.fdopen(fd, "w") as f:
            f.write(source)
        tmp_so = tmp_c[:-2] + ".so"
        try:
            try:
                r = subprocess.run([*cc, *flags, "-o", tmp_so, tmp_c], capture_output=True,
                                   text=True)
            except OSError as e:
                raise NoCompiler(f"cannot run C compiler {' '.join(cc)}: {e}") from None
            if r.returncode != 0:
                if not _compiler_works(cc, tuple(flags)):
                    said = r.stderr[-2000:].strip()
                    raise NoCompiler(f"C compiler {' '.join(cc)} does not work with flags "
                                     f"{' '.join(flags)}" + (f":\n{said}" if said else ""))
                raise BuildError(f"C compiler {' '.join(cc)} failed:\n{r.stderr[-2000:]}")
            os.replace(tmp_so, lib)
        finally:
            for p in (tmp_c, tmp_so):
                if os.path.exists(p):
                    os.unlink(p)
    _LOADED[key] = (ffi or _FFI).dlopen(str(lib))
    return _LOADED[key]
