"""calc answering a tool call read from the UART's input (the bridge's firmware side), in
its JSON ("hermes") form and in Qwen3.5's XML form (<function=calc> <parameter=expression>
... </function>, as the chat template renders it between <tool_call> and </tool_call>):
the call's expression against Python's Fraction, golden error texts, and the call read as
bytes on UART_RX or as text tokens (UART_TNEXT, UART_TXT). On the golden emulator; the core
reading the same calls is tests/cpu/test_core_fast.py."""
from __future__ import annotations

import json

import pytest

from tests.firmware.calc_oracle import KINDS, generate, oracle
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


def xml_call(expression: str | None = None, name: str = "calc", **params: str) -> str:
    """A call in Qwen3.5's XML form, exactly as its chat template renders it between the
    <tool_call> and </tool_call> tokens (each value framed by newlines)."""
    if expression is not None:
        params = {"expression": expression, **params}
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"\n<function={name}>\n{body}</function>\n"


def call_tokens(firmware_elf, pieces: list[str]) -> tuple[int | None, str]:
    """calc with an empty input buffer, reading one call as the text tokens ``pieces``
    (UART_TNEXT, UART_TXT: a routed merge's bridge), then an empty call (nothing left)."""
    m = Machine.from_elf(firmware_elf("calc"))
    m.text = [p.encode() for p in pieces]
    r = m.run(50_000_000)
    assert r.fault is None and not r.timed_out
    assert m.text_pos == len(m.text)        # every token was read
    return r.exit_code, r.output.decode()


@pytest.mark.parametrize("form", ["json", "xml"])
def test_random_expressions_through_calls(firmware_elf, form):
    """104 expressions (8 of each kind), each one call (JSON, or Qwen3.5's XML form),
    against Python's Fraction."""
    wrap = tool_call if form == "json" else xml_call
    for _, expr in generate(20261203, 8 * len(KINDS)):
        want, code = oracle(expr)
        got_code, out = call(firmware_elf, wrap(expr))
        if want is None:
            assert out.startswith("error: ") and got_code == code, (expr, out)
        else:
            assert (got_code, out) == (0, want + "\n"), expr


def test_the_template_text(firmware_elf):
    """The chat template's exact text, byte for byte."""
    text = "\n<function=calc>\n<parameter=expression>\n2**100\n</parameter>\n</function>\n"
    assert xml_call("2**100") == text
    assert call(firmware_elf, text) == (0, "1267650600228229401496703205376\n")


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


MALFORMED = "error: the call is malformed: "


@pytest.mark.parametrize("text,output,code", [
    # the template's form; whitespace (newlines, tabs, none) around the tags
    (xml_call("(1/3 + 1/6) * 7"), "7/2", 0),
    ("<function=calc><parameter=expression>2**10</parameter></function>", "1024", 0),
    (" \n\n\t<function=calc>  \n\n <parameter=expression>2**10</parameter>\n \t\n"
     "</function>\n\n  ", "1024", 0),
    ("<function= calc ><parameter= expression >2**10</parameter></function>", "1024", 0),
    # the value: one newline stripped each side, spaces kept (calc skips them)
    ("<function=calc><parameter=expression>\n\n 1+1 \n\n</parameter></function>", "2", 0),
    ("<function=calc><parameter=expression>\n</parameter></function>",
     "error: no expression given (example input: 2**100)", 1),
    # values are raw text: '<', '&', quotes, tags other than </parameter> are read as value
    (xml_call("2 < 3"), "error: syntax error at column 3: expected an operator or end of "
                        "line, found '<'", 1),
    (xml_call("1<parameter=x>2</function>"), "error: syntax error at column 2: expected an "
                                             "operator or end of line, found '<'", 1),
    (xml_call("6 & 3"), "error: syntax error at column 3: expected an operator or end of "
                        "line, found '&'", 1),
    (xml_call('"6*7"'), "error: syntax error at column 1: expected a number, '(' or gcd, "
                        "found '\"'", 1),
    (xml_call("6*'7'"), "error: syntax error at column 3: expected a number, '(' or gcd, "
                        "found '''", 1),
    (xml_call("1\u00e9"), "error: syntax error at column 2: expected an operator or end of "
                          "line, found byte 0xc3", 1),
    # a value of several lines: each line is evaluated, as calc's input buffer is
    (xml_call("1+1\n\n2**10"), "2\n1024", 0),
    (xml_call("1+1\n1/0\n(((\n3"), "2\nerror: division by zero\nerror: syntax error at "
     "column 4: expected a number, '(' or gcd, found end of line\n3", 2),
    # the function and its parameters
    (xml_call(name="python", code="print(1)"),
     'error: unknown tool "python" (this computer has calc)', 4),
    (xml_call("1", name="calculator"),
     'error: unknown tool "calculator" (this computer has calc)', 4),
    ("<function=><parameter=expression>1</parameter></function>",
     'error: unknown tool "" (this computer has calc)', 4),
    (xml_call(x="1", expression="2"),
     'error: unknown parameter "x" for calc (it takes "expression")', 4),
    (xml_call("2", precision="10"),
     'error: unknown parameter "precision" for calc (it takes "expression")', 4),
    (xml_call(expr="2"), 'error: unknown parameter "expr" for calc (it takes "expression")', 4),
    (xml_call(), "error: the call has no <parameter=expression>", 4),
    ("<function=calc></function>", "error: the call has no <parameter=expression>", 4),
    ("<function=calc><parameter=expression>1</parameter><parameter=expression>2</parameter>"
     "</function>", "error: the call gives <parameter=expression> twice", 4),
    # malformed
    ("<tool_call>\n<function=calc>\n</function>", MALFORMED + "<function=NAME> was expected", 4),
    ("<parameter=expression>1</parameter>", MALFORMED + "<function=NAME> was expected", 4),
    ("<function calc><parameter=expression>1</parameter></function>",
     MALFORMED + "<function=NAME> was expected", 4),
    ("<", MALFORMED + "<function=NAME> was expected", 4),
    ("<function=calc", MALFORMED + "<function= is not closed with '>'", 4),
    ("<function=calc\n<parameter=expression>1</parameter></function>",
     MALFORMED + "<function= is not closed with '>'", 4),
    ("<function=calc><parameter=expression\n1</parameter></function>",
     MALFORMED + "<parameter= is not closed with '>'", 4),
    ("<function=calc><parameter=expression>\n1+1\n</function>",
     MALFORMED + "<parameter=expression> has no </parameter>", 4),
    ("<function=calc><parameter=expression>1</parameter",
     MALFORMED + "<parameter=expression> has no </parameter>", 4),
    ("<function=calc><parameter=expression>1</parameter>", MALFORMED + "</function> is missing", 4),
    ("\n<function=calc>\n", MALFORMED + "</function> is missing", 4),
    ("<function=calc><parameter=expression>1</parameter></function",
     MALFORMED + "<parameter=NAME> or </function> was expected", 4),
    ("<function=calc>2**10</function>",
     MALFORMED + "<parameter=NAME> or </function> was expected", 4),
    ("<function=calc><parameter=expression>1</parameter>x</function>",
     MALFORMED + "<parameter=NAME> or </function> was expected", 4),
    ("<function=calc></parameter></function>",
     MALFORMED + "<parameter=NAME> or </function> was expected", 4),
    (xml_call("1") + "</tool_call>", MALFORMED + "text after </function>", 4),
    (xml_call("1") + xml_call("2"), MALFORMED + "text after </function>", 4),
    (xml_call("+".join(["1"] * 600)), "error: the call is longer than 1023 bytes", 4),
])
def test_xml_call_answers_and_errors(firmware_elf, text, output, code):
    """Qwen3.5's XML form (read as qwen3_coder reads it) and its golden error texts."""
    assert call(firmware_elf, text) == (code, output + "\n")


@pytest.mark.parametrize("pieces,output,code", [
    (["\n", "<function", "=c", "alc", ">\n", "<parameter", "=expression", ">\n", "2", "**",
      "7", "0", " /", " ", "3", "\n", "</parameter>", "\n", "</function>", "\n"],
     "1180591620717411303424/3", 0),
    (["<function=calc>", "<parameter=expression>", "1+1\n2", "**10", "</param", "eter>",
      "</function>"], "2\n1024", 0),
    (["<function=calc>", "<parameter=expression>", "1", "+" * 40, "2</parameter></function>"],
     "error: the call has a text token longer than 32 bytes", 4),
    (["<function=python>", "<parameter=expression>", "1</parameter>", "</function>"],
     'error: unknown tool "python" (this computer has calc)', 4),
    (["<function=calc>", "<parameter=expression>1"],
     MALFORMED + "<parameter=expression> has no </parameter>", 4),
    (['{"name": "calc", ', '"arguments": {"expression": "', "2**", "70", ' / 3"}}'],
     "1180591620717411303424/3", 0),
])
def test_a_call_as_text_tokens(firmware_elf, pieces, output, code):
    """A call read as text tokens goes to the same reader as one read as bytes: the XML
    form split anywhere (inside tags too) and the JSON form; a token over the 32 bytes the
    core holds is refused."""
    assert call_tokens(firmware_elf, pieces) == (code, output + "\n")
    if not any(len(p) > 32 for p in pieces):
        assert call(firmware_elf, "".join(pieces)) == (code, output + "\n")


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


def test_json_and_xml_calls_one_after_another(firmware_elf):
    """Both forms and plain expressions in one run; a call whose expression is empty is
    answered (an error), only an empty call ends the run."""
    calls = [xml_call("2**100"), tool_call("7*6"), xml_call(""), "1+1",
             "<function=calc><parameter=expression>1", tool_call(""), xml_call("1/3 + 1/6")]
    outs = [call(firmware_elf, c)[1] for c in calls]
    m = Machine.from_elf(firmware_elf("calc"))
    m.rx = "\0".join(calls).encode()
    r = m.run(50_000_000)
    assert r.fault is None and m.rx_pos == len(m.rx)
    assert (r.exit_code, r.output.decode()) == (1, "".join(outs))
    assert outs == ["1267650600228229401496703205376\n", "42\n",
                    "error: no expression given (example input: 2**100)\n", "2\n",
                    MALFORMED + "<parameter=expression> has no </parameter>\n",
                    "error: no expression given (example input: 2**100)\n", "1/2\n"]
