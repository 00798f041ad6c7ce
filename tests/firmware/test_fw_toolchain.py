"""The toolchain (firmware.toolchain.build), the runtime (crt0, printf, input buffer, memory
map) and the ``deltachip firmware`` command."""
from __future__ import annotations

from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from tests.firmware.fw_engines import run_on
from deltachip.cli import main
from firmware import toolchain
from firmware.toolchain import ToolchainError, build
from tests.firmware.unicorn_runner import elf_symbols


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------- errors

def test_compile_error_carries_the_compilers_message(tmp_path):
    src = write(tmp_path / "bad.c", "int main(void) { return undefined_name; }\n")
    out = tmp_path / "bad.elf"
    with pytest.raises(ToolchainError) as e:
        build([src], out)
    text = str(e.value)
    assert text.startswith("error: zig failed to build bad.elf:\n")
    assert "undefined_name" in text and "bad.c:1:" in text
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]          # no temporary file left behind


def test_failed_build_keeps_the_previous_elf(tmp_path):
    out = write(tmp_path / "prog.elf", "previous")
    src = write(tmp_path / "bad.c", "int main(void) { return ; }\n")
    with pytest.raises(ToolchainError):
        build([src], out)
    assert out.read_text() == "previous"


def test_link_error_is_reported(tmp_path):
    src = write(tmp_path / "nolink.c", "int missing(void);\nint main(void) { return missing(); }\n")
    with pytest.raises(ToolchainError, match="missing"):
        build([src], tmp_path / "nolink.elf")


def test_ram_overflow_is_reported(tmp_path):
    src = write(tmp_path / "big.c", "static volatile char big[40000];\n"
                                    "int main(void) { big[39999] = 1; return big[0]; }\n")
    with pytest.raises(ToolchainError, match="RAM"):
        build([src], tmp_path / "big.elf")


@pytest.mark.parametrize("kwargs, message", [
    ({"opt": "-O9"}, "error: unknown optimisation level '-O9' "
                     "(choose from -O0, -O1, -O2, -O3, -Os, -Oz)"),
    ({"compiler": "clang"}, "error: unknown compiler 'clang' (choose from zig, gcc, auto)"),
])
def test_bad_arguments(tmp_path, kwargs, message):
    src = write(tmp_path / "ok.c", "int main(void) { return 0; }\n")
    with pytest.raises(ToolchainError) as e:
        build([src], tmp_path / "ok.elf", **kwargs)
    assert str(e.value) == message


def test_bad_sources(tmp_path):
    with pytest.raises(ToolchainError) as e:
        build([tmp_path / "nope.c"], tmp_path / "x.elf")
    assert str(e.value) == f"error: {tmp_path / 'nope.c'}: no such file"
    txt = write(tmp_path / "notes.txt", "hi")
    with pytest.raises(ToolchainError) as e:
        build([txt], tmp_path / "x.elf")
    assert str(e.value) == f"error: {txt}: not a C or assembly source (expected .c, .S, .s)"
    with pytest.raises(ToolchainError) as e:
        build([], tmp_path / "x.elf")
    assert str(e.value) == "error: no source files given"



def test_bad_outputs_are_refused_and_leave_files_alone(tmp_path):
    """Regression: these used to escape as OSError tracebacks (or overwrite the source)."""
    src = write(tmp_path / "ok.c", "int main(void) { return 0; }\n")
    blocker = write(tmp_path / "file", "mine")
    cases = [
        (tmp_path, f"error: cannot write {tmp_path}: Is a directory"),
        (blocker / "x.elf", f"error: cannot write {blocker / 'x.elf'}: Not a directory"),
        (src, f"error: the output {src} is one of the sources"),
    ]
    for out, message in cases:
        with pytest.raises(ToolchainError) as e:
            build([src], out)
        assert str(e.value) == message
    assert src.read_text() == "int main(void) { return 0; }\n" and blocker.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "ok.c"]


# ---------------------------------------------------------------- memory map

def test_elf_layout(firmware_elf):
    """Code at 0, rodata at 0x40000, RAM at 0x80000 with .bss as the zero tail of the RAM
    segment; the stack (8 KiB by default) at the bottom of RAM, growing down towards
    unmapped memory, then the input buffer, .data, .bss and the heap up to the end of RAM."""
    path = firmware_elf("sieve")
    with open(path, "rb") as f:
        elf = ELFFile(f)
        assert elf.header.e_entry == 0
        loads = [(s["p_vaddr"], s["p_filesz"], s["p_memsz"], s["p_flags"])
                 for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        sections = {s.name: (s["sh_addr"], s["sh_size"]) for s in elf.iter_sections()}
    assert [(v, flags) for v, _, _, flags in loads] == [(0x0, 5), (0x40000, 4), (0x80000, 6)]
    ram = loads[2]
    assert ram[2] - ram[1] >= 10000            # the sieve's 10000-byte array is not in the file
    assert sections[".bss"][0] + sections[".bss"][1] <= 0x80000 + ram[2]
    assert sections[".text"][0] == 0 and sections[".rodata"][0] == 0x40000
    symbols = elf_symbols(path)
    assert symbols["__stack_size"] == 8192 and symbols["__stack_bottom"] == 0x80000
    assert symbols["__stack_top"] == symbols["__input_buffer"] == 0x82000
    assert symbols["__input_size"] == 1024
    assert symbols["__heap_start"] == symbols["__bss_end"] <= symbols["__heap_end"] == 0x88000


ECHO = r"""
#include "deltachip.h"
static int zeroed[64];          /* .bss: must read as zero */
static int initialised = 1234;  /* .data: loaded into RAM */
int main(void) {
    const char *s = input_text();
    for (int i = 0; i < 64; i++) if (zeroed[i]) return 9;
    printf("[%s] %u %d %u\n", s, (unsigned)strlen(s), initialised, (unsigned)INPUT_CAPACITY);
    return (int)strlen(s);
}
"""


@pytest.fixture(scope="module")
def echo_elf(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("echo")
    return build([write(d / "echo.c", ECHO)], d / "echo.elf")


@pytest.mark.parametrize("text", [None, "", "hello world", "x" * 1023, "multi\nline"])
def test_input_buffer(echo_elf, engine, text):
    out = run_on(engine, echo_elf, text)
    seen = text or ""
    assert out.output.decode() == f"[{seen}] {len(seen)} 1234 1024\n"
    assert out.exit_code == len(seen)


def test_input_too_long_is_refused(echo_elf):
    with pytest.raises(ValueError):
        run_on("unicorn", echo_elf, "x" * 1024)


# ---------------------------------------------------------------- printf

PRINTF_CASES = [
    ("%d", 0), ("%d", -2147483647 - 1), ("%i", 2147483647), ("%u", 4294967295),
    ("%x", 0xDEADBEEF), ("%X", 0xDEADBEEF), ("%8x", 0xABC), ("%08X", 0xABC), ("%-8x|", 0xABC),
    ("%5d", -42), ("%-5d|", -42), ("%05d", -42), ("%05d", 42), ("%1d", 12345),
    ("%c", 65), ("%3c", 66), ("%-3c|", 67), ("%s", "text"), ("%8s", "abc"), ("%-8s|", "abc"),
    ("%2s", "longer"), ("%%", None), ("%lld", -9000000000000000000),
    ("%llu", 18446744073709551615), ("%llx", 0x123456789ABCDEF0), ("%020lld", -12345678901),
    ("%ld", -5), ("%lu", 7), ("%.3s", "abcdef"), ("%6.2s|", "abcdef"), ("%.0s|", "abc"),
    ("%.5d", -42), ("%8.3x", 0xA), ("%.10s", "short"),
]


def _c_literal(v: int | str) -> str:
    """A C expression of the right type: int, unsigned, long long or unsigned long long."""
    if isinstance(v, str):
        return '"' + v + '"'
    if v == -2**31:
        return "(-2147483647 - 1)"
    if -2**31 < v < 2**31:
        return str(v)
    if 0 < v < 2**32:
        return f"{v}U"
    return f"{v}ULL" if v > 0 else f"({v + 1}LL - 1)"


def test_printf_matches_python(tmp_path, engine):
    lines = ['#include "deltachip.h"', "int main(void) {"]
    want = []
    for fmt, arg in PRINTF_CASES:
        if arg is None:
            lines.append(f'    printf("{fmt}\\n");')
            want.append(fmt % () + "\n")
        else:
            lines.append(f'    printf("{fmt}\\n", {_c_literal(arg)});')
            want.append(fmt.replace("ll", "").replace("l", "") % arg + "\n")
    lines.append('    int n = printf("%s=%d\\n", "n", 5); printf("%d %d\\n", n, puts("p"));')
    lines.append('    printf("%*d|%-*d|%.*s|\\n", 4, 7, 3, 8, 2, "xyz"); return 0; }')
    want.append("n=5\n4 ")           # printf returns the byte count, puts a non-negative int
    src = write(tmp_path / "fmt.c", "\n".join(lines) + "\n")
    out = run_on(engine, build([src], tmp_path / "fmt.elf"))
    text = out.output.decode()
    assert out.exit_code == 0
    assert text.startswith("".join(want[:-1]))
    assert text.endswith("n=5\np\n4 1\n   7|8  |xy|\n")


def _number_cases() -> list[tuple[str, int]]:
    """Every digit-count boundary of 32 and 64 bits and seeded random values, through the
    conversions the runtime prints by different paths (%d/%u without flags; the rest)."""
    import random
    rng = random.Random(41)
    edges = sorted({v + d for k in range(11) for v in (10**k,) for d in (-1, 0, 1)} |
                   {2**31 - 1, 2**31, 2**32 - 1})
    unsigned = [v for v in edges if 0 <= v < 2**32] + [rng.getrandbits(rng.randint(1, 32))
                                                      for _ in range(40)]
    signed = [v - 2**32 if v >= 2**31 else v for v in unsigned]
    wide = [2**32, 2**32 + 1, 10**10, 10**19 - 1, 2**64 - 1] + [rng.getrandbits(64)
                                                              for _ in range(8)]
    cases = [("%d", v) for v in signed] + [("%i", v) for v in signed[::3]]
    cases += [("%u", v) for v in unsigned] + [("%x", v) for v in unsigned[::2]]
    cases += [("%5d", v) for v in signed[::4]] + [("%.3u", v) for v in unsigned[::5]]
    cases += [("%llu", v) for v in wide] + [("%llx", v) for v in wide]
    cases += [("%lld", v - 2**63) for v in wide]
    return cases


def test_printf_numbers_and_counts_match_python(tmp_path, engine):
    # each conversion printed alone, then the byte count printf returned for it
    lines = ['#include "deltachip.h"', "int main(void) {"]
    want = []
    for fmt, arg in _number_cases():
        lines.append(f'    printf("=%d\\n", printf("{fmt}", {_c_literal(arg)}));')
        text = fmt.replace("ll", "") % arg
        want.append(f"{text}={len(text)}\n")
    lines.append('    printf("=%d\\n", printf("%u%d|%%|%u%%", 7u, -12, 345u));')
    want.append("7-12|%|345%=11\n")
    lines.append("    return 0; }")
    src = write(tmp_path / "numbers.c", "\n".join(lines) + "\n")
    out = run_on(engine, build([src], tmp_path / "numbers.elf"))
    assert out.exit_code == 0
    assert out.output.decode().splitlines(keepends=True) == want


# ---------------------------------------------------------------- CLI

def test_cli_build_and_list(tmp_path, capsys):
    out = tmp_path / "hello.elf"
    assert main(["firmware", "build", str(toolchain.PROGRAMS_DIR / "hello.c"), "-o", str(out),
                 "-Os"]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().out
    assert main(["firmware", "build", "calc", "-o", str(tmp_path / "calc.elf")]) == 0
    assert (tmp_path / "calc.elf").is_file()
    assert main(["firmware", "list"]) == 0
    listing = capsys.readouterr().out
    assert "calc" in listing and "firmware/programs/hello.c" in listing


def test_cli_build_error_exit_status(tmp_path, capsys):
    src = write(tmp_path / "bad.c", "int main(void) { return x; }\n")
    assert main(["firmware", "build", str(src), "-o", str(tmp_path / "bad.elf")]) == 2
    err = capsys.readouterr().err
    assert "error: zig failed to build bad.elf" in err and "Traceback" not in err


@pytest.mark.skipif(not toolchain.gcc_available(), reason="riscv64-unknown-elf-gcc not installed")
def test_gcc_compile_error(tmp_path):
    src = write(tmp_path / "bad.c", "int main(void) { return undefined_name; }\n")
    with pytest.raises(ToolchainError, match="(?s)gcc failed to build bad.elf:\n.*undefined_name"):
        build([src], tmp_path / "bad.elf", compiler="gcc")


def test_compiler_choice(monkeypatch):
    monkeypatch.setattr(toolchain, "zig_available", lambda: False)
    monkeypatch.setattr(toolchain, "gcc_available", lambda: True)
    assert toolchain.resolve_compiler("auto") == "gcc"
    with pytest.raises(ToolchainError) as e:
        toolchain.resolve_compiler("zig")
    assert str(e.value) == "error: zig not found: pip install ziglang"
    monkeypatch.setattr(toolchain, "gcc_available", lambda: False)
    with pytest.raises(ToolchainError) as e:
        toolchain.resolve_compiler("auto")
    assert str(e.value) == ("error: no RISC-V compiler found: install the 'ziglang' package "
                            "(pip install ziglang) or Debian's gcc-riscv64-unknown-elf")
    with pytest.raises(ToolchainError) as e:
        toolchain.resolve_compiler("gcc")
    assert str(e.value) == ("error: riscv64-unknown-elf-gcc not found: "
                            "apt-get install gcc-riscv64-unknown-elf")
    monkeypatch.setattr(toolchain, "zig_available", lambda: True)
    assert toolchain.resolve_compiler("auto") == "zig"
