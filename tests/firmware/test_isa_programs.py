"""ISA test programs (firmware/isa_tests/*.S): every RV32I, M and Zba instruction, run on
unicorn and on the golden emulator; exit 0 = pass, else the failing case number."""
from __future__ import annotations

import re

import pytest

from tests.firmware.fw_engines import run_on
from firmware import toolchain
from firmware.isa_tests import generate

RV32I = ("lui auipc jal jalr beq bne blt bge bltu bgeu lb lh lw lbu lhu sb sh sw addi slti "
         "sltiu xori ori andi slli srli srai add sub sll slt sltu xor srl sra or and fence").split()
RV32M = "mul mulh mulhsu mulhu div divu rem remu".split()
ZBA = "sh1add sh2add sh3add".split()

PROGRAMS = toolchain.isa_programs()


def test_checked_in_programs_match_the_generator():
    rendered = generate.render()
    assert sorted(name[:-2] for name in rendered) == PROGRAMS
    for name, text in rendered.items():
        on_disk = (toolchain.ISA_TESTS_DIR / name).read_text()
        assert on_disk == text, f"{name} is stale: run python -m firmware.isa_tests.generate"


def test_every_instruction_is_tested():
    used: set[str] = set()
    for name in PROGRAMS:
        text = (toolchain.ISA_TESTS_DIR / f"{name}.S").read_text()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)                   # comments
        used |= set(re.findall(r"\bTEST_\w+\(\d+, (\w+)", text))    # macro cases
        used |= set(re.findall(r"(?:^|[:;]\s*)\s*([a-z][a-z0-9]*)\s", text, re.M))  # raw lines
    missing = [i for i in RV32I + RV32M + ZBA if i not in used]
    assert not missing, f"no ISA test uses {missing}"


COMPILERS = ["zig", pytest.param("gcc", marks=pytest.mark.skipif(
    not toolchain.gcc_available(), reason="riscv64-unknown-elf-gcc not installed"))]


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_isa_program_passes(firmware_elf, engine, name, compiler):
    out = run_on(engine, firmware_elf(f"isa:{name}", compiler), max_steps=100_000)
    assert out.fault is None, out.fault
    assert out.exit_code == 0, f"{name}: case {out.exit_code} failed on {engine}"


def test_a_wrong_expectation_is_reported(tmp_path, engine):
    """The harness can fail: corrupt case 5 of rv32m_div and expect exit code 5."""
    text = (toolchain.ISA_TESTS_DIR / "rv32m_div.S").read_text()
    line = re.search(r"TEST_RR_OP\(5, (\w+), (0x[0-9a-f]+),", text)
    assert line
    wrong = f"0x{int(line.group(2), 16) ^ 1:08x}"
    broken = text.replace(line.group(0), f"TEST_RR_OP(5, {line.group(1)}, {wrong},")
    src = tmp_path / "broken.S"
    src.write_text(broken)
    (tmp_path / "isa_macros.h").write_text(
        (toolchain.ISA_TESTS_DIR / "isa_macros.h").read_text())
    elf = toolchain.build([src], tmp_path / "broken.elf")
    out = run_on(engine, elf, max_steps=100_000)
    assert out.exit_code == 5


def test_model_spot_checks():
    """The generator's model against values worked out from the spec by hand."""
    ops = generate.RR_OPS
    assert ops["div"](0x8000_0000, 0xFFFF_FFFF) & 0xFFFF_FFFF == 0x8000_0000
    assert ops["rem"](0x8000_0000, 0xFFFF_FFFF) == 0
    assert ops["divu"](7, 0) == 0xFFFF_FFFF and ops["rem"](7, 0) == 7
    assert ops["div"](0xFFFF_FFEC, 6) & 0xFFFF_FFFF == 0xFFFF_FFFD        # -20 / 6 = -3
    assert ops["rem"](0xFFFF_FFEC, 6) & 0xFFFF_FFFF == 0xFFFF_FFFE        # -20 % 6 = -2
    assert ops["mulh"](0xFFFF_FFFF, 0xFFFF_FFFF) & 0xFFFF_FFFF == 0       # -1 * -1 = 1
    assert ops["mulhsu"](0xFFFF_FFFF, 0xFFFF_FFFF) & 0xFFFF_FFFF == 0xFFFF_FFFF
    assert ops["mulhu"](0xFFFF_FFFF, 0xFFFF_FFFF) & 0xFFFF_FFFF == 0xFFFF_FFFE
    assert ops["sra"](0x8000_0000, 31) & 0xFFFF_FFFF == 0xFFFF_FFFF
    assert ops["sll"](1, 33) == 2                                          # rs2[4:0] only
    assert ops["sh3add"](0x2000_0001, 0xFFFF_FFFF) & 0xFFFF_FFFF == 7
