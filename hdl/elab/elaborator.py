"""Elaboration: typed AST of a circuit (or module) -> flat netlist IR.

Takes: a :class:`hdl.elab.files.FileCtx` (parsed, imports resolved) and the name of a
``circuit`` or ``module``. Gives: an :class:`hdl.ir.Circuit` whose nodes are in topological
order and pass :meth:`hdl.ir.Circuit.check`, or (through the collector) every design-rule
error found, each located.

How it works: statements run in order along the current *path*. A :class:`State` records
what the path has assigned (vars, wire drivers, the next token, memory write ports); ``if``
and ``match`` run every arm from a copy of the state and merge the copies with multiplexers
(:meth:`Elaborator._merge`). Wires and outputs are placeholders (``ALIAS`` nodes) so they can
be read before they are driven; module instances are elaborated inline with a name prefix
(``u1.sum``). Constants fold and identical nodes are shared as they are built
(:class:`hdl.elab.builder.Builder`).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hdl import ast
from hdl.diagnostics import Collector, suggest
from hdl.elab.builder import Builder
from hdl.elab.files import FileCtx
from hdl.elab.values import (KIND_ENUM, POISON, Assigned, CInt, CircuitSym, ConstSym, EnumSym,
                             InstSym, KindSym, MemSym, ModuleSym, NextSym, PendingWrite, Scope,
                             Sig, SigSym, State, TokSym, Type, Val, VarSym, WireSym)
from hdl.ir import MAX_WIDTH, Circuit, Field, Loc, Memory, Op, Token, TokenKind

MAX_UNROLL = 1 << 16
MAX_DEPTH = 64
U1 = Type(1)
_BUILTINS = ("zext", "sext", "ext", "trunc", "signed", "unsigned", "clog2", "min", "max")
_CMP = {"==", "!=", "<", "<=", ">", ">="}
_ARITH = {"+": Op.ADD, "-": Op.SUB, "*": Op.MUL, "&": Op.AND, "|": Op.OR, "^": Op.XOR}


class _Abort(Exception):
    """Stops elaborating one construct after an error that makes going on pointless."""


def _clog2(x: int) -> int:
    return 0 if x <= 1 else (x - 1).bit_length()


def _const_binop(op: str, a: int, b: int) -> int | None:
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


class Elaborator:
    """Elaborates one top (circuit or module) into ``self.circuit``; errors go to ``diags``."""

    def __init__(self, diags: Collector):
        self.diags = diags
        self.b = Builder()
        self.state = State()
        self.prefix = ""
        self.file: FileCtx | None = None
        self.in_circuit = False
        self.kinds: list[KindSym] = []
        self.depth = 0
        self._anon = 0
        self.top_ports: list[tuple[str, str, int, bool]] = []

    # ==== errors ============================================================================
    def err(self, loc: Loc, msg: str, notes: list[tuple[Loc, str]] | None = None) -> Any:
        self.diags.error(loc, msg, notes)
        return POISON

    # ==== file globals ======================================================================
    def build_globals(self, f: FileCtx) -> None:
        """Fill ``f.scope``: imported names first, then the file's own declarations."""
        if f.globals_done:
            return
        f.globals_done = True
        for sub in f.imports:
            self.build_globals(sub)
            for name in sub.scope.locs:          # the imported file's own declarations
                f.scope.syms.setdefault(name, sub.scope.syms[name])
        own: dict[str, Loc] = {}

        def declare(name: str, sym: Any, loc: Loc) -> None:
            if name in own:
                self.err(loc, f"'{name}' is already declared", [(own[name], "first declared here")])
                return
            own[name] = loc
            f.scope.syms[name] = sym
            f.scope.locs[name] = loc

        for item in f.source.items:
            if isinstance(item, ast.ModuleDecl):
                declare(item.name, ModuleSym(item, f), item.loc)
            elif isinstance(item, ast.CircuitDecl):
                declare(item.name, CircuitSym(item, f), item.loc)
        saved = self.file
        self.file = f
        for item in f.source.items:
            if isinstance(item, ast.Const):
                v = self.const_eval(item.value, f.scope)
                declare(item.name, ConstSym(v if v is not None else 0, item.loc), item.loc)
            elif isinstance(item, ast.EnumDecl):
                declare(item.name, self.enum_decl(item, f.scope), item.loc)
        self.file = saved

    def enum_decl(self, e: ast.EnumDecl, scope: Scope) -> EnumSym:
        members: dict[str, int] = {}
        locs: dict[str, Loc] = {}
        nxt = 0
        for m in e.members:
            v = nxt
            if m.value is not None:
                cv = self.const_eval(m.value, scope)
                v = cv if cv is not None else nxt
            if v < 0:
                self.err(m.loc, f"enum member {e.name}.{m.name} has a negative value ({v})")
                v = 0
            if m.name in members:
                self.err(m.loc, f"enum member '{m.name}' is declared twice",
                         [(locs[m.name], "first declared here")])
            members[m.name] = v
            locs[m.name] = m.loc
            nxt = v + 1
        width = max(1, max(members.values(), default=0).bit_length())
        if width > MAX_WIDTH:
            self.err(e.loc, f"width {width} of enum {e.name} is outside 1..{MAX_WIDTH}")
            width = MAX_WIDTH
        return EnumSym(e.name, members, Type(width, False, e.name), e.loc)

    # ==== compile-time evaluation ===========================================================
    def const_eval(self, e: ast.Expr, scope: Scope, what: str = "value") -> int | None:
        """A compile-time integer, or None (error reported)."""
        v = self.expr(e, scope)
        if isinstance(v, CInt):
            return v.value
        if v is POISON:
            return None
        assert isinstance(v, Sig)
        c = self.b.const_value(v.node)
        if c is not None and not v.type.enum:
            return c - (1 << v.type.width) if v.type.signed and c >> (v.type.width - 1) else c
        self.err(e.loc, f"this {what} must be a compile-time constant")
        return None

    def width_eval(self, e: ast.Expr, scope: Scope, loc: Loc | None = None) -> int | None:
        w = self.const_eval(e, scope, "width")
        if w is None:
            return None
        if not 1 <= w <= MAX_WIDTH:
            self.err(loc or e.loc, f"width {w} is outside 1..{MAX_WIDTH}")
            return None
        return w

    def type_eval(self, t: ast.TypeRef, scope: Scope) -> Type | None:
        name = t.name
        if t.width is not None:
            if name not in ("u", "s"):
                return self.err(t.loc, f"unknown type '{name}[...]': write u[W] or s[W]") and None
            w = self.width_eval(t.width, scope, t.loc)
            return Type(w, name == "s") if w is not None else None
        if name == "bool":
            return U1
        if len(name) > 1 and name[0] in "us" and name[1:].isdigit():
            w = int(name[1:])
            if not 1 <= w <= MAX_WIDTH:
                self.err(t.loc, f"width {w} is outside 1..{MAX_WIDTH}")
                return None
            return Type(w, name[0] == "s")
        sym = scope.lookup(name)
        if isinstance(sym, EnumSym):
            return sym.type
        cands = [n for n in scope.names() if isinstance(scope.lookup(n), EnumSym)]
        cands += ["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "bool"]
        self.err(t.loc, f"unknown type '{name}'{suggest(name, cands)}")
        return None

    # ==== nodes =============================================================================
    def node(self, op: Op, width: int, args: tuple[int, ...], loc: Loc, param: Any = None) -> int:
        return self.b.add(op, width, args, param, loc)

    def const_sig(self, value: int, t: Type, loc: Loc) -> Sig:
        return Sig(self.b.const(value, t.width, loc), t)

    def to_type(self, v: Val, t: Type, loc: Loc, what: str) -> Sig | None:
        """``v`` as a signal of type ``t`` (a constant is range-checked and converted);
        errors name ``what`` (e.g. "'x'", "field 'value' of Count")."""
        if v is POISON:
            return None
        if isinstance(v, CInt):
            if t.enum:
                self.err(loc, f"cannot use the number {v.value} as {t}")
                return None
            if not t.fits(v.value):
                self.err(loc, f"constant {v.value} does not fit {what}: {t} holds {t.range_text()}")
                return None
            return self.const_sig(v.value, t, loc)
        assert isinstance(v, Sig)
        if v.type.enum != t.enum:
            self.err(loc, f"type mismatch: cannot assign a value of type {v.type} to {what} ({t})")
            return None
        if v.type.width != t.width:
            self.err(loc, f"width mismatch: cannot assign a {v.type.width}-bit value to {what} "
                          f"({t.width} bits)")
            return None
        if v.type.signed != t.signed:
            self.err(loc, f"signed/unsigned mix: cannot assign a {v.type} value to {what} ({t}); "
                          f"convert with {'signed' if t.signed else 'unsigned'}()")
            return None
        return v

    # ==== expressions =======================================================================
    def expr(self, e: ast.Expr, scope: Scope, hint: Type | None = None) -> Val:
        try:
            return self._expr(e, scope, hint)
        except _Abort:
            return POISON

    def _expr(self, e: ast.Expr, scope: Scope, hint: Type | None) -> Val:
        if isinstance(e, ast.Number):
            if e.width is None:
                return CInt(e.value)
            if not 1 <= e.width <= MAX_WIDTH:
                return self.err(e.loc, f"width {e.width} is outside 1..{MAX_WIDTH}")
            if e.value >= 1 << e.width:
                return self.err(e.loc, f"constant {e.text} does not fit its {e.width} bits")
            return self.const_sig(e.value, Type(e.width), e.loc)
        if isinstance(e, ast.Name):
            return self.name_value(e, scope)
        if isinstance(e, ast.Binary):
            return self.binary(e, scope, hint)
        if isinstance(e, ast.Unary):
            return self.unary(e, scope, hint)
        if isinstance(e, ast.Ternary):
            return self.ternary(e, scope, hint)
        if isinstance(e, ast.Index):
            return self.index(e, scope)
        if isinstance(e, ast.Slice):
            return self.slice(e, scope)
        if isinstance(e, ast.Member):
            return self.member(e, scope)
        if isinstance(e, ast.Concat):
            return self.concat(e, scope)
        if isinstance(e, ast.Replicate):
            return self.replicate(e, scope)
        if isinstance(e, ast.Call):
            return self.call(e, scope, hint)
        raise TypeError(e)  # pragma: no cover

    def name_value(self, e: ast.Name, scope: Scope) -> Val:
        sym = scope.lookup(e.name)
        if sym is None:
            return self.err(e.loc, f"unknown name '{e.name}'{suggest(e.name, scope.names())}")
        if sym is POISON:
            return POISON
        if isinstance(sym, ConstSym):
            return CInt(sym.value)
        if isinstance(sym, SigSym):
            return sym.sig
        if isinstance(sym, WireSym):
            return Sig(sym.alias, sym.type)
        if isinstance(sym, VarSym):
            a = self.state.vals.get(sym)
            if a is None:
                return self.err(e.loc, f"variable '{e.name}' is read before it has a value")
            if not a.complete:
                return self.err(e.loc, f"variable '{e.name}' has no value on every path here",
                                [(a.loc, "assigned here on some paths only")])
            return Sig(a.value, sym.type)
        if isinstance(sym, KindSym):
            return self.const_sig(sym.index, self.kind_type(), e.loc)
        if isinstance(sym, MemSym):
            return self.err(e.loc, f"memory '{e.name}' is read as {e.name}[address]")
        if isinstance(sym, TokSym):
            return self.err(e.loc, "read the current token as tok.kind or tok.Kind.field")
        if isinstance(sym, NextSym):
            return self.err(e.loc, "'next' can only be assigned, not read")
        if isinstance(sym, InstSym):
            return self.err(e.loc, f"'{e.name}' is an instance; read its outputs as "
                                   f"{e.name}.port")
        if isinstance(sym, EnumSym):
            return self.err(e.loc, f"'{e.name}' is an enum type; write a member as {e.name}.MEMBER")
        return self.err(e.loc, f"'{e.name}' is a {'module' if isinstance(sym, ModuleSym) else 'circuit'}, not a value")

    def kind_type(self) -> Type:
        return Type(max(1, (len(self.kinds) - 1).bit_length()), False, KIND_ENUM)

    def signal(self, v: Val, loc: Loc, hint: Type | None, why: str) -> Sig:
        """``v`` as a signal; an unsized constant takes ``hint``'s type, else an error."""
        if isinstance(v, Sig):
            return v
        if v is POISON:
            raise _Abort
        assert isinstance(v, CInt)
        if hint is not None and not hint.enum:
            s = self.to_type(v, hint, loc, "its context")
            if s is None:
                raise _Abort
            return s
        self.err(loc, f"cannot tell the width of the constant {v.value} {why}: give it one, "
                      f"e.g. {max(1, v.value.bit_length())}'d{v.value}" if v.value >= 0 else
                 f"cannot tell the width of the constant {v.value} {why}")
        raise _Abort

    def unify(self, op: str, a: Val, b: Val, loc: Loc, hint: Type | None) -> tuple[Sig, Sig]:
        """Two operands of one operator as signals of one type (or an error and _Abort)."""
        if a is POISON or b is POISON:
            raise _Abort
        if isinstance(a, CInt) and isinstance(b, CInt):
            a = self.signal(a, loc, hint, f"in '{op}'")
        if isinstance(a, CInt):
            assert isinstance(b, Sig)
            s = self.to_type(a, b.type, loc, f"the other operand of '{op}'")
            if s is None:
                raise _Abort
            return s, b
        if isinstance(b, CInt):
            assert isinstance(a, Sig)
            s = self.to_type(b, a.type, loc, f"the other operand of '{op}'")
            if s is None:
                raise _Abort
            return a, s
        assert isinstance(a, Sig) and isinstance(b, Sig)
        if a.type.enum != b.type.enum:
            self.err(loc, f"type mismatch in '{op}': left is {a.type}, right is {b.type}")
            raise _Abort
        if a.type.width != b.type.width:
            self.err(loc, f"width mismatch in '{op}': left operand is {a.type.width} bits, "
                          f"right operand is {b.type.width} bits")
            raise _Abort
        if a.type.signed != b.type.signed:
            self.err(loc, f"signed/unsigned mix in '{op}': left is {a.type}, right is {b.type}; "
                          f"convert one with signed() or unsigned()")
            raise _Abort
        return a, b

    def binary(self, e: ast.Binary, scope: Scope, hint: Type | None) -> Val:
        op = e.op
        sub_hint = hint if op in _ARITH else None
        a = self.expr(e.left, scope, sub_hint)
        if op in ("<<", ">>"):
            return self.shift(e, a, self.expr(e.right, scope), hint)
        b = self.expr(e.right, scope, sub_hint)
        if isinstance(a, CInt) and isinstance(b, CInt):
            r = _const_binop(op, a.value, b.value)
            if r is None:
                return self.err(e.loc, f"division by zero in '{op}'")
            return CInt(r)
        if op in ("/", "%"):
            return self.err(e.loc, f"'{op}' works on compile-time constants only")
        if op in ("&&", "||"):
            for v, side in ((a, e.left), (b, e.right)):
                if isinstance(v, Sig) and v.type != U1:
                    return self.err(e.loc, f"'{op}' needs u1 operands; the {('left' if side is e.left else 'right')} "
                                           f"operand is {v.type}")
            sa, sb = self.unify(op, a, b, e.loc, U1)
            return Sig(self.node(Op.AND if op == "&&" else Op.OR, 1, (sa.node, sb.node), e.loc), U1)
        sa, sb = self.unify(op, a, b, e.loc, hint)
        t = sa.type
        if op in _ARITH:
            if t.enum:
                return self.err(e.loc, f"'{op}' is not defined on {t}; convert with unsigned()")
            return Sig(self.node(_ARITH[op], t.width, (sa.node, sb.node), e.loc), Type(t.width, t.signed))
        if op in ("==", "!="):
            n = self.node(Op.EQ, 1, (sa.node, sb.node), e.loc)
            if op == "!=":
                n = self.node(Op.NOT, 1, (n,), e.loc)
            return Sig(n, U1)
        if op in ("<", "<=", ">", ">="):
            if t.enum:
                return self.err(e.loc, f"'{op}' is not defined on {t}; convert with unsigned()")
            lt = Op.SLT if t.signed else Op.ULT
            x, y = (sa.node, sb.node) if op in ("<", ">=") else (sb.node, sa.node)
            n = self.node(lt, 1, (x, y), e.loc)
            if op in ("<=", ">="):
                n = self.node(Op.NOT, 1, (n,), e.loc)
            return Sig(n, U1)
        raise AssertionError(op)  # pragma: no cover

    def shift(self, e: ast.Binary, a: Val, n: Val, hint: Type | None) -> Val:
        if a is POISON or n is POISON:
            return POISON
        if isinstance(a, CInt) and isinstance(n, CInt):
            r = _const_binop(e.op, a.value, n.value)
            return CInt(r) if r is not None else self.err(e.loc, f"negative shift amount {n.value}")
        sa = self.signal(a, e.loc, hint, f"shifted by '{e.op}'")
        if sa.type.enum:
            return self.err(e.loc, f"'{e.op}' is not defined on {sa.type}; convert with unsigned()")
        w = sa.type.width
        t = Type(w, sa.type.signed)
        if isinstance(n, CInt):
            k = n.value
            if k < 0:
                return self.err(e.loc, f"negative shift amount {k}")
            if e.op == "<<":
                if k >= w:
                    return self.const_sig(0, t, e.loc)
                if k == 0:
                    return Sig(sa.node, t)
                low = self.node(Op.SLICE, w - k, (sa.node,), e.loc, 0)
                return Sig(self.node(Op.CONCAT, w, (low, self.b.const(0, k, e.loc)), e.loc), t)
            if k == 0:
                return Sig(sa.node, t)
            kk = min(k, w)
            if t.signed:
                sign = self.node(Op.SLICE, 1, (sa.node,), e.loc, w - 1)
                fill = self.node(Op.MUX, kk, (sign, self.b.const(0, kk, e.loc),
                                              self.b.const(-1, kk, e.loc)), e.loc)
            else:
                fill = self.b.const(0, kk, e.loc)
            if kk >= w:
                return Sig(fill, t)
            high = self.node(Op.SLICE, w - kk, (sa.node,), e.loc, kk)
            return Sig(self.node(Op.CONCAT, w, (fill, high), e.loc), t)
        assert isinstance(n, Sig)
        if n.type.signed or n.type.enum:
            return self.err(e.loc, f"the shift amount must be unsigned, not {n.type}")
        op = Op.SHL if e.op == "<<" else (Op.ASHR if t.signed else Op.LSHR)
        return Sig(self.node(op, w, (sa.node, n.node), e.loc), t)

    def unary(self, e: ast.Unary, scope: Scope, hint: Type | None) -> Val:
        v = self.expr(e.operand, scope, hint)
        if v is POISON:
            return POISON
        if isinstance(v, CInt):
            return CInt({"-": -v.value, "~": ~v.value, "!": int(v.value == 0)}[e.op])
        assert isinstance(v, Sig)
        t = v.type
        if t.enum:
            return self.err(e.loc, f"'{e.op}' is not defined on {t}; convert with unsigned()")
        if e.op == "!":
            if t != U1:
                return self.err(e.loc, f"'!' needs a u1 operand, not {t}; use ~ for a bitwise not")
            return Sig(self.node(Op.NOT, 1, (v.node,), e.loc), U1)
        if e.op == "~":
            return Sig(self.node(Op.NOT, t.width, (v.node,), e.loc), t)
        zero = self.b.const(0, t.width, e.loc)
        return Sig(self.node(Op.SUB, t.width, (zero, v.node), e.loc), t)

    def cond(self, e: ast.Expr, scope: Scope, what: str) -> Val:
        c = self.expr(e, scope)
        if isinstance(c, CInt):
            if c.value not in (0, 1):
                return self.err(e.loc, f"{what} must be u1, not the constant {c.value}")
            return self.const_sig(c.value, U1, e.loc)
        if isinstance(c, Sig) and c.type != U1:
            return self.err(e.loc, f"{what} must be u1, not {c.type}")
        return c

    def ternary(self, e: ast.Ternary, scope: Scope, hint: Type | None) -> Val:
        c = self.cond(e.cond, scope, "the condition of '?:'")
        a = self.expr(e.if_true, scope, hint)
        b = self.expr(e.if_false, scope, hint)
        if c is POISON or a is POISON or b is POISON:
            return POISON
        assert isinstance(c, Sig)
        cv = self.b.const_value(c.node)
        if isinstance(a, CInt) and isinstance(b, CInt) and cv is not None:
            return a if cv else b
        sa, sb = self.unify("?:", a, b, e.loc, hint)
        return Sig(self.node(Op.MUX, sa.type.width, (c.node, sb.node, sa.node), e.loc), sa.type)

    def index(self, e: ast.Index, scope: Scope) -> Val:
        if isinstance(e.base, ast.Name) and isinstance(scope.lookup(e.base.name), MemSym):
            m: MemSym = scope.lookup(e.base.name)
            addr = self.address(e.index, scope, m)
            if addr is None:
                return POISON
            return Sig(self.node(Op.MEM_READ, m.memory.width, (addr,), e.loc, m.memory.name), m.type)
        base = self.expr(e.base, scope)
        i = self.const_eval(e.index, scope, "bit index")
        if base is POISON or i is None:
            return POISON
        sb = self.signal(base, e.loc, None, "before '[...]'")
        if not 0 <= i < sb.type.width:
            return self.err(e.index.loc, f"bit index {i} is out of range for a "
                                         f"{sb.type.width}-bit value")
        return Sig(self.node(Op.SLICE, 1, (sb.node,), e.loc, i), U1)

    def address(self, e: ast.Expr, scope: Scope, m: MemSym) -> int | None:
        a = self.expr(e, scope)
        if a is POISON:
            return None
        if isinstance(a, CInt):
            if a.value < 0:
                self.err(e.loc, f"negative address {a.value}")
                return None
            w = max(m.memory.addr_width, a.value.bit_length())
            return self.b.const(a.value, w, e.loc)
        assert isinstance(a, Sig)
        if a.type.signed or a.type.enum:
            self.err(e.loc, f"a memory address must be unsigned, not {a.type}")
            return None
        return a.node

    def slice(self, e: ast.Slice, scope: Scope) -> Val:
        base = self.expr(e.base, scope)
        hi = self.const_eval(e.hi, scope, "slice bound")
        lo = self.const_eval(e.lo, scope, "slice bound")
        if base is POISON or hi is None or lo is None:
            return POISON
        sb = self.signal(base, e.loc, None, "before '[hi:lo]'")
        w = sb.type.width
        if not (0 <= lo <= hi < w):
            return self.err(e.loc, f"slice [{hi}:{lo}] is out of range for a {w}-bit value")
        return Sig(self.node(Op.SLICE, hi - lo + 1, (sb.node,), e.loc, lo), Type(hi - lo + 1))

    def member(self, e: ast.Member, scope: Scope) -> Val:
        base = e.base
        if isinstance(base, ast.Name):
            sym = scope.lookup(base.name)
            if isinstance(sym, EnumSym):
                if e.name not in sym.members:
                    return self.err(e.name_loc, f"enum {sym.name} has no member '{e.name}'"
                                                f"{suggest(e.name, sym.members)}")
                return self.const_sig(sym.members[e.name], sym.type, e.loc)
            if isinstance(sym, InstSym):
                return self.port_of(sym.outputs, sym.name, e)
            if isinstance(sym, TokSym):
                if e.name == "kind":
                    return Sig(self.node(Op.TOKEN_KIND, self.kind_type().width, (), e.loc), self.kind_type())
                return self.err(e.loc, f"write tok.kind, or a field as tok.{e.name}.FIELD")
        if isinstance(base, ast.Member) and isinstance(base.base, ast.Name) and \
                isinstance(scope.lookup(base.base.name), TokSym):
            ks = self.kind_sym(base.name, base.name_loc, scope)
            if ks is None:
                return POISON
            names = [f.name for f in ks.kind.fields]
            if e.name not in names:
                return self.err(e.name_loc, f"token kind {ks.kind.name} has no field '{e.name}'"
                                            f"{suggest(e.name, names)}")
            fi = names.index(e.name)
            t = ks.field_types[fi]
            return Sig(self.node(Op.TOKEN_FIELD, t.width, (), e.loc, (ks.index, fi)), t)
        if isinstance(base, ast.Call):
            outs = self.call_module(base, scope, want_outputs=True)
            if outs is None:
                return POISON
            return self.port_of(outs, base.name, e)
        v = self.expr(base, scope)
        if v is POISON:
            return POISON
        return self.err(e.name_loc, f"this value has no member '{e.name}'")

    def port_of(self, outputs: dict[str, Sig], who: str, e: ast.Member) -> Val:
        if e.name not in outputs:
            return self.err(e.name_loc, f"'{who}' has no output '{e.name}'{suggest(e.name, outputs)}")
        return outputs[e.name]

    def kind_sym(self, name: str, loc: Loc, scope: Scope) -> KindSym | None:
        sym = scope.lookup(name)
        if isinstance(sym, KindSym):
            return sym
        return self.err(loc, f"unknown token kind '{name}'"
                             f"{suggest(name, [k.kind.name for k in self.kinds])}") and None

    def concat(self, e: ast.Concat, scope: Scope) -> Val:
        parts = [self.expr(p, scope) for p in e.parts]
        if any(p is POISON for p in parts):
            return POISON
        sigs = [self.signal(p, q.loc, None, "in a concatenation") for p, q in zip(parts, e.parts)]
        w = sum(s.type.width for s in sigs)
        if w > MAX_WIDTH:
            return self.err(e.loc, f"width {w} is outside 1..{MAX_WIDTH}")
        return Sig(self.node(Op.CONCAT, w, tuple(s.node for s in sigs), e.loc), Type(w))

    def replicate(self, e: ast.Replicate, scope: Scope) -> Val:
        n = self.const_eval(e.count, scope, "repeat count")
        v = self.expr(e.value, scope)
        if n is None or v is POISON:
            return POISON
        s = self.signal(v, e.value.loc, None, "in a replication")
        w = n * s.type.width
        if not 1 <= w <= MAX_WIDTH:
            return self.err(e.loc, f"width {w} is outside 1..{MAX_WIDTH}")
        return Sig(self.node(Op.CONCAT, w, (s.node,) * n, e.loc), Type(w))

    # ---- calls -------------------------------------------------------------------------------
    def call(self, e: ast.Call, scope: Scope, hint: Type | None) -> Val:
        sym = scope.lookup(e.name)
        if sym is None and e.name in _BUILTINS:
            return self.builtin(e, scope, hint)
        if isinstance(sym, ModuleSym):
            outs = self.call_module(e, scope, want_outputs=False)
            return POISON if outs is None else outs  # type: ignore[return-value]
        if isinstance(sym, KindSym):
            return self.err(e.loc, f"a token ({e.name}(...)) can only be assigned to next")
        if sym is None:
            cands = set(scope.names()) | set(_BUILTINS)
            return self.err(e.loc, f"unknown function or module '{e.name}'{suggest(e.name, cands)}")
        return self.err(e.loc, f"'{e.name}' is not a module or a function")

    def builtin(self, e: ast.Call, scope: Scope, hint: Type | None) -> Val:
        name = e.name
        args = list(e.args)
        if e.has_params or any(isinstance(a, ast.NamedArg) for a in args):
            return self.err(e.loc, f"{name}() takes positional arguments only")
        want = {"zext": 2, "sext": 2, "ext": 2, "trunc": 2, "signed": 1, "unsigned": 1,
                "clog2": 1}.get(name)
        if want is not None and len(args) != want:
            return self.err(e.loc, f"{name}() takes {want} argument{'s' if want > 1 else ''}, "
                                   f"not {len(args)}")
        if name in ("clog2", "min", "max"):
            vals = [self.const_eval(a, scope) for a in args]  # type: ignore[arg-type]
            if any(v is None for v in vals):
                return POISON
            if name == "clog2":
                if vals[0] < 1:  # type: ignore[operator]
                    return self.err(e.loc, f"clog2() of {vals[0]} (must be at least 1)")
                return CInt(_clog2(vals[0]))  # type: ignore[arg-type]
            if not vals:
                return self.err(e.loc, f"{name}() needs at least one argument")
            return CInt((min if name == "min" else max)(vals))  # type: ignore[type-var]
        v = self.expr(args[0], scope)  # type: ignore[arg-type]
        if v is POISON:
            return POISON
        if name in ("signed", "unsigned"):
            s = self.signal(v, e.loc, hint, f"in {name}()")
            if s.type.enum and name == "signed":
                return self.err(e.loc, f"signed() is not defined on {s.type}")
            return Sig(s.node, Type(s.type.width, name == "signed"))
        w = self.width_eval(args[1], scope)  # type: ignore[arg-type]
        if w is None:
            return POISON
        s = self.signal(v, e.loc, None, f"in {name}()")
        sw = s.type.width
        if name == "trunc":
            if w > sw:
                return self.err(e.loc, f"trunc() to {w} bits of a {sw}-bit value: use zext or "
                                       f"sext to widen")
            return Sig(self.node(Op.SLICE, w, (s.node,), e.loc, 0), Type(w, s.type.signed))
        if w < sw:
            return self.err(e.loc, f"{name}() to {w} bits of a {sw}-bit value: use trunc to narrow")
        signed_ext = name == "sext" or (name == "ext" and s.type.signed)
        t = Type(w, s.type.signed)
        if w == sw:
            return Sig(s.node, t)
        if signed_ext:
            sign = self.node(Op.SLICE, 1, (s.node,), e.loc, sw - 1)
            fill = self.node(Op.MUX, w - sw, (sign, self.b.const(0, w - sw, e.loc),
                                              self.b.const(-1, w - sw, e.loc)), e.loc)
        else:
            fill = self.b.const(0, w - sw, e.loc)
        return Sig(self.node(Op.CONCAT, w, (fill, s.node), e.loc), t)

    def call_module(self, e: ast.Call, scope: Scope, want_outputs: bool) -> Any:
        """A module call: outputs dict (``want_outputs``) or the single output's Sig."""
        sym = scope.lookup(e.name)
        if not isinstance(sym, ModuleSym):
            if sym is None:
                return self.err(e.loc, f"unknown module '{e.name}'{suggest(e.name, scope.names())}") and None
            return self.err(e.loc, f"'{e.name}' is not a module") and None
        self._anon += 1
        outs = self.instantiate(sym, f"{e.name}${self._anon}", e.params, e.args, e.loc, scope)
        if outs is None:
            return None
        if want_outputs:
            return outs
        if len(outs) != 1:
            return self.err(e.loc, f"module '{e.name}' has {len(outs)} outputs; pick one with "
                                   f"{e.name}(...).{next(iter(outs), 'port')}") and None
        return next(iter(outs.values()))

    # ==== module instances ===================================================================
    def instantiate(self, m: ModuleSym, inst_name: str, params: tuple[ast.NamedArg, ...],
                    args: tuple, loc: Loc, scope: Scope) -> dict[str, Sig] | None:
        """Elaborate module ``m`` inline; returns its outputs (by port name)."""
        decl = m.decl
        pvals = self.param_values(decl, params, scope, loc)
        ins = [p for p in decl.ports if p.direction == "in"]
        given: dict[str, tuple[Val, Loc]] = {}
        positional = [a for a in args if not isinstance(a, ast.NamedArg)]
        named = [a for a in args if isinstance(a, ast.NamedArg)]
        ok = pvals is not None
        if positional and named:
            self.err(loc, "give the inputs either all by name or all by position")
            ok = False
        if len(positional) > len(ins):
            self.err(loc, f"module '{decl.name}' has {len(ins)} inputs, but "
                          f"{len(positional)} values are given")
            ok = False
        for p, a in zip(ins, positional):
            given[p.name] = (self.expr(a, scope), a.loc)
        in_names = [p.name for p in ins]
        for a in named:
            if a.name not in in_names:
                outs = [p.name for p in decl.ports if p.direction == "out"]
                extra = " (it is an output)" if a.name in outs else suggest(a.name, in_names)
                self.err(a.loc, f"module '{decl.name}' has no input '{a.name}'{extra}")
                ok = False
            elif a.name in given:
                self.err(a.loc, f"input '{a.name}' is connected twice")
                ok = False
            else:
                given[a.name] = (self.expr(a.value, scope), a.value.loc)
        missing = [n for n in in_names if n not in given]
        if missing and not (len(positional) > len(ins)):
            self.err(loc, f"input{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(repr(n) for n in missing)} of '{decl.name}' not connected")
            ok = False
        if self.depth >= MAX_DEPTH:
            self.err(loc, f"modules nested more than {MAX_DEPTH} deep (does '{decl.name}' "
                          f"instantiate itself?)")
            return None
        if not ok:
            return None
        return self.module_body(m, pvals, given, self.prefix + inst_name + ".")  # type: ignore[arg-type]

    def param_values(self, decl: ast.ModuleDecl, params: tuple[ast.NamedArg, ...],
                     scope: Scope, loc: Loc) -> dict[str, int] | None:
        names = [p.name for p in decl.params]
        out: dict[str, int] = {}
        ok = True
        for a in params:
            if a.name not in names:
                self.err(a.loc, f"module '{decl.name}' has no parameter '{a.name}'"
                                f"{suggest(a.name, names)}")
                ok = False
                continue
            v = self.const_eval(a.value, scope, "parameter")
            if v is None:
                ok = False
            else:
                out[a.name] = v
        return out if ok else None

    def module_body(self, m: ModuleSym, pvals: dict[str, int], given: dict[str, tuple[Val, Loc]] | None,
                    prefix: str, top: bool = False) -> dict[str, Sig] | None:
        """Run a module's body. ``given`` maps input names to values (None: the module is the
        top, and its inputs become INPUT nodes). Returns the outputs."""
        decl = m.decl
        f: FileCtx = m.file
        self.build_globals(f)
        saved = (self.state, self.prefix, self.file, self.in_circuit)
        self.state, self.prefix, self.file, self.in_circuit = State(), prefix, f, False
        self.depth += 1
        try:
            scope = Scope(f.scope)
            for p in decl.params:
                if p.type != "int":
                    self.err(p.loc, f"parameter '{p.name}' must have type int, not '{p.type}'")
                if p.name in pvals:
                    v = pvals[p.name]
                elif p.default is not None:
                    dv = self.const_eval(p.default, scope, "parameter default")
                    if dv is None:
                        return None
                    v = dv
                else:
                    self.err(p.loc if top else p.loc,
                             f"parameter '{p.name}' of module '{decl.name}' has no value and no default")
                    return None
                scope.syms[p.name] = ConstSym(v, p.loc)
            outputs: list[WireSym] = []
            bad = False
            for p in decl.ports:
                if p.name in scope.syms and not isinstance(scope.syms[p.name], ConstSym):
                    self.err(p.loc, f"port '{p.name}' is declared twice")
                    continue
                t = self.type_eval(p.type, scope)
                if t is None:
                    bad = True
                    continue
                if p.direction == "in":
                    if given is None:
                        node = self.b.add(Op.INPUT, t.width, (), p.name, p.loc)
                        self.top_ports.append((p.name, "in", t.width, t.signed))
                        sig = Sig(node, t)
                    else:
                        v, vloc = given[p.name]
                        s = self.to_type(v, t, vloc, f"input '{p.name}' of '{decl.name}'")
                        if s is None:
                            bad = True
                            continue
                        sig = Sig(s.node, t)
                    self.b.name(prefix + p.name, sig.node)
                    scope.syms[p.name] = SigSym(sig, p.loc)
                else:
                    alias = self.b.alias(prefix + p.name, t.width, p.loc)
                    self.b.name(prefix + p.name, alias)
                    w = WireSym(p.name, t, alias, p.loc, "output")
                    scope.syms[p.name] = w
                    outputs.append(w)
                    if given is None:
                        self.top_ports.append((p.name, "out", t.width, t.signed))
            if bad:
                return None
            self.block_stmts(decl.body.stmts, scope, decl.body.loc)
            self.finish_wires(outputs, decl.loc, f"of module '{decl.name}'")
            return {w.name: Sig(w.alias, w.type) for w in outputs}
        finally:
            self.depth -= 1
            self.state, self.prefix, self.file, self.in_circuit = saved

    # ==== statements =========================================================================
    def block_stmts(self, stmts: tuple, scope: Scope, loc: Loc) -> None:
        """Run statements in ``scope``; at the end, check and resolve its wires and name
        its vars' final values."""
        for s in stmts:
            try:
                self.stmt(s, scope)
            except _Abort:
                pass
        wires = [s for s in scope.syms.values() if isinstance(s, WireSym) and s.what == "signal"]
        self.finish_wires(wires, loc, "")
        for sym in scope.syms.values():
            if isinstance(sym, VarSym):
                a = self.state.vals.get(sym)
                if a is not None and a.complete:
                    self.b.name(sym.hier, a.value)

    def finish_wires(self, wires: list[WireSym], loc: Loc, where: str) -> None:
        for w in wires:
            a = self.state.vals.get(w)
            what = "output" if w.what == "output" else "signal"
            if a is None:
                self.err(w.loc, f"{what} '{w.name}' {where + ' ' if where else ''}is never driven")
                continue
            if not a.complete:
                self.err(w.loc, f"{what} '{w.name}' {where + ' ' if where else ''}is not driven on "
                                f"every path", [(a.loc, "driven here on some paths only")])
            self.b.drive(w.alias, a.value)

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

    def stmt(self, s: Any, scope: Scope) -> None:
        if isinstance(s, ast.Block):
            self.block_stmts(s.stmts, Scope(scope), s.loc)
        elif isinstance(s, ast.Let):
            self.let(s, scope)
        elif isinstance(s, ast.Wire):
            self.wire(s, scope)
        elif isinstance(s, ast.Var):
            self.var(s, scope)
        elif isinstance(s, ast.Assign):
            self.assign(s, scope)
        elif isinstance(s, ast.MemWrite):
            self.mem_write(s, scope)
        elif isinstance(s, ast.If):
            self.if_stmt(s, scope)
        elif isinstance(s, ast.Match):
            self.match(s, scope)
        elif isinstance(s, ast.For):
            self.for_stmt(s, scope)
        elif isinstance(s, ast.Const):
            v = self.const_eval(s.value, scope)
            self.declare(scope, s.name, ConstSym(v if v is not None else 0, s.loc), s.loc)
        elif isinstance(s, ast.Inst):
            self.inst(s, scope)
        elif isinstance(s, (ast.TokenDecl, ast.StartDecl, ast.MemDecl)):
            if not (self.in_circuit and scope.syms.get("tok") is not None):
                word = {ast.TokenDecl: "token", ast.StartDecl: "start", ast.MemDecl: s.kind
                        if isinstance(s, ast.MemDecl) else ""}[type(s)]
                self.err(s.loc, f"'{word}' declarations belong at the top level of a circuit")
        else:  # pragma: no cover
            raise TypeError(s)

    def poison(self, scope: Scope, name: str, loc: Loc) -> None:
        """Declare ``name`` after an error in its declaration, so its uses stay quiet."""
        if name not in scope.syms:
            scope.syms[name] = POISON
            scope.locs[name] = loc

    def let(self, s: ast.Let, scope: Scope) -> None:
        try:
            self._let(s, scope)
        finally:
            self.poison(scope, s.name, s.loc)

    def _let(self, s: ast.Let, scope: Scope) -> None:
        t = self.type_eval(s.type, scope) if s.type is not None else None
        if s.type is not None and t is None:
            return
        v = self.expr(s.value, scope, t)
        if v is POISON:
            return
        if t is None:
            if isinstance(v, CInt):
                self.err(s.value.loc, f"cannot tell the width of '{s.name}' from the constant "
                                      f"{v.value}: give it a type, e.g. let {s.name}: u8 = ...")
                return
            sig = v
        else:
            sig = self.to_type(v, t, s.value.loc, f"'{s.name}'")
        if sig is None:
            return
        assert isinstance(sig, Sig)
        if self.declare(scope, s.name, SigSym(sig, s.loc), s.loc):
            self.b.name(self.prefix + s.name, sig.node)

    def wire(self, s: ast.Wire, scope: Scope) -> None:
        t = self.type_eval(s.type, scope)
        if t is None:
            self.poison(scope, s.name, s.loc)
            return
        alias = self.b.alias(self.prefix + s.name, t.width, s.loc)
        w = WireSym(s.name, t, alias, s.loc)
        if not self.declare(scope, s.name, w, s.loc):
            return
        self.b.name(self.prefix + s.name, alias)
        if s.value is not None:
            sig = self.to_type(self.expr(s.value, scope, t), t, s.value.loc, f"'{s.name}'")
            if sig is not None:
                self.state.vals[w] = Assigned(sig.node, s.loc)

    def var(self, s: ast.Var, scope: Scope) -> None:
        t = self.type_eval(s.type, scope)
        if t is None:
            self.poison(scope, s.name, s.loc)
            return
        sym = VarSym(s.name, t, s.loc, self.prefix + s.name)
        if not self.declare(scope, s.name, sym, s.loc):
            return
        if s.value is not None:
            sig = self.to_type(self.expr(s.value, scope, t), t, s.value.loc, f"'{s.name}'")
            if sig is not None:
                self.state.vals[sym] = Assigned(sig.node, s.loc)

    def assign(self, s: ast.Assign, scope: Scope) -> None:
        sym = scope.lookup(s.target)
        if isinstance(sym, NextSym):
            if s.hi is not None:
                self.err(s.target_loc, "the next token is assigned whole: next = Kind(...)")
                return
            self.assign_next(s, scope, sym)
            return
        if sym is POISON:
            self.expr(s.value, scope)
            return
        if sym is None:
            self.err(s.target_loc, f"unknown name '{s.target}'{suggest(s.target, scope.names())}")
            self.expr(s.value, scope)
            return
        if not isinstance(sym, (VarSym, WireSym)):
            what = {SigSym: "a let (or an input); declare it with var to reassign it",
                    ConstSym: "a constant", MemSym: f"a memory; write it as {s.target}[address] <= data"}
            self.err(s.target_loc, f"cannot assign to '{s.target}': it is "
                                   f"{what.get(type(sym), 'not a signal')}")
            return
        if s.hi is not None:
            if not isinstance(sym, VarSym):
                self.err(s.target_loc, f"only a var can be assigned in parts; '{s.target}' is a "
                                       f"{'wire' if sym.what == 'signal' else 'output'}")
                return
            self.assign_part(s, scope, sym)
            return
        sig = self.to_type(self.expr(s.value, scope, sym.type), sym.type, s.value.loc, f"'{s.target}'")
        if isinstance(sym, WireSym):
            prev = self.state.vals.get(sym)
            if prev is not None:
                self.err(s.target_loc, f"{'output' if sym.what == 'output' else 'signal'} "
                                       f"'{s.target}' is driven more than once",
                         [(prev.loc, "first driven here")])
                return
        if sig is not None:
            self.state.vals[sym] = Assigned(sig.node, s.loc)
        elif isinstance(sym, WireSym):
            # keep it "driven" so the missing driver is not reported a second time
            self.state.vals[sym] = Assigned(self.b.const(0, sym.type.width, s.loc), s.loc)

    def assign_part(self, s: ast.Assign, scope: Scope, sym: VarSym) -> None:
        hi = self.const_eval(s.hi, scope, "bit index")  # type: ignore[arg-type]
        lo = hi if s.lo is None else self.const_eval(s.lo, scope, "bit index")
        if hi is None or lo is None:
            return
        w = sym.type.width
        if not 0 <= lo <= hi < w:
            self.err(s.target_loc, f"bits [{hi}:{lo}] are out of range for '{s.target}' ({w} bits)")
            return
        cur = self.state.vals.get(sym)
        if cur is None or not cur.complete:
            self.err(s.target_loc, f"variable '{s.target}' has no value on every path before this "
                                   f"partial assignment")
            return
        pw = hi - lo + 1
        v = self.to_type(self.expr(s.value, scope, Type(pw)), Type(pw), s.value.loc,
                         f"'{s.target}[{hi}:{lo}]'" if s.lo is not None else f"'{s.target}[{hi}]'")
        if v is None:
            return
        parts = []
        if hi < w - 1:
            parts.append(self.node(Op.SLICE, w - 1 - hi, (cur.value,), s.loc, hi + 1))
        parts.append(v.node)
        if lo > 0:
            parts.append(self.node(Op.SLICE, lo, (cur.value,), s.loc, 0))
        self.state.vals[sym] = Assigned(self.node(Op.CONCAT, w, tuple(parts), s.loc), s.loc)

    def assign_next(self, s: ast.Assign, scope: Scope, sym: NextSym) -> None:
        value = self.token_value(s.value, scope)
        prev = self.state.vals.get(sym)
        if prev is not None:
            self.err(s.target_loc, "the next token is assigned more than once on one path",
                     [(prev.loc, "first assigned here")])
            return
        if value is not None:
            self.state.vals[sym] = Assigned(value, s.loc)
        else:
            self.state.vals[sym] = Assigned(None, s.loc)

    def token_args(self, e: Any, scope: Scope, what: str) -> tuple[KindSym, list[Sig]] | None:
        """Check ``Kind(f: e, ...)`` and return the kind and its field values (in order)."""
        if not isinstance(e, ast.Call) or e.has_params:
            self.err(e.loc, f"{what} must be a token: Kind(field: value, ...)")
            return None
        ks = self.kind_sym(e.name, e.loc, scope)
        if ks is None:
            return None
        fields = [f.name for f in ks.kind.fields]
        given: dict[str, Any] = {}
        ok = True
        positional = [a for a in e.args if not isinstance(a, ast.NamedArg)]
        if positional and len(positional) != len(e.args):
            self.err(e.loc, "give the fields either all by name or all by position")
            return None
        if positional:
            if len(positional) != len(fields):
                self.err(e.loc, f"token kind {ks.kind.name} has {len(fields)} field"
                                f"{'s' if len(fields) != 1 else ''}, but {len(positional)} "
                                f"value{'s are' if len(positional) != 1 else ' is'} given")
                return None
            given = {f: a for f, a in zip(fields, positional)}
        for a in e.args:
            if not isinstance(a, ast.NamedArg):
                continue
            if a.name not in fields:
                self.err(a.loc, f"token kind {ks.kind.name} has no field '{a.name}'"
                                f"{suggest(a.name, fields)}")
                ok = False
            elif a.name in given:
                self.err(a.loc, f"field '{a.name}' is given twice")
                ok = False
            else:
                given[a.name] = a.value
        missing = [f for f in fields if f not in given]
        if missing and ok:
            self.err(e.loc, f"missing field{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(repr(m) for m in missing)} in {ks.kind.name}(...)")
            ok = False
        vals: list[Sig] = []
        for fi, f in enumerate(fields):
            if f not in given:
                continue
            t = ks.field_types[fi]
            arg = given[f]
            sv = self.to_type(self.expr(arg, scope, t), t, arg.loc,
                              f"field '{f}' of {ks.kind.name}")
            if sv is None:
                ok = False
            else:
                vals.append(sv)
        return (ks, vals) if ok else None

    def token_value(self, e: Any, scope: Scope) -> tuple[int, ...] | None:
        r = self.token_args(e, scope, "the next token")
        if r is None:
            return None
        ks, vals = r
        out = [self.b.const(ks.index, self.kind_type().width, e.loc)]
        for k in self.kinds:
            for fi, f in enumerate(k.kind.fields):
                out.append(vals[fi].node if k is ks else self.b.const(0, f.width, e.loc))
        return tuple(out)

    def mem_write(self, s: ast.MemWrite, scope: Scope) -> None:
        sym = scope.lookup(s.memory)
        if sym is POISON:
            return
        if not isinstance(sym, MemSym):
            if sym is None:
                mems = [n for n in scope.names() if isinstance(scope.lookup(n), MemSym)]
                self.err(s.loc, f"unknown memory '{s.memory}'{suggest(s.memory, mems or scope.names())}")
            else:
                self.err(s.loc, f"'{s.memory}' is not a memory ('<=' writes a memory; use '=' "
                                f"for signals)")
            return
        m = sym.memory
        if m.kind == "rom":
            self.err(s.loc, f"cannot write to rom '{m.name}': a rom is read-only (declare it "
                            f"as ram to write it)")
            return
        addr = self.address(s.addr, scope, sym)
        data = self.to_type(self.expr(s.data, scope, sym.type), sym.type, s.data.loc,
                            f"memory '{m.name}'")
        prev = self.state.writes.get(m.name)
        if prev is not None:
            self.err(s.loc, f"memory '{m.name}' is written twice on one path",
                     [(prev.loc, "first written here")])
            return
        if addr is None or data is None:
            return
        one = self.b.const(1, 1, s.loc)
        self.state.writes[m.name] = PendingWrite(addr, data.node, one, s.loc)

    def inst(self, s: ast.Inst, scope: Scope) -> None:
        sym = scope.lookup(s.module)
        if not isinstance(sym, ModuleSym):
            mods = [n for n in scope.names() if isinstance(scope.lookup(n), ModuleSym)]
            if sym is None:
                self.err(s.module_loc, f"unknown module '{s.module}'{suggest(s.module, mods)}")
            else:
                self.err(s.module_loc, f"'{s.module}' is not a module")
            return
        if s.name in scope.syms:
            self.declare(scope, s.name, None, s.loc)
            return
        outs = self.instantiate(sym, s.name, s.params, s.args, s.loc, scope)
        if outs is None:
            self.poison(scope, s.name, s.loc)   # its uses stay quiet
            return
        self.declare(scope, s.name, InstSym(s.name, s.module, outs, s.loc), s.loc)

    # ---- control flow ----------------------------------------------------------------------
    def _mux(self, c: int, if0: int, if1: int, loc: Loc) -> int:
        return self.node(Op.MUX, self.b.widths[if0], (c, if0, if1), loc)

    def _merge(self, c: int, s1: State, s0: State, loc: Loc) -> State:
        """Merge the states of two exclusive paths: ``s1`` where ``c`` is 1, ``s0`` where 0."""
        out = State()
        for k in list(s1.vals) + [k for k in s0.vals if k not in s1.vals]:
            a1, a0 = s1.vals.get(k), s0.vals.get(k)
            if a1 is a0:
                out.vals[k] = a1  # type: ignore[assignment]
            elif a1 is not None and a0 is not None:
                if a1.value is None or a0.value is None:
                    v = a1.value if a0.value is None else a0.value
                elif isinstance(a1.value, tuple):
                    v = tuple(self._mux(c, x0, x1, loc) for x1, x0 in zip(a1.value, a0.value))
                else:
                    v = self._mux(c, a0.value, a1.value, loc)
                out.vals[k] = Assigned(v, a1.loc, a1.complete and a0.complete)
            else:
                a = a1 if a1 is not None else a0
                out.vals[k] = Assigned(a.value, a.loc, False)  # type: ignore[union-attr]
        for name in list(s1.writes) + [n for n in s0.writes if n not in s1.writes]:
            w1, w0 = s1.writes.get(name), s0.writes.get(name)
            if w1 is w0:
                out.writes[name] = w1  # type: ignore[assignment]
            elif w1 is not None and w0 is not None:
                aw = max(self.b.widths[w1.addr], self.b.widths[w0.addr])
                a1 = self.zext_node(w1.addr, aw, loc)
                a0 = self.zext_node(w0.addr, aw, loc)
                out.writes[name] = PendingWrite(self._mux(c, a0, a1, loc),
                                                self._mux(c, w0.data, w1.data, loc),
                                                self._mux(c, w0.enable, w1.enable, loc), w1.loc)
            elif w1 is not None:
                en = self.node(Op.AND, 1, (c, w1.enable), loc)
                out.writes[name] = PendingWrite(w1.addr, w1.data, en, w1.loc)
            else:
                assert w0 is not None
                nc = self.node(Op.NOT, 1, (c,), loc)
                en = self.node(Op.AND, 1, (nc, w0.enable), loc)
                out.writes[name] = PendingWrite(w0.addr, w0.data, en, w0.loc)
        return out

    def zext_node(self, n: int, w: int, loc: Loc) -> int:
        nw = self.b.widths[n]
        if nw == w:
            return n
        return self.node(Op.CONCAT, w, (self.b.const(0, w - nw, loc), n), loc)

    def run_arm(self, body: ast.Block, scope: Scope, base: State) -> State:
        self.state = base.copy()
        self.block_stmts(body.stmts, Scope(scope), body.loc)
        return self.state

    def if_stmt(self, s: ast.If, scope: Scope) -> None:
        c = self.cond(s.cond, scope, "an if condition")
        base = self.state
        s1 = self.run_arm(s.then, scope, base)
        if isinstance(s.orelse, ast.If):
            self.state = base.copy()
            self.if_stmt(s.orelse, scope)
            s0 = self.state
        elif isinstance(s.orelse, ast.Block):
            s0 = self.run_arm(s.orelse, scope, base)
        else:
            s0 = base
        if not isinstance(c, Sig):
            self.state = base
            raise _Abort
        self.state = self._merge(c.node, s1, s0, s.loc)

    def match(self, s: ast.Match, scope: Scope) -> None:
        base = self.state
        if isinstance(s.subject, ast.Name) and isinstance(scope.lookup(s.subject.name), TokSym):
            subj: Val = Sig(self.node(Op.TOKEN_KIND, self.kind_type().width, (), s.subject.loc),
                            self.kind_type())
        else:
            subj = self.expr(s.subject, scope)
        if isinstance(subj, CInt):
            self.err(s.subject.loc, "cannot match on an unsized constant")
            subj = POISON
        arms: list[tuple[int | None, ast.MatchArm]] = []   # (condition node | None=always, arm)
        covered: dict[int, Loc] = {}
        wild: Loc | None = None
        for arm in s.arms:
            conds: list[int] = []
            always = False
            for p in arm.patterns:
                if wild is not None:
                    self.err(p.loc, "this pattern can never match: '_' above covers every value",
                             [(wild, "'_' is here")])
                    continue
                if p.kind == "wild":
                    always = True
                    wild = p.loc
                    continue
                if not isinstance(subj, Sig):
                    continue
                v = self.pattern_value(p, subj.type, scope)
                if v is None:
                    continue
                if v in covered:
                    self.err(p.loc, f"duplicate match pattern: {self.show_value(v, subj.type, scope)} "
                                    f"is already covered", [(covered[v], "first covered here")])
                    continue
                covered[v] = p.loc
                conds.append(self.node(Op.EQ, 1, (subj.node, self.b.const(v, subj.type.width, p.loc)), p.loc))
            if always:
                arms.append((None, arm))
            elif conds:
                c = conds[0]
                for x in conds[1:]:
                    c = self.node(Op.OR, 1, (c, x), arm.loc)
                arms.append((c, arm))
            else:
                arms.append((self.b.const(0, 1, arm.loc), arm))
        exhaustive = True   # after the error below, go on as if it were (no cascades)
        if isinstance(subj, Sig) and wild is None:
            missing = self.missing_value(subj.type, covered, scope)
            if missing is not None:
                self.err(s.loc, f"match is not exhaustive: {missing} not covered (add it, or "
                                f"'_ => {{ ... }}')")
        states = [self.run_arm(arm.body, scope, base) for _c, arm in arms]
        self.state = base
        if not isinstance(subj, Sig) or not arms:
            return
        # the last arm (or a '_' arm) is the default when the match is exhaustive
        n_used = next((i + 1 for i, (c, _a) in enumerate(arms) if c is None), len(arms))
        if exhaustive:
            merged = states[n_used - 1]
            order = range(n_used - 2, -1, -1)
        else:
            merged = base
            order = range(n_used - 1, -1, -1)
        for i in order:
            c = arms[i][0]
            assert c is not None
            merged = self._merge(c, states[i], merged, arms[i][1].loc)
        self.state = merged

    def pattern_value(self, p: ast.Pattern, t: Type, scope: Scope) -> int | None:
        """A pattern's value in the subject's (unsigned) encoding, or None (error reported)."""
        if p.kind == "name" and t.enum is not None:
            assert isinstance(p.expr, ast.Name)
            name = p.expr.name
            if t.enum == KIND_ENUM:
                ks = self.kind_sym(name, p.loc, scope)
                return ks.index if ks is not None else None
            enum = scope.lookup(t.enum)
            if isinstance(enum, EnumSym) and name in enum.members:
                return enum.members[name]
        v = self.expr(p.expr, scope, t)  # type: ignore[arg-type]
        if v is POISON:
            return None
        if isinstance(v, CInt):
            s = self.to_type(v, t, p.loc, "the matched value")
            return None if s is None else self.b.const_value(s.node)
        assert isinstance(v, Sig)
        c = self.b.const_value(v.node)
        if c is None:
            self.err(p.loc, "a match pattern must be a constant")
            return None
        s = self.to_type(v, t, p.loc, "the matched value")
        return None if s is None else c

    def show_value(self, v: int, t: Type, scope: Scope) -> str:
        if t.enum == KIND_ENUM:
            return f"token kind {self.kinds[v].kind.name}" if v < len(self.kinds) else f"value {v}"
        if t.enum:
            enum = scope.lookup(t.enum)
            for name, val in getattr(enum, "members", {}).items():
                if val == v:
                    return f"{t.enum}.{name}"
        if t.signed and v >> (t.width - 1):
            v -= 1 << t.width
        return f"value {v}"

    def missing_value(self, t: Type, covered: dict[int, Loc], scope: Scope) -> str | None:
        """Words for one value of type ``t`` not in ``covered`` (None: all covered)."""
        if t.enum == KIND_ENUM:
            for i, k in enumerate(self.kinds):
                if i not in covered:
                    return f"token kind {k.kind.name}"
            return None
        if t.enum:
            enum = scope.lookup(t.enum)
            for name, val in getattr(enum, "members", {}).items():
                if val not in covered:
                    return f"{t.enum}.{name}"
            return None
        if len(covered) >= 1 << t.width:
            return None
        order = range(1 << t.width) if not t.signed else \
            [x & ((1 << t.width) - 1) for x in range(-(1 << (t.width - 1)), 1 << (t.width - 1))]
        for v in order:
            if v not in covered:
                return self.show_value(v, t, scope)
        return None  # pragma: no cover

    def for_stmt(self, s: ast.For, scope: Scope) -> None:
        lo = self.const_eval(s.start, scope, "loop bound")
        hi = self.const_eval(s.stop, scope, "loop bound")
        if lo is None or hi is None:
            return
        if hi - lo > MAX_UNROLL:
            self.err(s.loc, f"loop of {hi - lo} iterations is too long to unroll (at most {MAX_UNROLL})")
            return
        for i in range(lo, hi):
            inner = Scope(scope)
            inner.syms[s.var] = ConstSym(i, s.loc)
            inner.locs[s.var] = s.loc
            self.block_stmts(s.body.stmts, Scope(inner), s.body.loc)

    # ==== circuits ============================================================================
    def circuit(self, c: CircuitSym, top_ports: list | None = None) -> Circuit | None:
        decl = c.decl
        f: FileCtx = c.file
        self.build_globals(f)
        self.file = f
        self.in_circuit = True
        out = Circuit(decl.name, decl.loc)
        scope = Scope(f.scope)
        tok, nxt = TokSym(decl.loc), NextSym(decl.loc)
        scope.syms["tok"] = tok
        scope.syms["next"] = nxt
        self.decls_of_circuit(decl, scope, out)
        body_stmts = tuple(s for s in decl.body.stmts
                           if not isinstance(s, (ast.TokenDecl, ast.StartDecl, ast.MemDecl)))
        self.block_stmts(body_stmts, scope, decl.body.loc)
        if not self.kinds:
            self.err(decl.loc, f"circuit '{decl.name}' declares no token kinds: add one, "
                               f"e.g. token Step(x: u8);")
            return None
        a = self.state.vals.get(nxt)
        if a is None:
            self.err(decl.loc, f"the next token is never assigned in circuit '{decl.name}'")
            return None
        if not a.complete:
            self.err(decl.loc, f"the next token is not assigned on every path in circuit "
                               f"'{decl.name}'", [(a.loc, "assigned here on some paths only")])
        if a.value is not None:
            self.b.add(Op.TOKEN_OUT, 0, a.value, None, decl.loc)
        for name, w in self.state.writes.items():
            self.b.add(Op.MEM_WRITE, 0, (w.addr, w.data, w.enable), name, w.loc)
        out.kinds = [k.kind for k in self.kinds]
        return out

    def decls_of_circuit(self, decl: ast.CircuitDecl, scope: Scope, out: Circuit) -> None:
        """Token kinds, memories and the start token (they may appear anywhere in the body)."""
        for s in decl.body.stmts:
            if isinstance(s, ast.TokenDecl):
                fields, ftypes = [], []
                seen: set[str] = set()
                for fd in s.fields:
                    t = self.type_eval(fd.type, scope)
                    if fd.name in seen:
                        self.err(fd.loc, f"field '{fd.name}' is declared twice in {s.name}")
                        continue
                    seen.add(fd.name)
                    if t is None:
                        t = Type(1)
                    fields.append(Field(fd.name, t.width, t.signed))
                    ftypes.append(t)
                ks = KindSym(len(self.kinds), TokenKind(s.name, tuple(fields), s.loc, s.halt), ftypes, s.loc)
                if self.declare(scope, s.name, ks, s.loc):
                    self.kinds.append(ks)
            elif isinstance(s, ast.MemDecl):
                self.mem_decl(s, scope, out)
        starts = [s for s in decl.body.stmts if isinstance(s, ast.StartDecl)]
        for s in starts[1:]:
            self.err(s.loc, "only one start token may be declared", [(starts[0].loc, "first one here")])
        if starts:
            s = starts[0]
            r = self.token_args(ast.Call(s.loc, s.kind, (), s.args), scope, "start")
            if r is not None:
                ks, vals = r
                fv = [self.b.const_value(v.node) for v in vals]
                if any(x is None for x in fv):
                    self.err(s.loc, "the start token's fields must be compile-time constants")
                else:
                    out.start = Token(ks.index, tuple(fv))  # type: ignore[arg-type]

    def mem_decl(self, s: ast.MemDecl, scope: Scope, out: Circuit) -> None:
        t = self.type_eval(s.elem, scope)
        depth = self.const_eval(s.depth, scope, "memory depth")
        self.poison(scope, s.name, s.loc)  # replaced below when the declaration is good
        if t is None or depth is None:
            return
        if depth < 1:
            self.err(s.depth.loc, f"memory depth {depth} must be at least 1")
            return
        image, init = None, ()
        if s.image is not None:
            if s.kind == "ram":
                self.err(s.image_loc or s.loc, "only a rom has an image; a ram starts as zeros")
                return
            assert self.file is not None
            path = (self.file.dir / s.image)
            image = str(path.resolve())
            loaded = load_image(path, t.width, depth)
            if isinstance(loaded, str):
                self.err(s.image_loc or s.loc, loaded)
                return
            init = loaded
        m = Memory(s.name, s.kind, t.width, depth, s.loc, image, init)
        if scope.syms.get(s.name) is POISON:
            del scope.syms[s.name]
        if self.declare(scope, s.name, MemSym(m, t), s.loc):
            out.memories[s.name] = m


def load_image(path: Path, width: int, depth: int) -> tuple[int, ...] | str:
    """A ROM image (``.hex``: one hexadecimal word per line, ``//`` comments; otherwise raw
    little-endian words of ceil(width/8) bytes), padded with zeros to ``depth`` words.
    Returns the words, or an error message."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        return f"cannot read ROM image '{path.name}': {e.strerror or e}"
    words: list[int] = []
    if path.suffix.lower() == ".hex":
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return f"ROM image '{path.name}' is not a text .hex file"
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("//", 1)[0].strip()
            for word in line.split():
                try:
                    v = int(word.replace("_", ""), 16)
                except ValueError:
                    return f"ROM image '{path.name}' line {lineno}: '{word}' is not a hexadecimal number"
                if v >> width:
                    return (f"ROM image '{path.name}' line {lineno}: {word} does not fit "
                            f"{width} bits")
                words.append(v)
    else:
        nb = (width + 7) // 8
        if len(raw) % nb:
            return f"ROM image '{path.name}' has {len(raw)} bytes, not a multiple of {nb}"
        for i in range(0, len(raw), nb):
            v = int.from_bytes(raw[i:i + nb], "little")
            if v >> width:
                return f"ROM image '{path.name}': word {i // nb} ({v:#x}) does not fit {width} bits"
            words.append(v)
    if len(words) > depth:
        return f"ROM image '{path.name}' has {len(words)} words, more than the depth {depth}"
    return tuple(words) + (0,) * (depth - len(words))
