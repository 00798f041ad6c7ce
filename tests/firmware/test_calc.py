"""calc (firmware/calc): exact big-integer and fraction arithmetic, checked against Python's
``fractions.Fraction`` on seeded random expressions, plus golden error texts."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.firmware.calc_oracle import KINDS, batches, big_operands, generate, mutate, oracle
from tests.firmware.fw_engines import Outcome, run_on
from firmware import toolchain


def run_calc(firmware_elf, engine: str, text: str) -> Outcome:
    return run_on(engine, firmware_elf("calc"), text)


def check_batch(elf: Path, engine: str, exprs: list[str]) -> None:
    """Run a multi-line batch and compare each line (and the exit code) with the oracle."""
    out = run_on(engine, elf, "\n".join(exprs))
    assert out.fault is None, out.fault
    lines = out.output.decode().split("\n")
    assert lines[-1] == "", "output must end with a newline"
    lines = lines[:-1]
    assert len(lines) == len(exprs), (exprs, lines)
    first_error = 0
    for expr, got in zip(exprs, lines):
        want, code = oracle(expr)
        if want is None:
            assert got.startswith("error: "), f"{expr!r}: expected an error, got {got!r}"
            first_error = first_error or code
        else:
            assert got == want, f"{expr!r}: calc {got!r}, Python {want!r}"
    assert out.exit_code == first_error, exprs


def check_random(elf: Path, engine: str, seed: int, count: int) -> None:
    cases = generate(seed, count)
    assert {kind for kind, _ in cases} == set(KINDS)
    for group in batches([expr for _, expr in cases]):
        check_batch(elf, engine, group)


def test_random_expressions(firmware_elf, engine):
    """208 expressions (16 of each of the 13 kinds) against Python's Fraction."""
    check_random(firmware_elf("calc"), engine, seed=20261129, count=16 * len(KINDS))


def test_big_operands_floor_mod_pow(firmware_elf, engine):
    """120 targeted expressions: //, % and ** with operands up to 1,024 digits and fractions
    with denominators up to 10**1023, against Python's Fraction (every result that fits is
    computed: no cross product is limited to 1,024 digits)."""
    exprs = big_operands(seed=20261201, count=120)
    values = sum(oracle(e)[0] is not None for e in exprs)
    assert values >= 90, values          # mostly results, not "number too big"
    for group in batches(exprs):
        check_batch(firmware_elf("calc"), engine, group)


@pytest.mark.parametrize("expr, want", [
    ("1/10**1000 // 10**30", "0"), ("-1/10**1000 // 10**30", "-1"),
    ("1/10**1000 % 10**30", "1/1" + "0" * 1000),
    ("(67942/74) % (947/10**1023)", None), ("10**1000 % (1/7)", "0"),
    ("(10**1023 - 1) // (10**1022/3)", "29"), ("-7/3 % (1/5)", "1/15"),
])
def test_floor_and_mod_with_big_operands(firmware_elf, engine, expr, want):
    """Operands whose cross products exceed 1,024 digits while the result fits (these
    used to say "number too big"); None: Python's own answer (long)."""
    want = want if want is not None else oracle(expr)[0]
    assert want is not None
    out = run_calc(firmware_elf, engine, expr)
    assert (out.output.decode(), out.exit_code) == (want + "\n", 0)


@pytest.mark.skipif(not toolchain.gcc_available(), reason="riscv64-unknown-elf-gcc not installed")
def test_gcc_build_agrees(firmware_elf, engine):
    """calc built by gcc (-O2 and -Os) on 52 random expressions."""
    for opt in ("-O2", "-Os"):
        check_random(firmware_elf("calc", "gcc", opt), engine, seed=99, count=4 * len(KINDS))


@pytest.mark.slow
def test_random_expressions_many(firmware_elf, engine):
    """1300 expressions (100 of each kind) against Python's Fraction."""
    check_random(firmware_elf("calc"), engine, seed=7, count=100 * len(KINDS))


def test_mutated_expressions(firmware_elf, engine):
    """Robustness: 300 randomly damaged expressions. Each line gets exactly one output line,
    the machine never faults, valid leftovers evaluate like Python, and broken ones print
    an error (exit codes are compared in the tests above; here only error vs value)."""
    rng = random.Random(1234)
    exprs = [mutate(rng, expr, rng.randint(1, 3)) for _, expr in generate(5, 300)]
    exprs = [e for e in exprs if e.strip() and len(e) < 1000]
    for group in batches(exprs):
        out = run_on(engine, firmware_elf("calc"), "\n".join(group))
        assert out.fault is None, (out.fault, group)
        lines = out.output.decode().split("\n")[:-1]
        assert len(lines) == len(group)
        for expr, got in zip(group, lines):
            want, _ = oracle(expr)
            if want is None:
                assert got.startswith("error: "), (expr, got)
            else:
                assert got == want, (expr, got, want)


@pytest.mark.parametrize("expr, want", [
    ("2**100", "1267650600228229401496703205376"),
    ("-7 // 2", "-4"),
    ("-7 % 2", "1"),
    ("7 % -2", "-1"),
    ("-2**2", "-4"),
    ("2**-1", "1/2"),
    ("2**3**2", "512"),
    ("1/3 + 1/6", "1/2"),
    ("(-7/3) % (2/5)", "1/15"),
    ("(7/2) // (-1/3)", "-11"),
    ("gcd(-12, 18)", "6"),
    ("  ( 1 +2 )*3 ", "9"),
    ("6/-4", "-3/2"),
    ("2**3402 // 2**3400", None),          # 2**3402 has 1025 digits: too big
    ("9" * 1020 + "+1", "1" + "0" * 1020),
])
def test_known_values(firmware_elf, engine, expr, want):
    expected, code = oracle(expr)
    assert expected == want                 # the oracle itself agrees with the table
    out = run_calc(firmware_elf, engine, expr)
    if want is None:
        assert out.output.decode().startswith("error: ") and out.exit_code == code
    else:
        assert (out.output.decode(), out.exit_code) == (want + "\n", 0)


@pytest.mark.parametrize("text, message, code", [
    ("1/0", "error: division by zero", 2),
    ("5 % (2-2)", "error: division by zero", 2),
    ("0**-1", "error: division by zero", 2),
    ("2**(1/2)", "error: exponent is not an integer", 2),
    ("gcd(1/2, 3)", "error: gcd() needs integers", 2),
    ("10**1024", "error: number too big (over 1024 digits)", 3),
    ("2 +", "error: syntax error at column 4: expected a number, '(' or gcd, "
            "found end of line", 1),
    ("(1", "error: syntax error at column 3: expected ')', found end of line", 1),
    ("1 2", "error: syntax error at column 3: expected an operator or end of line, "
            "found a number", 1),
    ("2 * * 3", "error: syntax error at column 5: expected a number, '(' or gcd, "
                "found '*'", 1),
    ("gcd 1", "error: syntax error at column 5: expected '(', found a number", 1),
    ("(1) gcd", "error: syntax error at column 5: expected an operator or end of line, "
                "found 'gcd'", 1),
    ("1 + \x01", "error: syntax error at column 5: expected a number, '(' or gcd, "
                 "found byte 0x01", 1),
    ("1 + é", "error: syntax error at column 5: expected a number, '(' or gcd, "
             "found byte 0xc3", 1),
    ("2 $ 3", "error: syntax error at column 3: expected an operator or end of line, "
              "found '$'", 1),
    ("1 + 007", "error: syntax error at column 5: leading zeros are not allowed in a "
                "number: 007", 1),
    ("00 + 1", "1", 0),
    ("x", "error: syntax error at column 1: expected a number, '(' or gcd, found 'x'", 1),
    ("", "error: no expression given (example input: 2**100)", 1),
    ("(" * 30 + "1" + ")" * 30, "error: expression nested too deeply", 3),
    ("1" + "+(1" * 14 + ")" * 14, "error: expression too complex", 3),
])
def test_error_messages(firmware_elf, engine, text, message, code):
    out = run_calc(firmware_elf, engine, text)
    assert out.fault is None
    assert out.output.decode() == message + "\n"
    assert out.exit_code == code


def test_errors_do_not_stop_later_lines(firmware_elf, engine):
    out = run_calc(firmware_elf, engine, "1/0\n\n2**10\n(\n3*3")
    assert out.output.decode().splitlines() == [
        "error: division by zero", "1024",
        "error: syntax error at column 2: expected a number, '(' or gcd, found end of line",
        "9"]
    assert out.exit_code == 2                 # the first error's code


def test_nesting_within_limits(firmware_elf, engine):
    deep = "(" * 20 + "1" + ")" * 20
    chain = "1" + "+(1" * 11 + ")" * 11
    out = run_calc(firmware_elf, engine, f"{deep}\n{chain}\n" + "-" * 40 + "5")
    assert out.output.decode() == "1\n12\n5\n"
    assert out.exit_code == 0


def test_cli_run_calc(firmware_elf, capfd):
    """`deltachip run calc.elf --input '2**100'` prints the power (needs the run command)."""
    from deltachip.cli import main
    elf = str(firmware_elf("calc"))
    assert main(["run", elf, "--input", "2**100"]) == 0
    assert capfd.readouterr().out == "1267650600228229401496703205376\n"
    assert main(["run", elf, "--input", "-7 // 2"]) == 0
    assert capfd.readouterr().out == "-4\n"


def test_memory_stays_in_bounds(firmware_elf):
    """On the emulator's trace: calc's stack stays inside its region at the bottom of RAM,
    and no store touches the input buffer, the ROMs or anything but RAM past the input buffer and the UART."""
    from cpu.emulator import Machine
    text = "\n".join([
        "(" * 23 + "1" + ")" * 23,                       # deepest nesting allowed
        "1" + "+(1" * 13 + ")" * 13,                     # every value slot in use
        "-" * 46 + "5",
        "2**3401 // 3**1000 % 7**100",                   # the largest numbers (1024 digits)
        "(2**100-1)/(3**60+1) - (5**50+7)/(2**150+3)",
        "gcd(2**300-1, 3**200-1)",
        "(67942/74) % (947/10**1023) + (1/10**1000 // 10**30)",   # double-width products
        "1" + "+(1" * 14 + ")" * 14, "10**1024", "1/0",  # errors unwind cleanly
        "(" * 30 + "1" + ")" * 30,
    ])
    m = Machine.from_elf(firmware_elf("calc"), text.encode())
    r = m.run(20_000_000, trace=True)
    assert r.fault is None and r.exit_code == 3
    assert r.output.decode().count("\n") == 11
    # the stack is at the bottom of RAM, below the input buffer (docs/firmware.md)
    stack_bottom, stack_top = m.symbols["__stack_bottom"], m.symbols["__stack_top"]
    input_end = m.symbols["__input_buffer"] + 1024
    sps = [x.rd_value for x in r.retired if x.rd == 2]
    assert stack_bottom < min(sps) and max(sps) <= stack_top == m.symbols["__input_buffer"]
    for x in r.retired:
        if x.is_store:
            assert (x.mem_addr == 0x1000_0000 or stack_bottom <= x.mem_addr < stack_top
                    or input_end <= x.mem_addr < 0x88000), x.format()
