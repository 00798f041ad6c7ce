"""The lock-step checker (cpu/rv32/lockstep.py): the core's token stream against the golden
emulator at every retired instruction (pc and write-back value), on the ISA suite and
shipped firmware through the simulator, and the disagreements it must catch."""
from __future__ import annotations

from pathlib import Path

import pytest

from cpu.emulator import Machine
from cpu.rv32.engines import SimCore
from cpu.rv32.loader import load_program
from cpu.rv32.lockstep import LockStep
from cpu.rv32.protocol import HALF, LO, NEXT, STEP
from firmware import toolchain
from hdl.ir import Token


def sim_stream(elf, text: bytes | None = None, limit: int = 200_000) -> list[Token]:
    """The core's whole token stream for a program (engine sim)."""
    core = SimCore(load_program(elf, text))
    toks = [core.cur]
    while not core.reader.done and len(toks) < limit:
        core._advance(None)
        toks.append(core.cur)
    return toks


def lockstep(elf, toks: list[Token], text: bytes | None = None) -> LockStep:
    ls = LockStep(Machine.from_elf(elf, text))
    for t in toks:
        ls.feed(t)
    ls.finish()
    return ls


@pytest.mark.parametrize("name", toolchain.isa_programs())
def test_the_isa_suite_agrees_at_every_instruction(name, tmp_path):
    elf = toolchain.build([toolchain.ISA_TESTS_DIR / f"{name}.S"], tmp_path / f"{name}.elf")
    ls = lockstep(elf, sim_stream(elf))
    want = Machine.from_elf(elf).run(10**6)
    assert ls.ok, "\n".join(ls.mismatches)
    assert ls.checked == want.instructions and ls.writebacks > 0


@pytest.mark.parametrize("name, text", [("hello", None), ("calc", b"-7 // 2"),
                                        ("calc", b"(1/3 + 1/6) * 4")])
def test_firmware_agrees_at_every_instruction(name, text, firmware_elf):
    elf = firmware_elf(name)
    ls = lockstep(elf, sim_stream(elf, text), text)
    assert ls.ok, "\n".join(ls.mismatches)
    assert ls.checked == Machine.from_elf(elf, text).run(10**6).instructions


def _edit(toks: list[Token], kinds: tuple[int, ...], skip: int = 10) -> tuple[list[Token], int]:
    """``toks`` with the last field of the ``skip``-th token of one of ``kinds`` changed."""
    seen = 0
    for i, t in enumerate(toks):
        if t.kind in kinds:
            if seen == skip:
                fields = (*t.fields[:-1], t.fields[-1] ^ 1)
                return toks[:i] + [Token(t.kind, fields)] + toks[i + 1:], i
            seen += 1
    raise AssertionError("no such token")


@pytest.mark.parametrize("kinds", [(STEP, NEXT), (HALF,), (LO,)])
def test_a_wrong_value_is_caught_where_it_is_written(kinds, firmware_elf):
    elf = firmware_elf("calc")
    text = b"(1/3 + 1/6) * 4"
    toks, at = _edit(sim_stream(elf, text), kinds, skip=3)
    ls = lockstep(elf, toks[:at + 2], text)
    assert ls.mismatches, "the edit went unnoticed"
    assert ls.mismatches[0].startswith((f"position {at} ", f"position {at + 1} ")), ls.mismatches


def test_a_wrong_pc_and_a_wrong_outcome_are_caught(firmware_elf):
    elf = firmware_elf("hello")
    toks = sim_stream(elf)
    ls = lockstep(elf, toks[:5] + toks[6:])          # one token lost
    assert not ls.ok and "the emulator" in ls.mismatches[0]
    ls = lockstep(elf, toks[:-40])                   # the stream cut short
    assert ls.mismatches[-1].endswith("instructions without an exit or a fault")


def test_long_runs_lockstep_script_runs(tmp_path):
    """`scripts/long_runs.py lockstep` (the fast engine free-running, the checker fed every
    token through fast_advance) on a short budget: every stream agrees, exit 0."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "long_runs.py"), "lockstep",
                        "--target", "compact", "--instructions", "2000", "--threads", "1",
                        "--only", "sum", "product", "--build", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert ", 0 streams with mismatches" in r.stdout


@pytest.mark.parametrize("name", ["product", "fibonacci", "switch"])
def test_every_wide_result_costs_the_core_a_half(name, firmware_elf):
    """benchmarks/result_widths.py's bound (docs/cpu.md, "What the results' widths allow"):
    the core's stream has a Half for every result the trace calls wide, so its tokens per
    instruction are at least 1 + the wide share; the shares split the instructions."""
    import benchmarks.result_widths as rw
    elf = firmware_elf(name)
    w = rw.widths(elf, None, [13, 18])
    n = w["instructions"]
    assert w["none"] + w["fits"] + w["keeps"] + w["wide"] == n
    assert sum(w[c] for c in [*rw.CLASSES, "other"]) == w["wide"] == w[13] >= w[18]
    toks = sim_stream(elf)
    assert sum(t.kind == HALF for t in toks) >= w["wide"] > 0
    assert len(toks) >= n + w["wide"]
