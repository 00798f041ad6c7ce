"""Statements: declarations, assignments, memory writes, ``if``/``match``/``for``.

Takes: statements and their scope. Gives: updates to the current path's :class:`State` (var
values, wire drivers, the next token, memory write ports) and, at each ``if``/``match``, the
merge of the arms' states with multiplexers (one write port per memory, its enable the OR of
the paths that write).
"""
from __future__ import annotations

import itertools
from typing import Any

from common.kinds import MemKind
from hdl import ast
from hdl.diagnostics import suggest
from hdl.elab.base import MAX_TOTAL_UNROLL, MAX_UNROLL, Abort, ElabBase
from hdl.elab.values import (KIND_ENUM, POISON, Assigned, CInt, ConstSym, EnumSym, InstSym, KindSym,
                             MemSym, ModuleSym, NextSym, PendingWrite, Scope, Sig, SigSym, State,
                             TokSym, Type, Val, VarSym, WireSym)
from hdl.ir import Loc, Op


class StmtMixin(ElabBase):
    """The statement half of :class:`hdl.elab.elaborator.Elaborator`."""

    def block_stmts(self, stmts: tuple, scope: Scope, loc: Loc) -> None:
        """Run statements in ``scope``; at the end, check and resolve its wires and name
        its vars' final values."""
        for s in stmts:
            try:
                self.stmt(s, scope)
            except Abort:
                pass
        wires = [s for s in scope.syms.values() if isinstance(s, WireSym) and s.what == "signal"]
        self.finish_wires(wires, loc, "")
        for sym in scope.syms.values():
            if isinstance(sym, VarSym):
                a = self.state.vals.get(sym)
                if a is not None and a.complete:
                    self.b.name(sym.hier, a.value)
            if isinstance(sym, VarSym) or isinstance(sym, WireSym) and sym.what == "signal":
                self.state.vals.pop(sym, None)   # out of scope: nothing to merge later

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
        if sym is None and s.target == "next":
            self.err(s.target_loc, "'next' (the next token) exists only in a circuit")
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
        if m.kind is MemKind.ROM:
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
            self.poison(scope, s.name, s.loc)
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
        known = self.b.const_value(c.node) if isinstance(c, Sig) else None
        if known is not None:
            # a compile-time condition (e.g. on a loop index) elaborates only the arm it picks
            if known:
                self.block_stmts(s.then.stmts, Scope(scope), s.then.loc)
            elif isinstance(s.orelse, ast.If):
                self.if_stmt(s.orelse, scope)
            elif isinstance(s.orelse, ast.Block):
                self.block_stmts(s.orelse.stmts, Scope(scope), s.orelse.loc)
            return
        s1 = self.run_arm(s.then, scope, base)
        if isinstance(s.orelse, ast.If):
            self.state = base.copy()
            self.if_stmt(s.orelse, scope)
            s0 = self.state
        elif isinstance(s.orelse, ast.Block):
            s0 = self.run_arm(s.orelse, scope, base)
        else:
            s0 = base
        # a bad condition has been reported: merge the arms all the same (on a stand-in
        # condition), so what they assign counts as assigned and no error follows from it
        cn = c.node if isinstance(c, Sig) else self.b.const(0, 1, s.cond.loc)
        self.state = self._merge(cn, s1, s0, s.loc)

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
        if not arms:
            return
        # (a bad subject has been reported; its arms merge on stand-in conditions, so what
        # they assign counts as assigned and no error follows from it)
        # the last arm (or a '_' arm) is the default when the match is exhaustive
        n_used = next((i + 1 for i, (c, _) in enumerate(arms) if c is None), len(arms))
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
        # 0, 1, 2, ... then (signed) -1, -2, ...: at most len(covered) + 1 are looked at
        mask, half = (1 << t.width) - 1, 1 << (t.width - 1)
        cands = itertools.chain(range(half), range(mask, half - 1, -1)) if t.signed \
            else range(1 << t.width)
        for v in cands:
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
            self.unrolled += 1
            if self.unrolled > MAX_TOTAL_UNROLL:   # reported once, at the loop that crossed it
                if self.unrolled == MAX_TOTAL_UNROLL + 1:
                    self.err(s.loc, f"loops unroll more than {MAX_TOTAL_UNROLL:,} iterations "
                                    "in total (nested loops multiply): use smaller bounds")
                raise Abort
            inner = Scope(scope)
            inner.syms[s.var] = ConstSym(i, s.loc)
            inner.locs[s.var] = s.loc
            self.block_stmts(s.body.stmts, Scope(inner), s.body.loc)
