"""The ISA emulator against unicorn (rung 1 of the verification ladder).

Hypothesis generates random instruction streams (every ALU, M and Zba op, lui/auipc, loads
and stores into RAM and loads from code ROM, branches, jal and auipc+jalr pairs forwards and
backwards that stay inside the stream) over edge-biased register values and random RAM.
Both machines run the same step budget; compared: the pc of every instruction, every
register write (against unicorn's registers before the next instruction), every data access
(address, width, store value), and at the end all registers, the pc and the RAM window.
A deterministic sweep adds every R/I/shift op over all pairs of edge values, and every
shipped firmware program (and calc on a few inputs) runs in lock-step on both.

unicorn 2.1.4 lacks Zba (emulated in its interrupt hook, see conftest) and allows misaligned
accesses silently, so the streams only make aligned accesses.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cpu import isa, memmap
from cpu.elf import read_elf
from cpu.emulator import FaultCause, Machine

M = 0xFFFF_FFFF
BASE_REG = 31                         # holds RAM_BASE + 0x400 for loads/stores; never written
BASE_VALUE = memmap.RAM_BASE + 0x400
RAM_WINDOW = 0x1000                   # RAM bytes initialised and compared
EDGES = [0, 1, 2, 3, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000,
         0x8000_0001, 0xFFFF_FFFF, 0xFFFF_FFFE, 0x1234_5678, 0xDEAD_BEEF, 31, 32, 33]

R_OPS = [s.name for s in isa.SPECS.values() if s.fmt is isa.Fmt.R]
I_OPS = ["addi", "slti", "sltiu", "xori", "ori", "andi"]
SHIFT_OPS = ["slli", "srli", "srai"]
LOADS = {"lb": 1, "lbu": 1, "lh": 2, "lhu": 2, "lw": 4}
STORES = {"sb": 1, "sh": 2, "sw": 4}
BRANCHES = ["beq", "bne", "blt", "bge", "bltu", "bgeu"]

reg_value = st.one_of(st.sampled_from(EDGES), st.integers(0, M),
                      st.integers(-64, 64).map(lambda v: v & M))
dest = st.integers(0, 30)
src = st.integers(0, 31)
imm12 = st.one_of(st.sampled_from([-2048, -1, 0, 1, 2047]), st.integers(-2048, 2047))


@st.composite
def operation(draw, n_ops: int):
    """One op: (name, fields, target op index or None). Target indices are laid out later."""
    kind = draw(st.sampled_from(["r", "r", "r", "i", "i", "shift", "u", "load", "load",
                                 "store", "store", "branch", "branch", "jal", "jalr"]))
    target = draw(st.integers(0, n_ops))
    if kind == "r":
        return (draw(st.sampled_from(R_OPS)), dict(rd=draw(dest), rs1=draw(src), rs2=draw(src)), None)
    if kind == "i":
        return (draw(st.sampled_from(I_OPS)), dict(rd=draw(dest), rs1=draw(src), imm=draw(imm12)), None)
    if kind == "shift":
        return (draw(st.sampled_from(SHIFT_OPS)),
                dict(rd=draw(dest), rs1=draw(src), imm=draw(st.integers(0, 31))), None)
    if kind == "u":
        return (draw(st.sampled_from(["lui", "auipc"])),
                dict(rd=draw(dest), imm=draw(st.integers(0, 0xFFFFF))), None)
    if kind == "load":
        name = draw(st.sampled_from(sorted(LOADS)))
        w = LOADS[name]
        if draw(st.booleans()):        # from RAM through the base register
            off = draw(st.integers(-1024 // w, 2047 // w)) * w
            return (name, dict(rd=draw(dest), rs1=BASE_REG, imm=off), None)
        off = draw(st.integers(0, 2047 // w)) * w     # from code ROM (the program itself)
        return (name, dict(rd=draw(dest), rs1=0, imm=off), None)
    if kind == "store":
        name = draw(st.sampled_from(sorted(STORES)))
        w = STORES[name]
        off = draw(st.integers(-1024 // w, 2047 // w)) * w
        return (name, dict(rs1=BASE_REG, rs2=draw(src), imm=off), None)
    if kind == "branch":
        return (draw(st.sampled_from(BRANCHES)), dict(rs1=draw(src), rs2=draw(src)), target)
    if kind == "jal":
        return ("jal", dict(rd=draw(dest)), target)
    return ("jalr", dict(rd=draw(dest), rs1=draw(st.integers(1, 30))), target)


def layout(ops: list[tuple]) -> list[int]:
    """Encode ops; a target is an op index (len(ops) = the end). jalr becomes
    ``auipc rs1, 0; jalr rd, off(rs1)``."""
    addr, pc = [], 0
    for name, _, _ in ops:
        addr.append(pc)
        pc += 8 if name == "jalr" else 4
    addr.append(pc)
    words = []
    for (name, fields, target), here in zip(ops, addr):
        if name == "jalr":
            words.append(isa.encode("auipc", rd=fields["rs1"], imm=0))
            words.append(isa.encode("jalr", imm=addr[target] - here, **fields))
        elif target is not None:
            words.append(isa.encode(name, imm=addr[target] - here, **fields))
        else:
            words.append(isa.encode(name, **fields))
    return words


def compare(words: list[int], regs: list[int], ram: bytes, steps: int, unicorn_run,
            compared: dict) -> None:
    """Run both machines and assert they agree (see the module docstring)."""
    m = Machine()
    m.load_words(words)
    m.regs[:] = regs
    m.write(memmap.RAM_BASE, ram)
    res = m.run(steps, trace=True)
    end = 4 * len(words)
    if res.fault is not None:        # only legal way out: falling off the end of the stream
        assert res.fault.cause is FaultCause.ILLEGAL_INSTRUCTION and res.fault.pc == end, \
            str(res.fault)
    uc = unicorn_run(words, regs, ram, steps)
    assert uc.error is None, uc.error
    ours = res.retired
    assert [r.pc for r in ours] == uc.pcs
    for i, r in enumerate(ours):
        if r.rd is not None:
            assert uc.snapshots[i + 1][r.rd] == r.rd_value, \
                f"#{i} pc 0x{r.pc:x} {isa.disassemble(r.insn)}: x{r.rd} ours 0x{r.rd_value:08x} " \
                f"unicorn 0x{uc.snapshots[i + 1][r.rd]:08x}"
    accesses = [("W" if r.is_store else "R", r.mem_addr, r.mem_width, r.mem_data if r.is_store else 0)
                for r in ours if r.mem_addr is not None]
    assert accesses == uc.accesses
    assert m.regs == uc.snapshots[-1]
    assert m.pc == uc.pc
    assert m.read(memmap.RAM_BASE, len(ram)) == uc.ram
    compared["instructions"] += len(ours)
    compared["streams"] += 1


def random_stream(data, n_ops: int, seed: int, unicorn_run, compared) -> None:
    ops = [data.draw(operation(n_ops)) for _ in range(n_ops)]
    regs = [0] + [data.draw(reg_value) for _ in range(1, 32)]
    regs[BASE_REG] = BASE_VALUE
    ram = random.Random(seed).randbytes(RAM_WINDOW)
    compare(layout(ops), regs, ram, 300, unicorn_run, compared)


STREAM_ARGS = dict(data=st.data(), n_ops=st.integers(1, 60), seed=st.integers(0, 2**32 - 1))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**STREAM_ARGS)
def test_random_streams_match_unicorn(data, n_ops, seed, unicorn_run, compared):
    random_stream(data, n_ops, seed, unicorn_run, compared)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**STREAM_ARGS)
def test_many_random_streams_match_unicorn(data, n_ops, seed, unicorn_run, compared):
    random_stream(data, n_ops, seed, unicorn_run, compared)


def li(rd: int, value: int) -> list[int]:
    """``lui`` + ``addi`` loading a 32-bit constant."""
    hi = ((value + 0x800) >> 12) & 0xFFFFF
    return [isa.encode("lui", rd=rd, imm=hi),
            isa.encode("addi", rd=rd, rs1=rd, imm=isa.sign_extend(value & 0xFFF, 12))]


def test_edge_value_sweep_matches_unicorn(unicorn_run, compared):
    """Every R-type op (I, M, Zba) on every pair of edge values, the I-type ops on edge
    immediates and the shifts by every amount, in straight-line code."""
    words: list[int] = []
    for name in R_OPS:
        for a in EDGES:
            for b in EDGES:
                words += li(1, a) + li(2, b) + [isa.encode(name, rd=3, rs1=1, rs2=2),
                                                isa.encode(name, rd=1, rs1=1, rs2=1)]
    for name in I_OPS:
        for a in EDGES:
            words += li(1, a)
            words += [isa.encode(name, rd=3, rs1=1, imm=i) for i in (-2048, -1, 0, 1, 5, 2047)]
    for name in SHIFT_OPS:
        for a in (0x8000_0001, 0x7FFF_FFFF, 0xDEAD_BEEF):
            words += li(1, a)
            words += [isa.encode(name, rd=3, rs1=1, imm=s) for s in range(32)]
    regs = [0] * 32
    compare(words, regs, bytes(64), len(words) + 1, unicorn_run, compared)


# ---------------------------------------------------------------- shipped firmware, lock-step

def _program_names() -> list[str]:
    try:
        from firmware.toolchain import shipped_programs
    except ImportError:
        return []
    return sorted(shipped_programs())


PROGRAM_INPUTS = {"calc": ["2**100", "-7 // 2", "(3/4 - 5) * 2**70 % 7 + gcd(84, -36)"]}


@pytest.mark.parametrize("name", _program_names())
def test_firmware_lockstep_with_unicorn(name, firmware_elf, unicorn_program, compared):
    """Every shipped program, instruction by instruction: pc, the register written and its
    value, every data access, the UART output and the exit code."""
    path = firmware_elf(name)
    image = read_elf(path)
    for text in PROGRAM_INPUTS.get(name, [None]):
        m = Machine.from_elf(path, None if text is None else text.encode())
        res = m.run(2_000_000, trace=True)
        assert res.exit_code is not None, str(res.fault)
        segments = [(s.vaddr, s.data + bytes(s.memsz - len(s.data))) for s in image.segments]
        if text is not None:
            segments.append((image.symbols["__input_buffer"].value, text.encode() + b"\0"))
        uc = unicorn_program(segments, image.entry, 2_000_000, [r.rd for r in res.retired])
        assert uc.error is None, uc.error
        assert [r.pc for r in res.retired] == uc.pcs
        mismatches = [(i, r) for i, r in enumerate(res.retired)
                      if r.rd is not None and uc.values[i] != r.rd_value]
        assert not mismatches, mismatches[:3]
        accesses = [("W" if r.is_store else "R", r.mem_addr, r.mem_width,
                     r.mem_data if r.is_store else 0)
                    for r in res.retired if r.mem_addr is not None]
        assert accesses == uc.accesses
        assert (res.output, res.exit_code) == (bytes(uc.output), uc.exit_code)
        compared["instructions"] += len(res.retired)
        compared["streams"] += 1
