"""The shipped programs (firmware/programs/*.c): expected output computed here in Python,
checked on unicorn and on the golden emulator, built with zig (and gcc when installed)."""
from __future__ import annotations

import math
import zlib

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from tests.firmware.bench_expected import EXPECTED as BENCH_EXPECTED
from tests.firmware.fw_engines import run_on
from firmware import toolchain


def _fibonacci(count: int) -> list[int]:
    a, b, out = 0, 1, []
    for _ in range(count):
        out.append(a)
        a, b = b, a + b
    return out


def _sort_expected() -> str:
    x, data = 12345, []
    for _ in range(256):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        data.append(x >> 8)
    data.sort()
    checksum = sum(i * v for i, v in enumerate(data)) & 0xFFFFFFFF
    return f"checksum {checksum:08x} min {data[0]} max {data[-1]}\n"


def _primes_expected(limit: int = 10000) -> str:
    primes = [n for n in range(2, limit) if all(n % d for d in range(2, int(n ** 0.5) + 1))]
    return f"primes {len(primes)} sum {sum(primes)} largest {primes[-1]}\n"


def _c_div(a: int, b: int) -> tuple[int, int]:
    """C's truncating division and remainder."""
    q = abs(a) // abs(b)
    q = -q if (a < 0) != (b < 0) else q
    return q, a - b * q


def _div64_expected() -> str:
    lines = []
    for a, b in [(123456789012345678, 987654321), (-9000000000000000000, 7),
                 (9000000000000000000, -1000000007), (-5, 3), (-(1 << 63), -3)]:
        q, r = _c_div(a, b)
        q = (q + (1 << 63)) % (1 << 64) - (1 << 63)      # INT64_MIN / -3 does not overflow
        lines.append(f"{a} / {b} = {q} r {r}")
    for a, b in [((1 << 64) - 1, 10), ((1 << 64) - 1, 0x100000001), (1 << 63, 3),
                 (12345, 0xFFFFFFFFFFFF)]:
        lines.append(f"{a} / {b} = {a // b} r {a % b:x}")
    return "\n".join(lines) + "\n"


EXPECTED = {
    # Python's % formatting agrees with C's printf on these conversions ("%05d" of -7 is -0007).
    "hello": "Hello from deltachip!\n" + "%d %u %x %s %c|%5d|%-5d|%05d|%08x\n" % (
        -42, 42, 0xBEEF, "str", "c", 7, 7, -7, 0xABC),
    "sum": f"{sum(range(1, 101))}\n",
    "fibonacci": "".join(f"{v}\n" for v in _fibonacci(41)),
    "multiply": f"{12345 * 6789}\n",
    "product": f"{12345 * 6789}\n",
    "sort": _sort_expected(),
    "crc32": f"{zlib.crc32(b'The quick brown fox jumps over the lazy dog'):08x}\n",
    "sieve": _primes_expected(),
    "switch": f"{math.factorial(10)}\n{(1 << 20) - 1}\nsteps 251\n",   # 251 bytecode steps
    "div64": _div64_expected(),
    **BENCH_EXPECTED,           # crc32c, sha256, aes128, matrix, softfloat: bench_expected.py
}

COMPILERS = ["zig", pytest.param("gcc", marks=pytest.mark.skipif(
    not toolchain.gcc_available(), reason="riscv64-unknown-elf-gcc not installed"))]


def test_every_program_has_an_expected_output():
    shipped = set(toolchain.shipped_programs()) - {"calc"}
    assert shipped == set(EXPECTED)


def test_fixed_figures():
    # The figures the task names, independent of the helper functions above.
    assert EXPECTED["sum"] == "5050\n"
    assert EXPECTED["multiply"] == "83810205\n"
    assert EXPECTED["fibonacci"].endswith("63245986\n102334155\n")
    assert EXPECTED["crc32"] == "414fa339\n"
    # Published test vectors: CRC-32C's check value, FIPS 180-4's SHA-256 examples, FIPS-197
    # appendix C.1.
    assert EXPECTED["crc32c"].startswith("e3069283\n")
    assert EXPECTED["sha256"].startswith(
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n"
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1\n")
    assert EXPECTED["aes128"].startswith("69c4e0d86a7b0430d8cdb78070b4c55a\n")
    assert EXPECTED["softfloat"].startswith("sqrt2 1414213562 3ff6a09e667f3bcc\n")


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_program_output(firmware_elf, engine, name, compiler):
    elf = firmware_elf(name, compiler)
    out = run_on(engine, elf)
    assert out.fault is None
    assert out.exit_code == 0
    assert out.output.decode() == EXPECTED[name]


@pytest.mark.parametrize("opt", ["-O0", "-Os"])
def test_other_optimisation_levels(firmware_elf, engine, opt):
    for name in ("div64", "switch", "sort"):
        out = run_on(engine, firmware_elf(name, "zig", opt))
        assert (out.exit_code, out.output.decode()) == (0, EXPECTED[name]), name


def test_loops_are_not_folded(firmware_elf):
    """sum and multiply must run their loops (the compiler may not fold them into a
    closed form): 6789 additions take at least 3 instructions each."""
    assert run_on("emulator", firmware_elf("multiply")).instructions >= 3 * 6789
    assert run_on("emulator", firmware_elf("sum")).instructions >= 3 * 100


def test_softfloat_calls_the_soft_float_library(firmware_elf):
    """softfloat's arithmetic is the compiler's soft-float helpers (the core has no F or D
    extension), not folded away at compile time."""
    with open(firmware_elf("softfloat"), "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        names = {s.name for s in symtab.iter_symbols()}
    assert {"__adddf3", "__muldf3", "__divdf3", "__addsf3", "__divsf3"} <= names
    assert run_on("emulator", firmware_elf("softfloat")).instructions >= 50_000


def _function_range(elf: ELFFile, names: tuple[str, ...]) -> list[tuple[int, int]]:
    symtab = elf.get_section_by_name(".symtab")
    assert isinstance(symtab, SymbolTableSection)
    return [(s["st_value"], s["st_value"] + s["st_size"]) for s in symtab.iter_symbols()
            if s.name in names and s["st_info"]["type"] == "STT_FUNC"]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_switch_compiles_to_a_jump_table_in_rodata(firmware_elf, compiler):
    """The interpreter's switch must become a table of code addresses in .rodata: at least
    10 consecutive words that all point at instructions inside the interpreter."""
    with open(firmware_elf("switch", compiler), "rb") as f:
        elf = ELFFile(f)
        rodata = elf.get_section_by_name(".rodata")
        assert rodata["sh_addr"] == 0x40000
        data = rodata.data()
        ranges = _function_range(elf, ("run", "main"))
        assert ranges
    words = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data) - 3, 4)]
    inside = [any(lo <= w < hi for lo, hi in ranges) and w % 4 == 0 for w in words]
    longest = run = 0
    for flag in inside:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    assert longest >= 10, f"no jump table found in .rodata (longest run {longest})"
