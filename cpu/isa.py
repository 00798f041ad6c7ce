"""RV32IM + Zba instruction encodings: a table of every instruction, decode, encode, disassemble.

The table :data:`SPECS` is the single source: :func:`decode` (word -> :class:`Decoded`, or
``None`` for an illegal encoding), :func:`encode` (fields -> word, used by tests and
hand-assembled programs) and :func:`disassemble` (word -> text for messages and traces) are
all built from it. Besides the executable instructions, the table lists the SYSTEM/fence
encodings the machine recognises only to refuse them by name (``fence.i``, the CSR
instructions, ``ebreak``): decoding them succeeds, executing them is a fault.

Immediates in :class:`Decoded` are sign-extended Python ints (``lui``/``auipc``: the upper
20 bits already shifted, i.e. ``imm = word & 0xFFFFF000`` sign-extended); shift immediates
are the 5-bit shift amount.
"""
from __future__ import annotations

from enum import Enum
from typing import NamedTuple

MASK32 = 0xFFFF_FFFF


class Fmt(Enum):
    """Instruction formats (how the fields and the immediate are laid out)."""
    R = "R"          # rd, rs1, rs2
    I = "I"          # rd, rs1, imm[11:0]
    LOAD = "LOAD"    # I-type, printed as rd, imm(rs1)
    SHIFT = "SHIFT"  # I-type with a 5-bit shamt and funct7
    S = "S"          # rs1, rs2, imm[11:0] (stores)
    B = "B"          # rs1, rs2, imm[12:1] (branches)
    U = "U"          # rd, imm[31:12]
    J = "J"          # rd, imm[20:1]
    NONE = "NONE"    # fixed encodings: ecall, ebreak, fence, fence.i
    CSR = "CSR"      # csrrw..csrrci: refused


class Spec(NamedTuple):
    """One instruction: mnemonic, format and the fixed opcode/funct3/funct7 fields."""
    name: str
    fmt: Fmt
    opcode: int
    funct3: int | None = None
    funct7: int | None = None
    #: Supported means "executes"; unsupported entries decode so that the fault names them.
    supported: bool = True


OP_LUI, OP_AUIPC, OP_JAL, OP_JALR = 0x37, 0x17, 0x6F, 0x67
OP_BRANCH, OP_LOAD, OP_STORE, OP_IMM, OP_REG = 0x63, 0x03, 0x23, 0x13, 0x33
OP_FENCE, OP_SYSTEM = 0x0F, 0x73

_SPEC_LIST: list[Spec] = [
    Spec("lui", Fmt.U, OP_LUI),
    Spec("auipc", Fmt.U, OP_AUIPC),
    Spec("jal", Fmt.J, OP_JAL),
    Spec("jalr", Fmt.I, OP_JALR, 0),
    Spec("beq", Fmt.B, OP_BRANCH, 0), Spec("bne", Fmt.B, OP_BRANCH, 1),
    Spec("blt", Fmt.B, OP_BRANCH, 4), Spec("bge", Fmt.B, OP_BRANCH, 5),
    Spec("bltu", Fmt.B, OP_BRANCH, 6), Spec("bgeu", Fmt.B, OP_BRANCH, 7),
    Spec("lb", Fmt.LOAD, OP_LOAD, 0), Spec("lh", Fmt.LOAD, OP_LOAD, 1),
    Spec("lw", Fmt.LOAD, OP_LOAD, 2), Spec("lbu", Fmt.LOAD, OP_LOAD, 4),
    Spec("lhu", Fmt.LOAD, OP_LOAD, 5),
    Spec("sb", Fmt.S, OP_STORE, 0), Spec("sh", Fmt.S, OP_STORE, 1),
    Spec("sw", Fmt.S, OP_STORE, 2),
    Spec("addi", Fmt.I, OP_IMM, 0), Spec("slti", Fmt.I, OP_IMM, 2),
    Spec("sltiu", Fmt.I, OP_IMM, 3), Spec("xori", Fmt.I, OP_IMM, 4),
    Spec("ori", Fmt.I, OP_IMM, 6), Spec("andi", Fmt.I, OP_IMM, 7),
    Spec("slli", Fmt.SHIFT, OP_IMM, 1, 0x00), Spec("srli", Fmt.SHIFT, OP_IMM, 5, 0x00),
    Spec("srai", Fmt.SHIFT, OP_IMM, 5, 0x20),
    Spec("add", Fmt.R, OP_REG, 0, 0x00), Spec("sub", Fmt.R, OP_REG, 0, 0x20),
    Spec("sll", Fmt.R, OP_REG, 1, 0x00), Spec("slt", Fmt.R, OP_REG, 2, 0x00),
    Spec("sltu", Fmt.R, OP_REG, 3, 0x00), Spec("xor", Fmt.R, OP_REG, 4, 0x00),
    Spec("srl", Fmt.R, OP_REG, 5, 0x00), Spec("sra", Fmt.R, OP_REG, 5, 0x20),
    Spec("or", Fmt.R, OP_REG, 6, 0x00), Spec("and", Fmt.R, OP_REG, 7, 0x00),
    # M extension
    Spec("mul", Fmt.R, OP_REG, 0, 0x01), Spec("mulh", Fmt.R, OP_REG, 1, 0x01),
    Spec("mulhsu", Fmt.R, OP_REG, 2, 0x01), Spec("mulhu", Fmt.R, OP_REG, 3, 0x01),
    Spec("div", Fmt.R, OP_REG, 4, 0x01), Spec("divu", Fmt.R, OP_REG, 5, 0x01),
    Spec("rem", Fmt.R, OP_REG, 6, 0x01), Spec("remu", Fmt.R, OP_REG, 7, 0x01),
    # Zba
    Spec("sh1add", Fmt.R, OP_REG, 2, 0x10), Spec("sh2add", Fmt.R, OP_REG, 4, 0x10),
    Spec("sh3add", Fmt.R, OP_REG, 6, 0x10),
    # fence is a no-op; ecall executes (exit only); the rest decode only to be refused.
    Spec("fence", Fmt.NONE, OP_FENCE, 0),
    Spec("fence.i", Fmt.NONE, OP_FENCE, 1, supported=False),
    Spec("ecall", Fmt.NONE, OP_SYSTEM, 0),
    Spec("ebreak", Fmt.NONE, OP_SYSTEM, 0, supported=False),
    Spec("csrrw", Fmt.CSR, OP_SYSTEM, 1, supported=False),
    Spec("csrrs", Fmt.CSR, OP_SYSTEM, 2, supported=False),
    Spec("csrrc", Fmt.CSR, OP_SYSTEM, 3, supported=False),
    Spec("csrrwi", Fmt.CSR, OP_SYSTEM, 5, supported=False),
    Spec("csrrsi", Fmt.CSR, OP_SYSTEM, 6, supported=False),
    Spec("csrrci", Fmt.CSR, OP_SYSTEM, 7, supported=False),
]

#: Every instruction the decoder knows, by mnemonic.
SPECS: dict[str, Spec] = {s.name: s for s in _SPEC_LIST}

#: The executable instruction set, grouped (tests iterate over these).
RV32I = ("lui auipc jal jalr beq bne blt bge bltu bgeu lb lh lw lbu lhu sb sh sw addi slti "
         "sltiu xori ori andi slli srli srai add sub sll slt sltu xor srl sra or and fence "
         "ecall").split()
RV32M = "mul mulh mulhsu mulhu div divu rem remu".split()
ZBA = "sh1add sh2add sh3add".split()

#: Formats whose instructions write rd.
_WRITES_RD = {Fmt.R, Fmt.I, Fmt.LOAD, Fmt.SHIFT, Fmt.U, Fmt.J}

ECALL_WORD = 0x0000_0073
EBREAK_WORD = 0x0010_0073

ABI_NAMES = ("zero ra sp gp tp t0 t1 t2 s0 s1 a0 a1 a2 a3 a4 a5 a6 a7 "
             "s2 s3 s4 s5 s6 s7 s8 s9 s10 s11 t3 t4 t5 t6").split()


class Decoded(NamedTuple):
    """A decoded instruction word. Fields an instruction does not use are 0."""
    spec: Spec
    rd: int
    rs1: int
    rs2: int
    imm: int
    word: int

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def writes_rd(self) -> bool:
        """True when the instruction writes a register and rd is not x0."""
        return self.spec.fmt in _WRITES_RD and self.rd != 0


def sign_extend(value: int, bits: int) -> int:
    """Interpret the low ``bits`` bits of ``value`` as a two's-complement number."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def to_signed(value: int) -> int:
    """A 32-bit register value as a signed int."""
    return sign_extend(value, 32)


# ---------------------------------------------------------------- decode

_BY_OPCODE: dict[int, Spec] = {}
_BY_F3: dict[tuple[int, int], Spec] = {}
_BY_F3_F7: dict[tuple[int, int, int], Spec] = {}
for _s in _SPEC_LIST:
    if _s.fmt in (Fmt.U, Fmt.J):
        _BY_OPCODE[_s.opcode] = _s
    elif _s.fmt in (Fmt.R, Fmt.SHIFT):
        _BY_F3_F7[(_s.opcode, _s.funct3, _s.funct7)] = _s
    elif _s.opcode != OP_SYSTEM or _s.fmt is Fmt.CSR:
        _BY_F3[(_s.opcode, _s.funct3)] = _s


def _imm_i(w: int) -> int:
    return sign_extend(w >> 20, 12)


def _imm_s(w: int) -> int:
    return sign_extend(((w >> 25) << 5) | ((w >> 7) & 0x1F), 12)


def _imm_b(w: int) -> int:
    v = (((w >> 31) & 1) << 12) | (((w >> 7) & 1) << 11) | (((w >> 25) & 0x3F) << 5) \
        | (((w >> 8) & 0xF) << 1)
    return sign_extend(v, 13)


def _imm_u(w: int) -> int:
    return sign_extend(w & 0xFFFFF000, 32)


def _imm_j(w: int) -> int:
    v = (((w >> 31) & 1) << 20) | (((w >> 12) & 0xFF) << 12) | (((w >> 20) & 1) << 11) \
        | (((w >> 21) & 0x3FF) << 1)
    return sign_extend(v, 21)


def decode(word: int) -> Decoded | None:
    """Decode a 32-bit instruction word; ``None`` when it is not a recognised encoding.

    Compressed (16-bit) encodings, reserved funct fields and RV64-only shift amounts
    (shamt[5] set) are all ``None``.
    """
    word &= MASK32
    opcode = word & 0x7F
    rd = (word >> 7) & 0x1F
    f3 = (word >> 12) & 7
    rs1 = (word >> 15) & 0x1F
    rs2 = (word >> 20) & 0x1F
    f7 = word >> 25
    if opcode == OP_SYSTEM and f3 == 0:
        if word == ECALL_WORD:
            return Decoded(SPECS["ecall"], 0, 0, 0, 0, word)
        if word == EBREAK_WORD:
            return Decoded(SPECS["ebreak"], 0, 0, 0, 0, word)
        return None
    spec = _BY_OPCODE.get(opcode)
    if spec is not None:
        imm = _imm_u(word) if spec.fmt is Fmt.U else _imm_j(word)
        return Decoded(spec, rd, 0, 0, imm, word)
    spec = _BY_F3_F7.get((opcode, f3, f7))
    if spec is None and opcode == OP_IMM and f3 in (1, 5):
        return None                     # shift with bad funct7 / shamt[5]
    if spec is not None:
        if spec.fmt is Fmt.SHIFT:
            return Decoded(spec, rd, rs1, 0, rs2, word)
        return Decoded(spec, rd, rs1, rs2, 0, word)
    spec = _BY_F3.get((opcode, f3))
    if spec is None:
        return None
    fmt = spec.fmt
    if fmt in (Fmt.I, Fmt.LOAD):
        return Decoded(spec, rd, rs1, 0, _imm_i(word), word)
    if fmt is Fmt.S:
        return Decoded(spec, 0, rs1, rs2, _imm_s(word), word)
    if fmt is Fmt.B:
        return Decoded(spec, 0, rs1, rs2, _imm_b(word), word)
    if fmt is Fmt.CSR:
        return Decoded(spec, rd, rs1, 0, word >> 20, word)
    return Decoded(spec, 0, 0, 0, 0, word)   # fence, fence.i (fields ignored)


# ---------------------------------------------------------------- encode

def _check_reg(r: int, what: str) -> int:
    if not 0 <= r < 32:
        raise ValueError(f"{what} must be a register number 0..31, got {r}")
    return r


def _check_imm(imm: int, bits: int, align: int, name: str) -> int:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= imm <= hi or imm % align:
        raise ValueError(f"{name}: immediate {imm} out of range [{lo}, {hi}]"
                         + (f" or not a multiple of {align}" if align > 1 else ""))
    return imm & ((1 << bits) - 1)


def encode(name: str, rd: int = 0, rs1: int = 0, rs2: int = 0, imm: int = 0) -> int:
    """Assemble one instruction into its 32-bit word.

    ``imm`` is the signed immediate as the assembler writes it: a byte offset for branches
    and ``jal`` (even), the upper 20 bits for ``lui``/``auipc`` (``lui x1, 0x12345``), the
    shift amount for ``slli``/``srli``/``srai``. Raises ``ValueError`` on a bad field.
    """
    try:
        spec = SPECS[name]
    except KeyError:
        raise ValueError(f"unknown instruction {name!r}") from None
    rd, rs1, rs2 = _check_reg(rd, "rd"), _check_reg(rs1, "rs1"), _check_reg(rs2, "rs2")
    op, f3, f7 = spec.opcode, spec.funct3 or 0, spec.funct7 or 0
    fmt = spec.fmt
    if fmt is Fmt.R:
        return (f7 << 25) | (rs2 << 20) | (rs1 << 15) | (f3 << 12) | (rd << 7) | op
    if fmt in (Fmt.I, Fmt.LOAD):
        u = _check_imm(imm, 12, 1, name)
        return (u << 20) | (rs1 << 15) | (f3 << 12) | (rd << 7) | op
    if fmt is Fmt.SHIFT:
        if not 0 <= imm < 32:
            raise ValueError(f"{name}: shift amount {imm} out of range [0, 31]")
        return (f7 << 25) | (imm << 20) | (rs1 << 15) | (f3 << 12) | (rd << 7) | op
    if fmt is Fmt.S:
        u = _check_imm(imm, 12, 1, name)
        return ((u >> 5) << 25) | (rs2 << 20) | (rs1 << 15) | (f3 << 12) | ((u & 0x1F) << 7) | op
    if fmt is Fmt.B:
        u = _check_imm(imm, 13, 2, name)
        return (((u >> 12) & 1) << 31) | (((u >> 5) & 0x3F) << 25) | (rs2 << 20) \
            | (rs1 << 15) | (f3 << 12) | (((u >> 1) & 0xF) << 8) | (((u >> 11) & 1) << 7) | op
    if fmt is Fmt.U:
        if not -(1 << 19) <= imm < (1 << 20):
            raise ValueError(f"{name}: upper immediate {imm} out of range")
        return ((imm & 0xFFFFF) << 12) | (rd << 7) | op
    if fmt is Fmt.J:
        u = _check_imm(imm, 21, 2, name)
        return (((u >> 20) & 1) << 31) | (((u >> 1) & 0x3FF) << 21) | (((u >> 11) & 1) << 20) \
            | (((u >> 12) & 0xFF) << 12) | (rd << 7) | op
    if fmt is Fmt.CSR:
        return ((imm & 0xFFF) << 20) | (rs1 << 15) | (f3 << 12) | (rd << 7) | op
    if name == "ecall":
        return ECALL_WORD
    if name == "ebreak":
        return EBREAK_WORD
    if name == "fence":
        return 0x0FF0_000F                   # fence iorw, iorw
    return 0x0000_100F                       # fence.i


# ---------------------------------------------------------------- disassemble

def disassemble(word: int, pc: int | None = None) -> str:
    """Assembly text for ``word`` (ABI register names); ``"illegal 0x…"`` when it is not
    an instruction. With ``pc``, branch and jal targets are absolute addresses."""
    d = decode(word)
    if d is None:
        return f"illegal 0x{word & MASK32:08x}"
    n, fmt = d.name, d.spec.fmt
    r = ABI_NAMES

    def target(off: int) -> str:
        return f"0x{(pc + off) & MASK32:x}" if pc is not None else f"{off:+d}"

    if fmt is Fmt.R:
        return f"{n} {r[d.rd]}, {r[d.rs1]}, {r[d.rs2]}"
    if fmt in (Fmt.I, Fmt.SHIFT):
        return f"{n} {r[d.rd]}, {r[d.rs1]}, {d.imm}"
    if fmt is Fmt.LOAD:
        return f"{n} {r[d.rd]}, {d.imm}({r[d.rs1]})"
    if fmt is Fmt.S:
        return f"{n} {r[d.rs2]}, {d.imm}({r[d.rs1]})"
    if fmt is Fmt.B:
        return f"{n} {r[d.rs1]}, {r[d.rs2]}, {target(d.imm)}"
    if fmt is Fmt.U:
        return f"{n} {r[d.rd]}, 0x{(d.imm >> 12) & 0xFFFFF:x}"
    if fmt is Fmt.J:
        return f"{n} {r[d.rd]}, {target(d.imm)}"
    if fmt is Fmt.CSR:
        return f"{n} {r[d.rd]}, 0x{d.imm:03x}, {r[d.rs1]}"
    return n


def assemble(program: list[str | tuple], base: int = 0) -> list[int]:
    """A two-pass mini assembler for tests and benchmarks.

    ``program`` items are labels (``"loop"``, a bare string) or instructions
    ``(name, {"rd": .., "rs1": .., "rs2": .., "imm": ..})``; a branch/jal ``imm`` may be a
    label, resolved to the pc-relative offset. Returns the instruction words.
    """
    labels: dict[str, int] = {}
    pc = base
    for item in program:
        if isinstance(item, str):
            labels[item] = pc
        else:
            pc += 4
    words: list[int] = []
    pc = base
    for item in program:
        if isinstance(item, str):
            continue
        name, fields = item[0], dict(item[1]) if len(item) > 1 else {}
        if isinstance(fields.get("imm"), str):
            fields["imm"] = labels[fields["imm"]] - pc
        words.append(encode(name, **fields))
        pc += 4
    return words
