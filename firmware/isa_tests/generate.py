"""Generate the ISA test programs (``firmware/isa_tests/*.S``) from a small model of the spec.

Run ``python -m firmware.isa_tests.generate`` to rewrite the ``.S`` files; the tests check
that the checked-in files match this generator's output. Each program exercises one group of
RV32I / M / Zba instructions with edge values (0, ±1, INT_MIN, INT_MAX, mixed halves),
register aliasing (rd = rs1, rd = rs2, rd = rs1 = rs2), x0 as source and destination,
branches taken and not taken in both directions (and at far offsets), sign extension of
loads and immediates, and loads/stores in RAM and the rodata ROM. The expected values come
from the model below (written from the RISC-V unprivileged spec); the programs themselves
are checked on unicorn as well as on the project's emulator. A failing case exits with its
number; a passing program exits 0 (see isa_macros.h).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
M32 = 0xFFFF_FFFF
INT_MIN = 0x8000_0000


def s32(x: int) -> int:
    """Two's-complement value of a 32-bit word."""
    x &= M32
    return x - (1 << 32) if x & INT_MIN else x


def _div(a: int, b: int) -> int:
    if b == 0:
        return M32
    if s32(a) == -(1 << 31) and s32(b) == -1:
        return INT_MIN
    q = abs(s32(a)) // abs(s32(b))
    return -q if (s32(a) < 0) != (s32(b) < 0) else q


def _rem(a: int, b: int) -> int:
    if b == 0:
        return a
    if s32(a) == -(1 << 31) and s32(b) == -1:
        return 0
    r = abs(s32(a)) % abs(s32(b))
    return -r if s32(a) < 0 else r


# The model: operands are unsigned 32-bit words, results are taken modulo 2^32.
RR_OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "sll": lambda a, b: a << (b & 31),
    "slt": lambda a, b: int(s32(a) < s32(b)),
    "sltu": lambda a, b: int(a < b),
    "xor": lambda a, b: a ^ b,
    "srl": lambda a, b: a >> (b & 31),
    "sra": lambda a, b: s32(a) >> (b & 31),
    "or": lambda a, b: a | b,
    "and": lambda a, b: a & b,
    "mul": lambda a, b: a * b,
    "mulh": lambda a, b: (s32(a) * s32(b)) >> 32,
    "mulhsu": lambda a, b: (s32(a) * b) >> 32,
    "mulhu": lambda a, b: (a * b) >> 32,
    "div": _div,
    "divu": lambda a, b: M32 if b == 0 else a // b,
    "rem": _rem,
    "remu": lambda a, b: a if b == 0 else a % b,
    "sh1add": lambda a, b: (a << 1) + b,
    "sh2add": lambda a, b: (a << 2) + b,
    "sh3add": lambda a, b: (a << 3) + b,
}
# Immediate forms: the 12-bit immediate is sign-extended (also for sltiu and the logic ops).
IMM_OPS = {"addi": "add", "slti": "slt", "sltiu": "sltu", "xori": "xor", "ori": "or",
           "andi": "and", "slli": "sll", "srli": "srl", "srai": "sra"}

EDGE_PAIRS = [
    (0, 0), (1, 1), (3, 7), (0x7FFF_FFFF, 1), (INT_MIN, M32), (INT_MIN, 1), (M32, M32),
    (0x7FFF_FFFF, INT_MIN), (0x0000_FFFF, 0xFFFF_0000), (0x1234_5678, 0x9ABC_DEF0),
    (0xFFFF_FFFD, 3), (0, INT_MIN), (5, 0xFFFF_FFFB), (0xFFFF_FFFF, 1),
]
SHIFT_PAIRS = [(0x8765_4321, 0), (0x8765_4321, 1), (0x8765_4321, 7), (0x8765_4321, 31),
               (0x8765_4321, 32), (0x8765_4321, 33), (0x7654_3210, 0xFFFF_FFE1),
               (INT_MIN, 31), (1, 31), (M32, 16)]
DIV_PAIRS = [(20, 6), (M32 - 19, 6), (20, M32 - 5), (M32 - 19, M32 - 5), (INT_MIN, M32),
             (INT_MIN, 1), (7, 0), (INT_MIN, 0), (0, 0), (0xFFFF_FFFF, 2), (1, 0xFFFF_FFFF),
             (0x7FFF_FFFF, INT_MIN), (12345678, 1000)]
MUL_PAIRS = [(0x8000, 0xFFFF_8000), (0xAAAA_AAAB, 0x0002_FE7D), (0x7FFF_FFFF, 0x7FFF_FFFF),
             (INT_MIN, INT_MIN), (INT_MIN, M32), (M32, 2)]
IMM_CASES = [(0, 0), (1, 1), (3, 7), (0, -1), (1, -1), (0x7FFF_FFFF, 1), (INT_MIN, -1),
             (0, 2047), (0, -2048), (0x1234_5678, 0x555), (0xFFFF_F800, -2048),
             (M32, 2047), (0x7FFF_FFFF, -2048), (INT_MIN, 2047)]
SHIFT_IMMS = [(0x8765_4321, 0), (0x8765_4321, 1), (0x8765_4321, 7), (0x8765_4321, 31),
              (INT_MIN, 31), (1, 31), (M32, 16)]

# Test data: the same words in RAM (.data) and in the rodata ROM (.rodata).
DATA_WORDS = [0x00FF_00FF, 0xFF00_FF00, 0x0FF0_0FF0, 0xF00F_F00F, 0x8000_7F80, 0x1234_5678]


def h(v: int) -> str:
    return f"0x{v & M32:08x}"


class Program:
    """One .S file being written: numbered cases (numbers stay below 256, the exit code)."""

    def __init__(self, name: str, title: str) -> None:
        self.name, self.title = name, title
        self.lines: list[str] = []
        self.data: list[str] = []
        self.rodata: list[str] = []
        self.num = 0

    def next(self) -> int:
        self.num += 1
        if self.num > 255:
            raise ValueError(f"{self.name}: more than 255 cases (exit codes are 8-bit)")
        return self.num

    def comment(self, text: str) -> None:
        self.lines.append(f"\n    /* {text} */")

    def emit(self, line: str) -> None:
        self.lines.append(f"    {line}")

    def text(self) -> str:
        out = [f"/* {self.name}.S: {self.title}",
               " * Generated by firmware/isa_tests/generate.py (do not edit by hand).",
               " * Exit 0: all cases passed; exit N: case N failed. */",
               '#include "isa_macros.h"', "", "TEST_BEGIN"]
        out += self.lines
        out += ["", "TEST_END", ""]
        if self.data:
            out += ["    .data", "    .balign 4", *self.data, ""]
        if self.rodata:
            out += ["    .section .rodata", "    .balign 4", *self.rodata, ""]
        return "\n".join(out)


def rr_cases(p: Program, inst: str, pairs: list[tuple[int, int]]) -> None:
    f = RR_OPS[inst]
    p.comment(inst)
    for a, b in pairs:
        p.emit(f"TEST_RR_OP({p.next()}, {inst}, {h(f(a, b))}, {h(a)}, {h(b)})")
    a, b = 0x1357_9BDF, 0x0000_0013
    p.emit(f"TEST_RR_SRC1_EQ_DEST({p.next()}, {inst}, {h(f(a, b))}, {h(a)}, {h(b)})")
    p.emit(f"TEST_RR_SRC2_EQ_DEST({p.next()}, {inst}, {h(f(a, b))}, {h(a)}, {h(b)})")
    p.emit(f"TEST_RR_SRC12_EQ_DEST({p.next()}, {inst}, {h(f(a, a))}, {h(a)})")
    p.emit(f"TEST_RR_ZEROSRC1({p.next()}, {inst}, {h(f(0, b))}, {h(b)})")
    p.emit(f"TEST_RR_ZEROSRC2({p.next()}, {inst}, {h(f(a, 0))}, {h(a)})")
    p.emit(f"TEST_RR_ZEROSRC12({p.next()}, {inst}, {h(f(0, 0))})")
    p.emit(f"TEST_RR_ZERODEST({p.next()}, {inst}, {h(a)}, {h(b)})")


def imm_cases(p: Program, inst: str, cases: list[tuple[int, int]]) -> None:
    f = RR_OPS[IMM_OPS[inst]]
    p.comment(f"{inst} (immediate sign-extended from 12 bits)")
    for a, imm in cases:
        p.emit(f"TEST_IMM_OP({p.next()}, {inst}, {h(f(a, imm & M32))}, {h(a)}, {imm})")
    a, imm = cases[-2]
    p.emit(f"TEST_IMM_SRC1_EQ_DEST({p.next()}, {inst}, {h(f(a, imm & M32))}, {h(a)}, {imm})")
    p.emit(f"TEST_IMM_ZEROSRC1({p.next()}, {inst}, {h(f(0, imm & M32))}, {imm})")
    p.emit(f"TEST_IMM_ZERODEST({p.next()}, {inst}, {h(a)}, {imm})")


def arith() -> Program:
    p = Program("rv32i_arith", "add, sub, addi")
    rr_cases(p, "add", EDGE_PAIRS)
    rr_cases(p, "sub", EDGE_PAIRS)
    imm_cases(p, "addi", IMM_CASES)
    return p


def compare() -> Program:
    p = Program("rv32i_compare", "slt, sltu, slti, sltiu")
    for inst in ("slt", "sltu"):
        rr_cases(p, inst, EDGE_PAIRS)
    for inst in ("slti", "sltiu"):
        imm_cases(p, inst, IMM_CASES)
    return p


def logic() -> Program:
    p = Program("rv32i_logic", "xor, or, and, xori, ori, andi")
    for inst in ("xor", "or", "and"):
        rr_cases(p, inst, EDGE_PAIRS[:10])
    for inst in ("xori", "ori", "andi"):
        imm_cases(p, inst, IMM_CASES)
    return p


def shift() -> Program:
    p = Program("rv32i_shift", "sll, srl, sra (shift amount = rs2[4:0]), slli, srli, srai")
    for inst in ("sll", "srl", "sra"):
        rr_cases(p, inst, SHIFT_PAIRS)
    for inst in ("slli", "srli", "srai"):
        imm_cases(p, inst, SHIFT_IMMS)
    return p


def upper() -> Program:
    p = Program("rv32i_upper", "lui, auipc")
    p.comment("lui: rd = imm << 12")
    for imm in (0, 1, 0x12345, 0x80000, 0xFFFFF, 0x7FFFF):
        p.emit(f"TEST_CASE({p.next()}, x14, {h(imm << 12)}, li x14, 1; lui x14, {h(imm)})")
    p.emit(f"TEST_CASE({p.next()}, x0, 0, lui x0, 0x12345)")
    p.emit(f"TEST_CASE({p.next()}, x14, 0x12345678, lui x14, 0x12345; addi x14, x14, 0x678)")
    p.emit(f"TEST_CASE({p.next()}, x14, 0x12344800, lui x14, 0x12345; addi x14, x14, -0x800)")
    p.comment("auipc: rd = pc + (imm << 12); expected from the absolute address (lui/addi)")
    for imm in (0, 1, 0x80000, 0xFFFFF, 0x12345):
        n = p.next()
        p.emit(f"li TESTNUM, {n}")
        p.emit(f"auipc_{n}: auipc x14, {h(imm)}")
        p.emit(f"lui x15, %hi(auipc_{n}); addi x15, x15, %lo(auipc_{n})")
        p.emit(f"li x16, {h(imm << 12)}; add x15, x15, x16")
        p.emit("bne x14, x15, fail")
    n = p.next()
    p.emit(f"TEST_CASE({n}, x0, 0, auipc x0, 0x12345)")
    return p


BRANCHES: dict[str, Callable[[int, int], bool]] = {
    "beq": lambda a, b: a == b, "bne": lambda a, b: a != b,
    "blt": lambda a, b: s32(a) < s32(b), "bge": lambda a, b: s32(a) >= s32(b),
    "bltu": lambda a, b: a < b, "bgeu": lambda a, b: a >= b,
}
BRANCH_PAIRS = [(0, 0), (1, 1), (0, 1), (1, 0), (M32, 1), (1, M32), (INT_MIN, 0x7FFF_FFFF),
                (0x7FFF_FFFF, INT_MIN), (M32, M32), (INT_MIN, INT_MIN), (M32, 0xFFFF_FFFE)]


def branch() -> Program:
    p = Program("rv32i_branch", "beq, bne, blt, bge, bltu, bgeu: taken forwards and "
                                "backwards, not taken, x0 operands, far offsets")
    for inst, taken in BRANCHES.items():
        p.comment(inst)
        for a, b in BRANCH_PAIRS:
            macro = "TEST_BR_TAKEN" if taken(a, b) else "TEST_BR_NOT_TAKEN"
            p.emit(f"{macro}({p.next()}, {inst}, {h(a)}, {h(b)})")
        # x0 as an operand: compare x0 with x0 and with a register holding 5.
        for rs2, value, setup in (("x0", 0, ""), ("x1", 5, "; li x1, 5")):
            n = p.next()
            p.emit(f"li TESTNUM, {n}{setup}")
            target = f"br_x0_{n}"
            if taken(0, value):
                p.emit(f"{inst} x0, {rs2}, {target}; j fail; {target}:")
            else:
                p.emit(f"{inst} x0, {rs2}, fail")
    p.comment("far branches: the largest offsets, +4092 and -4096 bytes")
    n = p.next()
    p.emit(f"li TESTNUM, {n}")
    p.emit("beq x0, x0, far_forward")          # 4 (j fail) + 4 * 1021 (nops) + 4 = +4092
    p.emit("j fail")
    p.emit("NOPS(1021)")
    p.emit("far_forward:")
    n = p.next()
    p.emit(f"li TESTNUM, {n}")
    p.emit("j far_backward_from")
    p.emit("far_backward_to: j far_done")
    p.emit("NOPS(1022)")
    p.emit("j fail")
    p.emit("far_backward_from: bne x31, x0, far_backward_to")
    p.emit("j fail")
    p.emit("far_done:")
    return p


def jump() -> Program:
    p = Program("rv32i_jump", "jal, jalr: links, forwards and backwards, offsets, rd = rs1, "
                              "x0 destinations, bit 0 of the jalr target cleared")
    p.comment("jal forwards: link = address after the jal")
    n = p.next()
    p.emit(f"li TESTNUM, {n}; lui x15, %hi(ret_{n}); addi x15, x15, %lo(ret_{n})")
    p.emit(f"jal x1, to_{n}")
    p.emit(f"ret_{n}: j fail")
    p.emit(f"to_{n}: bne x1, x15, fail")
    p.comment("jal backwards")
    n = p.next()
    p.emit(f"li TESTNUM, {n}; j start_{n}")
    p.emit(f"to_{n}: bne x14, x15, fail; j done_{n}")
    p.emit(f"start_{n}: lui x15, %hi(ret_{n}); addi x15, x15, %lo(ret_{n})")
    p.emit(f"jal x14, to_{n}")
    p.emit(f"ret_{n}: j fail")
    p.emit(f"done_{n}:")
    p.comment("jal x0 (j): no link, x0 stays zero")
    n = p.next()
    p.emit(f"li TESTNUM, {n}; jal x0, to_{n}; j fail; to_{n}: bne x0, x0, fail")
    p.comment("jal far: +8 KiB (beyond any branch's reach)")
    n = p.next()
    p.emit(f"li TESTNUM, {n}; lui x15, %hi(ret_{n}); addi x15, x15, %lo(ret_{n})")
    p.emit(f"jal x1, to_{n}")
    p.emit(f"ret_{n}: j fail")
    p.emit("NOPS(2048)")
    p.emit(f"to_{n}: bne x1, x15, fail")
    p.comment("jalr: target = (rs1 + imm) & ~1")
    for offset, base_adjust, desc in [(0, 0, "offset 0"), (8, -8, "positive offset"),
                                      (-16, 16, "negative offset"), (0, 1, "bit 0 cleared"),
                                      (2047, -2047, "largest offset"),
                                      (-2048, 2048, "smallest offset")]:
        n = p.next()
        p.emit(f"/* {desc} */ li TESTNUM, {n}")
        p.emit(f"lui x2, %hi(to_{n} + {base_adjust}); addi x2, x2, %lo(to_{n} + {base_adjust})")
        p.emit(f"lui x15, %hi(ret_{n}); addi x15, x15, %lo(ret_{n})")
        p.emit(f"jalr x1, {offset}(x2)")
        p.emit(f"ret_{n}: j fail")
        p.emit(f"to_{n}: bne x1, x15, fail")
    n = p.next()
    p.emit(f"/* rd = rs1: the target is read before the link is written */ li TESTNUM, {n}")
    p.emit(f"lui x1, %hi(to_{n}); addi x1, x1, %lo(to_{n})")
    p.emit(f"lui x15, %hi(ret_{n}); addi x15, x15, %lo(ret_{n})")
    p.emit("jalr x1, 0(x1)")
    p.emit(f"ret_{n}: j fail")
    p.emit(f"to_{n}: bne x1, x15, fail")
    n = p.next()
    p.emit(f"/* jalr x0 (jr): no link */ li TESTNUM, {n}")
    p.emit(f"lui x2, %hi(to_{n}); addi x2, x2, %lo(to_{n})")
    p.emit(f"jalr x0, 0(x2); j fail; to_{n}: bne x0, x0, fail")
    n = p.next()
    p.emit(f"/* jalr backwards (a call and return) */ li TESTNUM, {n}")
    p.emit(f"j start_{n}")
    p.emit(f"func_{n}: addi x14, x14, 1; jalr x0, 0(x1)")
    p.emit(f"start_{n}: li x14, 41; jal x1, func_{n}; li x15, 42; bne x14, x15, fail")
    return p


def _load_model(inst: str, words: list[int], offset: int) -> int:
    data = b"".join(w.to_bytes(4, "little") for w in words)
    size = {"lb": 1, "lbu": 1, "lh": 2, "lhu": 2, "lw": 4}[inst]
    v = int.from_bytes(data[offset:offset + size], "little")
    if inst in ("lb", "lh") and v >> (8 * size - 1):
        v -= 1 << (8 * size)
    return v


def load() -> Program:
    p = Program("rv32i_load", "lb, lh, lw, lbu, lhu from RAM and the rodata ROM: sign and "
                              "zero extension, every byte/halfword position, +/- offsets")
    words = ", ".join(h(w) for w in DATA_WORDS)
    p.data.append(f"ram_words: .word {words}")
    p.rodata.append(f"rom_words: .word {words}")
    for region in ("ram_words", "rom_words"):
        for inst, step in (("lb", 1), ("lbu", 1), ("lh", 2), ("lhu", 2), ("lw", 4)):
            p.comment(f"{inst} from {region}")
            for offset in range(0, 4 * len(DATA_WORDS), step):
                if step < 4 and offset >= 12 and offset not in (16, 17, 18, 19):
                    continue            # keep the count down: words 0-2 and the 0x80007f80
                want = _load_model(inst, DATA_WORDS, offset)
                p.emit(f"TEST_LD_OP({p.next()}, {inst}, {h(want)}, {offset}, {region})")
            # negative offset from a base past the data, rd = base, x0 destination
            want = _load_model(inst, DATA_WORDS, 16)
            n = p.next()
            p.emit(f"TEST_CASE({n}, x14, {h(want)}, lui x1, %hi({region} + 24); "
                   f"addi x1, x1, %lo({region} + 24); {inst} x14, -8(x1))")
            p.emit(f"TEST_LD_DEST_EQ_BASE({p.next()}, {inst}, {h(want)}, 16, {region})")
            p.emit(f"TEST_LD_ZERODEST({p.next()}, {inst}, 16, {region})")
    return p


def store() -> Program:
    p = Program("rv32i_store", "sb, sh, sw: only the addressed bytes change; read back with "
                               "every load width; +/- offsets; x0 as the stored value")
    p.data.append("scratch: .fill 4, 4, 0")
    fill = 0xA5A5_A5A5
    value = 0x8182_F3F4

    def case(store_inst: str, offset: int, load_inst: str, load_off: int, src: str) -> None:
        words = [fill, fill, fill, fill]
        size = {"sb": 1, "sh": 2, "sw": 4}[store_inst]
        data = bytearray(b"".join(w.to_bytes(4, "little") for w in words))
        v = 0 if src == "x0" else value
        data[offset:offset + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        now = [int.from_bytes(data[i:i + 4], "little") for i in range(0, 16, 4)]
        want = _load_model(load_inst, now, load_off)
        n = p.next()
        p.emit(f"li TESTNUM, {n}; lui x1, %hi(scratch); addi x1, x1, %lo(scratch)")
        p.emit(f"li x3, {h(fill)}; sw x3, 0(x1); sw x3, 4(x1); sw x3, 8(x1); sw x3, 12(x1)")
        p.emit(f"li x2, {h(value)}; addi x4, x1, 8; {store_inst} {src}, {offset - 8}(x4)")
        p.emit(f"{load_inst} x14, {load_off}(x1); li EXPECT, {h(want)}; bne x14, EXPECT, fail")

    for offset in range(4, 8):
        case("sb", offset, "lw", 4, "x2")
        case("sb", offset, "lbu", offset, "x2")
    case("sb", 4, "lb", 4, "x2")
    case("sb", 6, "lw", 0, "x2")          # neighbours unchanged
    for offset in (4, 6):
        case("sh", offset, "lw", 4, "x2")
        case("sh", offset, "lh", offset, "x2")
        case("sh", offset, "lhu", offset, "x2")
    case("sh", 8, "lw", 12, "x2")
    for offset in (0, 4, 8, 12):
        case("sw", offset, "lw", offset, "x2")
    case("sw", 4, "lw", 8, "x2")
    for inst, off in (("sb", 5), ("sh", 6), ("sw", 8)):
        case(inst, off, "lw", off & ~3, "x0")
    return p


def fence() -> Program:
    p = Program("rv32i_fence", "fence: an ordering no-op on this single in-order hart")
    p.emit(f"TEST_CASE({p.next()}, x14, 7, li x14, 7; fence)")
    p.emit(f"TEST_CASE({p.next()}, x14, 8, li x14, 8; fence rw, rw)")
    p.emit(f"TEST_CASE({p.next()}, x14, 9, li x14, 9; fence iorw, iorw)")
    p.emit(f"TEST_CASE({p.next()}, x14, 10, li x14, 10; fence r, w)")
    return p


def mul() -> Program:
    p = Program("rv32m_mul", "mul, mulh, mulhsu, mulhu")
    for inst in ("mul", "mulh", "mulhsu", "mulhu"):
        rr_cases(p, inst, EDGE_PAIRS + MUL_PAIRS)
    return p


def div() -> Program:
    p = Program("rv32m_div", "div, divu, rem, remu: rounding toward zero, division by zero, "
                             "INT_MIN / -1")
    for inst in ("div", "divu", "rem", "remu"):
        rr_cases(p, inst, DIV_PAIRS + EDGE_PAIRS[1:8])
    return p


def zba() -> Program:
    p = Program("zba", "sh1add, sh2add, sh3add: rd = (rs1 << n) + rs2")
    for inst in ("sh1add", "sh2add", "sh3add"):
        rr_cases(p, inst, EDGE_PAIRS + [(0x4000_0000, 5), (0x2000_0001, M32)])
    return p


def registers() -> Program:
    p = Program("rv32i_registers", "every register x1..x29 as rd, rs1 and rs2 (the harness "
                                   "owns x30 and x31); x0 ignores writes")

    def pattern(r: int) -> int:
        return (0x0101_0101 * r) ^ (0x8000_0000 if r % 2 else 0x0000_5A5A)
    p.comment("write a distinct value to each register, then read each back")
    p.emit(f"li TESTNUM, {p.next()}")
    for r in range(1, 30):
        p.emit(f"li x{r}, {h(pattern(r))}")
    p.emit("li x0, 0x12345678")
    for r in range(1, 30):
        p.emit(f"li EXPECT, {h(pattern(r))}; bne x{r}, EXPECT, fail")
    p.emit("bne x0, zero, fail")
    p.comment("each register as rs1, rs2 and rd of add: x[r] = x[r-1] + x[r+1]")
    for r in range(2, 29):
        want = (pattern(r - 1) + pattern(r + 1)) & M32
        p.emit(f"TEST_CASE({p.next()}, x{r}, {h(want)}, add x{r}, x{r - 1}, x{r + 1})")
        p.emit(f"li x{r}, {h(pattern(r))}")
    return p


PROGRAMS: list[Callable[[], Program]] = [arith, compare, logic, shift, upper, branch, jump,
                                         load, store, fence, mul, div, zba, registers]


def render() -> dict[str, str]:
    """File name → text of every ISA test program."""
    return {f"{prog.name}.S": prog.text() for prog in (make() for make in PROGRAMS)}


def main() -> None:
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
