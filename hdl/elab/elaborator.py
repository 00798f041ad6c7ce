"""Elaboration: typed AST of a circuit (or module) -> flat netlist IR.

Takes: a :class:`hdl.elab.files.FileCtx` (parsed, imports resolved) and the name of a
``circuit`` or ``module``. Gives: an :class:`hdl.ir.Circuit` whose nodes are in topological
order and pass :meth:`hdl.ir.Circuit.check`, or (through the collector) every design-rule
error found, each located.

How it works: statements run in order along the current *path*. A :class:`State` records
what the path has assigned (vars, wire drivers, the next token, memory write ports); ``if``
and ``match`` run every arm from a copy of the state and merge the copies with multiplexers
(:meth:`hdl.elab.stmts.StmtMixin._merge`). Wires and outputs are placeholders (``ALIAS`` nodes) so they can
be read before they are driven; module instances are elaborated inline with a name prefix
(``u1.sum``). Constants fold and identical nodes are shared as they are built
(:class:`hdl.elab.builder.Builder`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from common.kinds import MemKind
from hdl import ast
from hdl.diagnostics import suggest
from hdl.elab.base import MAX_DEPTH, MAX_MEM_DEPTH
from hdl.elab.exprs import ExprMixin
from hdl.elab.files import FileCtx, resolved
from hdl.elab.stmts import StmtMixin
from hdl.elab.values import (POISON, CircuitSym, ConstSym, EnumSym, KindSym, MemSym, ModuleSym,
                             NextSym, Scope, Sig, SigSym, State, TokSym, Type, Val, WireSym)
from hdl.images import ImageError, load_image
from hdl.ir import MAX_WIDTH, Circuit, Field, Loc, Memory, Op, Token, TokenKind


class Elaborator(ExprMixin, StmtMixin):
    """Elaborates one top (circuit or module); errors go to ``diags``. Files' global names,
    module instances and circuits are handled here; expressions and statements in the mixins."""

    def build_globals(self, f: FileCtx) -> None:
        """Fill ``f.scope``: imported names first (a name declared by two imported files is
        an error), then the file's own declarations (which hide imported ones)."""
        if f.globals_done:
            return
        f.globals_done = True
        came_from: dict[str, FileCtx] = {}
        for sub, at in f.imports:
            self.build_globals(sub)
            for name in sub.scope.locs:          # the imported file's own declarations
                sym = sub.scope.syms[name]
                first = f.scope.syms.setdefault(name, sym)
                if first is not sym:
                    self.err(at, f"'{name}' is declared by both {came_from[name].name} and "
                                 f"{sub.name}: rename one, or import only one",
                             [(came_from[name].scope.locs[name], "declared here"),
                              (sub.scope.locs[name], "and here")])
                came_from.setdefault(name, sub)
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
            self.err(loc, f"module '{decl.name}' has {len(ins)} input{'s' if len(ins) != 1 else ''}, "
                          f"but {len(positional)} values are given")
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
        outer = self.b.enter(self.prefix + inst_name, decl.name, loc)
        try:
            return self.module_body(m, pvals, given, self.prefix + inst_name + ".")  # type: ignore[arg-type]
        finally:
            self.b.leave(outer)

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
                    prefix: str) -> dict[str, Sig] | None:
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
                    self.err(p.loc, f"parameter '{p.name}' of module '{decl.name}' has no value "
                                    f"and no default")
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

    def circuit(self, c: CircuitSym) -> Circuit | None:
        """Elaborate circuit ``c``: its IR without nodes (see :meth:`Builder.emit`), or None."""
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
            if out.memories[name].read_under_write == "new":    # reads see this write
                r = self.b.see_write(name, (w.addr, w.data, w.enable))
                if r is not None:
                    self.err(w.loc, f"the write to transparent memory '{name}' depends on a "
                                    f"read of '{name}' in the same step; its reads see this "
                                    f"write, so that is a combinational loop",
                             [(self.b.locs[r], f"the read of '{name}' is here")])
        out.kinds = [k.kind for k in self.kinds]
        return out

    def field_bound(self, s: ast.TokenDecl, fd: ast.FieldDecl, t: Type, scope: Scope
                    ) -> int | None:
        """The bound of token field ``fd`` (``i: u4 < 11``), checked: the kind's last field
        (the payload's highest bits, so the kind's ids stay one run), unsigned, and
        wider than the field's lower half (every single bit of it stays an id)."""
        assert fd.bound is not None
        b = self.const_eval(fd.bound, scope, "field bound")
        if b is None:
            return None
        where = f"field '{fd.name}' of {s.name}"
        if fd is not s.fields[-1]:
            self.err(fd.bound.loc, f"{where}: only a kind's last field may have a bound (it is "
                                   f"the payload's highest bits): declare '{fd.name}' last")
        elif t.signed or t.enum:
            self.err(fd.bound.loc, f"{where}: a bound needs an unsigned field, not "
                                   f"{'an enum' if t.enum else 'a signed one'}")
        elif not (1 << (t.width - 1)) < b <= (1 << t.width):
            self.err(fd.bound.loc, f"{where}: bound {b} must be above {1 << (t.width - 1)} "
                                   f"and at most {1 << t.width} for u{t.width} (a smaller "
                                   "bound fits a narrower field)")
        else:
            return b
        return None

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
                    esym = scope.lookup(t.enum) if t.enum else None
                    enum = ((esym.name, tuple(esym.members.items()))
                            if isinstance(esym, EnumSym) else None)
                    bound = None
                    if fd.bound is not None:
                        bound = self.field_bound(s, fd, t, scope)
                    fields.append(Field(fd.name, t.width, t.signed, enum, bound))
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
        if depth > MAX_MEM_DEPTH:
            self.err(s.depth.loc, f"memory depth {depth} is too large (at most "
                                  f"{MAX_MEM_DEPTH:,} words)")
            return
        image, init = None, ()
        if s.image is not None:
            if s.kind is MemKind.RAM:
                self.err(s.image_loc or s.loc, "only a rom has an image; a ram starts as zeros")
                return
            assert self.file is not None
            path = (self.file.dir / s.image)
            image = str(resolved(path))
            loaded = rom_image(path, t.width, depth)
            if isinstance(loaded, str):
                self.err(s.image_loc or s.loc, loaded)
                return
            init = loaded
        if s.transparent_loc is not None and s.kind is MemKind.ROM:
            self.err(s.transparent_loc, "only a ram can be transparent (a rom is never written)")
            return
        if s.table_loc is not None and s.kind is MemKind.RAM:
            self.err(s.table_loc, "only a rom can be a table (a table's words become rows of "
                                  "the embedding and never change)")
            return
        m = Memory(s.name, s.kind, t.width, depth, s.loc, image, init,
                   "new" if s.transparent_loc is not None else "old", s.table_loc is not None)
        if scope.syms.get(s.name) is POISON:
            del scope.syms[s.name]
        if self.declare(scope, s.name, MemSym(m, t), s.loc):
            out.memories[s.name] = m


def rom_image(path: Path, width: int, depth: int) -> tuple[int, ...] | str:
    """A ROM's default image (read by :func:`hdl.images.load_image`), padded with zeros
    to ``depth`` words. Returns the words, or an error message naming the image."""
    try:
        words = load_image(path, width, depth)
    except ImageError as e:
        where = f" line {e.line}: " if e.line else " "
        return f"ROM image '{path.name}'{where}{e.problem}"
    return tuple(words) + (0,) * (depth - len(words))
