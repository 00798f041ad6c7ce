"""Reading a user's input with a bound: never more than what could be used.

Takes: a path or an open binary stream, the most bytes the reader can use, and what the
input is. Gives: :func:`read_bounded`, the one way the project reads a file or stream a
user names (an ELF, standard input, a ``.hdl`` source, a ROM image, a target config, the
JSON files of a checkpoint): it reads at most ``limit + 1`` bytes, so ``/dev/zero``, an
endless pipe or a huge file costs that much memory and no more, and refuses anything larger
with :class:`InputTooLarge` (a UserError, exit 2) naming the input, the limit and why that is
the limit. Each reader derives its limit from what can fit (docs: README, "Input sizes").

An ``OSError`` (missing file, permission denied, a directory) is raised unchanged, so each
reader keeps its own wording for it (with :func:`common.outputs.os_reason`).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from common.errors import UserError

#: bytes asked of the stream per read call
CHUNK = 1 << 20


class InputTooLarge(UserError):
    """An input larger than its reader's limit.

    ``str()`` is ``NAME: larger than N bytes, the limit for WHAT``; ``problem`` says the same
    as a predicate (``is larger than N bytes, the limit for WHAT``), for readers that locate
    the message elsewhere (an ``import`` statement, a ``rom`` declaration)."""

    def __init__(self, name: str, limit: int, what: str):
        self.name, self.limit, self.what = name, limit, what
        self.problem = f"is larger than {limit:,} bytes, the limit for {what}"
        super().__init__(f"{name}: larger than {limit:,} bytes, the limit for {what}")


def read_bounded(source: str | os.PathLike[str] | BinaryIO, limit: int, what: str,
                 name: str | None = None) -> bytes:
    """The bytes of ``source`` (a path, opened and closed here, or a binary stream read from
    where it stands) if there are at most ``limit`` of them; else :class:`InputTooLarge`
    for ``what`` (``"an ELF file (...)"``), naming ``name`` (default: the path, or
    ``standard input`` for a stream). At most ``limit + 1`` bytes are ever read. OSError
    as raised by ``open`` and ``read``."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if isinstance(source, (str, os.PathLike)):
        shown = name if name is not None else str(source)
        with open(source, "rb") as f:
            size = _regular_size(f)
            if size is not None and size > limit:       # no need to read it to know
                raise InputTooLarge(shown, limit, what)
            return _read(f, limit, what, shown)
    return _read(source, limit, what, name if name is not None else "standard input")


def _regular_size(f: BinaryIO) -> int | None:
    """The size of ``f`` when it is a regular file (a device or pipe has none)."""
    try:
        st = os.fstat(f.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _read(f: BinaryIO, limit: int, what: str, name: str) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got <= limit:
        part = f.read(min(CHUNK, limit + 1 - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    if got > limit:
        raise InputTooLarge(name, limit, what)
    return b"".join(parts)


def read_text_bounded(path: str | Path, limit: int, what: str) -> str:
    """:func:`read_bounded` of a UTF-8 text file (a leading byte-order mark dropped);
    UnicodeDecodeError when it is not UTF-8."""
    return read_bounded(path, limit, what).decode("utf-8-sig")


#: the most digits of an integer in a JSON file a reader takes (Python's own limit for
#: converting text to int; a longer number is refused here by name, not by int()'s advice)
MAX_JSON_DIGITS = 4300


class BadJSON(ValueError):
    """JSON text that cannot be taken: invalid, nested too deeply or holding a number too
    long (a ValueError, as json's own errors are)."""


def _json_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_JSON_DIGITS:
        raise BadJSON(f"a number of {digits:,} digits (at most {MAX_JSON_DIGITS:,})")
    return int(text)


def loads_json(data: bytes | str) -> object:
    """``json.loads(data)`` whose every failure is a ValueError (json's own errors,
    UnicodeDecodeError, or :class:`BadJSON` for nesting too deep for the parser's stack and
    for an integer longer than :data:`MAX_JSON_DIGITS` digits), never a RecursionError."""
    import json
    try:
        return json.loads(data, parse_int=_json_int)
    except RecursionError:
        raise BadJSON("nested too deeply") from None
