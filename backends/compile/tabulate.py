"""Token tables: logic that reads only the current token, looked up in the embedding.

A node whose value depends on the current token alone (its cone reaches only token kind and
field reads and constants, no memory) has the same value at every position that holds the
same token id, so the embedding can hold it: instead of neurons (one MLP stage or more,
every step), the node gets fresh embedding lanes (slot -1) and the emitter writes its bits
into every token id's row. ``tok.kind == Jump``, a field of one kind OR-ed with a field of
another, a field compared with a constant: all ready before layer 0, so a memory written
with them (a one-word state RAM such as the core's ``pcr``) sits in layer 0 instead of 1.

Costs: one residual lane per tabulated bit (live from the embedding to its last reader) and
the embedding entries where the bit is 1 (counted with the vocabulary's weights, not the
layers'). Wiring that only relabels lanes (slices, concatenations, NOT, constant shifts,
token reads, constants) is never tabulated: it costs nothing already.

Takes: a checked :class:`hdl.ir.Circuit`. Gives: :func:`plan` (which nodes the lowering
tabulates, and which it lowers), :class:`TokenTable` (their values on token ids, for the
embedding rows).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hdl.ir import Circuit, Node, Op
from hdl.sim.codegen import numpy_cone_source

#: ops that never read memory state: a node built only of these over the token is tabulable
_PURE_SOURCES = (Op.TOKEN_KIND, Op.TOKEN_FIELD, Op.CONST)
_SHIFTS = (Op.SHL, Op.LSHR, Op.ASHR)


def _free(c: Circuit, n: Node) -> bool:
    """True when the lowering only relabels lanes for ``n`` (no neuron)."""
    if n.op in _PURE_SOURCES or n.op in (Op.SLICE, Op.CONCAT, Op.NOT):
        return True
    return n.op in _SHIFTS and c.nodes[n.args[1]].op is Op.CONST


@dataclass(frozen=True)
class Tabulation:
    """``live``: the nodes to lower (some memory write or the next token reads them, through
    lowered nodes only); ``tabulated``: the live nodes whose bits the embedding holds, in
    node order."""
    live: frozenset[int]
    tabulated: tuple[int, ...]


def token_only(c: Circuit) -> set[int]:
    """The nodes whose value is a function of the current token alone
    (:meth:`hdl.ir.Circuit.token_only`: reads of a ``table`` ROM included)."""
    return c.token_only()


def plan(c: Circuit, tabulate: bool = True) -> Tabulation:
    """Which nodes the lowering needs, and which of them come from the embedding: a
    token-only node that costs neurons and that logic reading memory (or a memory port)
    reads, directly or through free wiring. Its own cone is then evaluated per token id,
    not lowered. Token-only logic that only the next token reads stays in the layers: a
    circuit without memories would otherwise become one lookup table from token to token.
    With ``tabulate`` False nothing is tabulated (every needed node is lowered), except
    the reads of ``table`` ROMs, which are always tabulated: no memory holds their words."""
    tonly = token_only(c) if tabulate else set()
    reads = {n.id for n in c.nodes if n.op is Op.MEM_READ and c.memories[n.param].table}
    live: set[int] = set()
    tab: set[int] = set()
    want: set[int] = set()      # free token-only wiring whose bits should be table lanes
    for n in reversed(c.nodes):
        if not (n.op in (Op.MEM_WRITE, Op.TOKEN_OUT) or n.id in live):
            continue
        live.add(n.id)
        if n.id in reads:
            tab.add(n.id)
        if n.id in tab:
            continue
        pull = n.id in want or (n.id not in tonly and n.op is not Op.TOKEN_OUT)
        for a in n.args:
            live.add(a)
            if pull and a in tonly:
                (want if _free(c, c.nodes[a]) else tab).add(a)
    return Tabulation(frozenset(live), tuple(sorted(tab)))


class TokenTable:
    """The values of ``nodes`` (token-only) on token ids, vectorised with numpy; a read of
    a ``table`` ROM looks its word up in the memory's image (``init``; 0 past the depth)."""

    def __init__(self, c: Circuit, nodes: Sequence[int]):
        self.c = c
        self.nodes = list(nodes)
        self.inputs: list[tuple[int, Any]] = []    # (node, (kind, field) or None for the kind)
        srcs: dict[int, str] = {}
        for n in c.nodes:
            if n.op is Op.TOKEN_KIND or n.op is Op.TOKEN_FIELD:
                srcs[n.id] = f"inp[{len(self.inputs)}]"
                self.inputs.append((n.id, None if n.op is Op.TOKEN_KIND else n.param))
        ns: dict[str, Any] = {}
        tables: dict[str, str] = {}
        for i, (name, m) in enumerate(sorted(c.memories.items())):
            if m.table:
                tables[name] = f"T{i}"
                words = np.zeros(m.depth + 1, dtype=np.uint64)    # the last: past the depth
                words[:len(m.init)] = np.asarray(m.init, dtype=np.uint64)
                ns[f"T{i}"] = words
        if self.nodes:
            exec(compile(numpy_cone_source(c, self.nodes, srcs, tables),
                         f"<token table {c.name}>", "exec"), ns)
        self._batch = ns.get("batch")

    def values(self, kind: int, payload: np.ndarray) -> list[np.ndarray]:
        """Per node, its value (``uint64``) on the ids of token kind ``kind`` with payloads
        ``payload`` (fields concatenated, first field lowest; another kind's fields read 0)."""
        n = len(payload)
        if not self.nodes:
            return []
        payload = np.asarray(payload, dtype=np.uint64)
        offs, o = [], 0
        for f in self.c.kinds[kind].fields:
            offs.append(o)
            o += f.width
        cols = []
        for _, src in self.inputs:
            if src is None:
                cols.append(np.full(n, kind, dtype=np.uint64))
            elif src[0] != kind:
                cols.append(np.zeros(n, dtype=np.uint64))
            else:
                w = self.c.kinds[kind].fields[src[1]].width
                cols.append((payload >> np.uint64(offs[src[1]])) & np.uint64((1 << w) - 1))
        return [np.broadcast_to(v, (n,)) for v in self._batch(cols, n)]
