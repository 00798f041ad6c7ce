"""calc answering a tool call read from the UART's input (the bridge's firmware side): the
call's JSON, its expression against Python's Fraction, and golden error texts. On the
golden emulator; the core reading the same calls is tests/cpu/test_core_fast.py."""
from __future__ import annotations

import json

import pytest

from calc_oracle import KINDS, generate, oracle
from cpu.emulator import Machine


def call(firmware_elf, text: str) -> tuple[int | None, str]:
    """calc with an empty input buffer and ``text`` on the UART's input."""
    m = Machine.from_elf(firmware_elf("calc"))
    m.rx = text.encode()
    r = m.run(50_000_000)
    assert r.fault is None and not r.timed_out
    assert m.rx_pos == len(m.rx)            # the whole call was read, even one too long
    return r.exit_code, r.output.decode()


def tool_call(expression: str, **extra) -> str:
    return json.dumps({"name": "calc", "arguments": {"expression": expression, **extra}})


def test_random_expressions_through_calls(firmware_elf):
    """104 expressions (8 of each kind), each one call, against Python's Fraction."""
    for _, expr in generate(20261203, 8 * len(KINDS)):
        want, code = oracle(expr)
        got_code, out = call(firmware_elf, tool_call(expr))
        if want is None:
            assert out.startswith("error: ") and got_code == code, (expr, out)
        else:
            assert (got_code, out) == (0, want + "\n"), expr


def test_a_long_call(firmware_elf):
    """A call of 1,000 bytes (a tool call of several hundred tokens)."""
    expr = "+".join(["12345"] * 162)
    text = tool_call(expr)
    assert 990 <= len(text) <= 1023
    assert call(firmware_elf, text) == (0, f"{12345 * 162}\n")


@pytest.mark.parametrize("text,message,code", [
    (tool_call("2**100"), "1267650600228229401496703205376", 0),
    ('{"arguments": {"x": [1, {"a": null}], "expression": "1/3 + 1/6"}, "name": "calc"}',
     "1/2", 0),
    (' {"name":"calc","arguments":{"expression":"2**\\u0031\\u0030"}} ', "1024", 0),
    ("7*6", "42", 0),
    (tool_call("1/0"), "error: division by zero", 2),
    (tool_call("((("), "error: syntax error at column 4: expected a number, '(' or gcd, "
                      "found end of line", 1),
    ('{"name": "python", "arguments": {"code": "1"}}',
     'error: unknown tool "python" (this computer has calc)', 4),
    ('{"name": "calc", "arguments": {}}',
     'error: the call has no "arguments": {"expression": "..."}', 4),
    ('{"arguments": {"expression": "1"}}', 'error: the call names no tool ("name": "calc")', 4),
    ('{"name": "calc"', "error: the call is not JSON: ',' or '}' was expected", 4),
    ('{"name": "calc", "arguments": {"expression": "1"}} x',
     "error: the call is not JSON: text after the object", 4),
    ('{"name": calc}', "error: the call is not JSON: a value was expected", 4),
    ('{"name": "calc", "arguments": {"expression": 7}}',
     'error: the call has no "arguments": {"expression": "..."}', 4),
    ('{"name": "c\\qalc"}', "error: the call is not JSON: a bad escape", 4),
    (tool_call("1\u00e9"), "error: the expression holds a character calc does not read", 4),
    (tool_call("+".join(["1"] * 600)), "error: the call is longer than 1023 bytes", 4),
    ("", "error: no expression given (example input: 2**100)", 1),
])
def test_call_answers_and_errors(firmware_elf, text, message, code):
    assert call(firmware_elf, text) == (code, message + "\n")


def test_calls_one_after_another(firmware_elf):
    """calc serves calls until an empty one: each call (ended by a 0 byte) is answered as
    it is alone, a malformed or too long one too, without ending the run; the exit code is
    the first failing call's."""
    calls = [tool_call("2**100"), tool_call("+".join(["1"] * 600)), "7*6",
             '{"name": "python"}', tool_call("1/0"), tool_call("(1/3 + 1/6) * 7")]
    outs = [call(firmware_elf, c)[1] for c in calls]
    m = Machine.from_elf(firmware_elf("calc"))
    m.rx = "\0".join(calls).encode()
    r = m.run(50_000_000)
    assert r.fault is None and m.rx_pos == len(m.rx)
    assert (r.exit_code, r.output.decode()) == (4, "".join(outs))
    assert outs[2] == "42\n" and outs[5] == "7/2\n"
