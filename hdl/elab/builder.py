"""The IR under construction: proto-nodes with forward references, folding and hash-consing.

Takes: ``add`` calls from the elaborator. Gives: node ids; :meth:`Builder.emit` turns the
proto-nodes into an :class:`hdl.ir.Circuit` node list in topological order, after wires
(placeholders that may be read before they are driven) are resolved.

A wire is an ``ALIAS`` proto-node: created when declared, read by everything that uses the
wire, and pointed at its driver when the driver is known. Combinational loops are cycles
through aliases; :meth:`Builder.cycles` finds them with networkx.
"""
from __future__ import annotations

from typing import Any

import networkx as nx

from hdl.ir import Circuit, Instance, Loc, Node, Op

_SINKS = {Op.MEM_WRITE, Op.TOKEN_OUT, Op.OUTPUT}
ALIAS = "alias"   # pseudo-op: a wire placeholder; args = (driver,) once driven
_NO_FOLD = {Op.TOKEN_KIND, Op.TOKEN_FIELD, Op.MEM_READ, Op.MEM_WRITE, Op.TOKEN_OUT, Op.INPUT,
            Op.OUTPUT, ALIAS}


def _signed(v: int, w: int) -> int:
    return v - (1 << w) if v >> (w - 1) & 1 else v


def fold(op: Op, width: int, vals: list[int], widths: list[int], param: Any) -> int:
    """The value of ``op`` on constant arguments (docs/ir.md semantics)."""
    m = (1 << width) - 1
    if op is Op.ADD:
        return (vals[0] + vals[1]) & m
    if op is Op.SUB:
        return (vals[0] - vals[1]) & m
    if op is Op.MUL:
        return (vals[0] * vals[1]) & m
    if op is Op.AND:
        return vals[0] & vals[1]
    if op is Op.OR:
        return vals[0] | vals[1]
    if op is Op.XOR:
        return vals[0] ^ vals[1]
    if op is Op.NOT:
        return ~vals[0] & m
    if op is Op.EQ:
        return int(vals[0] == vals[1])
    if op is Op.ULT:
        return int(vals[0] < vals[1])
    if op is Op.SLT:
        return int(_signed(vals[0], widths[0]) < _signed(vals[1], widths[1]))
    if op is Op.SHL:
        return (vals[0] << vals[1]) & m if vals[1] < width else 0
    if op is Op.LSHR:
        return vals[0] >> vals[1] if vals[1] < width else 0
    if op is Op.ASHR:
        return (_signed(vals[0], width) >> min(vals[1], width)) & m
    if op is Op.SLICE:
        return (vals[0] >> param) & m
    if op is Op.CONCAT:
        out = 0
        for v, w in zip(vals, widths):
            out = (out << w) | v
        return out
    if op is Op.MUX:
        return vals[2] if vals[0] else vals[1]
    raise ValueError(f"cannot fold {op}")


class Builder:
    """Proto-nodes: parallel lists indexed by id. ``add`` folds constants, simplifies a few
    trivial forms (mux on a constant select, mux of equal arms, full-width slice) and reuses
    an identical existing node (hash-consing)."""

    def __init__(self) -> None:
        self.ops: list[Any] = []
        self.widths: list[int] = []
        self.args: list[tuple[int, ...]] = []
        self.params: list[Any] = []
        self.locs: list[Loc] = []
        self.names: dict[str, int] = {}        # hierarchical signal name -> proto id
        self.alias_names: dict[int, str] = {}  # alias proto id -> signal name
        self._memo: dict[tuple, int] = {}
        self.instances: list[Instance] = []    # the module instances made so far
        self.inst: int = -1                    # the one being elaborated (-1: the top)
        self.insts: list[int] = []             # per proto node: the instance that made it

    def __len__(self) -> int:
        return len(self.ops)

    def _new(self, op: Any, width: int, args: tuple[int, ...], param: Any, loc: Loc) -> int:
        nid = len(self.ops)
        self.ops.append(op)
        self.widths.append(width)
        self.args.append(args)
        self.params.append(param)
        self.locs.append(loc)
        self.insts.append(self.inst)
        return nid

    def enter(self, path: str, module: str, loc: Loc) -> int:
        """Start elaborating an instance of ``module`` (``path``, instantiated at ``loc``)
        inside the current one: nodes made from now on are its. Returns the instance to
        go back to (:meth:`leave`)."""
        outer = self.inst
        self.instances.append(Instance(path, module, loc, outer))
        self.inst = len(self.instances) - 1
        return outer

    def leave(self, outer: int) -> None:
        self.inst = outer

    def const_value(self, nid: int) -> int | None:
        return self.params[nid] if self.ops[nid] is Op.CONST else None

    def const(self, value: int, width: int, loc: Loc) -> int:
        return self.add(Op.CONST, width, (), value & ((1 << width) - 1), loc)

    def add(self, op: Op, width: int, args: tuple[int, ...] = (), param: Any = None,
            loc: Loc = Loc("<builtin>", 0, 0)) -> int:
        args = tuple(args)
        if op not in _NO_FOLD and args:
            cv = [self.const_value(a) for a in args]
            if all(v is not None for v in cv):
                value = fold(op, width, cv, [self.widths[a] for a in args], param)  # type: ignore[arg-type]
                return self.const(value, width, loc)
            if op is Op.MUX:
                if cv[0] is not None:
                    return args[2] if cv[0] else args[1]
                if args[1] == args[2]:
                    return args[1]
            if op is Op.SLICE and param == 0 and self.widths[args[0]] == width:
                return args[0]
            if op is Op.CONCAT and len(args) == 1:
                return args[0]
        key = (op, width, args, param)
        if op not in (Op.MEM_WRITE, Op.TOKEN_OUT, Op.OUTPUT, Op.INPUT):
            hit = self._memo.get(key)
            if hit is not None:
                return hit
        nid = self._new(op, width, args, param, loc)
        self._memo[key] = nid
        return nid

    def see_write(self, memory: str, write: tuple[int, int, int]) -> int | None:
        """Make every read of the transparent ``memory`` carry its write's (address, data,
        enable): read-under-write "new" (docs/ir.md). Call once every read exists. Returns
        a read of ``memory`` the write depends on (nothing changed then: a loop), or None."""
        seen, stack = set(write), list(write)
        while stack:
            nid = stack.pop()
            if self.ops[nid] is Op.MEM_READ and self.params[nid] == memory:
                return nid
            for a in self.args[nid]:
                if a not in seen:
                    seen.add(a)
                    stack.append(a)
        for nid, op in enumerate(self.ops):
            if op is Op.MEM_READ and self.params[nid] == memory:
                self.args[nid] = self.args[nid][:1] + tuple(write)
        return None

    def alias(self, name: str, width: int, loc: Loc) -> int:
        """A placeholder for the wire ``name``; :meth:`drive` sets its driver."""
        nid = self._new(ALIAS, width, (), None, loc)
        self.alias_names[nid] = name
        return nid

    def drive(self, alias: int, driver: int) -> None:
        self.args[alias] = (driver,)

    def name(self, name: str, nid: int) -> str:
        """Record a named signal; returns the name used (``#2`` etc. added when reused)."""
        final, n = name, 1
        while final in self.names:
            n += 1
            final = f"{name}#{n}"
        self.names[final] = nid
        return final

    # ---- graph -----------------------------------------------------------------------------
    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(range(len(self.ops)))
        g.add_edges_from((a, n) for n in range(len(self.ops)) for a in self.args[n])
        return g

    def signal_names(self) -> dict[int, str]:
        """proto id -> the signal name it carries (a wire's own name, else the first name
        given to that node)."""
        out: dict[int, str] = {}
        for name, pid in self.names.items():
            out.setdefault(pid, name)
        out.update(self.alias_names)
        return out

    def cycles(self) -> list[list[tuple[int, str]]]:
        """Each combinational loop as its named signals (proto id, name) in the order the
        values flow, from the lowest-numbered one; one loop per strongly connected part."""
        if self._topo(range(len(self.ops))) is not None:
            return []
        g = self.graph()
        named = self.signal_names()
        loops = []
        for comp in nx.strongly_connected_components(g):
            first = next(iter(comp))
            if len(comp) == 1 and not g.has_edge(first, first):
                continue
            start = min((n for n in comp if n in self.alias_names), default=min(comp))
            cycle = nx.find_cycle(g.subgraph(comp), source=start)
            hops = [(u, named[u]) for u, _v in cycle if u in named]
            if hops:
                k = hops.index(min(hops))
                hops = hops[k:] + hops[:k]
            loops.append(hops)
        loops.sort()
        return loops

    def _topo(self, roots) -> list[int] | None:
        """Nodes reachable from ``roots`` (through args), arguments first, in id order where
        the dependencies allow; None if there is a cycle."""
        done: set[int] = set()
        on_path: set[int] = set()
        order: list[int] = []
        for root in roots:
            if root in done:
                continue
            stack = [(root, iter(self.args[root]))]
            on_path.add(root)
            while stack:
                node, it = stack[-1]
                for a in it:
                    if a in done:
                        continue
                    if a in on_path:
                        return None
                    on_path.add(a)
                    stack.append((a, iter(self.args[a])))
                    break
                else:
                    stack.pop()
                    on_path.discard(node)
                    done.add(node)
                    order.append(node)
        return order

    # ---- emission --------------------------------------------------------------------------
    def emit(self, circuit: Circuit) -> None:
        """Fill ``circuit.nodes`` and ``circuit.names``: aliases resolved, topological order,
        identical nodes merged once more (resolution can make nodes equal)."""
        # keep what a sink (output, token, memory write) or a named signal depends on
        live = {n for n in range(len(self.ops)) if self.ops[n] in _SINKS}
        live |= set(self.names.values())
        stack = list(live)
        while stack:
            for a in self.args[stack.pop()]:
                if a not in live:
                    live.add(a)
                    stack.append(a)
        order = self._topo(sorted(live))
        if order is None:
            raise ValueError("emit() on a graph with a cycle; report cycles() first")
        final: dict[int, int] = {}
        specs: list[tuple[Any, int, tuple[int, ...], Any, Loc]] = []
        memo: dict[tuple, int] = {}
        inst_of: list[int] = []
        for pid in order:
            op = self.ops[pid]
            args = tuple(final[a] for a in self.args[pid])
            if op == ALIAS:
                final[pid] = args[0]
                continue
            key = (op, self.widths[pid], args, self.params[pid])
            if op not in (Op.MEM_WRITE, Op.TOKEN_OUT, Op.OUTPUT, Op.INPUT) and key in memo:
                final[pid] = memo[key]
                continue
            memo[key] = final[pid] = len(specs)
            specs.append((op, self.widths[pid], args, self.params[pid], self.locs[pid]))
            inst_of.append(self.insts[pid])
        node_name: dict[int, str] = {}
        for name, pid in self.names.items():
            circuit.names[name] = final[pid]
            node_name.setdefault(final[pid], name)
        circuit.nodes = [Node(i, op, w, args, param, loc, node_name.get(i))
                         for i, (op, w, args, param, loc) in enumerate(specs)]
        circuit.instances = list(self.instances)
        circuit.inst_of = inst_of
