"""The examples (examples/*/): each circuit's token stream in the reference simulator against
an independent Python model (example_models.py), the default run through the `deltachip sim`
command, and the stack machine's assembler against its checked-in ROM image."""
from __future__ import annotations

import functools
import importlib.util
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import example_models as M
from hdl.ir import Circuit

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


@functools.cache
def circuit(name: str) -> Circuit:
    """The elaborated circuit of examples/<name>/<name>.hdl (loaded once)."""
    from hdl.frontend import load_circuit
    return load_circuit(EX / name / f"{name}.hdl")


def simulate(name: str, start: str | None = None, roms: dict[str, list[int]] | None = None,
             steps: int = 10_000) -> list[str]:
    """The token stream as text, from the circuit's start token or ``start``."""
    from hdl.sim import Simulator
    from hdl.sim.tokens import format_token, parse_token
    c = circuit(name)
    sim = Simulator(c, roms=roms)
    tok = parse_token(c, start) if start else c.start
    return [format_token(c, t) for t in sim.run(tok, steps)]


def cli(*argv: str) -> tuple[int, str, str]:
    """Run ``deltachip ARGV`` in-process; return (status, stdout, stderr)."""
    import contextlib
    import io
    from deltachip.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


# ---- counter ----------------------------------------------------------------------------------

def test_counter_stream():
    assert simulate("counter") == M.counter(9)


def test_counter_from_another_start():
    assert simulate("counter", "Count value=7") == M.counter(9)[7:]


# ---- gcd --------------------------------------------------------------------------------------

def test_gcd_default():
    stream = simulate("gcd")
    assert stream == M.gcd(252, 105)
    assert stream[-1] == f"Result value={math.gcd(252, 105)}"


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, 255), b=st.integers(0, 255))
def test_gcd_any_operands(a, b):
    stream = simulate("gcd", f"Step a={a} b={b}")
    assert stream == M.gcd(a, b)
    assert stream[-1] == f"Result value={math.gcd(a, b)}"


def test_gcd_longest_run():
    # the longest run for u8 operands (Lame: consecutive Fibonacci numbers, the smaller
    # first, so the first step swaps them): 13 Step tokens and the Result
    longest = max(len(M.gcd(a, b)) for a in range(256) for b in range(256))
    assert longest == 14
    assert simulate("gcd", "Step a=144 b=233") == M.gcd(144, 233)
    assert len(M.gcd(144, 233)) == longest


# ---- stack machine ----------------------------------------------------------------------------

def _asm():
    spec = importlib.util.spec_from_file_location("sm_asm", EX / "stack_machine" / "asm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _hex_words(path: Path) -> list[int]:
    words = []
    for line in path.read_text().splitlines():
        text = line.split("//", 1)[0].strip()
        if text:
            words.append(int(text, 16))
    return words


FIB = [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233]


def test_stack_machine_default_program():
    words = _hex_words(EX / "stack_machine" / "program.hex")
    stream = simulate("stack_machine")
    assert stream == M.stack_machine(words)
    assert M.printed(stream) == FIB
    assert stream[-1] == "Halt"


def test_assembler_reproduces_the_image():
    asm = _asm()
    sm = EX / "stack_machine"
    words = asm.assemble((sm / "program.asm").read_text(), "program.asm")
    assert (sm / "program.hex").read_text() == asm.to_hex(words, "program.asm")


def test_assembler_opcodes_match_the_circuit():
    text = (EX / "stack_machine" / "stack_machine.hdl").read_text()
    consts = {m[1]: int(m[2]) for m in re.finditer(r"^const (\w+) = (\d+);", text, re.M)}
    assert consts == _asm().OPCODES
    assert consts == {n: getattr(M, n) for n in consts}


def test_assembler_errors():
    asm = _asm()
    for src, msg in [("FOO", "x.asm:1: unknown instruction 'FOO'"),
                     ("PUSH", "x.asm:1: PUSH needs an operand"),
                     ("ADD 3", "x.asm:1: ADD takes no operand"),
                     ("JMP nowhere", "x.asm:1: unknown label 'nowhere'"),
                     ("PUSH 256", "x.asm:1: operand 256 is not a byte"),
                     ("a: DUP\na: DUP", "x.asm:2: label 'a' defined twice")]:
        with pytest.raises(asm.AsmError) as e:
            asm.assemble(src, "x.asm")
        assert str(e.value) == msg


# Random programs: mostly well-formed instructions with small operands (so jumps stay inside
# the program and LOAD/STORE hit the 16 variables), plus the odd unknown opcode (Fault).
_instr = st.one_of(
    st.tuples(st.sampled_from([M.PUSH, M.LOAD, M.STORE]), st.integers(0, 20)),
    st.tuples(st.sampled_from([M.DUP, M.OVER, M.DROP, M.ADD, M.SUB, M.AND, M.LT, M.OUT]),
              st.just(0)),
    st.tuples(st.sampled_from([M.JMP, M.JZ, M.JNZ]), st.integers(0, 24)),
    st.tuples(st.sampled_from([M.HALT, 15, 200]), st.integers(0, 255)),
)


@settings(max_examples=60, deadline=None)
@given(prog=st.lists(_instr, min_size=1, max_size=24))
def test_stack_machine_random_programs(prog):
    words = [op << 8 | arg for op, arg in prog]
    got = simulate("stack_machine", roms={"prog": words}, steps=300)
    assert got == M.stack_machine(words, steps=300)


# ---- the CLI ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [
    ("counter", lambda: M.counter(9)),
    ("gcd", lambda: M.gcd(252, 105)),
    ("stack_machine", lambda: M.stack_machine(_hex_words(EX / "stack_machine" / "program.hex"))),
])
def test_deltachip_sim_runs_each_example(name, expected):
    rc, out, err = cli("sim", str(EX / name / f"{name}.hdl"))
    assert rc == 0, err
    assert out.splitlines() == expected()


def test_own_program_through_asm_and_rom_option(tmp_path):
    src = tmp_path / "countdown.asm"
    src.write_text("        PUSH 3\nloop:   DUP\n        OUT\n        PUSH 1\n        SUB\n"
                   "        DUP\n        JNZ loop\n        HALT\n")
    assert _asm().main([str(src), "-o", str(tmp_path / "countdown.hex")]) == 0
    words = _hex_words(tmp_path / "countdown.hex")
    rc, out, err = cli("sim", str(EX / "stack_machine" / "stack_machine.hdl"),
                       "--rom", f"prog={tmp_path / 'countdown.hex'}")
    assert rc == 0, err
    assert out.splitlines() == M.stack_machine(words)
    assert M.printed(out.splitlines()) == [3, 2, 1]
