"""Writing a user's output file safely: all of it, or none of it.

Takes: the path the user asked for. Gives: :func:`replace_on_success`, a context manager that
creates a temporary file next to that path up front (so an unwritable path is reported before
any work is done), yields the temporary path, renames it over the target when the block ends
normally and deletes it otherwise, so that a failed or interrupted command never leaves a
half-written file or clobbers the one that was there.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from deltachip.errors import UserError


def os_reason(e: OSError) -> str:
    """The words for why a file operation failed (as the user should read them)."""
    # mkdir(parents=True) on a path through a regular file raises FileExistsError
    return "Not a directory" if isinstance(e, (FileExistsError, NotADirectoryError)) \
        else (e.strerror or str(e))


@contextmanager
def replace_on_success(path: str | Path, label: str = "",
                       error: type[UserError] = UserError,
                       make_parents: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` if the block succeeds.

    ``label`` prefixes error messages (``"--stats: "``); ``error`` is the UserError subclass
    raised as ``{label}cannot write {path}: {reason}`` when the path cannot be written (a
    folder, a missing or read-only folder); ``make_parents`` creates missing folders first.
    """
    path = Path(path)
    if path.is_dir():
        raise error(f"{label}cannot write {path}: Is a directory")
    try:
        if make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise error(f"{label}cannot write {path}: {os_reason(e)}") from None
    os.close(fd)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)   # as open() would have made it, not mkstemp's 0600
    try:
        yield tmp
        try:
            os.replace(tmp, path)
        except OSError as e:
            raise error(f"{label}cannot write {path}: {os_reason(e)}") from None
    finally:
        tmp.unlink(missing_ok=True)
