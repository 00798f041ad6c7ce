"""Parse deltachip source text into the typed AST.

Takes: source text and the file name to put in locations. Gives: an :class:`hdl.ast.SourceFile`,
or raises :class:`hdl.diagnostics.CompileError` with a located message in words that says
what was expected (``unexpected ';': expected an expression after '='``), the source line
and a caret.

The grammar is ``hdl/grammar.lark``, parsed by Lark's LALR parser in strict mode (no
shift/reduce conflicts, no terminal collisions); a :class:`lark.Transformer` with
``@v_args(meta=True)`` builds the AST.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError
from lark.lexer import PatternStr

from common.kinds import MemKind
from hdl import ast
from hdl.diagnostics import CompileError, Diagnostic, too_deep
from hdl.ir import Loc

GRAMMAR = Path(__file__).with_name("grammar.lark")


@functools.lru_cache(maxsize=1)
def lark_parser() -> Lark:
    """The (cached) Lark LALR parser for ``hdl/grammar.lark``."""
    # cache=True keeps the built tables in the temp folder, keyed by the grammar's hash
    return Lark(GRAMMAR.read_text(), parser="lalr", strict=True, propagate_positions=True,
                maybe_placeholders=True, cache=True)


# ---- syntax error messages ---------------------------------------------------------------

_DESCRIBE = {"NAME": "a name", "INT": "a number", "SIZED_INT": "a number", "STRING": "a string",
             "CHAR": "a character", "$END": "end of file"}
_EXPR_START = {"NAME", "INT", "SIZED_INT", "CHAR", "LPAR", "MINUS", "TILDE", "BANG", "LBRACE"}
_STMT_START = {"WIRE", "LET", "VAR", "IF", "MATCH", "FOR", "CONST", "INST", "TOKEN", "START",
               "ROM", "RAM", "NAME", "LBRACE"}
_ITEM_START = {"IMPORT", "CONST", "ENUM", "MODULE", "CIRCUIT"}
# tokens that may continue an expression: dropped from "expected" lists when anything else fits
_CONTINUE = {"OROR", "ANDAND", "EQ", "NE", "LT", "LE", "GT", "GE", "BAR", "CARET", "AMP", "SHL",
             "SHR", "PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "QUESTION", "LSQB", "DOT",
             "LPAR", "HASH"}


def _terminal_text(name: str) -> str:
    if name in _DESCRIBE:
        return _DESCRIBE[name]
    for t in lark_parser().terminals:
        if t.name == name and isinstance(t.pattern, PatternStr):
            return f"'{t.pattern.value}'"
    return name.lower()


def _token_text(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    return f"'{tok.value}'"


def describe_expected(expected: set[str]) -> str:
    """Words for a set of expected terminal names: 'an expression', "one of: ';', '}'"."""
    expected = set(expected)
    words: list[str] = []
    if _ITEM_START <= expected:
        expected -= _ITEM_START
        words.append("a declaration (import, const, enum, module or circuit)")
    if _STMT_START <= expected:
        expected -= _STMT_START
        words.append("a statement")
    if _EXPR_START <= expected:
        expected -= _EXPR_START
        words.append("an expression")
    rest = expected - _CONTINUE
    if words or rest:
        expected = rest
    words += sorted(_terminal_text(n) for n in expected)
    if len(words) == 1:
        return words[0]
    return "one of: " + ", ".join(words)


def _syntax_error(text: str, filename: str, exc: UnexpectedInput, prev: Token | None) -> Diagnostic:
    if isinstance(exc, UnexpectedCharacters):
        loc = Loc(filename, exc.line, exc.column)
        ch = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        return Diagnostic(loc, f"unexpected character {ch!r}")
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    if tok.type == "$END":
        lines = text.splitlines() or [""]
        loc = Loc(filename, len(lines), len(lines[-1]) + 1)
    else:
        loc = Loc(filename, tok.line, tok.column)
    expected = set(exc.expected)
    if getattr(exc, "interactive_parser", None) is not None:
        # LALR merges lookaheads across contexts; ask the parser what really fits here
        try:
            expected = set(exc.interactive_parser.accepts()) or expected
        except Exception:  # pragma: no cover - accepts() is best effort
            pass
    msg = f"unexpected {_token_text(tok)}: expected {describe_expected(expected)}"
    if prev is not None:
        msg += f" after '{prev.value}'"
    if tok.value == "=" and "EQ" in expected:
        msg += " (to compare, write '==')"
    return Diagnostic(loc, msg)


# ---- the AST builder ---------------------------------------------------------------------

class _BadNumber(Exception):
    def __init__(self, tok: Token):
        self.tok = tok


class _BadSyntax(Exception):
    """A construct the grammar accepts but the language does not (reported as a syntax error)."""

    def __init__(self, loc: Loc, message: str):
        self.loc, self.message = loc, message


def parse_int(text: str) -> int:
    """Value of an unsized literal: ``123``, ``0xFF``, ``0b1010``, ``0o17``, ``1_000``."""
    t = text.replace("_", "")
    if t[:2].lower() in ("0x", "0b", "0o"):
        return int(t[2:], {"x": 16, "b": 2, "o": 8}[t[1].lower()])
    return int(t, 10)


_CHAR_ESCAPES = {"n": 10, "r": 13, "t": 9, "0": 0, "\\": 92, "'": 39}


def parse_char(text: str) -> int:
    """Value of a character literal: ``'+'`` is 43, ``'\\n'`` 10, ``'\\x7f'`` 127 (the
    escapes ``\\n \\r \\t \\0 \\\\ \\'`` and ``\\xHH``). ValueError for a character
    outside ASCII (its byte value would depend on the encoding: write ``'\\xHH'``)."""
    body = text[1:-1]
    if body.startswith("\\x"):
        return int(body[2:], 16)
    if body.startswith("\\"):
        return _CHAR_ESCAPES[body[1]]
    if ord(body) > 127:
        raise ValueError("not ASCII")
    return ord(body)


def parse_sized(text: str) -> tuple[int, int]:
    """(width, value) of a sized literal such as ``8'hFF``."""
    w, rest = text.split("'", 1)
    base = {"d": 10, "h": 16, "b": 2}[rest[0].lower()]
    return int(w), int(rest[1:].replace("_", ""), base)


@v_args(meta=True)
class _ToAst(Transformer):
    def __init__(self, filename: str):
        super().__init__()
        self.file = filename

    def _loc(self, meta: Any) -> Loc:
        if getattr(meta, "empty", True):
            return Loc(self.file, 0, 0)
        return Loc(self.file, meta.line, meta.column)

    def _tloc(self, tok: Token) -> Loc:
        return Loc(self.file, tok.line, tok.column)

    # -- top level
    def start(self, meta, items):
        return tuple(items)

    def import_decl(self, meta, c):
        (t,) = c
        if t.type == "STRING":
            return ast.Import(self._loc(meta), t.value[1:-1], True)
        return ast.Import(self._loc(meta), t.value, False)

    def const_decl(self, meta, c):
        name, value = c
        return ast.Const(self._loc(meta), str(name), value)

    def enum_decl(self, meta, c):
        name, *members = c
        return ast.EnumDecl(self._loc(meta), str(name), tuple(m for m in members if m is not None))

    def enum_member(self, meta, c):
        name, value = c
        return ast.EnumMember(self._loc(meta), str(name), value)

    def module_decl(self, meta, c):
        name, params, *ports, body = c
        return ast.ModuleDecl(self._loc(meta), str(name), tuple(params or ()),
                              tuple(p for p in ports if p is not None), body)

    def param_decls(self, meta, c):
        return tuple(p for p in c if p is not None)

    def param_decl(self, meta, c):
        name, typ, default = c
        return ast.ParamDecl(self._loc(meta), str(name), str(typ), default)

    def port(self, meta, c):
        direction, name, typ = c
        return ast.Port(self._loc(meta), str(direction), str(name), typ)

    def circuit_decl(self, meta, c):
        name, body = c
        return ast.CircuitDecl(self._loc(meta), str(name), body)

    def type(self, meta, c):
        name, width = c
        return ast.TypeRef(self._loc(meta), str(name), width)

    # -- statements
    def block(self, meta, c):
        return ast.Block(self._loc(meta), tuple(c))

    def wire_stmt(self, meta, c):
        name, typ, value = c
        return ast.Wire(self._loc(meta), str(name), typ, value)

    def let_stmt(self, meta, c):
        name, typ, value = c
        return ast.Let(self._loc(meta), str(name), typ, value)

    def var_stmt(self, meta, c):
        name, typ, value = c
        return ast.Var(self._loc(meta), str(name), typ, value)

    def lvalue(self, meta, c):
        return (c[0], None, None)

    def lvalue_bit(self, meta, c):
        return (c[0], c[1], None)

    def lvalue_slice(self, meta, c):
        return (c[0], c[1], c[2])

    def assign_stmt(self, meta, c):
        (name, hi, lo), value = c
        return ast.Assign(self._loc(meta), str(name), self._tloc(name), value, hi, lo)

    def mem_write_stmt(self, meta, c):
        name, addr, _le, data = c
        return ast.MemWrite(self._loc(meta), str(name), addr, data)

    def if_stmt(self, meta, c):
        cond, then, orelse = c
        return ast.If(self._loc(meta), cond, then, orelse)

    def match_stmt(self, meta, c):
        subject, *arms = c
        return ast.Match(self._loc(meta), subject, tuple(arms))

    def match_arm(self, meta, c):
        *pats, body = c
        return ast.MatchArm(self._loc(meta), tuple(pats), body)

    def pat_name(self, meta, c):
        (t,) = c
        if t.value == "_":
            return ast.Pattern(self._loc(meta), "wild")
        return ast.Pattern(self._loc(meta), "name", ast.Name(self._tloc(t), str(t)))

    def pat_member(self, meta, c):
        base, name = c
        e = ast.Member(self._loc(meta), ast.Name(self._tloc(base), str(base)), str(name),
                       self._tloc(name))
        return ast.Pattern(self._loc(meta), "member", e)

    def pat_int(self, meta, c):
        return ast.Pattern(self._loc(meta), "expr", self.number(meta, c))

    def pat_neg(self, meta, c):
        minus, num = c
        e = ast.Unary(self._tloc(minus), "-", self.number(meta, [num]))
        return ast.Pattern(self._loc(meta), "expr", e)

    def pat_expr(self, meta, c):
        return ast.Pattern(self._loc(meta), "expr", c[0])

    def for_stmt(self, meta, c):
        var, _in, start, _dots, stop, body = c
        return ast.For(self._loc(meta), str(var), start, stop, body)

    def inst_stmt(self, meta, c):
        name, module, params, args = c
        return ast.Inst(self._loc(meta), str(name), str(module), self._tloc(module),
                        tuple(params or ()), tuple(args or ()))

    def token_stmt(self, meta, c):
        name, *fields, halt = c
        return ast.TokenDecl(self._loc(meta), str(name), tuple(f for f in fields if f is not None),
                             halt is not None)

    def field_decl(self, meta, c):
        name, typ, bound = c
        return ast.FieldDecl(self._loc(meta), str(name), typ, bound)

    def start_stmt(self, meta, c):
        kind, args = c
        return ast.StartDecl(self._loc(meta), str(kind), tuple(args or ()))

    def mem_decl(self, meta, c):
        kind, name, elem, *dims, image, modifier = c
        transparent = modifier if modifier is not None and modifier.type == "TRANSPARENT" else None
        table = modifier if modifier is not None and modifier.type == "TABLE" else None
        elem_loc = self._tloc(elem)
        if len(dims) > 2:
            raise _BadSyntax(self._loc(meta), "a memory has one dimension: name: u8[DEPTH] or "
                                              "name: u[W][DEPTH]")
        typ = ast.TypeRef(elem_loc, str(elem), dims[0] if len(dims) == 2 else None)
        image_text = image.value[1:-1] if image is not None else None
        return ast.MemDecl(self._loc(meta), MemKind(str(kind)), str(name), typ, dims[-1], image_text,
                           self._tloc(image) if image is not None else None,
                           self._tloc(transparent) if transparent is not None else None,
                           self._tloc(table) if table is not None else None)

    # -- expressions
    def ternary(self, meta, c):
        cond, q, a, b = c
        return ast.Ternary(self._tloc(q), cond, a, b)

    def binop(self, meta, c):
        left, op, right = c
        return ast.Binary(self._tloc(op), op.value, left, right)

    def unop(self, meta, c):
        op, operand = c
        return ast.Unary(self._tloc(op), op.value, operand)

    def index(self, meta, c):
        base, idx = c
        return ast.Index(self._loc(meta), base, idx)

    def slice(self, meta, c):
        base, hi, lo = c
        return ast.Slice(self._loc(meta), base, hi, lo)

    def member(self, meta, c):
        base, name = c
        return ast.Member(self._loc(meta), base, str(name), self._tloc(name))

    def name(self, meta, c):
        return ast.Name(self._loc(meta), str(c[0]))

    def number(self, meta, c):
        (t,) = c
        try:
            if t.type == "SIZED_INT":
                w, v = parse_sized(t.value)
                return ast.Number(self._tloc(t), v, w, t.value)
            if t.type == "CHAR":
                return ast.Number(self._tloc(t), parse_char(t.value), None, t.value)
            return ast.Number(self._tloc(t), parse_int(t.value), None, t.value)
        except ValueError:
            raise _BadNumber(t)

    def concat(self, meta, c):
        return ast.Concat(self._loc(meta), tuple(c))

    def replicate(self, meta, c):
        count, value = c
        return ast.Replicate(self._loc(meta), count, value)

    def call(self, meta, c):
        name, params, args = c
        return ast.Call(self._loc(meta), str(name), tuple(params or ()), tuple(args or ()),
                        params is not None)

    def param_args(self, meta, c):
        return tuple(a for a in c if a is not None)

    def call_args(self, meta, c):
        return tuple(a for a in c if a is not None)

    def named_arg(self, meta, c):
        name, value = c
        return ast.NamedArg(self._loc(meta), str(name), value)


def _token_before(text: str, exc: UnexpectedInput) -> Token | None:
    """The last token that ends before the error (for "after 'x'" in messages)."""
    if isinstance(exc, UnexpectedToken) and exc.token.type == "$END":
        stop = len(text)
    else:
        stop = exc.pos_in_stream if exc.pos_in_stream is not None else len(text)
    prev = None
    try:
        for tok in lark_parser().lex(text[:stop]):
            prev = tok
    except UnexpectedInput:
        pass
    return prev


_SCAN = re.compile(r'//[^\n]*|"[^"\n]*"|' r"'(?:[^'\\\n]|\\[^\n]|\\x..)'|/\*.*?\*/|(/\*)",
                   re.DOTALL)


def _unterminated_comment(text: str, filename: str) -> Diagnostic | None:
    """The error for a ``/*`` that no ``*/`` closes (outside comments and strings), or None.
    The lexer would report it as an unexpected '/' somewhere: the cause is the comment."""
    for m in _SCAN.finditer(text):
        if m.group(1):
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            return Diagnostic(Loc(filename, line, col),
                              "unterminated comment: this '/*' has no closing '*/'")
    return None


#: the deepest syntax tree a source may have: nested parentheses, blocks and `if`s, and
#: chained operators (a flat sum of N terms is N levels deep) all count
MAX_NESTING = 20_000


def _too_deep_at(tree: Tree, filename: str) -> Diagnostic | None:
    """The error for a syntax tree deeper than :data:`MAX_NESTING`, located at the node
    where it crosses the limit (found without recursion), or None."""
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, Tree):
            continue
        if depth > MAX_NESTING:
            meta = node.meta
            loc = Loc(filename, getattr(meta, "line", 0), getattr(meta, "column", 0))
            return Diagnostic(loc, f"the source nests expressions or blocks more than "
                                   f"{MAX_NESTING:,} levels deep here (parentheses, blocks and "
                                   "chained operators count): split it with `let`")
        stack.extend((child, depth + 1) for child in node.children)
    return None


def parse(text: str, filename: str = "<string>") -> ast.SourceFile:
    """Parse one file's text. Raises CompileError (with the source) on a syntax error.
    Call it on a deep stack (:func:`common.deep.call_deep`) for sources nested deeper than a
    few hundred levels; it refuses one deeper than :data:`MAX_NESTING` with its location."""
    try:
        tree = lark_parser().parse(text)
    except UnexpectedInput as exc:
        diag = _syntax_error(text, filename, exc, _token_before(text, exc))
        unclosed = _unterminated_comment(text, filename)
        if unclosed is not None and (unclosed.loc.line, unclosed.loc.col) <= (diag.loc.line,
                                                                             diag.loc.col):
            diag = unclosed
        raise CompileError([diag], {filename: text}) from None
    deep = _too_deep_at(tree, filename)
    if deep is not None:
        raise CompileError([deep], {filename: text})
    try:
        items = _ToAst(filename).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, _BadNumber):
            t = exc.orig_exc.tok
            what = (f"character literal {t.value} is not ASCII: write a byte as '\\xHH'"
                    if t.type == "CHAR" else f"malformed number '{t.value}'")
            diag = Diagnostic(Loc(filename, t.line, t.column), what)
            raise CompileError([diag], {filename: text}) from None
        if isinstance(exc.orig_exc, _BadSyntax):
            diag = Diagnostic(exc.orig_exc.loc, exc.orig_exc.message)
            raise CompileError([diag], {filename: text}) from None
        if isinstance(exc.orig_exc, RecursionError):
            raise too_deep(filename) from None
        raise
    return ast.SourceFile(filename, text, items)
