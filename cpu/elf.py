"""ELF loader: read an RV32 little-endian executable into segments and symbols (pyelftools).

:func:`read_elf` takes a path (reading at most :data:`MAX_ELF_BYTES`) and returns an
:class:`ElfImage` (entry point, the PT_LOAD segments with their bytes, the symbol table); it
checks that every segment fits inside one region of the memory map (:mod:`cpu.memmap`) and
that no two segments overlap. Anything wrong with the file raises
:class:`ElfError` (a :class:`common.errors.UserError`) whose text names the file and the
problem; never a pyelftools traceback.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from cpu import memmap
from common.errors import UserError
from common.inputs import read_bounded

EM_RISCV = 243
ELF32_HEADER_SIZE = 52
PF_X, PF_W, PF_R = 1, 2, 4

#: bytes an ELF may have beyond what it loads: headers, symbol and string tables, debug
#: sections (``firmware build`` passes -g; the shipped calc is 67 KB in all at -O0)
NON_LOADED_BYTES = 16 << 20
#: the largest ELF read: every region of the memory map full, plus :data:`NON_LOADED_BYTES`
MAX_ELF_BYTES = sum(size for _, _, size, _ in memmap.REGIONS) + NON_LOADED_BYTES
ELF_LIMIT_WHAT = (f"an ELF file (the memory map's {MAX_ELF_BYTES - NON_LOADED_BYTES:,} bytes "
                  f"plus {NON_LOADED_BYTES >> 20} MiB of headers, symbols and debug sections)")


class ElfError(UserError):
    """The ELF file cannot be loaded on the shipped CPU (exit status 2)."""


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD segment: ``memsz`` bytes at ``vaddr``, the first ``len(data)`` from the
    file and the rest zero (``.bss``)."""
    index: int
    vaddr: int
    data: bytes
    memsz: int
    flags: int
    region: str

    def describe(self) -> str:
        """``segment 1 (RW-) 0x00080000..0x00080100 (256 bytes)``: for messages."""
        return f"segment {self.index} ({flags_text(self.flags)}) " + span_text(self.vaddr, self.memsz)


@dataclass(frozen=True)
class Symbol:
    """An ELF symbol: its value (address), size and section index (``"SHN_ABS"`` etc.)."""
    name: str
    value: int
    size: int
    shndx: int | str


@dataclass
class ElfImage:
    """What the loader takes from an ELF file."""
    path: Path
    entry: int
    segments: list[Segment]
    symbols: dict[str, Symbol] = field(default_factory=dict)


def flags_text(flags: int) -> str:
    return ("R" if flags & PF_R else "-") + ("W" if flags & PF_W else "-") + ("X" if flags & PF_X else "-")


def span_text(addr: int, size: int) -> str:
    return f"0x{addr:08x}..0x{addr + size:08x} ({size} bytes)"


def region_of(addr: int, size: int) -> str | None:
    """Name of the memory-map region that holds all of ``[addr, addr+size)``, else None."""
    for name, base, rsize, _ in memmap.REGIONS:
        if base <= addr and addr + size <= base + rsize:
            return name
    return None


def _limits_text() -> str:
    return ", ".join(f"{name} {span_text(base, size)}" for name, base, size, _ in memmap.REGIONS)


def read_elf(path: str | Path) -> ElfImage:
    """Read and check ``path``; see the module docstring. Raises :class:`ElfError`."""
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_ELF_BYTES, ELF_LIMIT_WHAT)
    except OSError as e:
        raise ElfError(f"{path}: cannot read: {e.strerror or e}") from None
    if raw[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file (bad magic bytes)")
    if len(raw) < ELF32_HEADER_SIZE:
        raise ElfError(f"{path}: truncated ELF file: {len(raw)} bytes, less than the "
                       f"{ELF32_HEADER_SIZE}-byte ELF header")
    return _parse(path, raw)


@contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """Turn whatever pyelftools (or construct under it) raises while reading ``what`` into
    an ElfError in our words: ``corrupt or truncated ELF file: cannot read its WHAT``, never
    pyelftools' own texts ("String Table not found")."""
    try:
        yield
    except ElfError:
        raise
    except (ELFError, ELFParseError, ValueError, KeyError, IndexError, AssertionError,
            UnicodeDecodeError, TypeError, AttributeError, OverflowError):
        raise ElfError(f"{path}: corrupt or truncated ELF file: cannot read its {what}") from None
    except Exception as e:  # construct/struct errors from a damaged file
        if type(e).__module__.startswith(("construct", "struct", "elftools")):
            raise ElfError(f"{path}: corrupt or truncated ELF file: cannot read its "
                           f"{what}") from None
        raise


def _parse(path: Path, raw: bytes) -> ElfImage:
    """Read ``raw`` in stages (header, program headers, symbols), checking each before the
    next, so the first problem found is the one reported."""
    import io
    with _reading(path, "header"):
        elf = ELFFile(io.BytesIO(raw))
        header = dict(elf.header)
        elfclass, little = elf.elfclass, elf.little_endian
    _check_header(path, elfclass, little, header)
    with _reading(path, "program headers (segments)"):
        segs = [dict(seg.header) for seg in elf.iter_segments()]
    segments = _check_segments(path, raw, segs)
    entry = _check_entry(path, header["e_entry"], segments)
    with _reading(path, "section headers or symbol table"):
        symbols: dict[str, Symbol] = {}
        for section in elf.iter_sections():
            if isinstance(section, SymbolTableSection):
                for sym in section.iter_symbols():
                    if sym.name and sym.name not in symbols:
                        symbols[sym.name] = Symbol(sym.name, sym["st_value"], sym["st_size"],
                                                   sym["st_shndx"])
    return ElfImage(path, entry, segments, symbols)


def _check_header(path: Path, elfclass: int, little: bool, header: dict) -> None:
    """ElfError unless the header is an RV32 little-endian executable's."""
    if elfclass != 32:
        raise ElfError(f"{path}: not an RV32 executable: ELF class is {elfclass}-bit "
                       "(expected 32-bit)")
    if not little:
        raise ElfError(f"{path}: not an RV32 executable: big-endian (expected little-endian)")
    machine = header["e_machine"]
    if machine not in ("EM_RISCV", EM_RISCV):
        raise ElfError(f"{path}: not an RV32 executable: machine is {machine} (expected EM_RISCV)")
    if header["e_type"] != "ET_EXEC":
        raise ElfError(f"{path}: not an executable: ELF type is {header['e_type']} "
                       "(expected ET_EXEC; link the program, don't pass an object file)")


def _check_segments(path: Path, raw: bytes, segs: list[dict]) -> list[Segment]:
    """The PT_LOAD segments of program headers ``segs``, each whole in the file and in one
    region of the memory map, no two overlapping; else ElfError."""
    segments: list[Segment] = []
    for index, seg in enumerate(segs):
        if seg["p_type"] != "PT_LOAD" or seg["p_memsz"] == 0:
            continue
        vaddr, filesz, memsz, offset = seg["p_vaddr"], seg["p_filesz"], seg["p_memsz"], seg["p_offset"]
        if filesz > memsz:
            raise ElfError(f"{path}: corrupt ELF file: segment {index} has file size {filesz} "
                           f"larger than its memory size {memsz}")
        if offset + filesz > len(raw):
            raise ElfError(f"{path}: truncated ELF file: segment {index} needs bytes "
                           f"{offset}..{offset + filesz} but the file has {len(raw)}")
        region = region_of(vaddr, memsz)
        flags = seg["p_flags"]
        if region is None:
            raise ElfError(f"{path}: segment {index} ({flags_text(flags)}) at "
                           f"{span_text(vaddr, memsz)} does not fit the memory map: "
                           f"{_limits_text()}")
        segments.append(Segment(index, vaddr, raw[offset:offset + filesz], memsz, flags, region))
    if not segments:
        raise ElfError(f"{path}: no loadable (PT_LOAD) segment")
    by_addr = sorted(segments, key=lambda s: (s.vaddr, s.index))
    for a, b in zip(by_addr, by_addr[1:]):
        if b.vaddr < a.vaddr + a.memsz:
            first, second = sorted((a, b), key=lambda s: s.index)
            raise ElfError(f"{path}: corrupt ELF file: {first.describe()} overlaps "
                           f"{second.describe()}")
    return segments


def _check_entry(path: Path, entry: int, segments: list[Segment]) -> int:
    """``entry`` if it is a word-aligned address inside a loaded code segment; else ElfError."""
    if not (memmap.CODE_BASE <= entry < memmap.CODE_END) or entry % 4:
        raise ElfError(f"{path}: entry point 0x{entry:08x} is not a word-aligned address in "
                       f"code ROM {span_text(memmap.CODE_BASE, memmap.CODE_SIZE)}")
    code = [s for s in segments if s.region == "code ROM"]
    if not any(s.vaddr <= entry < s.vaddr + len(s.data) for s in code):
        spans = ", ".join(span_text(s.vaddr, len(s.data)) for s in code) or "none"
        raise ElfError(f"{path}: entry point 0x{entry:08x} is outside the loaded code "
                       f"(code segments: {spans})")
    return entry

