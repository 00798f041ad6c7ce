"""Lanes, slots and placement, and the neuron builders: a function of an integer form as
ReLU neurons ``relu(T - c)`` shared by every function of the same T.

A part of :class:`backends.compile.lower.Lowerer` (its state: lanes, MLP neurons, bits, memory
plans; see that class)."""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from backends.compile.program import Form, Lane, MuxBit, Neuron, PendingBit, const, lin
from backends.compile.lower.bits import MAX_SPAN, LoweringError, MIN_PRE, thresholds


class Neurons:
    """Lanes, placement and neuron builders (see the module docstring)."""

    def new_lane(self, slot: int, lo: int, hi: int, label: str = "") -> int:
        self.lanes.append(Lane(slot, lo, hi, self.cur, label))
        return len(self.lanes) - 1

    def slot_of(self, forms: Iterable[Form]) -> int:
        s = -1
        for f in forms:
            if isinstance(f, PendingBit):
                f = f.form if f.form is not None else f.T
            if isinstance(f, MuxBit):
                if f.form is None:
                    s = max(s, self.slot_of(x for lits, v in f.leaves for x in lits + (v,)))
                    continue
                f = f.form
            for lane in f.t:
                s = max(s, self.lanes[lane].slot)
        return s

    def place(self, slot: int, n: int) -> list[tuple[int, int]]:
        """The MLP layers for ``n`` neurons whose inputs are complete at ``slot``: [(layer,
        count)]. One layer when the target's MLP can hold them all (the first with room);
        an operation wider than the MLP is split over the room of successive layers, each
        part summing into its own lanes (the value is their sum, ready after the last)."""
        layer = max(0, (slot + 1) // 2)
        cap = self.target.mlp_width
        if cap is None:
            return [(layer, n)]
        if n <= cap:
            while len(self.mlp.get(layer, [])) + n > cap:
                layer += 1
            return [(layer, n)]
        parts: list[tuple[int, int]] = []
        while n:
            k = min(n, cap - len(self.mlp.get(layer, [])))
            if k > 0:
                parts.append((layer, k))
                n -= k
            layer += 1
        return parts

    def loc(self) -> str:
        return str(self.c.nodes[self.cur].loc) if self.cur >= 0 else "<chip>"

    def fns(self, T: Form, funcs: Sequence[Callable[[int], int]]) -> list[Form]:
        """Forms holding f(T) for each f, from shared neurons relu(T - c)."""
        lo, hi = T.lo, T.hi
        if lo == hi:
            return [const(f(lo)) for f in funcs]
        vals = [[f(v) for v in range(lo, hi + 1)] for f in funcs]
        out: list[Form | None] = [None] * len(funcs)
        coefs: list[dict[int, int]] = []
        for i, vs in enumerate(vals):
            d = [vs[j] - vs[j - 1] for j in range(1, len(vs))]
            if all(x == 0 for x in d):
                out[i] = const(vs[0])
                coefs.append({})
                continue
            if len(T.t) <= 1 and all(x == d[0] for x in d):   # affine in one lane: relabel
                out[i] = lin([(d[0], T)], vs[0] - d[0] * lo)
                out[i].lo, out[i].hi = min(vs), max(vs)
                if out[i].is_const:
                    out[i] = const(vs[0])
                coefs.append({})
                continue
            coefs.append(thresholds(T, funcs[i])[1])
        cuts = sorted({c for cd in coefs for c in cd})
        if not cuts:
            return [o if o is not None else const(vals[i][0]) for i, o in enumerate(out)]
        for c in cuts:
            if hi - c > MAX_SPAN or lo - c < MIN_PRE:
                raise LoweringError(f"{self.loc()}: internal: pre-activation range "
                                    f"[{lo - c}, {hi - c}] outside [{MIN_PRE}, {MAX_SPAN}]")
        parts = self.place(self.slot_of([T]), len(cuts))
        done = {i for i, o in enumerate(out) if o is not None}
        first = 0
        for layer, k in parts:
            part = cuts[first:first + k]
            first += k
            lanes: dict[int, int] = {}
            for i, cd in enumerate(coefs):
                if i in done or not any(c in cd for c in part):
                    continue
                vs = vals[i]
                # this part's share of f(T) - f(lo): sum of coef * relu(T - c) over its cuts
                g = [v - vs[0] for v in vs] if len(parts) == 1 else \
                    [sum(cd[c] * max(0, v - c) for c in part if c in cd) for v in range(lo, hi + 1)]
                lanes[i] = self.new_lane(2 * layer + 1, min(g), max(g))
                if out[i] is None:
                    out[i] = Form(vs[0], {lanes[i]: 1}, min(vs), max(vs))
                else:
                    out[i] = Form(vs[0], {**out[i].t, lanes[i]: 1}, min(vs), max(vs))
            neurons = self.mlp.setdefault(layer, [])
            for c in part:
                o = {lanes[i]: cd[c] for i, cd in enumerate(coefs) if c in cd and i in lanes}
                neurons.append(Neuron(lin([(1, T)], -c), o, self.cur))
        return out  # type: ignore[return-value]

    def fn(self, T: Form, f: Callable[[int], int]) -> Form:
        return self.fns(T, [f])[0]

    def relu_sum(self, terms: Sequence[tuple[Form, int]], lo: int, hi: int) -> Form:
        """A lane = sum(k * relu(T)) whose value is known to lie in [lo, hi]."""
        live = [(T, k) for T, k in terms if T.hi > 0 and k]
        linear = [(k, T) for T, k in live if T.lo >= 0 and len(T.t) <= 1]
        live = [(T, k) for T, k in live if not (T.lo >= 0 and len(T.t) <= 1)]
        if not live:
            f = lin(linear)
            f.lo, f.hi = (lo, hi) if not f.is_const else (f.c, f.c)
            return f
        for T, _ in live:
            if T.hi > MAX_SPAN or T.lo < MIN_PRE:
                raise LoweringError(f"{self.loc()}: internal: pre-activation out of range")
        parts = self.place(self.slot_of(T for T, _ in live), len(live))
        lanes: list[tuple[int, Form]] = []
        first = 0
        for layer, n in parts:
            part = live[first:first + n]
            first += n
            if linear or len(parts) > 1:    # the lane holds a part of the sum: bound it
                llo = sum(min(k * max(0, T.lo), k * T.hi) for T, k in part)
                lhi = sum(max(k * max(0, T.lo), k * T.hi) for T, k in part)
            else:               # the lane holds the result itself, known to lie in [lo, hi]
                llo, lhi = lo, hi
            lane = self.new_lane(2 * layer + 1, llo, lhi)
            neurons = self.mlp.setdefault(layer, [])
            for T, k in part:
                neurons.append(Neuron(T, {lane: k}, self.cur))
            lanes.append((1, Form(0, {lane: 1}, llo, lhi)))
        f = lin(lanes + linear)
        f.lo, f.hi = lo, hi
        return f
