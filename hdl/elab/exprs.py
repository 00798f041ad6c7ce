"""Expressions: AST expression -> a :class:`Sig` (an IR node and its type), a compile-time
:class:`CInt`, or :data:`POISON` after a reported error.

Takes: expressions and the scope they are read in; an optional type hint (the assigned
signal's type) that gives unsized constants a width. Gives: IR nodes with width, signedness
and enum checks done, constants folded; module calls go through ``instantiate``.
"""
from __future__ import annotations

import re
from typing import Any

from hdl import ast
from hdl.diagnostics import suggest
from hdl.elab.base import (ARITH, BUILTINS, MAX_CONST_BITS, U1, Abort, ElabBase, article, clog2,
                            const_binop)
from hdl.elab.values import (POISON, CInt, ConstSym, EnumSym, InstSym, KindSym, MemSym, ModuleSym,
                             NextSym, Scope, Sig, SigSym, TokSym, Type, Val, VarSym, WireSym)
from hdl.ir import MAX_WIDTH, Loc, Op


class ExprMixin(ElabBase):
    """The expression half of :class:`hdl.elab.elaborator.Elaborator`."""

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
        m = re.fullmatch(r"(u?)int(\d+)(_t)?", name)
        hint = (f"; did you mean '{'u' if m.group(1) else 's'}{m.group(2)}'?" if m
                else suggest(name, cands))
        self.err(t.loc, f"unknown type '{name}'{hint}")
        return None

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
            self.err(loc, f"width mismatch: cannot assign {article(v.type.width)} {v.type.width}-bit value to {what} "
                          f"({t.width} bits)")
            return None
        if v.type.signed != t.signed:
            self.err(loc, f"signed/unsigned mix: cannot assign {'an' if v.type.signed else 'a'} {v.type} value to {what} ({t}); "
                          f"convert with {'signed' if t.signed else 'unsigned'}()")
            return None
        return v

    def expr(self, e: ast.Expr, scope: Scope, hint: Type | None = None) -> Val:
        try:
            return self._expr(e, scope, hint)
        except Abort:
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

    def signal(self, v: Val, loc: Loc, hint: Type | None, why: str) -> Sig:
        """``v`` as a signal; an unsized constant takes ``hint``'s type, else an error."""
        if isinstance(v, Sig):
            return v
        if v is POISON:
            raise Abort
        assert isinstance(v, CInt)
        if hint is not None and not hint.enum:
            s = self.to_type(v, hint, loc, "its context")
            if s is None:
                raise Abort
            return s
        self.err(loc, f"cannot tell the width of the constant {v.value} {why}: give it one, "
                      f"e.g. {max(1, v.value.bit_length())}'d{v.value}" if v.value >= 0 else
                 f"cannot tell the width of the constant {v.value} {why}")
        raise Abort

    def unify(self, op: str, a: Val, b: Val, loc: Loc, hint: Type | None) -> tuple[Sig, Sig]:
        """Two operands of one operator as signals of one type (or an error and Abort)."""
        if a is POISON or b is POISON:
            raise Abort
        if isinstance(a, CInt) and isinstance(b, CInt):
            a = self.signal(a, loc, hint, f"in '{op}'")
        if isinstance(a, CInt) or isinstance(b, CInt):   # the constant takes the signal's type
            const, sig = (a, b) if isinstance(a, CInt) else (b, a)
            assert isinstance(const, CInt) and isinstance(sig, Sig)
            s = self.to_type(const, sig.type, loc, f"the other operand of '{op}'")
            if s is None:
                raise Abort
            return (s, sig) if const is a else (sig, s)
        assert isinstance(a, Sig) and isinstance(b, Sig)
        if a.type.enum != b.type.enum:
            self.err(loc, f"type mismatch in '{op}': left is {a.type}, right is {b.type}")
            raise Abort
        if a.type.width != b.type.width:
            self.err(loc, f"width mismatch in '{op}': left operand is {a.type.width} bits, "
                          f"right operand is {b.type.width} bits")
            raise Abort
        if a.type.signed != b.type.signed:
            self.err(loc, f"signed/unsigned mix in '{op}': left is {a.type}, right is {b.type}; "
                          f"convert one with signed() or unsigned()")
            raise Abort
        return a, b

    def binary(self, e: ast.Binary, scope: Scope, hint: Type | None) -> Val:
        op = e.op
        sub_hint = hint if op in ARITH else None
        a = self.expr(e.left, scope, sub_hint)
        if op in ("<<", ">>"):
            return self.shift(e, a, self.expr(e.right, scope), hint)
        b = self.expr(e.right, scope, sub_hint)
        if isinstance(a, CInt) and isinstance(b, CInt):
            if op == "*" and a.value.bit_length() + b.value.bit_length() > MAX_CONST_BITS:
                return self.err(e.loc, "compile-time value too large")
            r = const_binop(op, a.value, b.value)
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
        if op in ARITH:
            if t.enum:
                return self.err(e.loc, f"'{op}' is not defined on {t}; convert with unsigned()")
            return Sig(self.node(ARITH[op], t.width, (sa.node, sb.node), e.loc), Type(t.width, t.signed))
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
            if e.op == "<<" and n.value > MAX_CONST_BITS:
                return self.err(e.loc, f"compile-time value too large (1 << {n.value})")
            r = const_binop(e.op, a.value, n.value)
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
        iv = self.expr(e.index, scope)
        if base is POISON or iv is POISON:
            return POISON
        sb = self.signal(base, e.loc, None, "before '[...]'")
        if isinstance(iv, Sig) and self.b.const_value(iv.node) is None:
            # a bit chosen at run time: (x >> i)[0], 0 when i >= the width
            if iv.type.signed or iv.type.enum:
                return self.err(e.index.loc, f"a bit index must be unsigned, not {iv.type}")
            shifted = self.node(Op.LSHR, sb.type.width, (sb.node, iv.node), e.loc)
            return Sig(self.node(Op.SLICE, 1, (shifted,), e.loc, 0), U1)
        i = self.const_eval(e.index, scope, "bit index")
        if i is None:
            return POISON
        if not 0 <= i < sb.type.width:
            return self.err(e.index.loc, f"bit index {i} is out of range for "
                                         f"{article(sb.type.width)} {sb.type.width}-bit value")
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
            return self.err(e.loc, f"slice [{hi}:{lo}] is out of range for {article(w)} {w}-bit value")
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
        if n < 1:
            return self.err(e.count.loc, f"repeat count {n} must be at least 1")
        w = n * s.type.width
        if not 1 <= w <= MAX_WIDTH:
            return self.err(e.loc, f"width {w} is outside 1..{MAX_WIDTH}")
        return Sig(self.node(Op.CONCAT, w, (s.node,) * n, e.loc), Type(w))

    # ---- calls -------------------------------------------------------------------------------
    def call(self, e: ast.Call, scope: Scope, hint: Type | None) -> Val:
        sym = scope.lookup(e.name)
        if sym is None and e.name in BUILTINS:
            return self.builtin(e, scope, hint)
        if isinstance(sym, ModuleSym):
            outs = self.call_module(e, scope, want_outputs=False)
            return POISON if outs is None else outs  # type: ignore[return-value]
        if isinstance(sym, KindSym):
            return self.err(e.loc, f"a token ({e.name}(...)) can only be assigned to next")
        if sym is None:
            cands = set(scope.names()) | set(BUILTINS)
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
                return CInt(clog2(vals[0]))  # type: ignore[arg-type]
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
