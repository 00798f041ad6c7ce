"""Scheduling: the depth rule, memory layers, and the final layer assignment.

Takes: a checked circuit and a :class:`backends.chipdir.target.Target`. Gives: a
:class:`backends.compile.program.Program` whose neurons sit in MLP layers and whose memories sit in
GDN layers, or a :class:`DepthRuleError` naming the offending signal and its source line.

How. The dependency graph (NetworkX, from :meth:`hdl.ir.Circuit.graph`) gives, for every
memory, the memories whose reads feed its inputs (read addresses, write address, data,
enable). A memory must sit in a deeper layer than every memory it depends on; a memory that
depends on itself, or a cycle of memories, breaks the depth rule (the only path from a deep
layer back to a shallow one is the next token). Then neurons are placed greedily, as early
as their inputs allow (ASAP list scheduling under the target's MLP budget), and memories are
pushed down until their inputs are ready and their layer has key heads left: a fixed point,
reached in at most (number of memories x layers) rounds. A target sized to fit (compact)
then gets the smallest key-head budget per layer that keeps the layer count, since every
layer of the checkpoint has the widest layer's head count.
"""
from __future__ import annotations

import networkx as nx

from hdl.diagnostics import CompileError, Diagnostic
from hdl.elab.files import source_texts
from hdl.ir import Circuit, Node, Op
from backends.compile.lower import LoweringError, Lowerer
from backends.compile.program import Placed, Program

from backends.chipdir.target import Target


class DepthRuleError(CompileError):
    """A memory's inputs depend on its own reads (or a cycle of memories)."""


FIX = ("compute the value at this step, carry it in a field of the next token, and write "
       "the memory from that token at the next step")


def _signal_on_path(c: Circuit, g: nx.DiGraph, src: int, dst: int) -> Node:
    """The last named node on a dependency path src -> dst (dst itself if none is named)."""
    path = nx.shortest_path(g, src, dst)
    named = [c.nodes[i] for i in path if c.nodes[i].name]
    return named[-1] if named else c.nodes[dst]


def memory_inputs(c: Circuit) -> dict[str, list[tuple[Node, int]]]:
    """memory -> [(user node, input node id)]: read addresses and write arguments."""
    res: dict[str, list[tuple[Node, int]]] = {m: [] for m in c.state_memories}
    for n in c.nodes:
        if n.op in (Op.MEM_READ, Op.MEM_WRITE) and n.param in res:
            res[n.param] += [(n, a) for a in n.args]
    return res


def check_depth_rule(c: Circuit) -> nx.DiGraph:
    """The memory dependency graph (edge B -> A: A's inputs read B); raises
    :class:`DepthRuleError` for a memory feeding itself or a cycle of memories."""
    g = c.graph()
    feeds: dict[int, dict[str, int]] = {}     # node -> {memory: one read node it depends on}
    for n in c.nodes:
        d: dict[str, int] = {}
        for a in n.args:
            for m, r in feeds.get(a, {}).items():
                d.setdefault(m, r)
        if n.op is Op.MEM_READ and not c.memories[n.param].table:
            d.setdefault(n.param, n.id)
        feeds[n.id] = d
    mg = nx.DiGraph()
    mg.add_nodes_from(c.state_memories)
    why: dict[tuple[str, str], tuple[Node, int, int]] = {}
    for m, uses in memory_inputs(c).items():
        for user, a in uses:
            for b, r in feeds[a].items():
                if not mg.has_edge(b, m):
                    mg.add_edge(b, m)
                    why[(b, m)] = (user, a, r)
    diags = []
    for m in c.state_memories:
        if mg.has_edge(m, m):
            user, a, r = why[(m, m)]
            sig = _signal_on_path(c, g, r, a)
            what = "write to" if user.op is Op.MEM_WRITE else "read address of"
            diags.append(Diagnostic(
                sig.loc,
                f"depth rule: the {what} memory '{m}' depends on a read of '{m}' in the same "
                f"step, through {c.describe(sig.id)}; a memory's reads and writes happen in one "
                f"layer, so its address, data and enable must be computed before that layer",
                [(c.nodes[r].loc, f"the read of '{m}' is here"),
                 (user.loc, f"the {what.split()[0]} is here"),
                 (user.loc, f"fix: {FIX}")]))
    if not diags:
        try:
            cyc = nx.find_cycle(mg)
        except nx.NetworkXNoCycle:
            cyc = None
        if cyc:
            b, m = cyc[0][0], cyc[0][1]
            user, a, r = why[(b, m)]
            sig = _signal_on_path(c, g, r, a)
            ring = " -> ".join([e[0] for e in cyc] + [cyc[0][0]])
            diags.append(Diagnostic(
                sig.loc,
                f"depth rule: memories {ring} read each other in the same step (here through "
                f"{c.describe(sig.id)}); each must sit in a deeper layer "
                f"than the memories it reads, which a cycle cannot",
                [(user.loc, f"fix: {FIX}")]))
    if diags:
        raise DepthRuleError(diags, source_texts(n.loc.file for n in c.nodes))
    return mg


def schedule(c: Circuit, target: Target, byte_cells: bool = True,
             tables: bool = True) -> Program:
    """Lower and place the whole circuit (see the module docstring). ``byte_cells``: large
    ROMs may store 8 bits per state cell (exact in bf16, and in fp32 when d_k is a power
    of 4; :func:`backends.chipdir.memory.byte_cells_exact`). ``tables``: token-only logic that memory logic reads
    comes from the embedding (backends.compile.tabulate); False lowers it to neurons."""
    c.check()
    if not c.kinds:
        raise LoweringError(f"{c.loc}: '{c.name}' is a module: compile a circuit with tokens")
    mg = check_depth_rule(c)
    prog = _place(c, target, mg, target.k_heads, byte_cells, tables)
    if target.k_heads is None and prog.mems:
        prog = _balance(c, target, mg, prog, byte_cells, tables)
    return prog


def run(c: Circuit, target: Target, byte_cells: bool = True, tables: bool = True) -> Placed:
    """The first stage of the pipeline: :func:`schedule` as a :class:`backends.compile.program.Placed`."""
    return Placed(schedule(c, target, byte_cells, tables))


def _place(c: Circuit, target: Target, mg: nx.DiGraph, budget: int | None,
           byte_cells: bool, tables: bool = True) -> Program:
    """Lower with memory layers found by the fixed point (module docstring), at most
    ``budget`` key heads per layer (None: any)."""
    height = _heights(mg)
    layer = {m: 0 for m in c.state_memories}
    for m in nx.topological_sort(mg):          # a first guess: one layer per dependency level
        for p in mg.predecessors(m):
            layer[m] = max(layer[m], layer[p] + 1)
    last = dict(layer)
    for _ in range(64 * (len(c.state_memories) + 1) + 64):
        lw = Lowerer(c, target, dict(layer), dict(last), byte_cells, tables)
        prog = lw.run()
        changed = False
        for m, L in lw.bumps.items():
            if L > layer[m]:
                layer[m] = L
                changed = True
        for m in c.state_memories:             # keep dependency order strict
            for p in mg.predecessors(m):
                if layer[m] <= last[p]:
                    layer[m] = last[p] + 1
                    changed = True
        if changed:
            continue
        new_last = allocate_banks(prog, budget, height)
        if new_last != {m: max(layer[m], last[m]) for m in c.state_memories}:
            last = new_last
            continue
        n_layers = max([prog.n_layers] + [L + 1 for L in new_last.values()])
        prog.n_layers = n_layers
        return prog
    raise LoweringError(f"{c.loc}: internal: memory placement did not converge")


def _balance(c: Circuit, target: Target, mg: nx.DiGraph, prog: Program,
             byte_cells: bool, tables: bool = True) -> Program:
    """For a target sized to fit (compact: every layer gets the widest layer's key heads):
    the smallest per-layer key-head budget that keeps ``prog``'s layer count (binary
    search), so banks spread over the layers that have room instead of piling up in one."""
    per: dict[int, int] = {}
    for p in prog.mems.values():
        for L, _ in p.banks:
            per[L] = per.get(L, 0) + 1
    hi = max(per.values())
    lo = max(1, -(-sum(per.values()) // prog.n_layers))
    best = prog
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            q = _place(c, target, mg, mid, byte_cells, tables)
        except LoweringError:
            q = None
        if q is not None and q.n_layers <= prog.n_layers:
            best, hi = q, mid
        else:
            lo = mid + 1
    return best


def _heights(mg: nx.DiGraph) -> dict[str, int]:
    """How many memory layers wait on each memory: 0 for one that no memory reads after it,
    else 1 + the largest of the memories that depend on it."""
    height: dict[str, int] = {}
    for m in reversed(list(nx.topological_sort(mg))):
        height[m] = max((height[s] + 1 for s in mg.successors(m)), default=0)
    return height


def allocate_banks(prog: Program, budget: int | None,
                   height: dict[str, int] | None = None) -> dict[str, int]:
    """Give every bank a (layer, key head): memories in order of first layer, and among
    those of one first layer the ones most memories wait on (``height``) first, then the
    smaller (a big memory spans layers anyway; a small one pushed down a layer delays all
    that reads it), each from its first layer on, filling layers up to ``budget`` key heads.
    Returns each memory's last layer."""
    height = height or {}
    used: dict[int, int] = {}
    last = {}
    for p in sorted(prog.mems.values(), key=lambda p: (p.layer, -height.get(p.name, 0), p.kheads)):
        p.banks = []
        L = p.layer
        for _ in range(p.kheads):
            while budget is not None and used.get(L, 0) >= budget:
                L += 1
            p.banks.append((L, used.get(L, 0)))
            used[L] = used.get(L, 0) + 1
        last[p.name] = max(p.layer, L)
    return last
