"""Digests of a checkpoint's files: recorded when it is written, checked when it is loaded.

Takes: a checkpoint directory. Gives:

- :func:`write`: ``manifest.json``, the size and sha256 digest of each file named (read back
  from the disk after writing, so it describes what is on the disk).
  :func:`backends.chipdir.checkpoint.write_checkpoint` writes it last, before the directory is
  renamed into place, so every directory deltachip writes has one.
- :func:`problem`: the first way the directory differs from its manifest, in words relative
  to the directory (``chip.json is missing``, ``model-00002-of-00012.safetensors does not
  match its sha256 digest in manifest.json``), or None when every file listed is there,
  whole. Files the manifest does not list are not looked at.
- :func:`stamp`: ``verified.json``, each listed file's (size, mtime_ns, ctime_ns, inode) as it
  is now, meaning "these files were hashed and matched". Hashing is the cost here (the
  compiled RISC-V core is 6.1 GB: 4.3 s with its files in the page cache, 16 s from the
  disk, on the 2-core machine of docs/cpu.md), so :func:`problem` does not read again a file
  whose four values are those of the stamp: rewriting a file in place changes its mtime and
  ctime, replacing it changes its inode, and ctime cannot be set back by any tool. What a
  stamp cannot see is a change below the file system (a disk's bit rot); the core's engines
  notice a core that stops retiring instructions (:mod:`cpu.rv32.protocol`). Only the core
  cache writes stamps (``problem(..., write_stamp=True)`` and :func:`stamp`); a stamp found
  elsewhere is used the same way, and a damaged or stale one is ignored.

The manifest is ``{"format": "deltachip-manifest", "version": 1, "files": {name: {"size":
bytes, "sha256": hex}}}``; the stamp ``{"format": "deltachip-verified", "manifest": key,
"files": {name: key}}``, ``key`` being ``[size, mtime_ns, ctime_ns, inode]``.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from common.inputs import InputTooLarge, read_bounded
from common.outputs import os_reason

MANIFEST = "manifest.json"
STAMP = "verified.json"
FORMAT = "deltachip-manifest"
VERSION = 1
ALGORITHM = "sha256"
#: the most bytes read of a manifest or a stamp (one line per file of a checkpoint)
LIMIT = (1 << 20, "a checkpoint's manifest (one line per file)")


def digest(path: str | Path) -> str:
    """The hex :data:`ALGORITHM` digest of the file ``path`` (OSError as ``open`` raises it)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, ALGORITHM).hexdigest()


def write(d: str | Path, names: Iterable[str]) -> None:
    """Write ``d``/manifest.json: the size and digest of each file ``names`` (in ``d``)."""
    d = Path(d)
    files = {n: {"size": (d / n).stat().st_size, ALGORITHM: digest(d / n)} for n in sorted(names)}
    record = {"format": FORMAT, "version": VERSION, "files": files}
    (d / MANIFEST).write_text(json.dumps(record, indent=1) + "\n")


def _key(st: os.stat_result) -> list[int]:
    """What a stamp records of a file: [size, mtime_ns, ctime_ns, inode]."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _load(path: Path) -> Any:
    """The JSON in ``path`` (OSError, InputTooLarge, ValueError as they come)."""
    return json.loads(read_bounded(path, *LIMIT))


def _files(d: Path) -> dict[str, tuple[int, str]] | str:
    """name -> (size, digest) from ``d``'s manifest, or the problem with the manifest."""
    path = d / MANIFEST
    if not path.is_file():
        from common.outputs import special_kind
        kind = special_kind(path, follow_symlinks=True)
        return f"{MANIFEST} is {kind}, not a regular file" if kind else f"{MANIFEST} is missing"
    try:
        record = _load(path)
    except OSError as e:
        return f"{MANIFEST} cannot be read ({os_reason(e)})"
    except (InputTooLarge, ValueError, RecursionError) as e:
        return f"{MANIFEST} is corrupt ({e})"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(record, dict) or record.get("format") != FORMAT \
            or record.get("version") != VERSION or not isinstance(files, dict):
        return f"{MANIFEST} is corrupt (not a {FORMAT} version {VERSION})"
    out = {}
    for name, entry in files.items():
        size = entry.get("size") if isinstance(entry, dict) else None
        hexdigest = entry.get(ALGORITHM) if isinstance(entry, dict) else None
        if not isinstance(size, int) or not isinstance(hexdigest, str) \
                or Path(name).name != name or name in (MANIFEST, STAMP):
            return f"{MANIFEST} is corrupt (its entry for {name!r})"
        out[name] = (size, hexdigest)
    return out


def _stamped(d: Path) -> dict[str, list[int]]:
    """The stamp's keys of ``d``'s files, when the stamp is whole and was made for the
    manifest there now; else none."""
    try:
        record = _load(d / STAMP)
        manifest_now = _key((d / MANIFEST).stat())
    except (OSError, InputTooLarge, ValueError, RecursionError):
        return {}
    if not isinstance(record, dict) or record.get("manifest") != manifest_now \
            or not isinstance(record.get("files"), dict):
        return {}
    return record["files"]


def problem(d: str | Path, write_stamp: bool = False) -> str | None:
    """The first difference between directory ``d`` and its manifest (see the module
    docstring), None when there is none. A file whose stamp key is unchanged is not hashed
    again; with ``write_stamp``, a directory found whole is stamped (when it may be written)."""
    d = Path(d)
    files = _files(d)
    if isinstance(files, str):
        return files
    stamped = _stamped(d)
    hashed = False
    for name, (size, want) in sorted(files.items()):
        path = d / name
        try:
            st = path.stat()
            if not path.is_file():
                return f"{name} is not a file"
            if st.st_size != size:
                return f"{name} has {st.st_size:,} bytes, not the {size:,} {MANIFEST} records"
            if stamped.get(name) == _key(st):
                continue
            hashed = True
            if digest(path) != want:
                return f"{name} does not match its {ALGORITHM} digest in {MANIFEST}"
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as e:
            return f"{name} cannot be read ({os_reason(e)})"
    if write_stamp and hashed:
        stamp(d)
    return None


def stamp(d: str | Path) -> None:
    """Write ``d``/verified.json from the files as they are now (the caller knows they match
    the manifest: it just checked them, or just wrote them). Skipped when ``d`` may not be
    written: a stamp only saves time."""
    d = Path(d)
    files = _files(d)
    if isinstance(files, str):
        return
    try:
        record = {"format": "deltachip-verified", "manifest": _key((d / MANIFEST).stat()),
                  "files": {n: _key((d / n).stat()) for n in sorted(files)}}
        fd, tmp = tempfile.mkstemp(prefix=f".{STAMP}.", dir=d)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, d / STAMP)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
