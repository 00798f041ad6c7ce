"""Elaborate parsed sources into the netlist IR (the entry points; the work is in hdl/elab/).

Takes: a root source file (path or text). Gives: :class:`hdl.ir.Circuit` for a named
``circuit`` (:func:`elaborate_circuit`) or a ``module`` alone (:func:`elaborate_module`), or
raises :class:`hdl.diagnostics.CompileError` with every error found (syntax, names, widths,
drivers, loops, matches, memories, imports), each located and rendered with its source line.
"""
from __future__ import annotations

from pathlib import Path

from common.deep import call_deep
from hdl.diagnostics import Collector, CompileError, Diagnostic, suggest, too_deep
from hdl.elab.elaborator import Elaborator
from hdl.elab.files import FileCtx, Loader
from hdl.elab.values import CircuitSym, ModuleSym
from hdl.ir import Circuit, Loc, Op


def _load(path: Path | None, text: str | None, filename: str) -> tuple[Collector, Loader, FileCtx | None]:
    diags = Collector()
    loader = Loader(diags)
    if text is not None:
        root = loader.load_text(text, filename, Path(filename).parent if filename != "<string>"
                                else Path.cwd())
    else:
        assert path is not None
        try:
            root = loader.load_path(path, filename)
        except OSError as e:
            raise CompileError([Diagnostic(Loc(filename, 0, 0),
                                           f"cannot read source file: {e.strerror or e}")]) from None
    return diags, loader, root


def _own(root: FileCtx, kind: type) -> list:
    return [s for n, s in root.scope.syms.items() if isinstance(s, kind) and n in root.scope.locs]


def _finish(el: Elaborator, diags: Collector, loader: Loader, circuit: Circuit | None) -> Circuit:
    for hops in el.b.cycles():
        if not hops:
            continue
        names = [name for _pid, name in hops]
        locs = [el.b.locs[pid] for pid, _name in hops]
        path = " -> ".join(names + [names[0]])
        diags.error(locs[0], f"combinational loop: {path}",
                    [(loc, f"signal {n}") for loc, n in zip(locs, names)])
    diags.raise_if_errors(loader.sources)
    assert circuit is not None
    el.b.emit(circuit)
    _check_tables(circuit, diags)
    diags.raise_if_errors(loader.sources)
    circuit.check()
    return circuit


def _check_tables(c: Circuit, diags: Collector) -> None:
    """Every read of a ``table`` ROM must be at an address the current token alone decides
    (its words become token-table lanes); name the state read an address depends on."""
    tables = [n for n in c.nodes if n.op is Op.MEM_READ and c.memories[n.param].table]
    if not tables:
        return
    tonly = c.token_only()
    for r in tables:
        if r.args[0] in tonly:
            continue
        seen, todo, culprit = set(), [r.args[0]], None
        while todo and culprit is None:
            x = todo.pop()
            if x in seen or x in tonly:
                continue
            seen.add(x)
            n = c.nodes[x]
            if n.op is Op.MEM_READ:
                culprit = n
            todo.extend(n.args)
        why = ([(culprit.loc, f"the address reads memory '{culprit.param}' here")]
               if culprit is not None else [])
        diags.error(r.loc, f"table rom '{r.param}' is read at an address that depends on "
                           f"more than the current token; a table rom's words become rows "
                           f"of the embedding, so its address may use token fields and "
                           f"constants only", why)


def list_circuits(root: FileCtx, diags: Collector) -> list[str]:
    Elaborator(diags).build_globals(root)
    return [s.decl.name for s in _own(root, CircuitSym)]


def _guard_depth(fn):
    """Run ``fn`` on a deep stack (:func:`common.deep.call_deep`: the parser and the
    elaborator recurse once per nesting level, and the parser bounds the nesting, with a
    located error, at :data:`hdl.parser.MAX_NESTING`); a RecursionError all the same becomes
    the whole-file CompileError."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return call_deep(fn, *args, **kwargs)
        except RecursionError:
            name = kwargs.get("filename") or str(args[0] if args and args[0] is not None else "<string>")
            raise too_deep(name) from None
    return wrapper


def _prepare(path: Path | None, text: str | None, filename: str | None
             ) -> tuple[str, Collector, Loader, FileCtx, Elaborator]:
    """Parse the root file and its imports and build their global scopes; raise the
    CompileError if that found any error. Gives the root's shown name, the collector, the
    loader, the root file and the elaborator, ready to elaborate a circuit or module."""
    shown = filename or (str(path) if path is not None else "<string>")
    diags, loader, root = _load(path, text, shown)
    if root is None:
        diags.raise_if_errors(loader.sources)
        raise AssertionError("unreachable: a file that failed to load has reported why")
    el = Elaborator(diags)
    el.build_globals(root)
    diags.raise_if_errors(loader.sources)
    return shown, diags, loader, root, el


@_guard_depth
def elaborate_circuit(path: Path | None, top: str | None, text: str | None = None,
                      filename: str | None = None) -> Circuit:
    """Parse ``path`` (or ``text``), then elaborate its circuit ``top`` (or its only one)."""
    shown, diags, loader, root, el = _prepare(path, text, filename)
    circuits = _own(root, CircuitSym)
    if top is None:
        if len(circuits) != 1:
            names = ", ".join(c.decl.name for c in circuits)
            msg = (f"{shown} declares no circuit" if not circuits else
                   f"{shown} declares several circuits ({names}): choose one with --top")
            raise CompileError([Diagnostic(Loc(shown, 0, 0), msg)], loader.sources)
        sym = circuits[0]
    else:
        found = [c for c in circuits if c.decl.name == top]
        if not found:
            is_module = isinstance(root.scope.syms.get(top), ModuleSym)
            msg = (f"'{top}' in {shown} is a module, not a circuit (token kinds and `next`)"
                   if is_module else f"no circuit '{top}' in {shown}"
                   f"{suggest(top, [c.decl.name for c in circuits])}")
            raise CompileError([Diagnostic(Loc(shown, 0, 0), msg)], loader.sources)
        sym = found[0]
    circuit = el.circuit(sym)
    return _finish(el, diags, loader, circuit)


@_guard_depth
def elaborate_module(path: Path | None, name: str, params: dict[str, int] | None = None,
                     text: str | None = None, filename: str | None = None) -> Circuit:
    """Elaborate module ``name`` of ``path`` alone: INPUT/OUTPUT nodes and ``ports`` set."""
    shown, diags, loader, root, el = _prepare(path, text, filename)
    sym = root.scope.syms.get(name)
    if not isinstance(sym, ModuleSym):
        mods = [n for n, s in root.scope.syms.items() if isinstance(s, ModuleSym)]
        raise CompileError([Diagnostic(Loc(shown, 0, 0),
                                       f"no module '{name}' in {shown}{suggest(name, mods)}")],
                           loader.sources)
    params = dict(params or {})
    known = [p.name for p in sym.decl.params]
    for p in params:
        if p not in known:
            diags.error(sym.decl.loc, f"module '{name}' has no parameter '{p}'{suggest(p, known)}")
    diags.raise_if_errors(loader.sources)
    circuit = Circuit(name, sym.decl.loc)
    outs = el.module_body(sym, params, None, "")
    if outs is not None:
        for port in sym.decl.ports:
            if port.direction == "out" and port.name in outs:
                el.b.add(Op.OUTPUT, 0, (outs[port.name].node,), port.name, port.loc)
    circuit.ports = list(el.top_ports)
    return _finish(el, diags, loader, circuit)
