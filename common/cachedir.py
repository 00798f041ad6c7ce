"""Where deltachip keeps its caches: ``$DELTACHIP_CACHE``, else ``~/.cache/deltachip``.

Takes: the name of one cache (``cores``: compiled RISC-V cores; ``sim``: the simulator's
compiled C). Gives: :func:`cache_dir`, that cache's folder, created and known to be
writable, or :class:`CacheDirError` (a UserError, exit 2) naming the variable, the folder
and the OS's reason, with what to do: a ``DELTACHIP_CACHE`` that names a file, a folder that
cannot be created or one deltachip may not write in is bad input like any other, never an
``OSError`` from deep inside a compile.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from common.errors import UserError
from common.outputs import os_reason

ENV = "DELTACHIP_CACHE"


class CacheDirError(UserError):
    """The cache folder cannot be used (see the module docstring)."""


def cache_root() -> Path:
    """``$DELTACHIP_CACHE`` (when set and not empty) or ``~/.cache/deltachip``, unchecked."""
    base = os.environ.get(ENV)
    return Path(base) if base else Path.home() / ".cache" / "deltachip"


def cache_dir(name: str) -> Path:
    """The folder of cache ``name`` under :func:`cache_root`, created if missing; a
    CacheDirError unless deltachip may write in it."""
    d = cache_root() / name
    try:
        d.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".deltachip-probe-", dir=d))     # writable?
    except OSError as e:
        base, root = os.environ.get(ENV), cache_root()
        why = ("it is a file, not a folder" if root.exists() and not root.is_dir()
               else f"{d}: {os_reason(e)}")
        what = (f"{ENV}={base}: cannot keep deltachip's caches there" if base
                else f"cannot keep deltachip's caches in {root}")
        raise CacheDirError(f"{what}: {why}; set {ENV} to a folder deltachip may write in"
                            + (", or unset it" if base else "")) from None
    return d


@contextlib.contextmanager
def entry_lock(entry: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of the cache folder that holds ``entry`` (``flock`` on the
    folder itself, so nothing is left on disk) while ``entry`` is built: two processes
    building an entry there for the first time (two terminals, two test workers) build it
    once, the second waiting and then finding it built. ``waiting`` is called once if
    another process holds the lock. Only builds take it: a process that finds its entry
    whole never waits."""
    fd = os.open(entry.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)            # releases the lock
