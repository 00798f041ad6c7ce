"""The ISA emulator on its own: known answers from the RISC-V spec, faults (golden texts),
retire records, the ELF loader and the input buffer, and the shipped firmware programs."""
from __future__ import annotations

import pytest

from cpu import isa, memmap
from cpu.elf import ElfError, read_elf
from cpu.emulator import FaultCause, InputError, Machine, Retire

M = 0xFFFF_FFFF
INT_MIN = 0x8000_0000
E = isa.encode
EXIT = [E("addi", rd=17, imm=93), E("ecall")]


def li(rd: int, value: int) -> list[int]:
    hi = ((value + 0x800) >> 12) & 0xFFFFF
    return [E("lui", rd=rd, imm=hi), E("addi", rd=rd, rs1=rd, imm=isa.sign_extend(value & 0xFFF, 12))]


def run_words(words: list[int], steps: int = 10_000, trace: bool = False,
              regs: dict[int, int] | None = None):
    m = Machine()
    m.load_words(words)
    for r, v in (regs or {}).items():
        m.regs[r] = v & M
    return m, m.run(steps, trace=trace)


def binop(name: str, a: int, b: int) -> int:
    """rd of ``name x3, x1, x2`` with x1 = a, x2 = b."""
    m, r = run_words([E(name, rd=3, rs1=1, rs2=2)] + EXIT, regs={1: a, 2: b})
    assert r.exit_code == 0
    return m.regs[3]


# ---------------------------------------------------------------- encode/decode

@pytest.mark.parametrize("name", isa.RV32I + isa.RV32M + isa.ZBA)
def test_encode_decode_roundtrip(name):
    spec = isa.SPECS[name]
    fields = {"R": dict(rd=5, rs1=6, rs2=7), "I": dict(rd=5, rs1=6, imm=-3),
              "LOAD": dict(rd=5, rs1=6, imm=-3), "SHIFT": dict(rd=5, rs1=6, imm=17),
              "S": dict(rs1=6, rs2=7, imm=-3), "B": dict(rs1=6, rs2=7, imm=-8),
              "U": dict(rd=5, imm=0xABCDE), "J": dict(rd=5, imm=-1024), "NONE": {}}[spec.fmt.value]
    d = isa.decode(E(name, **fields))
    assert d is not None and d.name == name
    for key in ("rd", "rs1", "rs2"):
        assert getattr(d, key) == fields.get(key, 0)
    if spec.fmt is isa.Fmt.U:
        assert d.imm == isa.sign_extend(0xABCDE << 12, 32)
    elif "imm" in fields:
        assert d.imm == fields["imm"]


@pytest.mark.parametrize("word", [0x0000_0000, 0xFFFF_FFFF, E("slli", rd=1, rs1=1, imm=1) | (1 << 25),
                                  E("add", rd=1, rs1=1, rs2=1) | (1 << 30) | (1 << 12),
                                  0x0000_3003, 0x0000_3023, 0x0000_2063, 0x0000_1067,
                                  0x1050_0073, 0x3020_0073])
def test_illegal_encodings_decode_to_none(word):
    # 0 / all-ones; slli with funct7 bit; sll with sub's funct7; ld, sd, branch f3=2,
    # jalr f3=1; wfi; mret
    assert isa.decode(word) is None


def test_disassemble():
    assert isa.disassemble(E("lw", rd=10, rs1=2, imm=-8)) == "lw a0, -8(sp)"
    assert isa.disassemble(E("beq", rs1=1, rs2=0, imm=-4), pc=0x100) == "beq ra, zero, 0xfc"
    assert isa.disassemble(E("sh3add", rd=5, rs1=6, rs2=7)) == "sh3add t0, t1, t2"


# ---------------------------------------------------------------- semantics (spec answers)

@pytest.mark.parametrize("name,a,b,want", [
    ("add", M, 1, 0), ("sub", 0, 1, M), ("sll", 1, 33, 2), ("srl", INT_MIN, 35, 0x1000_0000),
    ("sra", INT_MIN, 35, 0xF000_0000), ("slt", M, 0, 1), ("sltu", M, 0, 0),
    ("slt", 0, INT_MIN, 0), ("sltu", 0, INT_MIN, 1),
    ("mul", 0xFFFF_FFFF, 0xFFFF_FFFF, 1), ("mulh", M, M, 0), ("mulhu", M, M, 0xFFFF_FFFE),
    ("mulhsu", M, M, M), ("mulh", INT_MIN, INT_MIN, 0x4000_0000),
    ("mulhsu", INT_MIN, M, 0x8000_0000),
    ("div", (-7) & M, 2, (-3) & M), ("rem", (-7) & M, 2, (-1) & M),
    ("div", 7, (-2) & M, (-3) & M), ("rem", 7, (-2) & M, 1),
    ("div", 5, 0, M), ("divu", 5, 0, M), ("rem", 5, 0, 5), ("remu", 5, 0, 5),
    ("div", INT_MIN, M, INT_MIN), ("rem", INT_MIN, M, 0),
    ("divu", INT_MIN, M, 0), ("remu", 7, 3, 1),
    ("sh1add", 0x8000_0001, 1, 3), ("sh2add", 3, 4, 16), ("sh3add", M, 9, 1),
])
def test_r_type_known_answers(name, a, b, want):
    assert binop(name, a, b) == want


def test_immediates_sign_extend_and_x0_stays_zero():
    words = [E("addi", rd=1, imm=-1), E("sltiu", rd=2, rs1=0, imm=-1), E("slti", rd=3, rs1=1, imm=0),
             E("xori", rd=4, rs1=0, imm=-2048), E("addi", rd=0, imm=5), E("lui", rd=0, imm=1),
             E("add", rd=5, rs1=0, rs2=0), E("srai", rd=6, rs1=1, imm=31), E("lw", rd=0, rs1=0, imm=0)]
    m, r = run_words(words + EXIT)
    assert r.exit_code == 0
    assert m.regs[:7] == [0, M, 1, 1, 0xFFFF_F800, 0, M]


def test_loads_sign_and_zero_extend():
    words = li(1, memmap.RAM_BASE) + li(2, 0x8081_F0FF) + [
        E("sw", rs1=1, rs2=2, imm=0), E("lb", rd=3, rs1=1, imm=0), E("lbu", rd=4, rs1=1, imm=0),
        E("lh", rd=5, rs1=1, imm=2), E("lhu", rd=6, rs1=1, imm=2), E("lb", rd=7, rs1=1, imm=1),
        E("lw", rd=8, rs1=1, imm=0), E("sb", rs1=1, rs2=0, imm=3), E("lw", rd=9, rs1=1, imm=0)]
    m, r = run_words(words + EXIT)
    assert r.exit_code == 0
    assert m.regs[3:10] == [M, 0xFF, 0xFFFF_8081, 0x8081, 0xFFFF_FFF0, 0x8081_F0FF, 0x0081_F0FF]


def test_jal_jalr_link_and_jalr_clears_bit0():
    # 0: jal ra, +16 -> 16: t0 = 5; 20: jalr t1, 0(t0) -> 5 & ~1 = 4: a0 = 7; exit
    words = [E("jal", rd=1, imm=16), E("addi", rd=10, imm=7), *EXIT,
             E("addi", rd=5, imm=5), E("jalr", rd=6, rs1=5, imm=0)]
    m, r = run_words(words, trace=True)
    assert r.exit_code == 7
    assert m.regs[1] == 4 and m.regs[6] == 24
    assert [x.pc for x in r.retired] == [0, 16, 20, 4, 8, 12]


def test_exit_code_is_signed_a0_and_ecall_retires():
    m, r = run_words(li(10, (-5) & M) + EXIT, trace=True)
    assert (r.exit_code, r.instructions, len(r.retired), r.timed_out) == (-5, 4, 4, False)
    assert r.retired[-1] == Retire(12, isa.ECALL_WORD, None, None, None, None, None, False, 16)


def test_uart_byte_stores_print():
    words = li(1, memmap.UART_TX) + [E("addi", rd=2, imm=ord("h")), E("sb", rs1=1, rs2=2),
                                     E("addi", rd=2, imm=0x169), E("sb", rs1=1, rs2=2)] + EXIT
    _, r = run_words(words)
    assert (r.output, r.exit_code) == (b"hi", 0)


def test_fence_is_a_nop_and_budget_times_out():
    m, r = run_words([E("fence"), E("jal", imm=-4)], steps=1001)
    assert r.timed_out and r.instructions == 1001 and r.exit_code is None and r.fault is None
    assert m.pc == 4
    r2 = m.run(1)
    assert r2.instructions == 1 and m.pc == 0


def test_retire_records():
    words = li(1, memmap.RAM_BASE) + [E("addi", rd=2, imm=-2), E("sh", rs1=1, rs2=2, imm=6),
                                      E("lh", rd=3, rs1=1, imm=6), E("beq", rs1=2, rs2=3, imm=8),
                                      E("ebreak"), *EXIT]
    _, r = run_words(words, trace=True)
    recs = r.retired[2:6]
    assert recs == [
        Retire(8, words[2], 2, 0xFFFF_FFFE, None, None, None, False, 12),
        Retire(12, words[3], None, None, 0x80006, 0xFFFE, 2, True, 16),
        Retire(16, words[4], 3, 0xFFFF_FFFE, 0x80006, 0xFFFE, 2, False, 20),
        Retire(20, words[5], None, None, None, None, None, False, 28),
    ]
    assert recs[1].format() == "0000000c 00209323 - W2[0x00080006]=0xfffe 00000010"
    assert recs[2].format() == "00000010 00609183 x3=0xfffffffe R2[0x00080006]=0xfffe 00000014"


def test_fast_and_traced_runs_agree():
    words = li(5, 10) + [E("mul", rd=6, rs1=5, rs2=5), E("addi", rd=5, rs1=5, imm=-1),
                         E("bne", rs1=5, rs2=0, imm=-8), E("add", rd=10, rs1=6, rs2=0), *EXIT]
    m1, r1 = run_words(words)
    m2, r2 = run_words(words, trace=True)
    assert (r1.exit_code, r1.instructions) == (r2.exit_code, r2.instructions) == (1, 35)
    assert m1.regs == m2.regs and len(r2.retired) == 35


# ---------------------------------------------------------------- faults (golden texts)

FAULTS = [
    ([E("lw", rd=1, rs1=0, imm=2)], FaultCause.MISALIGNED_LOAD,
     "machine fault at pc 0x00000000, instruction 0x00202083 (lw ra, 2(zero)): misaligned load: "
     "address 0x00000002 is not a multiple of 4"),
    ([E("sh", rs1=0, rs2=0, imm=0x7FF)], FaultCause.MISALIGNED_STORE,
     "machine fault at pc 0x00000000, instruction 0x7e001fa3 (sh zero, 2047(zero)): misaligned "
     "store: address 0x000007ff is not a multiple of 2"),
    ([E("sw", rs1=0, rs2=0, imm=8)], FaultCause.STORE_TO_ROM,
     "machine fault at pc 0x00000000, instruction 0x00002423 (sw zero, 8(zero)): store to ROM: "
     "address 0x00000008 is in code ROM"),
    ([E("lui", rd=1, imm=0x40), E("sb", rs1=1, rs2=0)], FaultCause.STORE_TO_ROM,
     "machine fault at pc 0x00000004, instruction 0x00008023 (sb zero, 0(ra)): store to ROM: "
     "address 0x00040000 is in rodata ROM"),
    ([E("lui", rd=1, imm=0x60), E("lbu", rd=2, rs1=1)], FaultCause.LOAD_ACCESS,
     "machine fault at pc 0x00000004, instruction 0x0000c103 (lbu sp, 0(ra)): load from unmapped "
     "address: address 0x00060000"),
    ([E("lw", rd=2, rs1=0, imm=-4)], FaultCause.LOAD_ACCESS,
     "machine fault at pc 0x00000000, instruction 0xffc02103 (lw sp, -4(zero)): load from unmapped "
     "address: address 0xfffffffc"),
    ([E("lui", rd=1, imm=0x10000), E("lw", rd=2, rs1=1)], FaultCause.LOAD_ACCESS,
     "machine fault at pc 0x00000004, instruction 0x0000a103 (lw sp, 0(ra)): load from unmapped "
     "address: address 0x10000000 (the UART's output is write-only)"),
    ([E("lui", rd=1, imm=0x10000), E("lw", rd=2, rs1=1, imm=4)], FaultCause.LOAD_ACCESS,
     "machine fault at pc 0x00000004, instruction 0x0040a103 (lw sp, 4(ra)): load from unmapped "
     "address: address 0x10000004 (the UART's input takes byte loads (lb, lbu) only)"),
    ([E("lui", rd=1, imm=0x10000), E("sw", rs1=1, rs2=0)], FaultCause.STORE_ACCESS,
     "machine fault at pc 0x00000004, instruction 0x0000a023 (sw zero, 0(ra)): store to unmapped "
     "address: address 0x10000000 (the UART takes byte stores (sb) only)"),
    ([E("lui", rd=1, imm=0x88), E("sb", rs1=1, rs2=0)], FaultCause.STORE_ACCESS,
     "machine fault at pc 0x00000004, instruction 0x00008023 (sb zero, 0(ra)): store to unmapped "
     "address: address 0x00088000"),
    ([E("jal", imm=-4)], FaultCause.BAD_JUMP,
     "machine fault at pc 0x00000000, instruction 0xffdff06f (jal zero, 0xfffffffc): jump target "
     "outside code ROM: target 0xfffffffc is outside code ROM 0x00000000..0x00040000"),
    ([E("lui", rd=1, imm=0x80), E("jalr", rs1=1)], FaultCause.BAD_JUMP,
     "machine fault at pc 0x00000004, instruction 0x00008067 (jalr zero, ra, 0): jump target "
     "outside code ROM: target 0x00080000 is outside code ROM 0x00000000..0x00040000"),
    ([E("jalr", rs1=0, imm=6)], FaultCause.MISALIGNED_JUMP,
     "machine fault at pc 0x00000000, instruction 0x00600067 (jalr zero, zero, 6): misaligned "
     "jump target: target 0x00000006 is not a multiple of 4"),
    ([E("beq", imm=2)], FaultCause.MISALIGNED_JUMP,
     "machine fault at pc 0x00000000, instruction 0x00000163 (beq zero, zero, 0x2): misaligned "
     "jump target: target 0x00000002 is not a multiple of 4"),
    ([E("ebreak")], FaultCause.EBREAK,
     "machine fault at pc 0x00000000, instruction 0x00100073 (ebreak): ebreak"),
    ([E("ecall")], FaultCause.BAD_ECALL,
     "machine fault at pc 0x00000000, instruction 0x00000073 (ecall): unsupported ecall: a7 = 0 "
     "(only 93, exit, is supported)"),
    ([0x0000_100F], FaultCause.UNSUPPORTED_INSTRUCTION,
     "machine fault at pc 0x00000000, instruction 0x0000100f (fence.i): unsupported instruction: "
     "fence.i is not supported"),
    # (csrrs rd, cycle/time/instret, x0 read Zicntr's counters: tests/firmware/test_sdk.py)
    ([E("csrrs", rd=1, imm=0x300)], FaultCause.UNSUPPORTED_INSTRUCTION,
     "machine fault at pc 0x00000000, instruction 0x300020f3 (csrrs ra, 0x300, zero): unsupported "
     "instruction: csrrs is not supported"),
    ([0xFFFF_FFFF], FaultCause.ILLEGAL_INSTRUCTION,
     "machine fault at pc 0x00000000, instruction 0xffffffff: illegal instruction: not an "
     "RV32IM/Zba encoding"),
    ([E("addi", rd=1)], FaultCause.ILLEGAL_INSTRUCTION,
     "machine fault at pc 0x00000004, instruction 0x00000000: illegal instruction: not an "
     "RV32IM/Zba encoding"),
]


@pytest.mark.parametrize("words,cause,text", FAULTS, ids=[f[1].name for f in FAULTS])
@pytest.mark.parametrize("trace", [False, True])
def test_faults(words, cause, text, trace):
    m, r = run_words(words, trace=trace)
    assert r.fault is not None and r.fault.cause is cause
    assert str(r.fault) == text
    assert (r.exit_code, r.timed_out, r.instructions) == (None, False, len(words) - 1 if
                                                          cause is not FaultCause.ILLEGAL_INSTRUCTION
                                                          or words[0] == 0xFFFF_FFFF else 1)
    assert m.run(10).fault == r.fault          # a faulted machine stays stopped


def test_running_off_the_end_of_code_rom():
    m = Machine(entry=memmap.CODE_END - 4)
    m.load_words([E("addi", rd=1, imm=1)], addr=memmap.CODE_END - 4)
    r = m.run(10)
    assert str(r.fault) == ("machine fault at pc 0x00040000: instruction fetch outside code ROM: "
                            "execution ran past the end of code ROM (0x00040000)")


def test_branch_to_bad_target_faults_only_when_taken():
    _, r = run_words([E("bne", rs1=0, rs2=0, imm=-8), *EXIT])
    assert r.exit_code == 0


# ---------------------------------------------------------------- ELF loader

CODE = b"".join(w.to_bytes(4, "little") for w in li(10, 42) + EXIT)


def test_elf_loads_segments_and_zeroes_bss(build_elf, elf_file):
    data = b"\x11\x22\x33\x44"
    prog = li(1, memmap.RAM_BASE) + [E("lw", rd=10, rs1=1, imm=0), E("lw", rd=11, rs1=1, imm=4),
                                     E("add", rd=10, rs1=10, rs2=11)] + EXIT
    code = b"".join(w.to_bytes(4, "little") for w in prog)
    path = elf_file(build_elf([(0, code, len(code), 5), (memmap.RODATA_BASE, b"ro", 2, 4),
                               (memmap.RAM_BASE, data, 64, 6)]))
    m = Machine.from_elf(path)
    assert m.read(memmap.RODATA_BASE, 2) == b"ro"
    m.write(memmap.RAM_BASE + 4, b"\xff" * 4)
    assert m.read(memmap.RAM_BASE + 8, 8) == bytes(8)
    r = m.run(100)
    assert r.exit_code == 0x44332211 + 0xFFFFFFFF - (1 << 32)


@pytest.mark.parametrize("kwargs,segments,message", [
    (dict(elf_class=2), None, "not an RV32 executable: ELF class is 64-bit (expected 32-bit)"),
    (dict(data=2), None, "not an RV32 executable: big-endian (expected little-endian)"),
    (dict(machine=40), None, "not an RV32 executable: machine is EM_ARM (expected EM_RISCV)"),
    (dict(e_type=1), None, "not an executable: ELF type is ET_REL (expected ET_EXEC; link the "
                           "program, don't pass an object file)"),
    ({}, [(0x3FFF0, CODE, 0x20, 5)],
     "segment 0 (R-X) at 0x0003fff0..0x00040010 (32 bytes) does not fit the memory map: code "
     "ROM 0x00000000..0x00040000 (262144 bytes), rodata ROM 0x00040000..0x00060000 (131072 "
     "bytes), RAM 0x00080000..0x00088000 (32768 bytes)"),
    ({}, [(0, CODE, len(CODE), 5), (memmap.RAM_BASE, b"", 0x9000, 6)],
     "segment 1 (RW-) at 0x00080000..0x00089000 (36864 bytes) does not fit the memory map: code "
     "ROM 0x00000000..0x00040000 (262144 bytes), rodata ROM 0x00040000..0x00060000 (131072 "
     "bytes), RAM 0x00080000..0x00088000 (32768 bytes)"),
    ({}, [], "no loadable (PT_LOAD) segment"),
])
def test_elf_refusals(build_elf, elf_file, kwargs, segments, message):
    if segments is None:
        segments = [(0, CODE, len(CODE), 5)]
    path = elf_file(build_elf(segments, **kwargs))
    with pytest.raises(ElfError) as e:
        Machine.from_elf(path)
    assert str(e.value) == f"{path}: {message}"


def test_elf_entry_outside_code_rom(build_elf, elf_file):
    path = elf_file(build_elf([(0, CODE, len(CODE), 5)], entry=memmap.RAM_BASE))
    with pytest.raises(ElfError, match=r"entry point 0x00080000 is not a word-aligned address in "
                                       r"code ROM 0x00000000..0x00040000 \(262144 bytes\)$"):
        read_elf(path)



def test_elf_entry_outside_the_loaded_code(build_elf, elf_file):
    """Regression: an entry in code ROM but past the program's bytes used to load, then run
    into zeros (an illegal-instruction fault at run time instead of a load error)."""
    path = elf_file(build_elf([(0, CODE, len(CODE), 5)], entry=0x30000))
    with pytest.raises(ElfError) as e:
        read_elf(path)
    assert str(e.value) == (f"{path}: entry point 0x00030000 is outside the loaded code "
                            f"(code segments: 0x00000000..0x{len(CODE):08x} ({len(CODE)} bytes))")


def test_elf_shorter_than_its_header(elf_file):
    path = elf_file(b"\x7fELF\x01\x01\x01" + bytes(3))
    with pytest.raises(ElfError) as e:
        read_elf(path)
    assert str(e.value) == f"{path}: truncated ELF file: 10 bytes, less than the 52-byte ELF header"

def test_corrupt_and_truncated_elf(build_elf, elf_file, tmp_path):
    blob = build_elf([(0, CODE, len(CODE), 5)], symbols={"x": (0, 0, 1)})
    for cut in (3, 20, 60, 90, len(blob) - 10):
        path = elf_file(blob[:cut])
        with pytest.raises(ElfError) as e:
            read_elf(path)
        assert str(e.value).startswith(f"{path}: ")
    with pytest.raises(ElfError, match="not an ELF file"):
        read_elf(elf_file(b"hello world"))
    with pytest.raises(ElfError, match="cannot read"):
        read_elf(tmp_path / "missing.elf")
    bad_phoff = blob[:28] + (0xFFFF_FF00).to_bytes(4, "little") + blob[32:]
    with pytest.raises(ElfError, match="corrupt or truncated ELF file"):
        read_elf(elf_file(bad_phoff))


def test_mutated_elf_files_never_raise_anything_but_elf_error(build_elf, elf_file):
    """Random byte flips and truncations: the loader loads or raises ElfError, nothing else."""
    import random
    blob = build_elf([(0, CODE, len(CODE), 5), (memmap.RAM_BASE, b"abcd", 64, 6)],
                     symbols={"__input_buffer": (memmap.RAM_BASE + 8, 32, 2)})
    rng = random.Random(1234)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(300):
        b = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.2:
            b = b[:rng.randrange(len(b))]
        try:
            Machine.from_elf(elf_file(bytes(b)), b"hi")
            outcomes["loaded"] += 1
        except ElfError:
            outcomes["refused"] += 1
    assert outcomes["loaded"] and outcomes["refused"]


def _input_program() -> bytes:
    # a0 = first byte of the input buffer + 1000 * third byte; exit
    prog = li(1, memmap.RAM_BASE + 0x100) + [E("lbu", rd=10, rs1=1), E("lbu", rd=11, rs1=1, imm=2),
                                             E("addi", rd=12, imm=1000),
                                             E("mul", rd=11, rs1=11, rs2=12),
                                             E("add", rd=10, rs1=10, rs2=11)] + EXIT
    return b"".join(w.to_bytes(4, "little") for w in prog)


@pytest.mark.parametrize("size_symbol", [(16, 0, 0xFFF1), None])
def test_input_buffer(build_elf, elf_file, size_symbol):
    code = _input_program()
    symbols = {"__input_buffer": (memmap.RAM_BASE + 0x100, 16 if size_symbol is None else 0, 3)}
    if size_symbol:
        symbols["__input_size"] = size_symbol
    path = elf_file(build_elf([(0, code, len(code), 5), (memmap.RAM_BASE, b"", 0x200, 6)],
                              symbols=symbols))
    assert Machine.from_elf(path, b"AB").run(100).exit_code == 65     # NUL at [2]
    assert Machine.from_elf(path, b"ABC").run(100).exit_code == 65 + 67000
    assert Machine.from_elf(path, b"x" * 15).read(memmap.RAM_BASE + 0x10F, 1) == b"\0"
    with pytest.raises(InputError) as e:
        Machine.from_elf(path, b"x" * 16)
    assert str(e.value) == ("--input text is 16 bytes; the program's input buffer holds 16 "
                            "bytes including the terminating NUL")


def test_input_without_buffer_is_an_error(build_elf, elf_file):
    path = elf_file(build_elf([(0, CODE, len(CODE), 5)]))
    assert Machine.from_elf(path).run(100).exit_code == 42
    with pytest.raises(InputError) as e:
        Machine.from_elf(path, b"1+1")
    assert str(e.value) == (f"{path}: --input given but the program has no input buffer (no "
                            "symbol __input_buffer in the ELF)")


# ---------------------------------------------------------------- shipped firmware

@pytest.mark.parametrize("name,output", [
    ("sum", b"5050"), ("fibonacci", b"102334155"), ("multiply", b"83810205"),
])
def test_firmware_programs(firmware_elf, name, output):
    m = Machine.from_elf(firmware_elf(name))
    fast = m.run(5_000_000)
    assert fast.exit_code == 0 and fast.fault is None, str(fast.fault)
    assert output in fast.output
    traced = Machine.from_elf(firmware_elf(name)).run(5_000_000, trace=True)
    assert (traced.output, traced.instructions) == (fast.output, fast.instructions)


def test_speed_benchmark_runs_and_reports_a_rate():
    """benchmarks/isa_speed.py runs and reports a rate (speed is measured by the script,
    not asserted here: the machines are shared and noisy)."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "isa_speed.py"
    p = subprocess.run([sys.executable, str(script), "--steps", "200000", "--repeat", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rate = float(p.stdout.split("median ")[1].split(" ")[0].replace(",", ""))
    assert rate > 0, p.stdout


@pytest.mark.parametrize("pc", [2, memmap.CODE_END, memmap.RAM_BASE])
def test_start_pc_outside_code_rom_faults(pc):
    m = Machine(entry=pc)
    r = m.run(5)
    assert r.fault is not None and r.fault.cause is FaultCause.FETCH_OUTSIDE_CODE
    assert str(r.fault) == (f"machine fault at pc 0x{pc:08x}: instruction fetch outside code "
                            "ROM: the pc is not a word address in code ROM")


@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize("rd", [0, 5])
def test_load_alignment_for_every_width_and_x0(rd, trace):
    """Byte loads never fault on alignment (also into x0, whose value is dropped); halfword
    and word loads fault off their alignment whatever rd is."""
    for name, width in (("lb", 1), ("lbu", 1), ("lh", 2), ("lhu", 2), ("lw", 4)):
        for off in range(4):
            words = li(1, memmap.RAM_BASE) + [E(name, rd=rd, rs1=1, imm=off)] + EXIT
            m, r = run_words(words, trace=trace)
            if off % width:
                assert r.fault is not None and r.fault.cause is FaultCause.MISALIGNED_LOAD, (name, off)
            else:
                assert r.fault is None and r.exit_code == 0, (name, off, r.fault)


def test_memory_bytes_and_loaded_words_are_little_endian():
    m = Machine()
    m.write(memmap.RAM_BASE, bytes([0x11, 0x22, 0x33, 0x44, 0x55, 0x66]))
    assert m.read(memmap.RAM_BASE + 2, 4) == bytes([0x33, 0x44, 0x55, 0x66])
    m.load_words([0xDEAD_BEEF, 0x0102_0304])
    assert m.read(memmap.CODE_BASE, 8) == bytes([0xEF, 0xBE, 0xAD, 0xDE, 4, 3, 2, 1])


def test_uart_input_reads_the_stream_byte_by_byte():
    """lbu and lb from UART_RX read the input stream in order (lb sign-extends), a load to
    x0 consumes a byte, and once it is used up every read gives 0."""
    m = Machine()
    prog = [E("lui", rd=1, imm=0x10000), E("lbu", rd=2, rs1=1, imm=4),
            E("lb", rd=3, rs1=1, imm=4), E("lb", rd=0, rs1=1, imm=4),
            E("lbu", rd=4, rs1=1, imm=4), E("lbu", rd=5, rs1=1, imm=4)]
    m.load_words(prog + [E("ecall")])
    m.rx = b"A\xf0xy"
    m.run(5)
    assert m.regs[2:6] == [0x41, 0xFFFF_FFF0, 0x79, 0] and m.rx_pos == 4
