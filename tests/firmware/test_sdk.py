"""The C SDK (docs/firmware.md, "The C SDK"): picolibc built for the core and cached, C programs
in the style of CoreMark and Embench IoT (tests/firmware/sdk_programs/) built unmodified with
``deltachip firmware build`` and checked on the golden emulator (``ref``) against Python, a
few on the compiled core in the circuit simulator (``sim``); the build's -D, -I, -O,
--cflag, --stack-size and shown warnings; Zicntr counters; the stack guard.

picolibc is built from ../shared/vendor/ (or DELTACHIP_PICOLIBC) into $DELTACHIP_CACHE on the
first test that needs it (about 2 minutes on one core), then reused.
"""
from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from cpu.emulator import Machine
from deltachip.cli import main as cli
from firmware import toolchain
from firmware.sdk import picolibc

PROGRAMS = Path(__file__).resolve().parent / "sdk_programs"

needs_source = pytest.mark.skipif(
    not (picolibc.REPO_ROOT.parent / "shared" / "vendor" / picolibc.TARBALL_NAME).is_file()
    and not __import__("os").environ.get("DELTACHIP_PICOLIBC"),
    reason="no picolibc source offline (../shared/vendor/ or DELTACHIP_PICOLIBC)")
pytestmark = [needs_source,
              pytest.mark.skipif(not toolchain.zig_available(), reason="the SDK needs zig")]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(name, *flags)`` → the ELF of sdk_programs/NAME.c, built by the CLI (cached)."""
    out_dir = tmp_path_factory.mktemp("sdk")
    cache: dict[tuple, Path] = {}

    def get(name: str, *flags: str) -> Path:
        key = (name, flags)
        if key not in cache:
            out = out_dir / f"{name}-{len(cache)}.elf"
            assert cli(["firmware", "build", str(PROGRAMS / f"{name}.c"), "-o", str(out),
                        *flags]) == 0
            cache[key] = out
        return cache[key]
    return get


def run_ref(elf: Path, max_steps: int = 50_000_000):
    m = Machine.from_elf(elf)
    r = m.run(max_steps)
    return m, r


def run_sim(elf: Path, capsys) -> tuple[int, str, str]:
    """(exit status of `deltachip run --engine sim`, stdout, stderr)."""
    capsys.readouterr()
    status = cli(["run", str(elf), "--engine", "sim"])
    out = capsys.readouterr()
    return status, out.out, out.err


# ---------------------------------------------------------------- the library

def test_library_is_cached_with_headers_and_archives():
    lib = picolibc.library_dir()
    assert lib.name.startswith("picolibc-") and lib.parent == picolibc.cache_root()
    for rel in ("include/stdio.h", "include/math.h", "include/setjmp.h", "include/picolibc.h",
                "lib/libc.a", "lib/libm.a", "COPYING.picolibc", "BUILD.json"):
        assert (lib / rel).is_file(), rel
    assert picolibc.library_dir() == lib                      # found, not rebuilt
    assert "#define __IO_DEFAULT 'd'" in (lib / "include" / "picolibc.h").read_text()


def test_build_key_covers_source_and_flags(monkeypatch):
    key = picolibc.build_key("a" * 64)
    assert picolibc.build_key("b" * 64) != key
    monkeypatch.setattr(picolibc, "CFLAGS", [*picolibc.CFLAGS, "-DX"])
    assert picolibc.build_key("a" * 64) != key


def test_source_lists_come_from_picolibc_cmake_files(unpacked):
    with_exact = {p.name for p, _ in picolibc.cmake_sources(unpacked / "libc" / "stdio")}
    assert {"vfprintf.c", "snprintf.c", "dtoa_ryu.c"} <= with_exact
    assert "dtoa_engine.c" not in with_exact and "posixiob_stdout.c" not in with_exact
    without = {p.name for p, _ in picolibc.cmake_sources(
        unpacked / "libc" / "stdio", {"__IO_FLOAT_EXACT": False})}
    assert "dtoa_engine.c" in without and "dtoa_ryu.c" not in without


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    """picolibc's release unpacked once for this module, under pytest's temporary folder
    (removed with it)."""
    src, _ = picolibc.source_tarball()
    return picolibc._unpack(src, tmp_path_factory.mktemp("picolibc-src"))


def test_source_override_and_missing(monkeypatch, tmp_path, unpacked):
    monkeypatch.setenv("DELTACHIP_PICOLIBC", str(tmp_path / "nope.tar.gz"))
    with pytest.raises(picolibc.PicolibcError, match="no such file or folder"):
        picolibc.source_tarball()
    monkeypatch.setenv("DELTACHIP_PICOLIBC", str(unpacked))
    path, digest = picolibc.source_tarball()
    assert path == unpacked and len(digest) == 64


def test_libc_is_linked_when_a_program_includes_a_c_library_header(tmp_path):
    hello = toolchain.PROGRAMS_DIR / "hello.c"
    assert not toolchain.uses_libc([hello])
    assert toolchain.uses_libc([PROGRAMS / "libm_users.c"])
    (tmp_path / "local.h").write_text("#include <math.h>\n")
    (tmp_path / "a.c").write_text('#include <stdint.h>\n#include "local.h"\nint main(void){return 0;}\n')
    assert toolchain.uses_libc([tmp_path / "a.c"])


# ---------------------------------------------------------------- programs on ref

def _crc16(crc: int, v: int) -> int:
    for _ in range(32):
        bit = (crc ^ v) & 1
        crc >>= 1
        v >>= 1
        if bit:
            crc ^= 0xA001
    return crc


def _bench_oracle(iterations: int, list_size: int, n: int) -> int:
    """bench.c's CRC, computed in Python."""
    M = 0xFFFFFFFF
    crc = 0
    for it in range(iterations):
        seed, nodes = 0x1234 + it, []
        for i in range(list_size):
            seed = (seed * 1103515245 + 12345) & M
            nodes.append(((seed >> 8) % 1000, i))
        c = 0
        for key, value in sorted(nodes):
            c = _crc16(c, (key * 31 + value) & M)
        crc = _crc16(crc, c)
        seed, a, b = 0x5678 + it, [[0] * n for _ in range(n)], [[0] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                seed = (seed * 1664525 + 1013904223) & M
                a[i][j] = (seed >> 20) - 2048
                b[i][j] = (seed & 0xFFF) - 2048
        c = 0
        for i in range(n):
            for j in range(n):
                c = _crc16(c, sum(a[i][k] * b[k][j] for k in range(n)) & M)
        crc = _crc16(crc, c)
        crc = _crc16(crc, _state_crc())
    return crc


def _state_crc() -> int:
    text = "5012 1.23 -874 3.14e5 +7 abc 0x1f 12e-2 -.5 9.9.9 42, 1e 77"
    START, INT, FRAC, EXP_SIGN, EXP, INVALID = range(6)
    st, counts = START, [0] * 6
    digit = str.isdigit
    for i, ch in enumerate(text + "\0"):
        if ch in " ,\0":
            if i and text[i - 1] not in " ,":
                counts[st] += 1
            st = START
            continue
        if st == START:
            st = INT if digit(ch) or ch in "+-" else FRAC if ch == "." else INVALID
        elif st == INT:
            st = FRAC if ch == "." else EXP_SIGN if ch in "eE" else INT if digit(ch) else INVALID
        elif st == FRAC:
            st = EXP_SIGN if ch in "eE" else FRAC if digit(ch) else INVALID
        elif st == EXP_SIGN:
            st = EXP if digit(ch) or ch in "+-" else INVALID
        elif st == EXP:
            st = EXP if digit(ch) else INVALID
    crc = 0
    for c in counts:
        crc = _crc16(crc, c)
    return crc


def test_benchmark_reads_the_clock_and_validates_itself(build):
    """CoreMark's shape: configured with -D and -I, reads rdinstret, checks its own CRC (the
    expected value computed here in Python and passed with -D)."""
    expected = _bench_oracle(3, 48, 6)
    elf = build("bench", "-I", str(PROGRAMS / "include"), "-DITERATIONS=3", "-DLIST_SIZE=48",
                "-DMATRIX_N=6", f"-DEXPECTED_CRC=0x{expected:04x}", "-O3")
    m, r = run_ref(elf)
    text = r.output.decode()
    assert r.fault is None and r.exit_code == 0, text
    assert f"crc 0x{expected:04x}\n" in text and "correct operation validated" in text
    per_iter = int(re.search(r"instructions per iteration (\d+)", text).group(1))
    assert 0 < per_iter * 3 < r.instructions
    # a wrong expectation is caught by the program itself
    bad = build("bench", "-I", str(PROGRAMS / "include"), "-DEXPECTED_CRC=0x1")
    _, r = run_ref(bad)
    assert r.exit_code == 1 and "ERROR: crc" in r.output.decode()


def _libc_users_expected() -> str:
    v = sorted((i * 7919) % 101 - 50 for i in range(40))
    weighted = sum(x * (i + 1) for i, x in enumerate(v))
    mixed = "Hello, World 42!"
    return "\n".join([
        "strlen 16 strcmp 1 strncmp 0",
        "strchr achip runs C strrchr hip runs C strstr runs C",
        "strtok 3 memcmp 1",
        "%s %d" % ((s := "[%5d|%-5d|%05d|%x|%X|%o|%c|%s|%.2s]" % (
            42, -7, 3, 0xbeef, 0xBEEF, 8, "q", "str", "truncate")), len(s)),
        "%f %.3f %10.4f %e %g %g" % (3.14159265358979, -2.5, 1.0 / 3.0, 12345.678, 0.0001, 1e20),
        "-1234567890123 18446744073709551615 -2147483648 44",
        "truncated 10", "0123456",
        f"qsort min {v[0]} max {v[39]} weighted {weighted} bsearch 1",
        "realloc 1 calloc 100",
        "malloc huge NULL small yes",
        "strtol -31 rest Z strtoul 4294967295 atoi 123",
        "strtol base0 493 16 99",
        "abs 5 labs 70000 div -3 -2",
        "strtod %.6f" % 2.718281828,
        "ctype %d %d %d %d %d %s q" % (sum(c.isupper() for c in mixed),
                                      sum(c.islower() for c in mixed),
                                      sum(c.isdigit() for c in mixed),
                                      sum(c.isspace() for c in mixed),
                                      sum(not c.isalnum() and not c.isspace() for c in mixed),
                                      mixed.upper()),
        "longjmp 50 from depth 5",
    ]) + "\n"


def test_libc_users(build):
    """string.h, stdio.h (snprintf, printf %d %x %s %f %e %g, long long), malloc/calloc/
    realloc/free (and NULL when the heap is out), qsort, bsearch, strtol, ctype, setjmp."""
    m, r = run_ref(build("libc_users"))
    assert r.fault is None and r.exit_code == 0
    assert r.output.decode() == _libc_users_expected()


FUNCS = {"sin": math.sin, "cos": math.cos, "tan": math.tan, "atan": math.atan, "exp": math.exp,
         "sqrt": math.sqrt, "log": math.log, "pow": math.pow, "atan2": math.atan2,
         "asin": math.asin, "acos": math.acos, "sinh": math.sinh, "tanh": math.tanh,
         "log10": math.log10, "fmod": math.fmod, "floor": math.floor, "ceil": math.ceil,
         "hypot": math.hypot}


def test_libm_users(build):
    """Every libm result within the tolerance the program prints of Python's math; the
    cubic solver's roots are roots."""
    m, r = run_ref(build("libm_users"))
    assert r.fault is None and r.exit_code == 0
    lines = r.output.decode().splitlines()
    checked = set()
    for line in lines:
        name, *rest = line.split()
        if name in FUNCS:
            x, y, got, tol = map(float, rest)
            one_arg = name not in ("pow", "atan2", "fmod", "hypot")
            want = FUNCS[name](x) if one_arg else FUNCS[name](x, y)
            assert math.isclose(got, want, rel_tol=tol, abs_tol=1e-300), line
            checked.add(name)
    assert checked == set(FUNCS)
    assert "float sinf %.9g sqrtf %.9g" % (0.4794255495071411, 1.4142135381698608) in lines
    for line in (ln for ln in lines if ln.startswith("cubic")):
        coeffs, roots = line[6:].split(":")
        a, b, c = map(float, coeffs.split())
        for x in map(float, roots.split()):
            assert abs(x ** 3 + a * x * x + b * x + c) < 1e-4, line
    assert sum(ln.startswith("cubic") for ln in lines) == 4


def test_stdio_misc_atexit_and_input(build):
    m = Machine.from_elf(build("stdio_misc"), b"Z")
    r = m.run(10_000_000)
    assert r.exit_code == 0
    assert r.output == b"1.414214 1.41421 ff\n12 34 Z -1 nofile 1\nbye\n"


def test_assert(build):
    """A failed assert prints file, line, function and expression, and exits 134 (abort:
    128 + SIGABRT); -DNDEBUG turns it off (zig's own NDEBUG at -O2 does not)."""
    m, r = run_ref(build("assert_fail"))
    out = r.output.decode()
    assert r.exit_code == 134 and r.fault is None
    assert out.startswith("7\nassertion \"b != 0\" failed: file \"")
    assert out.endswith("assert_fail.c\", line 7, function: checked_div\n")
    _, r = run_ref(build("assert_fail", "-DNDEBUG"))
    assert r.exit_code == 0 and r.output.startswith(b"7\n")


def test_stack_overflow_faults_before_touching_data(build):
    """A runaway recursion stops with a fault on a store just below RAM (the stack is at
    the bottom of RAM, growing towards unmapped memory); .data and .bss are intact."""
    elf = build("overflow")
    m, r = run_ref(elf)
    assert r.exit_code is None and r.fault is not None
    text = str(r.fault)
    assert "store to unmapped address: address 0x0007ff" in text and text.startswith(
        "machine fault at pc 0x")
    assert r.output == b"guard 12345, recursing\n"
    assert m.regs[2] < m.symbols["__stack_bottom"] + 64
    guard = m.symbols["guard"]
    assert int.from_bytes(m.read(guard, 4), "little") == 12345
    # nothing between the stack's top and the end of RAM was written but the heap's
    # bookkeeping: the RAM above the stack is as the loader left it
    top = m.symbols["__stack_top"]
    fresh = Machine.from_elf(elf)
    assert m.read(top, 0x88000 - top) == fresh.read(top, 0x88000 - top)


def test_counters_on_ref(build):
    """rdinstret/rdcycle/rdtime (Zicntr) read the instructions retired before them."""
    m, r = run_ref(build("counters"))
    assert r.exit_code == 0
    first, d1, d2, loop = map(int, re.fullmatch(
        r"first (\d+) cycle-instret (\d+) instret64-cycle (\d+) loop (\d+)\n",
        r.output.decode()).groups())
    assert d1 == 1 and d2 == 2 and loop == 202 and 0 < first < 50


def test_counters_in_the_trace(build):
    elf = build("counters")
    m = Machine.from_elf(elf)
    r = m.run(100_000, trace=True)
    reads = [x for x in r.retired if (x.insn & 0x7F) == 0x73 and (x.insn >> 12) & 7 == 2]
    assert reads and all(x.rd_value is not None for x in reads if x.rd)
    index = {id(x): i for i, x in enumerate(r.retired)}
    for x in reads:
        if x.rd and (x.insn >> 20) in (0xC00, 0xC01, 0xC02):
            assert x.rd_value == index[id(x)]
    assert r.output == Machine.from_elf(elf).run(100_000).output


# ---------------------------------------------------------------- the build's options

def test_defines_includes_opt_and_warnings(tmp_path, capsys):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "greet.h").write_text('#define GREETING "hi"\n')
    src = tmp_path / "w.c"
    src.write_text('#include <stdio.h>\n#include "greet.h"\n'
                   "int main(void) { int x; printf(\"%s %d\\n\", GREETING, N); return x; }\n")
    out = tmp_path / "w.elf"
    capsys.readouterr()
    assert cli(["firmware", "build", str(src), "-o", str(out), "-DN=7", "-I", str(inc),
                "-O1", "--cflag=-Wextra"]) == 0
    err = capsys.readouterr().err
    assert "warning: variable 'x' is uninitialized when used here" in err
    _, r = run_ref(out)
    assert r.output == b"hi 7\n"
    # --cflag=-Werror turns the warning into a failed build with the compiler's message
    assert cli(["firmware", "build", str(src), "-o", str(tmp_path / "e.elf"), "-DN=7", "-I",
                str(inc), "--cflag=-Werror"]) == 2
    assert "[-Werror,-Wuninitialized]" in capsys.readouterr().err
    assert not (tmp_path / "e.elf").exists()


def test_stack_size_option_and_ram_limit_in_the_link_error(tmp_path, capsys):
    src = tmp_path / "big.c"
    src.write_text('#include "deltachip.h"\nvolatile char big[N];\n'
                   "int main(void) { big[N - 1] = 1; return big[0]; }\n")
    out = tmp_path / "big.elf"
    assert cli(["firmware", "build", str(src), "-o", str(out), "-DN=20000",
                "--stack-size", "4096"]) == 0
    m = Machine.from_elf(out)
    assert m.symbols["__stack_top"] == 0x81000 and m.run(1000).exit_code == 0
    capsys.readouterr()
    assert cli(["firmware", "build", str(src), "-o", str(out), "-DN=30000"]) == 2
    err = capsys.readouterr().err
    assert "RAM overflow" in err and "32 KiB of RAM at 0x80000-0x88000" in err
    assert "--stack-size" in err
    assert cli(["firmware", "build", str(src), "-o", str(out), "-DN=8",
                "--stack-size", "1000"]) == 2
    assert "multiple of 16, at least 1024" in capsys.readouterr().err


def test_stack_size_from_the_source(tmp_path):
    src = tmp_path / "s.c"
    src.write_text('#include "deltachip.h"\nDELTACHIP_STACK_SIZE(2048);\n'
                   "int main(void) { return 0; }\n")
    out = toolchain.build([src], tmp_path / "s.elf")
    m = Machine.from_elf(out)
    assert m.symbols["__stack_top"] == m.symbols["__input_buffer"] == 0x80800


def test_libc_none_keeps_the_small_runtime(tmp_path):
    out = toolchain.build([toolchain.PROGRAMS_DIR / "hello.c"], tmp_path / "h.elf")
    out2 = toolchain.build([toolchain.PROGRAMS_DIR / "hello.c"], tmp_path / "h2.elf",
                           libc="picolibc")
    a, b = run_ref(out)[1], run_ref(out2)[1]
    assert a.output == b.output and a.exit_code == b.exit_code == 0
    assert a.instructions != b.instructions


# ---------------------------------------------------------------- the compiled core (sim)

@pytest.mark.parametrize("name", ["short", "assert_fail", "libc_users"])
def test_sim_matches_ref(build, capsys, name):
    elf = build(name)
    _, r = run_ref(elf)
    status, out, err = run_sim(elf, capsys)
    assert out.encode() == r.output and status == r.exit_code, err


def test_sim_stack_overflow_fault(build, capsys):
    elf = build("overflow")
    _, r = run_ref(elf)
    status, out, err = run_sim(elf, capsys)
    assert status == 3 and out.encode() == r.output
    assert str(r.fault) in err


def test_sim_counters_fault_clearly(build, capsys):
    status, out, err = run_sim(build("counters"), capsys)
    assert status == 3
    assert "rdinstret (a Zicntr counter read) is not implemented by the compiled core yet; " \
           "it runs on --engine ref only" in err
