"""Writing a user's output safely: all of it or none of it, and never through a special file.

Takes: the path the user asked for. Gives:

- :func:`replace_on_success`, a context manager that checks the path
  (:func:`check_output_path`), creates a temporary file next to it up front (so an unwritable
  path is reported before any work is done), yields the temporary path, renames it over the
  target when the block ends normally and deletes it otherwise, so that a failed or
  interrupted command never leaves a half-written file or clobbers the one that was there.
  An ``OSError`` raised while the block writes the temporary file (disk full, quota, I/O
  error) becomes the command's error, naming the path and the reason.
- :func:`check_output_path`: an output may be a missing path or a regular file; a
  directory, a symbolic link, a FIFO, a device or a socket is refused, never replaced.
- :func:`temp_name_prefix` and :func:`sweep_stale`: every temporary the project makes beside
  an output is named ``.NAME.deltachip-PID-…``; a command killed outright (SIGKILL, power
  loss) leaves its temporary behind, and the next command writing the same output removes
  those whose process no longer runs.
- :func:`prepare_dir_output`: the checks before a command builds an output directory (a
  compiled chip, a merged checkpoint): absent, empty, or one the command wrote before;
  :func:`building_dir` builds it in a temporary directory and renames it into place.
- :func:`disk_shortfall`: whether an output of a known size fits its disk, asked before
  any work is written (a full disk found half way costs the time spent up to there).
- :func:`os_reason` / :func:`write_reason`: the words for why a write failed.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from common.errors import UserError

TEMP_TAG = "deltachip"
#: room kept free on an output's disk beyond what is written there
DISK_MARGIN = 64 << 20

_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def os_reason(e: OSError) -> str:
    """The words for why a file operation failed (as the user should read them)."""
    # mkdir(parents=True) on a path through a regular file raises FileExistsError
    return "Not a directory" if isinstance(e, (FileExistsError, NotADirectoryError)) \
        else (e.strerror or str(e))


_OS_ERROR_RE = re.compile(r"(?:I/O error: )?(.*?) \(os error (\d+)\)")


def write_reason(e: BaseException) -> str | None:
    """Why a write failed, if ``e`` is a failed write: an ``OSError``, or a library's error
    that wraps one (safetensors says ``... I/O error: No space left on device (os error
    28)``); None for any other exception."""
    if isinstance(e, OSError):
        return os_reason(e)
    m = _OS_ERROR_RE.search(str(e))
    if m and type(e).__name__ in ("SafetensorError",):
        return os.strerror(int(m.group(2)))
    return None


def special_kind(path: str | Path, follow_symlinks: bool = False) -> str | None:
    """What ``path`` is when it is neither missing nor a regular file ("a symbolic link",
    "a directory", "a named pipe (FIFO)", ...); None for a regular file or a missing path.
    With ``follow_symlinks``, what a link points to (an input is read through its links)."""
    try:
        mode = os.stat(path, follow_symlinks=follow_symlinks).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return None         # unreadable: the write itself will say why
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    for test, words in _SPECIAL:
        if test(mode):
            return words
    return None


def check_output_path(path: str | Path, label: str = "",
                      error: type[UserError] = UserError) -> Path:
    """``path`` as a Path if a file may be written there: it is missing or a regular file.
    Otherwise raises ``error`` (``{label}cannot write {path}: Is a directory`` for a folder,
    ``... : is a named pipe (FIFO), not a regular file; refusing to replace it`` and the
    like for a symbolic link, FIFO, device or socket)."""
    path = Path(path)
    kind = special_kind(path)
    if kind == "a directory":
        raise error(f"{label}cannot write {path}: Is a directory")
    if kind is not None:
        raise error(f"{label}cannot write {path}: it is {kind}, not a regular file; "
                    "refusing to replace it")
    return path


#: the most bytes of an output's name kept in its temporaries' names (a longer name is cut
#: and a digest of it added, so a temporary's name stays within the 255 bytes a file system
#: allows whatever the output's legal name)
SHORT_NAME = 64


def short_name(name: str) -> str:
    """``name`` as it appears in a temporary's name: itself when it has at most
    :data:`SHORT_NAME` bytes, else its first 48 bytes, ``~`` and 12 hex digits of its
    sha256 (the same name gives the same short name, so :func:`sweep_stale` finds it)."""
    raw = os.fsencode(name)
    if len(raw) <= SHORT_NAME:
        return name
    return f"{os.fsdecode(raw[:48])}~{hashlib.sha256(raw).hexdigest()[:12]}"


def temp_name_prefix(path: str | Path) -> str:
    """The name prefix of this process's temporaries beside ``path``:
    ``.NAME.deltachip-PID-`` (what :func:`sweep_stale` recognises; NAME is
    :func:`short_name` of the output's)."""
    return f".{short_name(Path(path).name)}.{TEMP_TAG}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep_stale(path: str | Path) -> list[Path]:
    """Remove the temporaries beside ``path`` that a killed deltachip process left (named by
    :func:`temp_name_prefix`, their process gone); return what was removed. Anything else in
    the folder, and the temporaries of running processes, are left alone; errors are
    ignored (the sweep is a courtesy, the write that follows reports real problems)."""
    path = Path(path)
    return _sweep(path.absolute().parent, re.escape(short_name(path.name)))


def sweep_folder(folder: str | Path) -> list[Path]:
    """:func:`sweep_stale` for every output in ``folder``: remove each temporary there (named
    by :func:`temp_name_prefix`, whatever its output) whose process no longer runs; return
    what was removed. For a folder only deltachip writes (the core cache), where a killed
    build or an interrupted rebuild leaves a temporary that no later write of the same
    name would sweep."""
    return _sweep(Path(folder), ".+")


def _sweep(folder: Path, name: str) -> list[Path]:
    """Remove the temporaries in ``folder`` of outputs whose name matches regex ``name``
    whose process is gone; what was removed."""
    pattern = re.compile(rf"\.{name}\.{TEMP_TAG}-(\d+)-.*", re.DOTALL)
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or _alive(int(m.group(1))):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
        except OSError:
            pass
    return removed


@contextmanager
def replace_on_success(path: str | Path, label: str = "",
                       error: type[UserError] = UserError,
                       make_parents: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` if the block succeeds.

    ``label`` prefixes error messages (``"--stats: "``); ``error`` is the UserError subclass
    raised as ``{label}cannot write {path}: {reason}`` when the path cannot be written (a
    folder, a special file, a missing or read-only folder, a full disk while the block
    writes); ``make_parents`` creates missing folders first.
    """
    path = check_output_path(path, label, error)
    try:
        if make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path)
        fd, name = tempfile.mkstemp(prefix=temp_name_prefix(path), suffix=".tmp",
                                    dir=path.parent)
    except OSError as e:
        raise error(f"{label}cannot write {path}: {os_reason(e)}") from None
    os.close(fd)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)   # as open() would have made it, not mkstemp's 0600
    try:
        try:
            yield tmp
        except OSError as e:
            if e.filename not in (None, str(tmp), name):
                raise           # about another file: not this output's business
            raise error(f"{label}cannot write {path}: {os_reason(e)}") from None
        check_output_path(path, label, error)    # nothing special appeared meanwhile
        try:
            os.replace(tmp, path)
        except OSError as e:
            raise error(f"{label}cannot write {path}: {os_reason(e)}") from None
    finally:
        tmp.unlink(missing_ok=True)


def dir_name_problem(path: str | Path) -> str | None:
    """Why directory output ``path`` cannot be built when it names the current directory
    or a parent (``.``, ``..``, ``a/..``): the output is built beside it and renamed onto
    it, which such a name cannot take; None otherwise."""
    p = Path(path)
    if p.name not in ("", ".", ".."):
        return None
    real = p.absolute().resolve()
    by_name = (f"give it by its name ({os.path.join(os.path.relpath(real.parent), real.name)})"
               f" or " if real.name else "")
    return (f"names the current directory or a parent, which cannot be replaced in place; "
            f"{by_name}choose another path")


def prepare_dir_output(path: str | Path, error: Callable[[Path, str], UserError], kind: str,
                       ours: Callable[[Path, list[str]], bool], mine: Callable[[str], bool],
                       not_dir: str = "") -> Path:
    """``path`` as a Path once a command may build directory ``kind`` there: it is absent,
    an empty directory, or one ``ours(path, entries)`` recognises as written by the command
    before (then it may be replaced); its parents are created and the folder is writable.
    Otherwise raises ``error(path, why)`` (a symbolic link, a file (``not_dir`` explains
    what is written), a folder holding another file: the first name ``mine`` does not
    claim); the error words where the path came from (``-o PATH: why``)."""
    p = Path(path)
    why = dir_name_problem(p)
    if why is not None:
        raise error(p, why)
    if p.is_symlink():
        raise error(p, "is a symbolic link; give the directory itself")
    if p.exists():
        if not p.is_dir():
            raise error(p, f"exists and is not a directory{not_dir}; choose another path")
        try:
            entries = sorted(e.name for e in p.iterdir())
        except OSError as e:
            raise error(p, f"cannot read the directory: {os_reason(e)}") from None
        if entries and not ours(p, entries):
            foreign = [e for e in entries if not mine(e)] or entries
            raise error(p, f"directory is not empty and is not a deltachip {kind} "
                        f"(it holds '{foreign[0]}'); refusing to replace it: choose a new or "
                        "empty directory")
    parent = p.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(p)          # what a killed command left beside the output
        os.rmdir(tempfile.mkdtemp(prefix=temp_name_prefix(p), dir=parent))     # writable?
    except OSError as e:
        raise error(p, f"cannot write in {parent}: {os_reason(e)}") from None
    return p


def disk_folder(out: str | Path) -> Path:
    """The nearest folder above ``out`` that exists: where ``out`` will be written, for
    asking about its disk before its parents are made."""
    parent = Path(out).absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def disk_shortfall(out: str | Path, need: int) -> str | None:
    """None when the disk that will hold ``out`` has ``need`` bytes (and
    :data:`DISK_MARGIN`) free; otherwise the words for why not (``needs X GiB, PARENT has Y
    GiB free``), asked of :func:`disk_folder`."""
    parent = disk_folder(out)
    free = shutil.disk_usage(parent).free
    if free >= need + DISK_MARGIN:
        return None
    return f"needs {(need + DISK_MARGIN) / 2**30:.2f} GiB, {parent} has {free / 2**30:.2f} GiB free"


def _snapshot(d: Path) -> dict[str, tuple[int, ...]]:
    """Every entry under directory ``d`` (not following links), by its path relative to
    ``d``: (mode, size, mtime_ns, inode) of a file or link, the mode alone of a folder (its
    entries are listed themselves); empty when ``d`` is missing."""
    out: dict[str, tuple[int, ...]] = {}
    if not d.is_dir() or d.is_symlink():
        return out
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            path = Path(root) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            key = str(path.relative_to(d))
            out[key] = ((st.st_mode,) if stat.S_ISDIR(st.st_mode) else
                        (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino))
    return out


def _changed(before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]]
             ) -> str | None:
    """The first path that appeared, changed or went between two snapshots, in words."""
    for key in sorted(now):
        if key not in before:
            return f"'{key}' appeared in it"
        if now[key] != before[key]:
            return f"'{key}' changed in it"
    gone = sorted(set(before) - set(now))
    return f"'{gone[0]}' went from it" if gone else None


@contextmanager
def building_dir(out: Path, error: Callable[[Path, str], UserError], failed: str
                 ) -> Iterator[Path]:
    """Yield a new temporary directory beside ``out`` (checked by
    :func:`prepare_dir_output`). When the block ends normally its folders and files get the
    modes mkdir and open would have made (not mkdtemp's 0700 and safetensors' 0600) and it is
    renamed onto ``out``, a previous ``out`` moved aside first (put back if the rename fails,
    removed after). Otherwise it is removed and ``out`` is as it was; a failed write (a full
    disk, ...) becomes ``error(out, f"{failed}: {reason} (nothing was changed)")``.

    What ``out`` held when the block began is all that may be replaced: a file written,
    changed or removed there while the block ran (a user's file in OUT_DIR during a long
    merge) is found at the swap, checked again once ``out`` is moved aside, and the command
    fails with ``error(out, ...)`` naming it, ``out`` left as it then is and the new output
    removed: nothing the command did not write is ever deleted."""
    parent = out.absolute().parent
    before = _snapshot(out)
    tmp = Path(tempfile.mkdtemp(prefix=temp_name_prefix(out), dir=parent))
    old = None
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        for root, _, files in os.walk(tmp):
            os.chmod(root, 0o777 & ~umask)
            for f in files:
                os.chmod(Path(root) / f, 0o666 & ~umask)
        _unchanged(out, before, error)
        if out.exists() or out.is_symlink():   # empty, or a previous output (as it began)
            old = Path(tempfile.mkdtemp(prefix=temp_name_prefix(out) + "old-", dir=parent))
            os.rename(out, old / out.name)
            try:
                _unchanged(old / out.name, before, error, shown=out)
            except UserError:
                os.rename(old / out.name, out)      # put it back, as it is now
                raise
        os.rename(tmp, out)
    except BaseException as e:
        if old is not None and not out.exists() and (old / out.name).exists():
            os.rename(old / out.name, out)      # put the previous output back
        shutil.rmtree(tmp, ignore_errors=True)
        reason = write_reason(e)
        if reason is not None and not isinstance(e, UserError):
            raise error(out, f"{failed}: {reason} (nothing was changed)") from None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _unchanged(d: Path, before: dict[str, tuple[int, ...]],
               error: Callable[[Path, str], UserError], shown: Path | None = None) -> None:
    """``error`` unless directory ``d`` holds what ``before`` recorded (the output's
    previous contents, which alone may be replaced)."""
    what = _changed(before, _snapshot(d))
    if what is not None:
        raise error(shown or d, f"{what} while the new output was being built; nothing was "
                                f"replaced or deleted (the new output was discarded): move "
                                f"what is yours elsewhere and run the command again")
