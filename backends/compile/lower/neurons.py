"""Lanes, slots and placement, and the neuron builders: a function of an integer form as
ReLU neurons ``relu(T - c)`` shared by every function of the same T.

A part of :class:`backends.compile.lower.Lowerer` (its state: lanes, MLP neurons, bits, memory
plans; see that class)."""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from backends.compile.program import Form, Lane, MuxBit, Neuron, PendingBit, const, lin
from backends.compile.lower.bits import MAX_SPAN, LoweringError, MIN_PRE, thresholds


def centered(vs: Sequence[int], k0: int) -> dict[tuple[int, int], int]:
    """{(1, k): a} and {(-1, k): a} with f(j) = vs[k0] + sum(a * relu(j - k)) over the first
    + sum(a * relu(k - j)) over the second, for j = 0 .. len(vs) - 1 (vs[j]: f at the j-th
    value of its range): the first are cuts k >= k0, the second k <= k0, so every term is 0
    at j = k0. (k0 = 0 gives :func:`~backends.compile.lower.bits.thresholds`' cuts.)"""
    out: dict[tuple[int, int], int] = {}
    prev = 0
    for j in range(k0 + 1, len(vs)):          # above k0: slopes rising from 0
        dj = vs[j] - vs[j - 1]
        if dj - prev:
            out[1, j - 1] = dj - prev
        prev = dj
    prev = 0
    for k in range(k0, 0, -1):                # below k0: slopes seen from k0 down
        dk = vs[k] - vs[k - 1]
        if prev - dk:
            out[-1, k] = prev - dk
        prev = dk
    return out


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

    def fns(self, T: Form, funcs: Sequence[Callable[[int], int]], center: bool = False
            ) -> list[Form]:
        """Forms holding f(T) for each f, from shared neurons relu(T - c): each lane holds
        f(T) - f(lo), 0 where T is at its least. ``center``: and neurons relu(c - T), each lane
        f(T) - f(c0) with c0 the constant of T, the value T has where its lanes are 0
        (:func:`centered`): every neuron is off there, and the lanes 0."""
        lo, hi = T.lo, T.hi
        k0 = min(max(T.c - lo, 0), hi - lo)
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
            coefs.append({(sg, lo + k): a for (sg, k), a in centered(vs, k0).items()} if center
                         else {(1, c): a for c, a in thresholds(T, funcs[i])[1].items()})
        cuts = sorted({c for cd in coefs for c in cd})     # (sign, c): relu(sign * (T - c))
        if not cuts:
            return [o if o is not None else const(vals[i][0]) for i, o in enumerate(out)]
        for sg, c in cuts:
            pre = sorted((sg * (lo - c), sg * (hi - c)))
            if pre[1] > MAX_SPAN or pre[0] < MIN_PRE:
                raise LoweringError(f"{self.loc()}: internal: pre-activation range "
                                    f"[{pre[0]}, {pre[1]}] outside [{MIN_PRE}, {MAX_SPAN}]")
        slot = self.slot_of([T])
        done = {i for i, o in enumerate(out) if o is not None}
        todo = [i for i in range(len(funcs)) if i not in done]
        if len(todo) > 1 and len(self.place(slot, len(cuts))) > 1:
            # too many neurons for one layer: split over layers, each part's lane must stay
            # a small integer (below), which shared cuts cannot promise (no cut of the
            # union may end every function's part at once): each function on its own
            for i in todo:
                out[i] = self.fns(T, [funcs[i]], center)[0]
            return out  # type: ignore[return-value]

        def share(cd: dict, part: Sequence[tuple[int, int]]) -> list[int]:
            """A part's share of f(T) - base on T's range: the sum of coef * relu(sign * (T
            - c)) over its cuts."""
            return [sum(cd[sc] * max(0, sc[0] * (v - sc[1])) for sc in part if sc in cd)
                    for v in range(lo, hi + 1)]
        first = 0
        while first < len(cuts):
            parts = self.place(slot, len(cuts) - first)
            layer, k = parts[0]
            whole = first == 0 and len(parts) == 1
            if not whole:
                # split over layers: each part writes its own lane, a residual value that
                # must stay within +-MAX_SPAN (exact.py): the longest run of cuts that does
                # and fits the layer's room, or the shortest one, in the first layer with
                # room for it (a parity's cuts come in pairs: one alone is a ramp)
                def bounded(e: int) -> bool:
                    return all(max(map(abs, share(cd, cuts[first:first + e]))) <= MAX_SPAN
                               for i, cd in enumerate(coefs) if i not in done and cd)
                e = next((e for e in range(k, 0, -1) if bounded(e)), 0)
                if not e:
                    e = next((e for e in range(k + 1, len(cuts) - first) if bounded(e)),
                             len(cuts) - first)
                    room = self.place(slot, e)
                    if len(room) == 1:
                        layer = room[0][0]
                    else:               # no layer has room for it: the proof will say so
                        e = k
                k = e
            part = cuts[first:first + k]
            first += k
            lanes: dict[int, int] = {}
            for i, cd in enumerate(coefs):
                if i in done or not any(c in cd for c in part):
                    continue
                vs = vals[i]
                base = vs[k0] if center else vs[0]
                g = [v - base for v in vs] if whole else share(cd, part)
                lanes[i] = self.new_lane(2 * layer + 1, min(g), max(g))
                if out[i] is None:
                    out[i] = Form(base, {lanes[i]: 1}, min(vs), max(vs))
                else:
                    out[i] = Form(base, {**out[i].t, lanes[i]: 1}, min(vs), max(vs))
            neurons = self.mlp.setdefault(layer, [])
            for sg, c in part:
                o = {lanes[i]: cd[sg, c] for i, cd in enumerate(coefs)
                     if (sg, c) in cd and i in lanes}
                neurons.append(Neuron(lin([(sg, T)], -sg * c), o, self.cur))
        return out  # type: ignore[return-value]

    def fn(self, T: Form, f: Callable[[int], int], center: bool = False) -> Form:
        return self.fns(T, [f], center)[0]

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
