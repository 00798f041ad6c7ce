"""calc (firmware/calc): exact big-integer and fraction arithmetic, checked against Python's
``fractions.Fraction`` on seeded random expressions, plus golden error texts."""
from __future__ import annotations

import pytest

from calc_oracle import KINDS, batches, generate, oracle
from conftest import Outcome, run_on


def run_calc(firmware_elf, engine: str, text: str) -> Outcome:
    return run_on(engine, firmware_elf("calc"), text)


def check_batch(firmware_elf, engine: str, exprs: list[str]) -> None:
    """Run a multi-line batch and compare each line (and the exit code) with the oracle."""
    out = run_calc(firmware_elf, engine, "\n".join(exprs))
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


def check_random(firmware_elf, engine: str, seed: int, count: int) -> None:
    cases = generate(seed, count)
    assert {kind for kind, _ in cases} == set(KINDS)
    for group in batches([expr for _, expr in cases]):
        check_batch(firmware_elf, engine, group)


def test_random_expressions(firmware_elf, engine):
    """208 expressions (16 of each of the 13 kinds) against Python's Fraction."""
    check_random(firmware_elf, engine, seed=20261129, count=16 * len(KINDS))


@pytest.mark.slow
def test_random_expressions_many(firmware_elf, engine):
    """1300 expressions (100 of each kind) against Python's Fraction."""
    check_random(firmware_elf, engine, seed=7, count=100 * len(KINDS))


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
            "found '2'", 1),
    ("2 $ 3", "error: syntax error at column 3: expected an operator or end of line, "
              "found '$'", 1),
    ("007", "error: syntax error at column 1: expected a number without leading zeros, "
            "found '0'", 1),
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
