"""Shared helpers for the CPU tests: a unicorn oracle, a tiny ELF writer, firmware builds.

* :func:`run_unicorn` runs instruction words on unicorn 2.1.x with the shipped memory map,
  emulating Zba (sh1add/sh2add/sh3add) in the interrupt hook, and returns the per-instruction
  pcs, register snapshots and data accesses.
* :func:`run_unicorn_program` runs a whole loaded program (UART, exit ecall) and reads the
  register each instruction wrote, for lock-step checks of the firmware.
* :func:`make_elf` writes a minimal RV32 ELF (segments + optional symbols) so the loader
  tests need no compiler.
* the ``firmware_elf`` fixture builds a shipped program with ``firmware.toolchain`` (cached
  per session; tests using it skip when no RISC-V compiler is installed).
* the unicorn differential tests add to :data:`COMPARED` (fixture ``compared``); the total
  is printed in the test summary.

Test modules get these through fixtures (``unicorn_run``, ``unicorn_program``, ``build_elf``, ``elf_file``,
``firmware_elf``, ``compared``), never ``import conftest``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import unicorn  # noqa: F401 - the oracle (a test dependency): fail here, never skip

from cpu import memmap
from firmware import toolchain

#: Instructions compared against unicorn in this session (printed in the summary).
COMPARED = {"instructions": 0, "streams": 0}

SH_ADD_FUNCT3 = {2: 1, 4: 2, 6: 3}


@dataclass
class UnicornRun:
    """What unicorn did: ``pcs[i]`` is the pc of instruction i, ``snapshots[i]`` the registers
    before it (``snapshots[-1]``: after the last), ``accesses`` (kind, addr, size, value) in
    order (``value`` is 0 for reads), the final pc and the RAM bytes."""
    pcs: list[int] = field(default_factory=list)
    snapshots: list[list[int]] = field(default_factory=list)
    accesses: list[tuple[str, int, int, int]] = field(default_factory=list)
    pc: int = 0
    ram: bytes = b""
    error: str | None = None


def run_unicorn(words: list[int], regs: list[int], ram: bytes, max_steps: int,
                snapshots: bool = True) -> UnicornRun:
    """Run ``words`` at address 0 with registers ``regs`` (x0..x31) and RAM initialised with
    ``ram`` (from RAM_BASE) for at most ``max_steps`` instructions, or until the pc leaves
    the program."""
    from unicorn import UC_ARCH_RISCV, UC_HOOK_CODE, UC_HOOK_INTR, UC_HOOK_MEM_READ, \
        UC_HOOK_MEM_WRITE, UC_MODE_RISCV32, Uc, UcError
    from unicorn.riscv_const import UC_RISCV_REG_PC, UC_RISCV_REG_X0

    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    uc.mem_map(memmap.CODE_BASE, memmap.CODE_SIZE)
    uc.mem_map(memmap.RODATA_BASE, memmap.RODATA_SIZE)
    uc.mem_map(memmap.RAM_BASE, memmap.RAM_SIZE)
    uc.mem_write(0, b"".join(w.to_bytes(4, "little") for w in words))
    uc.mem_write(memmap.RAM_BASE, ram)
    for i in range(1, 32):
        uc.reg_write(UC_RISCV_REG_X0 + i, regs[i])
    out = UnicornRun()
    end = 4 * len(words)

    def read_regs() -> list[int]:
        return [0] + [uc.reg_read(UC_RISCV_REG_X0 + i) for i in range(1, 32)]

    def on_code(uc, addr, size, _):
        if len(out.pcs) == max_steps:
            uc.emu_stop()
            return
        if snapshots:
            out.snapshots.append(read_regs())
        out.pcs.append(addr)

    def on_intr(uc, intno, _):
        pc = uc.reg_read(UC_RISCV_REG_PC)          # reported past the instruction
        word = int.from_bytes(uc.mem_read(pc - 4, 4), "little")
        f3 = (word >> 12) & 7
        if intno == 2 and word & 0xFE00707F in (0x20002033, 0x20004033, 0x20006033):
            rd, rs1, rs2 = (word >> 7) & 31, (word >> 15) & 31, (word >> 20) & 31
            a = uc.reg_read(UC_RISCV_REG_X0 + rs1)
            b = uc.reg_read(UC_RISCV_REG_X0 + rs2)
            if rd:
                uc.reg_write(UC_RISCV_REG_X0 + rd, ((a << SH_ADD_FUNCT3[f3]) + b) & 0xFFFFFFFF)
            return
        out.error = f"interrupt {intno} at 0x{pc - 4:08x}"
        uc.emu_stop()

    def on_read(uc, kind, addr, size, value, _):
        out.accesses.append(("R", addr & 0xFFFFFFFF, size, 0))

    def on_write(uc, kind, addr, size, value, _):
        out.accesses.append(("W", addr & 0xFFFFFFFF, size, value & ((1 << (8 * size)) - 1)))

    uc.hook_add(UC_HOOK_CODE, on_code)
    uc.hook_add(UC_HOOK_INTR, on_intr)
    uc.hook_add(UC_HOOK_MEM_READ, on_read)
    uc.hook_add(UC_HOOK_MEM_WRITE, on_write)
    try:
        uc.emu_start(0, end)
    except UcError as e:
        out.error = str(e)
    out.pc = uc.reg_read(UC_RISCV_REG_PC)
    out.snapshots.append(read_regs())
    out.ram = bytes(uc.mem_read(memmap.RAM_BASE, len(ram)))
    return out


@dataclass
class UnicornProgramRun:
    """A whole program on unicorn: per-instruction pcs, ``values[i]`` = the watched register
    after instruction i (None when not watched), data accesses, UART bytes, exit code."""
    pcs: list[int] = field(default_factory=list)
    values: list[int | None] = field(default_factory=list)
    accesses: list[tuple[str, int, int, int]] = field(default_factory=list)
    output: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    error: str | None = None


def run_unicorn_program(segments: list[tuple[int, bytes]], entry: int, max_steps: int,
                        watch: list[int | None]) -> UnicornProgramRun:
    """Run a loaded program image (``segments``: (address, bytes incl. zeroed tails)) from
    ``entry`` until the exit ecall (a7 = 93), an error, or ``max_steps`` instructions.
    ``watch[i]`` names the register to read after instruction i (the lock-step check)."""
    from unicorn import UC_ARCH_RISCV, UC_HOOK_CODE, UC_HOOK_INTR, UC_HOOK_MEM_READ, \
        UC_HOOK_MEM_WRITE, UC_MODE_RISCV32, Uc, UcError
    from unicorn.riscv_const import UC_RISCV_REG_PC, UC_RISCV_REG_X0

    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    for base, size in ((memmap.CODE_BASE, memmap.CODE_SIZE), (memmap.RODATA_BASE, memmap.RODATA_SIZE),
                       (memmap.RAM_BASE, memmap.RAM_SIZE), (memmap.UART_TX, 0x1000)):
        uc.mem_map(base, size)
    for addr, blob in segments:
        uc.mem_write(addr, blob)
    uc.reg_write(UC_RISCV_REG_X0 + memmap.REG_SP, memmap.STACK_TOP)
    out = UnicornProgramRun()
    pending: list[int | None] = [None]

    def settle() -> None:
        reg = pending[0]
        out.values.append(None if reg is None else uc.reg_read(UC_RISCV_REG_X0 + reg))

    def on_code(uc, addr, size, _):
        n = len(out.pcs)
        if n:
            settle()
        if n == max_steps:
            uc.emu_stop()
            return
        out.pcs.append(addr)
        pending[0] = watch[n] if n < len(watch) else None

    def on_intr(uc, intno, _):
        pc = uc.reg_read(UC_RISCV_REG_PC)          # reported past the instruction
        word = int.from_bytes(uc.mem_read(pc - 4, 4), "little")
        if intno == 2 and word & 0xFE00707F in (0x20002033, 0x20004033, 0x20006033):
            rd, rs1, rs2 = (word >> 7) & 31, (word >> 15) & 31, (word >> 20) & 31
            a = uc.reg_read(UC_RISCV_REG_X0 + rs1)
            b = uc.reg_read(UC_RISCV_REG_X0 + rs2)
            if rd:
                uc.reg_write(UC_RISCV_REG_X0 + rd,
                             ((a << SH_ADD_FUNCT3[(word >> 12) & 7]) + b) & 0xFFFFFFFF)
            return
        if word == 0x73 and uc.reg_read(UC_RISCV_REG_X0 + memmap.REG_A7) == memmap.EXIT_SYSCALL:
            a0 = uc.reg_read(UC_RISCV_REG_X0 + memmap.REG_A0)
            out.exit_code = a0 - (1 << 32) if a0 >> 31 else a0
        else:
            out.error = f"interrupt {intno} at 0x{pc - 4:08x}"
        settle()
        pending[0] = -1
        uc.emu_stop()

    def on_read(uc, kind, addr, size, value, _):
        out.accesses.append(("R", addr & 0xFFFFFFFF, size, 0))

    def on_write(uc, kind, addr, size, value, _):
        value &= (1 << (8 * size)) - 1
        out.accesses.append(("W", addr & 0xFFFFFFFF, size, value))
        if addr == memmap.UART_TX:
            out.output.append(value & 0xFF)

    uc.hook_add(UC_HOOK_CODE, on_code)
    uc.hook_add(UC_HOOK_INTR, on_intr)
    uc.hook_add(UC_HOOK_MEM_READ, on_read)
    uc.hook_add(UC_HOOK_MEM_WRITE, on_write)
    try:
        uc.emu_start(entry, memmap.CODE_END)
    except UcError as e:
        out.error = str(e)
    if pending[0] != -1 and len(out.values) < len(out.pcs):
        settle()
    return out


# ---------------------------------------------------------------- ELF writer

PT_LOAD = 1
SHN_ABS = 0xFFF1


def make_elf(segments: list[tuple[int, bytes, int, int]], entry: int = 0,
             symbols: dict[str, tuple[int, int, int]] | None = None, *, elf_class: int = 1,
             data: int = 1, machine: int = 243, e_type: int = 2) -> bytes:
    """A minimal ELF32: ``segments`` are (vaddr, file bytes, memsz, flags); ``symbols`` name
    -> (value, size, shndx) in a .symtab. The header fields can be overridden to make bad
    files (class 2 = 64-bit, data 2 = big-endian, another machine, e_type 1 = REL)."""
    symbols = symbols or {}
    ehsize, phentsize, shentsize = 52, 32, 40
    phoff = ehsize
    offset = phoff + phentsize * len(segments)
    phdrs, blobs = b"", b""
    for vaddr, blob, memsz, flags in segments:
        phdrs += struct.pack("<8I", PT_LOAD, offset + len(blobs), vaddr, vaddr, len(blob),
                             memsz, flags, 4)
        blobs += blob
    body_end = offset + len(blobs)
    shdrs = b""
    tail = b""
    shnum = shstrndx = 0
    shoff = 0
    if symbols:
        strtab = b"\0"
        syms = b"\0" * 16
        for name, (value, size, shndx) in symbols.items():
            syms += struct.pack("<IIIBBH", len(strtab), value, size, 0x10, 0, shndx)
            strtab += name.encode() + b"\0"
        shstr = b"\0.symtab\0.strtab\0.shstrtab\0"
        sym_off = body_end
        str_off = sym_off + len(syms)
        shstr_off = str_off + len(strtab)
        tail = syms + strtab + shstr
        shoff = body_end + len(tail)
        shdrs = bytes(shentsize)
        shdrs += struct.pack("<10I", 1, 2, 0, 0, sym_off, len(syms), 2, 1, 4, 16)
        shdrs += struct.pack("<10I", 9, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0)
        shdrs += struct.pack("<10I", 17, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0)
        shnum, shstrndx = 4, 3
    ident = b"\x7fELF" + bytes([elf_class, data, 1, 0]) + bytes(8)
    endian = "<" if data == 1 else ">"
    header = ident + struct.pack(endian + "HHIIIIIHHHHHH", e_type, machine, 1, entry, phoff,
                                 shoff, 0, ehsize, phentsize, len(segments), shentsize, shnum,
                                 shstrndx)
    return header + phdrs + blobs + tail + shdrs


@pytest.fixture(scope="session")
def unicorn_run():
    """:func:`run_unicorn` (unicorn is a test dependency: ``pip install -e '.[test]'``)."""
    return run_unicorn


@pytest.fixture(scope="session")
def unicorn_program():
    """:func:`run_unicorn_program`."""
    return run_unicorn_program


@pytest.fixture(scope="session")
def compared() -> dict[str, int]:
    """The session's counter of instructions compared against unicorn."""
    return COMPARED


@pytest.fixture(scope="session")
def build_elf():
    """:func:`make_elf`, as a fixture (test modules cannot import conftest by name)."""
    return make_elf


@pytest.fixture
def elf_file(tmp_path: Path):
    """``elf_file(bytes) -> Path``: write an ELF image to a temporary file."""
    counter = iter(range(1000))

    def write(blob: bytes) -> Path:
        path = tmp_path / f"prog{next(counter)}.elf"
        path.write_bytes(blob)
        return path
    return write


@pytest.fixture(scope="session")
def firmware_elf(tmp_path_factory):
    """``firmware_elf("hello") -> Path``: build a shipped program (``firmware.toolchain.
    shipped_programs()``: firmware/programs/*.c and calc) once per session, with the
    default compiler (zig, from the ``ziglang`` dependency)."""
    cache: dict[str, Path] = {}
    out_dir = tmp_path_factory.mktemp("firmware")

    def build(name: str) -> Path:
        if name not in cache:
            sources = toolchain.shipped_programs()[name]
            cache[name] = toolchain.build(sources, out_dir / f"{name}.elf")
        return cache[name]
    return build


def pytest_terminal_summary(terminalreporter):
    if COMPARED["instructions"]:
        terminalreporter.write_line(
            f"unicorn differential: {COMPARED['instructions']:,} instructions compared in "
            f"{COMPARED['streams']:,} streams")
