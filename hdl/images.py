"""Memory image files, the one reader that the elaborator (a ROM's default image) and the
tools (``--rom NAME=FILE``) share, as docs/language.md defines them:

- ``.hex``: text, hexadecimal words (an optional ``0x`` and ``_`` between digits allowed),
  one or several per line separated by spaces, ``//`` comments;
- anything else (``.bin``): raw little-endian words, each rounded up to whole bytes.

Takes: a path and the memory's word width and depth. Gives: the list of words (not padded),
or raises :class:`ImageError` (a UserError) naming the file, the line and the problem; its
``problem`` and ``line`` let the elaborator locate the same message at the ``rom``
declaration.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping, Protocol

from common.errors import UserError
from common.inputs import InputTooLarge, read_bounded

_HEX_WORD = re.compile(r"(?:0[xX])?[0-9a-fA-F][0-9a-fA-F_]*")

#: bytes of a .hex image per word of the memory (digits, separators, comments)
HEX_BYTES_PER_WORD = 64
#: bytes read beyond what a full image takes, so that an image a little too long is
#: reported by its word count (``has 5 words, more than the depth 4``)
IMAGE_SLACK = 64 << 10


def image_limit(path: str | Path, width: int, depth: int) -> tuple[int, str]:
    """The most bytes read of an image for a ``u<width>[<depth>]`` memory and how to say
    why: a .bin holds ``depth`` words of whole bytes, a .hex up to
    :data:`HEX_BYTES_PER_WORD` characters per word; both plus :data:`IMAGE_SLACK`."""
    if Path(path).suffix.lower() == ".hex":
        return (depth * HEX_BYTES_PER_WORD + IMAGE_SLACK,
                f"a .hex image of u{width}[{depth}] ({HEX_BYTES_PER_WORD} characters a word "
                f"plus {IMAGE_SLACK:,} bytes)")
    nb = (width + 7) // 8
    return (depth * nb + IMAGE_SLACK,
            f"a .bin image of u{width}[{depth}] ({depth} words of {nb} "
            f"byte{'s' * (nb > 1)} plus {IMAGE_SLACK:,} bytes)")


class ImageError(UserError):
    """A memory image file that cannot be read or does not fit its memory.

    ``str()`` is the full message (``FILE:LINE: problem``). ``problem`` says the same about
    the file as a predicate (``has 5 words, more than the depth 4``) or, with ``line`` (the
    1-based line of a ``.hex`` file, else None), about that line.
    """

    def __init__(self, message: str, problem: str, line: int | None = None):
        super().__init__(message)
        self.problem = problem
        self.line = line


def _hex_words(p: Path, text: str, width: int, name: str) -> list[int]:
    words: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for word in line.split("//", 1)[0].split():
            if not _HEX_WORD.fullmatch(word):
                problem = f"'{word}' is not a hexadecimal word"
                raise ImageError(f"{p}:{lineno}: {problem}", problem, lineno)
            w = int(word.replace("_", ""), 16)
            if w >> width:
                problem = f"0x{w:x} does not fit {width} bits"
                raise ImageError(f"{p}:{lineno}: {problem} (image for '{name}', u{width})",
                                 problem, lineno)
            words.append(w)
    return words


def load_image(path: str | Path, width: int, depth: int, name: str = "memory") -> list[int]:
    """Read a ``.hex`` or ``.bin`` image for a ``u<width>[<depth>]`` memory called ``name``."""
    p = Path(path)
    try:
        data = read_bounded(p, *image_limit(p, width, depth))
    except InputTooLarge as e:
        raise ImageError(f"{p}: image for '{name}' {e.problem}", e.problem) from None
    except OSError as e:
        why = e.strerror or str(e)
        raise ImageError(f"cannot read image for '{name}': {p}: {why}",
                         f"cannot be read: {why}") from None
    if p.suffix.lower() == ".hex":
        try:
            text = data.decode("utf-8-sig")   # a BOM (some Windows editors) is not a word
        except UnicodeDecodeError:
            problem = "is not a text .hex file (use .bin for raw bytes)"
            raise ImageError(f"{p} {problem}", problem) from None
        words = _hex_words(p, text, width, name)
    else:
        nb = (width + 7) // 8
        if len(data) % nb:
            raise ImageError(f"{p}: {len(data)} bytes is not a whole number of {nb}-byte "
                             f"words (image for '{name}', u{width})",
                             f"has {len(data)} bytes, not a whole number of {nb}-byte words")
        words = [int.from_bytes(data[i:i + nb], "little") for i in range(0, len(data), nb)]
        for i, w in enumerate(words):
            if w >> width:
                raise ImageError(f"{p}: word {i} (0x{w:x}) does not fit {width} bits",
                                 f"has word {i} (0x{w:x}), which does not fit {width} bits")
    if len(words) > depth:
        problem = f"has {len(words)} words, more than the depth {depth}"
        raise ImageError(f"{p}: image has {len(words)} words, but '{name}' holds only "
                         f"{depth} (u{width}[{depth}])", problem)
    return words


class _Mem(Protocol):
    """What :func:`load_rom_specs` needs of a memory (an :class:`hdl.ir.Memory`)."""
    width: int
    depth: int


def load_rom_specs(specs: Iterable[str], memories: Mapping[str, _Mem],
                   circuit_name: str) -> dict[str, list[int]]:
    """Parse ``--rom NAME=FILE`` options against a circuit's ``memories``: name -> words.

    Raises :class:`common.errors.UserError` for a malformed spec, an unknown memory, a
    memory given twice, or a bad image."""
    roms: dict[str, list[int]] = {}
    for spec in specs:
        name, eq, file = spec.partition("=")
        if not eq or not name or not file:
            raise UserError(f"--rom expects NAME=FILE, got '{spec}'")
        mem = memories.get(name)
        if mem is None:
            known = ", ".join(memories) or "none"
            raise UserError(f"--rom {spec}: circuit '{circuit_name}' has no memory '{name}' "
                            f"(its memories: {known})")
        if name in roms:
            raise UserError(f"--rom {spec}: memory '{name}' is given twice")
        roms[name] = load_image(file, mem.width, mem.depth, name)
    return roms
