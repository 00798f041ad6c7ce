"""Lane allocation: logical lanes -> physical residual dimensions, with liveness reuse.

Takes: a scheduled :class:`backends.lower.Program`. Gives: ``prog.phys`` (lane -> physical
dim, counted after the ballast dims) and ``prog.n_phys``; adds "clear" neurons to the MLP
layers that reuse a dimension.

A lane is live from the slot that writes it to the last slot that reads it (MLP gates, GDN
query/key/value/z forms at every layer holding a bank of the memory, and the lm_head at the
end). A lane written by an MLP may take over a dimension whose previous occupant is no longer
read after that MLP's input: the writing MLP then also adds ``-old`` (one neuron
``-relu(old)``, plus ``+relu(-old)`` when the old lane can be negative), so the dimension
holds exactly the new value afterwards. Lanes written by the embedding or by a GDN read take
fresh dimensions (those writers cannot subtract). With a fixed MLP budget a dimension is only
reused when the writing layer has room for the clear neurons.
"""
from __future__ import annotations

import heapq

from backends.lower import Form, Neuron, Program

END = 1 << 30


def _reads(prog: Program) -> dict[int, int]:
    """lane -> last slot that reads it."""
    last: dict[int, int] = {}

    def see(f: Form, slot: int) -> None:
        for ln in f.t:
            if last.get(ln, -2) < slot:
                last[ln] = slot
    for L, ns in prog.mlp.items():
        for n in ns:
            see(n.gate, 2 * L + 1)
    for p in prog.mems.values():
        layers = sorted({L for L, _ in p.banks}) or [p.layer]
        for port in p.reads:
            for f in port.addr:
                see(f, 2 * max(layers))
        for w in p.writes:
            for f in w.addr + w.data + [w.en]:
                see(f, 2 * max(layers))
    for f in prog.out_kind:
        see(f, END)
    for fl in prog.out_fields:
        for bits in fl:
            for f in bits:
                see(f, END)
    return last


def allocate(prog: Program) -> None:
    """Fill ``prog.phys`` / ``prog.n_phys`` (see the module docstring)."""
    last = _reads(prog)
    cap = prog.target.mlp_width
    order = sorted(range(len(prog.lanes)), key=lambda ln: (prog.lanes[ln].slot, ln))
    phys = [-1] * len(prog.lanes)
    free: list[tuple[int, int, int]] = []     # (free after slot, dim, last occupant lane)
    n_phys = 0
    extra: dict[int, list[Neuron]] = {}
    for ln in order:
        lane = prog.lanes[ln]
        w = lane.slot
        end = last.get(ln, w)
        reuse = None
        if w >= 0 and w % 2 == 1 and free and free[0][0] <= w:
            L = w // 2
            occ = free[0][2]
            o = prog.lanes[occ]
            need = (1 if o.hi > 0 else 0) + (1 if o.lo < 0 else 0)
            used = len(prog.mlp.get(L, [])) + len(extra.get(L, []))
            if cap is None or used + need <= cap:
                reuse = heapq.heappop(free)
                of = Form(0, {occ: 1}, o.lo, o.hi)
                if o.hi > 0:
                    extra.setdefault(L, []).append(Neuron(of, {ln: -1}, lane.node))
                if o.lo < 0:
                    extra.setdefault(L, []).append(
                        Neuron(Form(0, {occ: -1}, -o.hi, -o.lo), {ln: 1}, lane.node))
        if reuse is None:
            phys[ln] = n_phys
            n_phys += 1
        else:
            phys[ln] = reuse[1]
        if end < END:       # free once read for the last time and present in the residual
            heapq.heappush(free, (max(end, w + 1), phys[ln], ln))
    for L, ns in extra.items():
        prog.mlp.setdefault(L, []).extend(ns)
    prog.phys = phys
    prog.n_phys = n_phys
