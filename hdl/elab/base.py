"""Shared state and helpers of the elaborator (see :mod:`hdl.elab.elaborator`).

Takes: a diagnostics collector. Gives: :class:`ElabBase`, the state every part of the
elaborator shares (the IR builder, the current path's :class:`State`, the name prefix of the
module instance being elaborated, the circuit's token kinds), with node helpers and
declarations; :class:`Abort`; limits and small compile-time helpers.
"""
from __future__ import annotations

from typing import Any

from hdl.diagnostics import Collector
from hdl.elab.builder import Builder
from hdl.elab.files import FileCtx
from hdl.elab.values import KIND_ENUM, POISON, KindSym, NextSym, Scope, Sig, State, TokSym, Type
from hdl.ir import Loc, Op

MAX_UNROLL = 1 << 16
MAX_TOTAL_UNROLL = 1 << 18   # loop iterations in one elaboration (nested loops multiply)
MAX_CONST_BITS = 1 << 16   # compile-time integers are arbitrary precision, within reason
MAX_DEPTH = 64
MAX_MEM_DEPTH = 1 << 24     # words per memory: the simulators hold every word in memory
U1 = Type(1)
BUILTINS = ("zext", "sext", "ext", "trunc", "signed", "unsigned", "clog2", "min", "max")
ARITH = {"+": Op.ADD, "-": Op.SUB, "*": Op.MUL, "&": Op.AND, "|": Op.OR, "^": Op.XOR}


class Abort(Exception):
    """Stops elaborating one construct after an error that makes going on pointless."""


def article(n: int) -> str:
    """'a 16-bit' / 'an 8-bit': the article for a number said aloud."""
    t = str(n)
    return "an" if t.startswith("8") or t in ("11", "18") else "a"


def clog2(x: int) -> int:
    return 0 if x <= 1 else (x - 1).bit_length()


def const_binop(op: str, a: int, b: int) -> int | None:
    """Compile-time integer arithmetic (arbitrary precision); None for division by zero."""
    if op in ("/", "%") and b == 0:
        return None
    return {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
        "/": lambda: a // b, "%": lambda: a % b,
        "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b,
        "<<": lambda: a << b if b >= 0 else None, ">>": lambda: a >> b if b >= 0 else None,
        "==": lambda: int(a == b), "!=": lambda: int(a != b), "<": lambda: int(a < b),
        "<=": lambda: int(a <= b), ">": lambda: int(a > b), ">=": lambda: int(a >= b),
        "&&": lambda: int(bool(a) and bool(b)), "||": lambda: int(bool(a) or bool(b)),
    }[op]()


class ElabBase:
    """What the expression, statement and top-level parts of the elaborator share."""

    def __init__(self, diags: Collector):
        self.diags = diags
        self.b = Builder()
        self.state = State()
        self.prefix = ""
        self.file: FileCtx | None = None
        self.in_circuit = False
        self.kinds: list[KindSym] = []
        self.depth = 0
        self.unrolled = 0   # loop iterations elaborated so far (MAX_TOTAL_UNROLL)
        self._anon = 0
        self.top_ports: list[tuple[str, str, int, bool]] = []

    def err(self, loc: Loc, msg: str, notes: list[tuple[Loc, str]] | None = None) -> Any:
        self.diags.error(loc, msg, notes)
        return POISON

    def node(self, op: Op, width: int, args: tuple[int, ...], loc: Loc, param: Any = None) -> int:
        return self.b.add(op, width, args, param, loc)

    def const_sig(self, value: int, t: Type, loc: Loc) -> Sig:
        return Sig(self.b.const(value, t.width, loc), t)

    def kind_type(self) -> Type:
        return Type(max(1, (len(self.kinds) - 1).bit_length()), False, KIND_ENUM)

    def declare(self, scope: Scope, name: str, sym: Any, loc: Loc) -> bool:
        if name in scope.syms:
            prev = scope.locs.get(name)
            self.err(loc, f"'{name}' is already declared in this block",
                     [(prev, "first declared here")] if prev else None)
            return False
        if name in ("tok", "next") and not isinstance(sym, (TokSym, NextSym)):
            self.err(loc, f"'{name}' is reserved")
            return False
        scope.syms[name] = sym
        scope.locs[name] = loc
        return True

    def poison(self, scope: Scope, name: str, loc: Loc) -> None:
        """Declare ``name`` after an error in its declaration, so its uses stay quiet."""
        if name not in scope.syms:
            scope.syms[name] = POISON
            scope.locs[name] = loc
