"""Memory image files: ``.hex`` (one hexadecimal word per line, ``//`` comments) or raw
little-endian ``.bin`` (each word rounded up to whole bytes), as docs/language.md defines.

Takes: a path and the memory's word width and depth. Gives: the list of words, or raises
:class:`ImageError` (a UserError) naming the file, the line and the problem.
"""
from __future__ import annotations

from pathlib import Path

from deltachip.errors import UserError


class ImageError(UserError):
    """A memory image file that cannot be read or does not fit its memory."""


def load_image(path: str | Path, width: int, depth: int, name: str = "memory") -> list[int]:
    """Read a ``.hex`` or ``.bin`` image for a ``u<width>[<depth>]`` memory called ``name``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ImageError(f"cannot read image for '{name}': {p}: {e.strerror}") from None
    words: list[int] = []
    if p.suffix.lower() == ".bin":
        nb = (width + 7) // 8
        if len(data) % nb:
            raise ImageError(f"{p}: {len(data)} bytes is not a whole number of {nb}-byte "
                             f"words (image for '{name}', u{width})")
        words = [int.from_bytes(data[i:i + nb], "little") for i in range(0, len(data), nb)]
        for i, w in enumerate(words):
            if w >> width:
                raise ImageError(f"{p}: word {i} (0x{w:x}) does not fit {width} bits")
    else:
        for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            text = line.split("//", 1)[0].strip().replace("_", "")
            if not text:
                continue
            try:
                w = int(text.removeprefix("0x").removeprefix("0X"), 16)
            except ValueError:
                raise ImageError(f"{p}:{lineno}: '{line.strip()}' is not a hexadecimal "
                                 "word") from None
            if w >> width:
                raise ImageError(f"{p}:{lineno}: 0x{w:x} does not fit {width} bits "
                                 f"(image for '{name}', u{width})")
            words.append(w)
    if len(words) > depth:
        raise ImageError(f"{p}: image has {len(words)} words, but '{name}' holds only "
                         f"{depth} (u{width}[{depth}])")
    return words
