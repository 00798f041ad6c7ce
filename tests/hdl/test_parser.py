"""The parser: grammar (LALR, strict), the typed AST it builds, literals, precedence,
locations, and syntax errors in words."""
from __future__ import annotations

from pathlib import Path

import pytest

from hdl import ast
from hdl.diagnostics import CompileError
from hdl.ir import Loc
from hdl.parser import describe_expected, lark_parser, parse, parse_int, parse_sized

ROOT = Path(__file__).parents[2]


def expr_of(text: str) -> ast.Expr:
    """The expression ``text`` as parsed in ``let x = text;``."""
    f = parse(f"circuit C {{ let x = {text}; }}", "e.hdl")
    return f.items[0].body.stmts[0].value


def shape(e) -> str:
    """A fully parenthesised rendering, to check precedence and associativity."""
    if isinstance(e, ast.Binary):
        return f"({shape(e.left)} {e.op} {shape(e.right)})"
    if isinstance(e, ast.Unary):
        return f"({e.op}{shape(e.operand)})"
    if isinstance(e, ast.Ternary):
        return f"({shape(e.cond)} ? {shape(e.if_true)} : {shape(e.if_false)})"
    if isinstance(e, ast.Name):
        return e.name
    if isinstance(e, ast.Number):
        return str(e.value)
    if isinstance(e, ast.Index):
        return f"{shape(e.base)}[{shape(e.index)}]"
    if isinstance(e, ast.Member):
        return f"{shape(e.base)}.{e.name}"
    if isinstance(e, ast.Call):
        return f"{e.name}(...)"
    raise TypeError(e)


def test_grammar_builds_in_strict_lalr_mode():
    p = lark_parser()
    assert p.options.parser == "lalr" and p.options.strict


@pytest.mark.parametrize("text, want", [
    ("a + b * c", "(a + (b * c))"),
    ("a - b - c", "((a - b) - c)"),
    ("a | b ^ c & d", "(a | (b ^ (c & d)))"),
    ("a << 1 + 2", "(a << (1 + 2))"),
    ("a == b && c < d || e", "(((a == b) && (c < d)) || e)"),
    ("a & b == c", "((a & b) == c)"),
    ("c ? a : d ? e : f", "(c ? a : (d ? e : f))"),
    ("-a * ~b", "((-a) * (~b))"),
    ("!x[3] + y.z", "((!x[3]) + y.z)"),
    ("a <= b", "(a <= b)"),
    ("f(1).p + 2", "(f(...).p + 2)"),
])
def test_precedence(text, want):
    assert shape(expr_of(text)) == want


def test_comparisons_do_not_chain():
    with pytest.raises(CompileError):
        parse("circuit C { let x = a < b < c; }")


@pytest.mark.parametrize("text, value", [
    ("123", 123), ("1_000", 1000), ("0xFF", 255), ("0x_ff_ff", 0xFFFF), ("0b1010", 10),
    ("0o17", 15), ("007", 7),
])
def test_unsized_literals(text, value):
    assert parse_int(text) == value
    n = expr_of(text)
    assert isinstance(n, ast.Number) and n.value == value and n.width is None


@pytest.mark.parametrize("text, width, value", [
    ("8'd255", 8, 255), ("8'hFF", 8, 255), ("4'b1010", 4, 10), ("16'h_12_34", 16, 0x1234),
])
def test_sized_literals(text, width, value):
    assert parse_sized(text) == (width, value)
    n = expr_of(text)
    assert isinstance(n, ast.Number) and (n.width, n.value) == (width, value)


def test_statements_and_locations():
    src = (
        "// comment\n"
        "/* block\n comment */ circuit C {\n"
        "    token A(v: u8, w: s[4]) halt;\n"
        "    ram m: u8[16];\n"
        "    rom r: u[12][4] = \"img.hex\";\n"
        "    m[1] <= 2;\n"
        "    x[7:4] = y;\n"
        "    for i in 0..4 { inst u = add #(W: 8) (a: i, b: 1); }\n"
        "    match tok { A | B => {} _ => {}, }\n"
        "}\n")
    f = parse(src, "s.hdl")
    c = f.items[0]
    assert isinstance(c, ast.CircuitDecl) and c.loc == Loc("s.hdl", 3, 13)
    tok, ram, rom, wr, asg, loop, m = c.body.stmts
    assert tok == ast.TokenDecl(Loc("s.hdl", 4, 5), "A", (
        ast.FieldDecl(Loc("s.hdl", 4, 13), "v", ast.TypeRef(Loc("s.hdl", 4, 16), "u8")),
        ast.FieldDecl(Loc("s.hdl", 4, 20), "w", ast.TypeRef(
            Loc("s.hdl", 4, 23), "s", ast.Number(Loc("s.hdl", 4, 25), 4, None, "4")))), True)
    assert (ram.kind, ram.name, ram.elem.name, ram.image) == ("ram", "m", "u8", None)
    assert (rom.kind, rom.elem.name, rom.image) == ("rom", "u", "img.hex")
    assert rom.elem.width.value == 12 and rom.depth.value == 4
    assert isinstance(wr, ast.MemWrite) and wr.memory == "m"
    assert isinstance(asg, ast.Assign) and asg.hi.value == 7 and asg.lo.value == 4
    assert isinstance(loop, ast.For) and loop.var == "i"
    inst = loop.body.stmts[0]
    assert isinstance(inst, ast.Inst) and inst.module == "add" and inst.params[0].name == "W"
    assert [p.kind for arm in m.arms for p in arm.patterns] == ["name", "name", "wild"]


def test_operator_location_is_the_operator():
    e = expr_of("aa +  bb")
    assert isinstance(e, ast.Binary) and e.loc == Loc("e.hdl", 1, 24)


def test_every_shipped_source_parses():
    files = [*ROOT.glob("examples/*/*.hdl"), *ROOT.glob("stdlib/*.hdl"),
             *(Path(__file__).parent / "sources").glob("*.hdl")]
    assert files
    for p in files:
        parse(p.read_text(), str(p))


@pytest.mark.parametrize("src, message", [
    ("circuit C { let x = ; }", "unexpected ';': expected an expression after '='"),
    ("circuit C { let x = a let y = b; }", "unexpected 'let': expected ';' after 'a'"),
    ("circuit C { match x { 1 => {} 2 {} } }", "unexpected '{': expected '=>' after '2'"),
    ("module m(in a u8) {}", "unexpected 'u8': expected ':' after 'a'"),
    ("let x", "unexpected 'let': expected one of: a declaration (import, const, enum, module "
              "or circuit), end of file"),
    ("circuit C { token A(x: u8) }", "unexpected '}': expected one of: ';', 'halt' after ')'"),
    ("circuit C { let x = 0x_; }", "malformed number '0x_'"),
    ("circuit C { if a = b { } }", "unexpected '=': expected '{' after 'a' (to compare, write '==')"),
])
def test_syntax_error_messages(src, message):
    with pytest.raises(CompileError) as info:
        parse(src, "b.hdl")
    (d,) = info.value.diagnostics
    assert d.message == message


def test_describe_expected_groups_terminals():
    assert describe_expected({"SEMICOLON", "RBRACE"}) == "one of: ';', '}'"
    assert describe_expected({"NAME", "INT", "SIZED_INT", "CHAR", "LPAR", "MINUS", "TILDE", "BANG",
                              "LBRACE"}) == "an expression"
