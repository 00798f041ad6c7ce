"""Retiming: move MLP neurons away from their ASAP layers where that needs fewer residual dims.

Takes: a scheduled :class:`backends.compile.program.Program` (neurons placed as early as their inputs
allow, memories in their GDN layers), before lane allocation. Gives: the same Program with
some neuron *groups* moved to later MLP layers (``prog.mlp`` and the moved lanes' ``slot``)
and ``prog.sched``, a record of the outcome::

    {"asap_dims": 44, "dims": 36, "layers": 24, "moved_neurons": 9, "moved_groups": 9,
     "mlp_width": 58}

(dims as :func:`backends.compile.lanes.plan` allocates them, clear neurons included; ``mlp_width`` is
the MLP budget the pass kept to, which :func:`backends.compile.lanes.allocate` must then keep to). Memories,
GDN layers and the number of layers never change, and the retimed program is kept only when
it needs fewer dims than the ASAP one.

Why. Layers are the dependency depth already; what ASAP wastes is lanes: a value computed in
layer 0 but read in layer 20 holds a residual dim for 20 layers.

How.

1. A *group* is the neurons that write a common lane (union-find over their output lanes);
   it moves as a unit and its output lanes are written in slot 2L+1 of its layer L. It may
   sit from its earliest layer (after every lane its gates read: slot s allows layer
   (s+1)//2) to its latest (ALAP), strictly before every reader: an MLP reader in layer R
   (slot 2R+1) needs L <= R-1; a memory whose read address or write address/data/enable
   reads the lane needs L <= ``p.layer`` - 1 (the write of step t is made in the memory's
   first layer from the previous position's residual, the query from the current one, so
   both need the value before that layer); the lm_head needs L <= n_layers-1.
2. The cost of a placement is the sum over slots of occupancy^2 (occupancy: lanes holding a
   dim in that slot, from the write (a GDN-written lane: from the MLP before, which clears
   its dim) to the last read; the square weights the dense slots, where the dims are
   decided). A pass visits every group once and moves it to the legal layer of least cost,
   the others staying put (moving later frees its output lanes in the slots it skips but
   keeps its input lanes alive until its new layer).
3. Two starts: ASAP, and every group pushed to its latest layer (deepest first, so readers
   are final). From each, passes alternate deepest-first and shallowest-first until two in
   a row move nothing (at most ``MAX_PASSES`` each). After every pass that moved something
   the placement is allocated; the fewest dims win, ties keep ASAP.
4. A layer takes a group only while its neurons plus one clear neuron per output lane fit
   the MLP budget: the target's ``mlp_width``, or on ``compact`` the ASAP program's widest
   layer with its clear neurons, so the MLP never widens.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from backends.compile.lanes import first_writes, plan, reads
from backends.compile.program import Neuron, Placed, Program, Retimed, copy_for_change

#: The most pairs of improvement passes from each start (each pass visits every group once).
MAX_PASSES = 4


@dataclass
class Group:
    """Neurons that write a common lane: they sit in ``layer`` (``asap`` before retiming);
    ``outs`` are the lanes they write, ``ins`` the lanes their gates read; a ``pinned`` group
    (an irregular one: no outputs, or outputs written elsewhere) never moves."""
    layer: int
    asap: int
    neurons: list[Neuron] = field(default_factory=list)
    outs: list[int] = field(default_factory=list)
    ins: list[int] = field(default_factory=list)
    pinned: bool = False
    room: int = 0       # MLP rows it takes: its neurons + one clear neuron per output lane


def groups_of(prog: Program) -> list[Group]:
    """The neuron groups of ``prog.mlp`` (union-find over output lanes)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for ns in prog.mlp.values():
        for n in ns:
            outs = list(n.out)
            for o in outs:
                find(o)
            for o in outs[1:]:
                parent[find(o)] = find(outs[0])
    by_root: dict[int, Group] = {}
    groups: list[Group] = []
    for L in sorted(prog.mlp):
        for n in prog.mlp[L]:
            if not n.out:
                groups.append(Group(L, L, [n], pinned=True))
                continue
            r = find(next(iter(n.out)))
            g = by_root.get(r)
            if g is None:
                g = by_root[r] = Group(L, L)
                groups.append(g)
            if g.layer != L:
                g.pinned = True
            g.neurons.append(n)
    for g in groups:
        outs = {o for n in g.neurons for o in n.out}
        g.outs = sorted(outs)
        g.ins = sorted({ln for n in g.neurons for ln in n.gate.t} - outs)
        if any(prog.lanes[o].slot != 2 * g.layer + 1 for o in g.outs):
            g.pinned = True
        g.room = len(g.neurons) + len(g.outs)     # clear neurons: see backends.compile.lanes.plan
    return groups


class _State:
    """Occupancy per slot and the reader structure, for moving groups one at a time."""

    def __init__(self, prog: Program, groups: list[Group], cap: int):
        self.prog, self.groups, self.cap = prog, groups, cap
        n = prog.n_layers
        self.end_slot = 2 * n + 1                 # lm_head-read lanes stay live until here
        nl = len(prog.lanes)
        self.slot = [ln.slot for ln in prog.lanes]
        self.readers: list[list[int]] = [[] for _ in range(nl)]
        self.tops: dict[int, tuple[int, int, int]] = {}
        self.writer = [-1] * nl
        for gi, g in enumerate(groups):
            for ln in g.ins:
                self.readers[ln].append(gi)
            for o in g.outs:
                self.writer[o] = gi
        fixed = reads(prog, {})                   # memories and the lm_head
        self.fixed_read = [min(fixed.get(ln, -2), self.end_slot) for ln in range(nl)]
        self.bound = [n - 1] * nl                 # latest writer layer allowed by them
        for p in prog.mems.values():
            for f in p.input_forms():
                for ln in f.t:
                    self.bound[ln] = min(self.bound[ln], p.layer - 1)
        self.count: dict[int, int] = {}
        for g in groups:
            self.count[g.layer] = self.count.get(g.layer, 0) + g.room
        self.occ = [0] * (self.end_slot + 2)      # index slot + 1 (slot -1 is the embedding)
        first = first_writes(prog)
        for ln in range(nl):
            w = self.slot[ln]
            if w > 0 and w % 2 == 0:    # a GDN lane: its dim is cleared by the MLP before
                w = first.get(ln, w) - 1  # the memory's first bank layer
            for s in range(w, self.end(ln)):
                self.occ[s + 1] += 1

    def _top(self, ln: int) -> tuple[int, int, int]:
        """(deepest reader layer, how many readers sit there, next deepest) of ``ln``'s
        reader groups (-1: none), cached until a reader moves."""
        top = self.tops.get(ln)
        if top is None:
            layers = [self.groups[h].layer for h in self.readers[ln]]
            m1 = max(layers, default=-1)
            top = (m1, layers.count(m1), max((x for x in layers if x != m1), default=-1))
            self.tops[ln] = top
        return top

    def last_read(self, ln: int, skip: int = -1) -> int:
        """Last slot reading ``ln`` (-2: none), ignoring group ``skip`` (one of its
        readers)."""
        m1, n1, m2 = self._top(ln)
        if skip >= 0 and n1 == 1 and self.groups[skip].layer == m1:
            m1 = m2
        return max(self.fixed_read[ln], 2 * m1 + 1 if m1 >= 0 else -2)

    def end(self, ln: int) -> int:
        """First slot where ``ln``'s dim is free again (as :func:`backends.compile.lanes.plan`)."""
        return max(self.last_read(ln), self.slot[ln] + 1)

    def alap(self, gi: int) -> int:
        L = self.prog.n_layers - 1
        for o in self.groups[gi].outs:
            L = min(L, self.bound[o])
            for h in self.readers[o]:
                L = min(L, self.groups[h].layer - 1)
        return L

    def earliest(self, gi: int) -> int:
        """The earliest legal layer of group ``gi``: after every lane its gates read."""
        return max([0] + [(self.slot[ln] + 1) // 2 for ln in self.groups[gi].ins])

    def steps(self, gi: int, lo: int, hi: int) -> list[dict[int, int]]:
        """Occupancy changes of moving group ``gi`` from layer L to L+1, for L in [lo, hi)."""
        g = self.groups[gi]
        read_outs = sum(1 for o in g.outs if self.last_read(o) >= 0)
        unread_outs = len(g.outs) - read_outs
        in_ends = sorted(max(self.last_read(i, gi), self.slot[i] + 1) for i in g.ins)
        out = []
        for L in range(lo, hi):
            s = 2 * L + 1
            d: dict[int, int] = {}
            v = bisect_right(in_ends, s) - read_outs - unread_outs
            if v:
                d[s] = v
            v = bisect_right(in_ends, s + 1) - read_outs
            if v:
                d[s + 1] = v
            if unread_outs:
                d[s + 2] = unread_outs
            out.append(d)
        return out

    def best_layer(self, gi: int, latest: bool = False) -> tuple[int, dict[int, int]]:
        """Where group ``gi`` should go and the occupancy change that brings (slot ->
        delta): the legal layer with the least sum of occupancy^2 (ties: the nearest to the
        current one, earlier first), or with ``latest`` the latest legal layer; layers
        without room in the MLP budget are skipped."""
        g = self.groups[gi]
        cur = g.layer
        lo, hi = self.earliest(gi), self.alap(gi)
        if g.pinned or lo >= hi:
            return cur, {}
        fits = lambda L: L == cur or self.count.get(L, 0) + g.room <= self.cap
        steps = self.steps(gi, lo, hi)
        if latest:
            best = next(L for L in range(hi, cur - 1, -1) if fits(L))
        else:
            occ = self.occ
            best, best_key = cur, (0, 0)
            for direction in (1, -1):
                delta: dict[int, int] = {}
                cost = 0
                L = cur
                while lo <= L + direction <= hi:
                    step = steps[L - lo] if direction == 1 else steps[L - 1 - lo]
                    for s, d in step.items():
                        d *= direction
                        old = delta.get(s, 0)
                        cost += d * (2 * (occ[s + 1] + old) + d)    # change of occupancy^2
                        delta[s] = old + d
                    L += direction
                    if fits(L) and (cost, abs(L - cur)) < best_key:
                        best, best_key = L, (cost, abs(L - cur))
        delta = {}
        a, b, sign = (cur, best, 1) if best >= cur else (best, cur, -1)
        for step in steps[a - lo:b - lo]:
            for s, d in step.items():
                delta[s] = delta.get(s, 0) + sign * d
        return best, {s: d for s, d in delta.items() if d}

    def move(self, gi: int, L: int, delta: dict[int, int]) -> None:
        g = self.groups[gi]
        for s, d in delta.items():
            self.occ[s + 1] += d
        self.count[g.layer] -= g.room
        self.count[L] = self.count.get(L, 0) + g.room
        g.layer = L
        for o in g.outs:
            self.slot[o] = 2 * L + 1
        for ln in g.ins:
            self.tops.pop(ln, None)

    def one_pass(self, deepest_first: bool = True, latest: bool = False) -> int:
        """Visit every group once (deepest first, or shallowest first) and move it where
        :meth:`best_layer` says; returns how many moved."""
        moved = 0
        sign = -1 if deepest_first else 1
        for gi in sorted(range(len(self.groups)), key=lambda i: sign * self.groups[i].layer):
            L, delta = self.best_layer(gi, latest)
            if L != self.groups[gi].layer:
                self.move(gi, L, delta)
                moved += 1
        return moved


def _mlp_of(groups: list[Group], prog: Program) -> dict[int, list[Neuron]]:
    mlp: dict[int, list[Neuron]] = {L: [] for L in prog.mlp}
    for g in groups:
        mlp.setdefault(g.layer, []).extend(g.neurons)
    return mlp


def run(placed: Placed) -> Retimed:
    """Retime a copy of ``placed``'s program (``placed`` is left as it was): the
    :class:`backends.compile.program.Retimed` program and the MLP width the pass kept to."""
    prog = copy_for_change(placed.prog, lanes=True)
    rec = retime(prog)
    return Retimed(prog, rec["mlp_width"])


def retime(prog: Program) -> dict[str, int]:
    """Retime ``prog`` in place (see the module docstring); returns and stores
    ``prog.sched``."""
    asap = plan(prog)
    asap_dims = asap.n_phys
    cap = prog.target.mlp_width
    if cap is None:         # compact: no wider than the ASAP MLP, clear neurons included
        cap = max([0] + [len(prog.mlp.get(L, [])) + len(asap.extra.get(L, []))
                         for L in range(prog.n_layers)])
    best_dims, best_layers = asap_dims, None
    groups: list[Group] = []
    for start_latest in (False, True):
        groups = groups_of(prog)        # the same groups in the same order each time
        st = _State(prog, groups, cap)
        passes = [(True, True)] if start_latest else []
        passes += [(True, False), (False, False)] * MAX_PASSES
        quiet = 0
        for deepest_first, latest in passes:
            if st.one_pass(deepest_first, latest):
                quiet = 0
                dims = plan(prog, st.slot, _mlp_of(groups, prog), cap).n_phys
                if dims < best_dims:
                    best_dims, best_layers = dims, [g.layer for g in groups]
            else:
                quiet += 1
                if quiet == 2:
                    break
    moved_groups = moved_neurons = 0
    if best_layers is not None:
        for g, L in zip(groups, best_layers):
            g.layer = L
            if L != g.asap:
                moved_groups += 1
                moved_neurons += len(g.neurons)
        _apply(prog, groups)
    prog.sched = {"asap_dims": asap_dims, "dims": best_dims, "layers": prog.n_layers,
                  "moved_neurons": moved_neurons, "moved_groups": moved_groups,
                  "mlp_width": cap}
    return prog.sched


def _apply(prog: Program, groups: list[Group]) -> None:
    """Write the groups' layers into ``prog``: neurons and lane slots."""
    for g in groups:
        for o in g.outs:
            prog.lanes[o].slot = 2 * g.layer + 1
    prog.mlp = _mlp_of(groups, prog)
