"""Front-end messages that used to mislead (issue 9, class 7) and character literals; golden
texts: an unterminated comment, nesting past the limit (located), a flat 10,000-term sum
(compiles), no cascade after a bad `if`/`match` condition."""
from __future__ import annotations

import pytest

from hdl.diagnostics import CompileError
from hdl.frontend import load_source
from hdl.parser import MAX_NESTING
from hdl.sim import Simulator
from hdl.ir import Token


def _errors(src: str, name: str = "t.hdl") -> str:
    with pytest.raises(CompileError) as info:
        load_source(src, name)
    return str(info.value)


@pytest.mark.parametrize("src, where", [
    ("circuit C {\n token A halt;\n /* never closed\n next = A();\n}\n", "3:2"),
    ("/* never closed", "1:1"),
    ("// a /* in a line comment is not one\ncircuit C {\n token A halt;\n next = A(); /*\n}\n", "4:14"),
    ('circuit C {\n token A(v: u8) halt;\n rom r: u8[4] = "a/*b.hex";\n next = A(v: 0);\n} /* x', "5:3"),
])
def test_unterminated_comment(src, where):
    line = src.splitlines()[int(where.split(":")[0]) - 1]
    col = int(where.split(":")[1])
    assert _errors(src) == (f"t.hdl:{where}: error: unterminated comment: this '/*' has no "
                            f"closing '*/'\n{line}\n{' ' * (col - 1)}^")


def test_syntax_error_before_an_unclosed_comment_is_reported_as_itself():
    src = "circuit C {\n token A halt\n next = A();\n /* open\n}\n"
    assert _errors(src).startswith("t.hdl:3:2: error: unexpected 'next': expected")


def _sum_circuit(terms: list[str]) -> str:
    return ("circuit C {\n token A(v: u16);\n token B(v: u16) halt;\n start A(v: 7);\n"
            " match tok { A => { next = B(v: " + " + ".join(terms) + "); } B => { next = B(v: 0); } }\n}\n")


def test_parentheses_do_not_count():
    """Parentheses add no level to the syntax tree: 30,000 of them compile."""
    expr = "(" * 30_000 + "tok.A.v" + ")" * 30_000
    c = load_source("circuit C {\n token A(v: u8) halt;\n start A(v: 0);\n next = A(v: "
                    + expr + ");\n}\n")
    assert c.kinds[0].name == "A"


def test_flat_10000_term_sum_compiles_and_simulates():
    """A flat sum is a 10,000-level syntax tree (it used to be refused as "nests too deeply"
    with no location); it elaborates, simulates, and (its constants folded) compiles."""
    terms = [str(i % 7) for i in range(9_999)] + ["tok.A.v"]
    c = load_source(_sum_circuit(terms))
    out = Simulator(c, backend="python").run(Token(0, (7,)), 1)
    assert out[-1] == Token(1, ((sum(i % 7 for i in range(9_999)) + 7) % 65536,))
    from backends.compile.pipeline import compile_circuit
    assert compile_circuit(c).chip["shapes"]["layers"] >= 1
    c2 = load_source(_sum_circuit(["tok.A.v"] * 10_000))        # 10,000 real adds
    assert Simulator(c2, backend="python").run(Token(0, (7,)), 1)[-1] == Token(1, (70_000 % 65536,))


@pytest.mark.parametrize("body, line", [
    ("next = A(v: " + " + ".join(["tok.A.v"] * (MAX_NESTING + 50)) + ");", 4),
    ("next = A(v: " + "-" * (MAX_NESTING + 5) + "tok.A.v);", 4),
    ("\n".join(["if tok.A.v == 1 {"] * (MAX_NESTING // 2)) + "\nnext = A(v: 0);"
     + "} else { next = A(v: 1); }" * (MAX_NESTING // 2), None),
])
def test_nesting_past_the_limit_is_located(body, line):
    src = "circuit C {\n token A(v: u16) halt;\n start A(v: 0);\n" + body + "\n}\n"
    text = _errors(src)
    head = text.splitlines()[0]
    assert head.startswith(f"t.hdl:{line}:" if line else "t.hdl:"), head
    assert int(head.split(":")[1]) >= 4, head       # a real place in the source
    assert head.endswith(f": error: the source nests expressions or blocks more than "
                         f"{MAX_NESTING:,} levels deep here (parentheses, blocks and chained "
                         "operators count): split it with `let`")


BAD_CONDITIONS = {
    "undefined field in if": (
        "if tok.A.w == 1 { next = B(v: 1); } else { next = A(v: 2); }",
        "t.hdl:5:11: error: token kind A has no field 'w'"),
    "sign mix in if": (
        "if tok.A.v < signed(tok.A.v) { next = B(v: 1); } else { next = A(v: 2); }",
        "t.hdl:5:13: error: signed/unsigned mix in '<': left is u8, right is s8; convert one "
        "with signed() or unsigned()"),
    "undefined field in match": (
        "match tok.A.q { 0 => { next = A(v: 1); } _ => { next = B(v: 1); } }",
        "t.hdl:5:14: error: token kind A has no field 'q'"),
    "var set in both arms": (
        "var x: u8;\n if tok.A.q == 1 { x = 1; } else { x = 2; }\n next = A(v: x);",
        "t.hdl:6:11: error: token kind A has no field 'q'"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONDITIONS))
def test_bad_condition_reports_only_itself(case):
    """After an error in an `if` or `match` condition, the arms still count as assigning
    `next` (and variables): no spurious "not assigned on every path"."""
    body, first = BAD_CONDITIONS[case]
    src = ("circuit C {\n token A(v: u8);\n token B(v: u8) halt;\n start A(v: 0);\n "
           + body + "\n}\n")
    diags = _errors(src).split("\n")
    errors = [line for line in diags if ": error: " in line]
    assert errors == [first]


# ---- character literals --------------------------------------------------------------------

CHARS = """circuit Bytes {
    token In(c: u8);
    token Out(kind: u8) halt;
    start In(c: 43);
    match tok.In.c {
        '+' | '-' => { next = Out(kind: 1); }
        '0' => { next = Out(kind: '\\x30'); }
        '\\n' => { next = Out(kind: '\\\\'); }
        _ => { next = Out(kind: tok.In.c == 'a' ? 'A' : '\\''); }
    }
}
"""


@pytest.mark.parametrize("c, kind", [(ord("+"), 1), (ord("-"), 1), (ord("0"), 0x30),
                                     (10, ord("\\")), (ord("a"), ord("A")), (ord("z"), 39)])
def test_character_literals(c, kind):
    circuit = load_source(CHARS, "bytes.hdl")
    out = Simulator(circuit, backend="python").run(Token(0, (c,)), 1)
    assert out[-1] == Token(1, (kind,))


def test_character_literal_must_be_ascii():
    src = "circuit C {\n token A(v: u8) halt;\n next = A(v: 'é');\n}\n"
    assert _errors(src) == ("t.hdl:3:14: error: character literal 'é' is not ASCII: write a "
                            "byte as '\\xHH'\n next = A(v: 'é');\n             ^")


def test_character_literal_takes_its_width_from_context():
    src = "circuit C {\n token A(v: u4) halt;\n next = A(v: 'a');\n}\n"
    assert _errors(src).startswith("t.hdl:3:14: error: constant 97 does not fit")
