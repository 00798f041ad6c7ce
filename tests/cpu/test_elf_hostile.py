"""The ELF loader against hostile files (issue 9, classes 7 and 9): overlapping segments are
refused, and a damaged file is reported in the project's words, never pyelftools' own."""
from __future__ import annotations

import random
import re

import pytest

from cpu import memmap
from cpu.elf import ElfError, read_elf

CODE = b"\x13\x00\x00\x00" * 8          # nops


@pytest.mark.parametrize("second, first_text, second_text", [
    # the same region, the second starting inside the first
    ((0x10, CODE, len(CODE), 5), "segment 0 (R-X) 0x00000000..0x00000020 (32 bytes)",
     "segment 1 (R-X) 0x00000010..0x00000030 (32 bytes)"),
    # the second wholly inside the first
    ((0x8, b"\x01" * 4, 4, 5), "segment 0 (R-X) 0x00000000..0x00000020 (32 bytes)",
     "segment 1 (R-X) 0x00000008..0x0000000c (4 bytes)"),
    # identical spans
    ((0, CODE, len(CODE), 5), "segment 0 (R-X) 0x00000000..0x00000020 (32 bytes)",
     "segment 1 (R-X) 0x00000000..0x00000020 (32 bytes)"),
])
def test_overlapping_segments_are_refused(build_elf, elf_file, second, first_text, second_text):
    path = elf_file(build_elf([(0, CODE, len(CODE), 5), second]))
    with pytest.raises(ElfError) as e:
        read_elf(path)
    assert str(e.value) == f"{path}: corrupt ELF file: {first_text} overlaps {second_text}"


def test_bss_overlapping_the_next_segment_is_refused(build_elf, elf_file):
    ram = memmap.RAM_BASE
    path = elf_file(build_elf([(0, CODE, len(CODE), 5), (ram, b"ab", 0x100, 6),
                               (ram + 0x80, b"cd", 2, 6)]))
    with pytest.raises(ElfError) as e:
        read_elf(path)
    assert str(e.value) == (f"{path}: corrupt ELF file: segment 1 (RW-) 0x00080000..0x00080100 "
                            "(256 bytes) overlaps segment 2 (RW-) 0x00080080..0x00080082 (2 bytes)")


def test_adjacent_segments_load(build_elf, elf_file):
    ram = memmap.RAM_BASE
    path = elf_file(build_elf([(0, CODE, len(CODE), 5), (ram, b"ab", 0x80, 6),
                               (ram + 0x80, b"cd", 2, 6)]))
    assert [s.vaddr for s in read_elf(path).segments] == [0, ram, ram + 0x80]


#: every text the loader may give for a damaged file: the project's own words only
OUR_TEXTS = re.compile("|".join([
    r"not an ELF file \(bad magic bytes\)",
    r"truncated ELF file: .*",
    r"corrupt or truncated ELF file: cannot read its (header|program headers \(segments\)|"
    r"section headers or symbol table)",
    r"corrupt ELF file: .*",
    r"not an RV32 executable: .*",
    r"not an executable: ELF type is .*",
    r"segment \d+ \(...\) at .* does not fit the memory map: .*",
    r"no loadable \(PT_LOAD\) segment",
    r"entry point 0x[0-9a-f]{8} is .*",
]))


def test_damaged_files_speak_our_words(build_elf, elf_file):
    """Every truncation and 3,000 random byte flips of a small ELF with a symbol table:
    the loader loads the file or says what is wrong in one of its own texts (no pyelftools
    message such as "String Table not found" gets through)."""
    blob = build_elf([(0, CODE, len(CODE), 5), (memmap.RAM_BASE, b"abcd", 64, 6)],
                     symbols={"__input_buffer": (memmap.RAM_BASE + 8, 32, 2)})
    rng = random.Random(99)
    variants = [blob[:n] for n in range(4, len(blob))]
    for _ in range(3000):
        b = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        variants.append(bytes(b))
    path = elf_file(b"")
    for v in variants:
        path.write_bytes(v)
        try:
            read_elf(path)
        except ElfError as e:
            text = str(e)
            assert text.startswith(f"{path}: "), text
            assert OUR_TEXTS.fullmatch(text[len(f"{path}: "):]), text


def test_string_table_damage_is_named(build_elf, elf_file):
    """A section-header string table index past the table: pyelftools says "String Table
    not found"; the loader names the part of the file it cannot read."""
    blob = bytearray(build_elf([(0, CODE, len(CODE), 5)], symbols={"x": (0, 0, 1)}))
    blob[50:52] = (0x7FFF).to_bytes(2, "little")        # e_shstrndx
    path = elf_file(bytes(blob))
    with pytest.raises(ElfError) as e:
        read_elf(path)
    assert str(e.value) == (f"{path}: corrupt or truncated ELF file: cannot read its section "
                            "headers or symbol table")
