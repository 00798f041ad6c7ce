"""Run deltachip firmware ELFs on unicorn (the independent oracle for the firmware tests).

:func:`run_elf` maps the deltachip memory map (code ROM 0x0 256 KiB, rodata ROM 0x40000
128 KiB, RAM 0x80000 32 KiB, UART at 0x10000000), loads the ELF's PT_LOAD segments
(zeroing each segment's p_memsz tail: that is how .bss gets zeroed), writes the input text
NUL-terminated at ``__input_buffer``, and runs from the entry point until ``ecall`` with
a7 = 93, a fault, or ``max_steps`` instructions.

Unicorn 2.1.4 does not implement Zba: sh1add/sh2add/sh3add raise an illegal-instruction
interrupt with the pc already past the instruction, so the interrupt hook performs them and
execution resumes at the next instruction. Unicorn silently allows misaligned accesses.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from unicorn import (UC_ARCH_RISCV, UC_HOOK_INTR, UC_HOOK_MEM_WRITE, UC_MODE_RISCV32,
                     UC_PROT_ALL, UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE, Uc, UcError)
from unicorn import riscv_const as rc

CODE_ROM = (0x0000_0000, 256 * 1024)
RODATA_ROM = (0x0004_0000, 128 * 1024)
RAM = (0x0008_0000, 32 * 1024)
UART = 0x1000_0000
UART_PAGE = (UART, 0x1000)

ECALL_CAUSES = (8, 9, 11)      # environment call from U, S, M mode
ILLEGAL_INSTRUCTION = 2
EXIT_SYSCALL = 93
ZBA_FUNCT3_SHIFT = {2: 1, 4: 2, 6: 3}   # sh1add, sh2add, sh3add

X_REGS = [getattr(rc, f"UC_RISCV_REG_X{i}") for i in range(32)]


@dataclass
class UnicornResult:
    """The outcome of one run: exit code (None if the program did not exit), UART bytes,
    and a fault description (None after a clean exit)."""
    exit_code: int | None
    output: bytes
    fault: str | None = None


def elf_symbols(path: Path) -> dict[str, int]:
    """The ELF's symbol table as name → value."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            return {}
        return {s.name: s["st_value"] for s in symtab.iter_symbols() if s.name}


def _signed32(v: int) -> int:
    v &= 0xFFFF_FFFF
    return v - (1 << 32) if v & 0x8000_0000 else v


def run_elf(path: Path, input_text: str | bytes | None = None,
            max_steps: int = 50_000_000) -> UnicornResult:
    """Run the ELF at ``path`` on unicorn; return its exit code, UART output and any fault."""
    path = Path(path)
    mu = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    mu.mem_map(*CODE_ROM, UC_PROT_READ | UC_PROT_EXEC)
    mu.mem_map(*RODATA_ROM, UC_PROT_READ)
    mu.mem_map(*RAM, UC_PROT_READ | UC_PROT_WRITE)
    mu.mem_map(*UART_PAGE, UC_PROT_ALL)
    with open(path, "rb") as f:
        elf = ELFFile(f)
        entry = elf.header.e_entry
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_LOAD" or seg["p_memsz"] == 0:
                continue
            data = seg.data()
            mu.mem_write(seg["p_vaddr"], data + bytes(seg["p_memsz"] - len(data)))
    if input_text is not None:
        symbols = elf_symbols(path)
        raw = input_text.encode() if isinstance(input_text, str) else bytes(input_text)
        capacity = symbols.get("__input_size", 0)
        if "__input_buffer" not in symbols or len(raw) + 1 > capacity:
            raise ValueError(f"input of {len(raw)} bytes does not fit the ELF's input buffer "
                             f"({capacity} bytes)")
        mu.mem_write(symbols["__input_buffer"], raw + b"\0")

    output = bytearray()
    state: dict[str, object] = {"exit": None, "fault": None}

    def on_uart(uc, access, address, size, value, user_data):
        if address == UART:
            output.append(value & 0xFF)

    def on_interrupt(uc, intno, user_data):
        pc = uc.reg_read(rc.UC_RISCV_REG_PC)
        if intno in ECALL_CAUSES:
            if uc.reg_read(rc.UC_RISCV_REG_A7) == EXIT_SYSCALL:
                state["exit"] = _signed32(uc.reg_read(rc.UC_RISCV_REG_A0))
            else:
                state["fault"] = f"pc {pc - 4:#010x}: unsupported ecall"
            uc.emu_stop()
            return
        if intno == ILLEGAL_INSTRUCTION:
            insn = int.from_bytes(uc.mem_read(pc - 4, 4), "little")
            funct3 = (insn >> 12) & 7
            if insn & 0x7F == 0x33 and insn >> 25 == 0x10 and funct3 in ZBA_FUNCT3_SHIFT:
                rd, rs1, rs2 = (insn >> 7) & 31, (insn >> 15) & 31, (insn >> 20) & 31
                value = (uc.reg_read(X_REGS[rs1]) << ZBA_FUNCT3_SHIFT[funct3]) \
                    + uc.reg_read(X_REGS[rs2])
                if rd:
                    uc.reg_write(X_REGS[rd], value & 0xFFFF_FFFF)
                return
            state["fault"] = f"pc {pc - 4:#010x}: illegal instruction {insn:#010x}"
        else:
            state["fault"] = f"pc {pc:#010x}: exception {intno}"
        uc.emu_stop()

    mu.hook_add(UC_HOOK_MEM_WRITE, on_uart, begin=UART, end=UART + 0xFFF)
    mu.hook_add(UC_HOOK_INTR, on_interrupt)
    mu.reg_write(rc.UC_RISCV_REG_PC, entry)
    try:
        mu.emu_start(entry, 0xFFFF_FFFF, count=max_steps)
    except UcError as e:
        state["fault"] = f"pc {mu.reg_read(rc.UC_RISCV_REG_PC):#010x}: {e}"
    if state["exit"] is None and state["fault"] is None:
        state["fault"] = f"did not exit within {max_steps} instructions"
    return UnicornResult(state["exit"], bytes(output), state["fault"])  # type: ignore[arg-type]
