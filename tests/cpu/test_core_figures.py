"""benchmarks/core_trace.py and benchmarks/core_figures.py: the worked trace of docs/cpu.md
("The core") and the core's figures table, regenerated from the current core.

The default run uses the small cores (the trace on TINY, the programs table on SMALL, where
the shipped programs fit); the full table (both targets compiled, every program on the full
core) is a slow test."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cpu.emulator import Machine
from cpu.rv32.build import TINY, load_core

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _script(name: str, *args: str, timeout: int = 600) -> str:
    p = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def _kinds_in(rows: list[list[str]]) -> set[str]:
    return {row[1].strip("`").split()[0] for row in rows}


def test_trace_covers_every_token_kind_and_agrees_with_ref():
    """The worked trace shows every kind the core declares (a new kind must get a place in
    the trace programs), and trace_rows checks the core against the golden emulator."""
    trace = _module("core_trace")
    main_rows, main_eng = trace.trace_rows(trace.PROGRAMS["main"], TINY)
    fault_rows, fault_eng = trace.trace_rows(trace.PROGRAMS["fault"], TINY)
    declared = {k.name for k in load_core(TINY).kinds}
    # Want is emitted, never fed: the run answers it with In(b), which the trace shows
    assert _kinds_in(main_rows) | _kinds_in(fault_rows) == declared - {"Want"}
    assert "In" in _kinds_in(fault_rows)
    assert "Fault" in _kinds_in(fault_rows) and fault_eng.reader.fault is not None
    want = trace.machine_of(trace.PROGRAMS["main"]).run(1000)
    assert (main_eng.reader.exit_code, bytes(main_eng.reader.output)) == (want.exit_code, want.output)
    assert len(main_rows) == main_eng.reader.tokens
    # the wide lui result is written back by the Step after its Half
    half = next(i for i, r in enumerate(main_rows) if r[1].startswith("`Half"))
    assert main_rows[half + 1][3] == "a1 = 0x00080000"


def test_trace_script_prints_markdown():
    out = _script("core_trace", "--sizes", "tiny", "--program", "main")
    assert out.startswith("### `main`: ")
    assert "| # | token | executes | register write | RAM write | state written |" in out
    assert "`0x0000: lui a1, 0x80`" in out and "(halted)" in out


def test_figures_programs_table_on_small_core(tmp_path):
    """Programs table (engine sim): the counts agree with the golden emulator's; a program
    that does not fit the core gets a row saying so."""
    from firmware import toolchain
    out = _script("core_figures", "--sizes", "small", "--no-compile", "--programs", "sum")
    elf = toolchain.build(toolchain.shipped_programs()["sum"], tmp_path / "sum.elf")
    want = Machine.from_elf(elf).run(10**6)
    row = next(line for line in out.splitlines() if line.startswith("| sum |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    instructions, tokens, tpi = int(cells[1].replace(",", "")), int(cells[2].replace(",", "")), float(cells[3])
    assert instructions == want.instructions
    assert tokens > instructions and tpi == pytest.approx(tokens / instructions, abs=1e-3)
    kinds = [int(c.replace(",", "")) for c in cells[4:]]
    assert sum(kinds) == tokens
    assert f"**mean over 1 programs** | | | **{tpi:.3f}**" in out
    tiny = _script("core_figures", "--sizes", "tiny", "--no-compile", "--programs", "sum")
    assert re.search(r"\| sum \(does not fit: the program's code reaches word \d+, past the 512 "
                     r"words of core 'c512-r128-m128'\)", tiny)


def test_figures_rejects_unknown_program():
    p = subprocess.run([sys.executable, str(BENCH / "core_figures.py"), "--no-compile",
                        "--programs", "nosuch"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "unknown program(s) nosuch" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_full_figures_table(tmp_path):
    """The whole table: the full core compiled for qwen3.5-4b and compact (each in its own
    process, peak RSS measured), every shipped program and calc 2**100 on the full core."""
    out = _script("core_figures", "--workdir", str(tmp_path), timeout=7200)
    for target in ("qwen3.5-4b", "compact"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {target} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        layers, in_layers = int(cells[1]), int(cells[2].replace(",", ""))
        assert layers > 0 and 0 < in_layers and int(cells[4].replace(",", "")) > 0
        if cells[3].startswith("not built: refused by the compile rules"):
            assert "token tables" in cells[3]       # only the tables' size may be refused
        else:
            assert int(cells[3].replace(",", "")) > 0
        assert cells[8].endswith(" GB") and float(cells[8].split()[0]) > 0
    from firmware import toolchain
    for name in toolchain.shipped_programs():
        label = "calc `2**100`" if name == "calc" else name
        assert f"| {label} | " in out
    assert "**mean over" in out
