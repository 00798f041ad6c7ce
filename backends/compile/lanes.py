"""Lane allocation: logical lanes -> physical residual dimensions, with liveness reuse.

Takes: a scheduled :class:`backends.compile.program.Program`. Gives: ``prog.phys`` (lane -> physical
dim, counted after the ballast dims) and ``prog.n_phys``; adds "clear" neurons to the MLP
layers that reuse a dimension. The retiming pass (:mod:`backends.compile.retime`), which moves MLP
neurons later where that needs fewer dims, runs before it and builds on :func:`plan`.

A lane is live from the slot that writes it to the last slot that reads it (MLP gates, GDN
query/key/value/z forms at every layer holding a bank of the memory, and the lm_head at the
end). A lane written by an MLP may take over a dimension whose previous occupant is no longer
read after that MLP's input: the writing MLP then also adds ``-old`` (one neuron
``-relu(old)``, plus ``+relu(-old)`` when the old lane can be negative), so the dimension
holds exactly the new value afterwards. A lane written by a GDN read (which cannot subtract)
may take a dimension whose occupant is last read before an MLP that precedes the memory's
first bank layer (a memory spread over layers adds part of each read in each of them): that
MLP clears the dimension (the same neurons), so it holds 0 when the GDNs add the new value. Lanes written by
the embedding take fresh dimensions. With a fixed MLP budget a dimension is only reused when
the clearing layer has room for the clear neurons.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from backends.compile.program import Allocated, Form, Neuron, Program, Retimed, copy_for_change

#: The read slot of the lm_head (after every layer).
END = 1 << 30


@dataclass
class Allocation:
    """The result of :func:`plan`: ``phys`` (lane -> dim), ``n_phys`` dims, and the clear
    neurons to add per MLP layer (``extra``)."""
    phys: list[int]
    n_phys: int
    extra: dict[int, list[Neuron]]


def reads(prog: Program, mlp: dict[int, list[Neuron]] | None = None) -> dict[int, int]:
    """lane -> last slot that reads it (``END`` for the lm_head), for the neurons of ``mlp``
    (default ``prog.mlp``); lanes nobody reads are absent."""
    last: dict[int, int] = {}

    def see(f: Form, slot: int) -> None:
        for ln in f.t:
            if last.get(ln, -2) < slot:
                last[ln] = slot
    for L, ns in (prog.mlp if mlp is None else mlp).items():
        for n in ns:
            see(n.gate, 2 * L + 1)
    for p in prog.mems.values():
        slot = 2 * max([L for L, _ in p.banks] or [p.layer])
        for f in p.input_forms():
            see(f, slot)
    for f in prog.out_kind:
        see(f, END)
    for fl in prog.out_fields:
        for bits in fl:
            for f in bits:
                see(f, END)
    return last


def first_writes(prog: Program) -> dict[int, int]:
    """lane -> first slot that adds to it, for lanes read from memories: a memory whose
    banks span layers ``layer .. last`` adds each bank's part of the word in its own layer, so
    its read lanes (``slot`` 2*last) already receive values from slot 2*layer on."""
    first: dict[int, int] = {}
    for p in prog.mems.values():
        s = 2 * min([p.layer] + [L for L, _ in p.banks])
        for port in p.reads:
            for ln in port.lanes:
                first[ln] = s
    return first


def plan(prog: Program, slots: Sequence[int] | None = None,
         mlp: dict[int, list[Neuron]] | None = None, cap: int | None = None) -> Allocation:
    """The allocation of ``prog`` with lane write slots ``slots`` (default: each lane's
    ``slot``) and neurons ``mlp`` (default ``prog.mlp``), adding clear neurons only while a
    layer holds at most ``cap`` neurons (default: the target's ``mlp_width``; None: no
    limit); changes nothing on ``prog``."""
    mlp = prog.mlp if mlp is None else mlp
    slot = [ln.slot for ln in prog.lanes] if slots is None else slots
    last = reads(prog, mlp)
    cap = prog.target.mlp_width if cap is None else cap
    first = first_writes(prog)
    start = [first.get(ln, s) for ln, s in enumerate(slot)]
    order = sorted(range(len(prog.lanes)), key=lambda ln: (start[ln], ln))
    phys = [-1] * len(prog.lanes)
    free: list[tuple[int, int, int]] = []     # (free after slot, dim, last occupant lane)
    n_phys = 0
    extra: dict[int, list[Neuron]] = {}
    for ln in order:
        lane = prog.lanes[ln]
        w = slot[ln]
        end = last.get(ln, w)
        reuse = None
        gdn = w >= 0 and w % 2 == 0
        if gdn:             # the dim must be clear before the memory's first bank adds to it
            w = start[ln]
        if w >= 0 and free and free[0][0] <= w - gdn:
            occ = free[0][2]
            o = prog.lanes[occ]
            need = (1 if o.hi > 0 else 0) + (1 if o.lo < 0 else 0)
            # the clear goes in the writing MLP, or (GDN writer) in an MLP between the
            # occupant's last read and the GDN: the dim then holds 0 when the GDN adds to it
            for L in (range(w // 2 - 1, free[0][0] // 2 - 1, -1) if gdn else [w // 2]):
                used = len(mlp.get(L, [])) + len(extra.get(L, []))
                if cap is None or used + need <= cap:
                    reuse = heapq.heappop(free)
                    of = Form(0, {occ: 1}, o.lo, o.hi)
                    if o.hi > 0:
                        extra.setdefault(L, []).append(Neuron(of, {ln: -1}, lane.node, clear=True))
                    if o.lo < 0:
                        extra.setdefault(L, []).append(
                            Neuron(Form(0, {occ: -1}, -o.hi, -o.lo), {ln: 1}, lane.node, clear=True))
                    break
        if reuse is None:
            phys[ln] = n_phys
            n_phys += 1
        else:
            phys[ln] = reuse[1]
        if end < END:       # free once read for the last time and present in the residual
            heapq.heappush(free, (max(end, slot[ln] + 1), phys[ln], ln))
    return Allocation(phys, n_phys, extra)


def run(retimed: Retimed) -> Allocated:
    """Allocate a copy of ``retimed``'s program (``retimed`` is left as it was) within the MLP
    width retiming kept to: the :class:`backends.compile.program.Allocated` program."""
    prog = copy_for_change(retimed.prog)
    allocate(prog, retimed.mlp_width)
    return Allocated(prog)


def allocate(prog: Program, cap: int | None = None) -> None:
    """Fill ``prog.phys`` / ``prog.n_phys`` (see the module docstring), adding clear neurons
    only while an MLP layer holds at most ``cap`` neurons (default: the target's
    ``mlp_width``). After :func:`backends.compile.retime.retime`, pass the width it kept to
    (``prog.sched["mlp_width"]``; on ``compact`` the ASAP program's widest layer, clear
    neurons included)."""
    a = plan(prog, cap=cap)
    for L, ns in a.extra.items():
        prog.mlp.setdefault(L, []).extend(ns)
    prog.phys = a.phys
    prog.n_phys = a.n_phys
