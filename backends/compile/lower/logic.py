"""Bits kept pending (AND/OR/XOR groups, thresholds, mux trees) until something reads
them, fused where one neuron group can do the work, and materialised into lanes.

A part of :class:`backends.compile.lower.Lowerer` (its state: lanes, MLP neurons, bits, memory
plans; see that class)."""
from __future__ import annotations

from typing import Callable, Sequence

from backends.chipdir.numbers import sig_bits
from backends.compile.program import Form, MuxBit, PendingBit, const, lin
from backends.compile.lower.bits import (MAX_SPAN, MUX_LEAVES, MIN_PRE, MAX_FANIN, SymBit,
                                         ThresholdBit, as_threshold, thresholds, fusable,
                                         plain_leaves, and_lits, is_tree, unabsorbed_trees,
                                         not_of)


def stage_out(q: int) -> int:
    """The output slot of a stage whose inputs are ready at slot ``q``."""
    return 2 * ((q + 1) // 2) + 1


def form_key(x: Form) -> tuple:
    """A hashable key of a Form (equal for equal affine forms)."""
    return x.c, tuple(sorted(x.t.items()))


class Logic:
    """Pending bits: made, fused and materialised (see the module docstring)."""

    def pending(self, T: Form, f: Callable[[int], int]) -> "Form | PendingBit":
        """f(T) as a PendingBit when it would need neurons, else its Form right away."""
        if T.lo == T.hi:
            return const(f(T.lo))
        if len(T.t) <= 1:
            return self.fn(T, f)
        return PendingBit(T, f, self.cur)

    def sym(self, kind: str, xs: Sequence["Form | MuxBit | PendingBit"]
            ) -> "Form | PendingBit":
        """AND/OR/XOR (``kind``) of the bits ``xs``: an unmaterialised :class:`SymBit` that
        absorbs the literals of operands of the same kind (constants folded)."""
        lits: list[Form] = []
        inner: list[PendingBit] = []
        for x in xs:
            if kind == "and" and isinstance(x, MuxBit) and x.form is None and len(x.leaves) == 1:
                # a one-leaf tree is the AND of its literals and its value
                (leaf, x), = x.leaves
                lits += leaf
            if isinstance(x, SymBit) and x.kind == kind:
                lits += x.lits
            elif kind != "xor" and as_threshold(x) is not None:
                inner.append(x)           # the other op, or a threshold: perhaps fused below
            else:
                lits.append(self.mat(x))
        if inner:
            # one of them (the latest) fuses into this AND/OR, the others are materialised
            inner.sort(key=lambda g: self.slot_of([g]))
            lits += [self.mat(g) for g in inner[:-1]]
            fused = self.fuse_threshold(kind, lits, inner[-1])
            if fused is not None:
                return fused
            lits.append(self.mat(inner[-1]))
        absorb, neutral = {"and": (0, 1), "or": (1, 0), "xor": (None, 0)}[kind]
        flip = 0
        keep = []
        for x in lits:
            if x.is_const:
                if x.c == absorb:
                    return const(absorb)
                flip ^= x.c if kind == "xor" else 0
                continue
            keep.append(x)
        if not keep:
            return const(neutral ^ flip)
        if len(keep) == 1:
            return lin([(-1, keep[0])], 1) if flip else keep[0]
        if flip:
            keep.append(const(1))
        while len(keep) > MAX_FANIN:       # too many for one neuron group: a tree of them
            head = SymBit(kind, keep[:MAX_FANIN], self.cur)
            keep = [self.mat(head)] + keep[MAX_FANIN:]
        return SymBit(kind, keep, self.cur)

    def fuse_threshold(self, kind: str, lits: list[Form], g: PendingBit
                       ) -> "Form | PendingBit | None":
        """AND/OR (``kind``) of the bits ``lits`` and the threshold g = [T >= theta] as one
        threshold: AND is [K * sum(lits) + T >= K * n + theta] with K = max T - theta + 1 (one
        literal 0 keeps it below), OR is [K * sum(lits) + T >= theta] with K = theta - min T
        (one literal 1 lifts it over). None when a weight or the range does not fit a neuron."""
        T, theta = as_threshold(g)  # type: ignore[misc]
        absorb = 0 if kind == "and" else 1
        keep = []
        for x in lits:
            if x.is_const:
                if x.c == absorb:
                    return const(absorb)
                continue
            keep.append(x)
        if not keep:
            return g
        n = len(keep)
        K = (T.hi - theta + 1) if kind == "and" else (theta - T.lo)
        K = max(1, K)
        F = lin([(K, x) for x in keep] + [(1, T)])
        th = K * n + theta if kind == "and" else theta
        if sig_bits(K) > 8 or any(sig_bits(w) > 8 for w in F.t.values()) or \
                F.hi - (th - 1) > MAX_SPAN or F.lo - th < MIN_PRE or n + len(T.t) > MAX_FANIN:
            return None
        return ThresholdBit(F, th, self.cur)

    def negate(self, x: "Form | MuxBit | PendingBit") -> "Form | PendingBit":
        """NOT x, keeping AND/OR/XOR and pending functions unmaterialised."""
        if isinstance(x, SymBit) and x.form is None:
            if x.kind == "xor":
                return self.sym("xor", x.lits + [const(1)])
            other = "or" if x.kind == "and" else "and"
            return SymBit(other, [lin([(-1, y)], 1) for y in x.lits], x.node)
        if isinstance(x, ThresholdBit) and x.form is None:     # [T < theta] = [-T >= 1 - theta]
            T, theta = lin([(-1, x.T)]), 1 - x.theta
            if T.hi - (theta - 1) <= MAX_SPAN and T.lo - theta >= MIN_PRE:
                return ThresholdBit(T, theta, x.node)
            # mirrored, the range no longer fits one neuron (a chain of NANDs): materialise
            return lin([(-1, self.mat(x))], 1)
        if isinstance(x, PendingBit) and x.form is None:
            return PendingBit(x.T, not_of(x.f), x.node)
        if isinstance(x, MuxBit) and x.form is None and len(x.leaves) == 1:
            # a one-leaf tree (`c ? v : 0`) is the AND of its literals and its value: NOT of
            # it an OR of their complements, which an AND reading it may still fuse
            return self.negate(self.sym("and", [x]))
        return lin([(-1, self.mat(x))], 1)

    def mat(self, x: "Form | MuxBit | PendingBit") -> Form:
        """The Form of a bit, materialising a mux tree or a pending function (once); the
        neurons and lanes this makes are traced to the node that made ``x``."""
        if isinstance(x, (MuxBit, PendingBit)) and x.form is None and x.node >= 0:
            reader, self.cur = self.cur, x.node
            try:
                return self._mat(x)
            finally:
                self.cur = reader
        return self._mat(x)

    def _mat(self, x: "Form | MuxBit | PendingBit") -> Form:
        if isinstance(x, PendingBit):
            if x.form is None:
                x.form = self.fn(x.T, x.f)
            return x.form
        if not isinstance(x, MuxBit):
            return x
        if x.form is None:
            terms = []
            for lits, v in x.leaves:
                lits = self.leaf_gate(lits, v)
                n = len(lits)
                gated = None
                if isinstance(v, PendingBit) and v.form is None:
                    gated = self.gated_terms(v, lits)
                if gated is not None:
                    terms += gated
                else:
                    terms.append((lin([(1, self.mat(v))] + [(1, lit) for lit in lits], -n), 1))
            x.form = self.relu_sum(terms, 0, 1)
        return x.form

    def leaf_gate(self, lits: tuple[Form, ...], v: "Form | PendingBit") -> tuple[Form, ...]:
        """A mux leaf's literals with those ready a stage before the leaf's neurons (a class
        flag, an op bit: not the data) as one lane, their AND: made once per set (every bit
        of a word's leaf shares it) in a stage that delays nothing, so that the leaf's
        neurons read one lane, 1 only where the leaf is selected, instead of every select
        on its path (lanes that are 1 on most tokens), each read again by every threshold
        of a pending value. ``lits`` unchanged when fewer than two are early."""
        if len(lits) < 2:
            return lits
        at = self.slot_of(lits + (v,))                       # the leaf's neurons' inputs
        is_early = [stage_out(self.slot_of([f])) <= at for f in lits]
        early = [f for f, e in zip(lits, is_early) if e]
        if len(early) < 2:
            return lits
        late = tuple(f for f, e in zip(lits, is_early) if not e)
        key = tuple(sorted(form_key(f) for f in early))
        if key not in self.leaf_gates:
            self.leaf_gates[key] = self.mat(self.sym("and", early))
        g = self.leaf_gates[key]
        if g.is_const:
            return late if g.c else (g,)
        return late + (g,)

    def gated_terms(self, v: PendingBit, lits: tuple[Form, ...]
                    ) -> list[tuple[Form, int]] | None:
        """Neurons computing v.f(v.T) * AND(lits), or None when no gate slope keeps every
        weight within 8 significant bits."""
        f0, cd = thresholds(v.T, v.f)
        n = len(lits)
        out = []
        for cth, k in cd.items():
            for M in range(max(1, v.T.hi - cth), 4096):
                T = lin([(1, v.T)] + [(M, lit) for lit in lits], -cth - M * n)
                if T.lo < MIN_PRE:
                    return None
                if sig_bits(T.c) <= 8 and all(sig_bits(w) <= 8 for w in T.t.values()):
                    out.append((T, k))
                    break
            else:
                return None
        if f0:
            out.append((lin([(1, lit) for lit in lits], 1 - n), f0))
        return out

    def mux_lazy(self, s: "Form | PendingBit", x: Form | MuxBit, y: Form | MuxBit,
                 ns: "PendingBit | None" = None, trees_first: bool = False) -> Form | MuxBit:
        """s ? y : x as a MuxBit (fused with the trees of x and y while they stay small).
        A select that is still pending (a compare, an AND/OR; ``ns`` its negation) is fused
        too: a leaf (literals, bit v) becomes the leaf (literals + (v,), s), computed gated
        in the mux's own stage, so "compare, then select" costs one stage."""
        if isinstance(x, Form) and isinstance(y, Form) and x.is_const and y.is_const \
                and {x.c, y.c} == {0, 1}:          # s ? 1 : 0 is s itself, s ? 0 : 1 is !s
            return s if y.c else (ns if ns is not None else self.negate(s))
        if isinstance(s, PendingBit) and s.form is None and ns is not None:
            return self.mux_pending(s, ns, x, y, trees_first)
        s = self.mat(s)
        if s.is_const:
            return y if s.c else x
        if x is y:
            return x

        def leaves(v):
            if isinstance(v, PendingBit):
                if v.form is None:
                    return [((), v)]
                v = v.form
            if isinstance(v, MuxBit):
                if v.form is None and len(v.leaves) <= MUX_LEAVES // 2:
                    return v.leaves
                v = self.mat(v)
            if v.is_const and v.c == 0:
                return []
            return [((), v)]
        ns = lin([(-1, s)], 1)
        out = [(lits + (ns,), v) for lits, v in leaves(x)] + [(lits + (s,), v) for lits, v in leaves(y)]
        if not out:
            return const(0)
        return MuxBit(out, self.cur)

    def mux_pending(self, s: PendingBit, ns: PendingBit, x: Form | MuxBit,
                    y: Form | MuxBit, trees_first: bool = False) -> Form | MuxBit:
        """:meth:`mux_lazy` for a pending select ``s`` (``ns`` = NOT s): every leaf value must
        be a plain bit, else ``s`` is materialised, or with ``trees_first`` the values
        (:meth:`trees_first`)."""
        if x is y:
            return x
        trees = unabsorbed_trees(s, ns, x, y)
        if trees and not trees_first:        # a tree or function as a value: select it
            return self.mux_lazy(self.mat(s), x, y)
        out = []
        for v, sel in ((x, ns), (y, s)):
            if and_lits(sel, v):
                if isinstance(v, MuxBit):
                    out += [(lits + tuple(sel.lits), val) for lits, val in v.leaves]
                else:
                    out.append((tuple(sel.lits), v))
                continue
            if is_tree(v):                         # trees_first: materialise it
                v = self.mat(v)
            if isinstance(v, (PendingBit, MuxBit)) and v.form is not None:
                v = v.form
            if fusable(v):
                out += [(lits + ((val,) if not val.is_const else ()), sel)
                        for lits, val in plain_leaves(v) if not (val.is_const and not val.c)]
            elif v.is_const:
                if v.c:
                    out.append(((), sel))
            else:
                out.append(((v,), sel))
        if not out:
            return const(0)
        return MuxBit(out, self.cur)

    def trees_first(self, s: PendingBit, xs: Sequence, ys: Sequence) -> bool:
        """Whether the word ``s ? ys : xs`` (``s`` pending, some values mux trees or
        functions not yet materialised) is ready a stage earlier when those values are
        materialised and ``s`` stays pending (fused into the mux's stage) than when ``s`` is
        materialised once and the values fused as gated leaves: the latest bit decides."""
        ss = self.slot_of([s])
        ns = self.negate(s)
        keep = mat = -1
        for x, y in zip(xs, ys):
            trees = unabsorbed_trees(s, ns, x, y)
            rest = self.slot_of([v for v in (x, y) if all(v is not t for t in trees)])
            if trees:
                keep = max(keep, stage_out(max(stage_out(self.slot_of(trees)), ss, rest)))
            else:
                keep = max(keep, stage_out(max(ss, rest)))
            mat = max(mat, stage_out(max(stage_out(ss), self.slot_of([x, y]))))
        return keep < mat

    def mux(self, s: Form, x: Form, y: Form, H: Form | None = None) -> Form:
        """s ? y : x for bits; forced to 0 when the integer H >= 1."""
        if s.is_const and H is None:
            return y if s.c else x
        if x is y and H is None:
            return x
        h = [(-1, H)] if H is not None else []
        return self.relu_sum([(lin([(1, x), (-1, s)] + h), 1),
                              (lin([(1, y), (1, s)] + h, -1), 1)], 0, 1)

    def eq_bits(self, a: Sequence[Form], b: Sequence[Form]) -> "Form | PendingBit":
        """a == b: [sum 2^j (a_j - b_j) == 0] per byte, then their AND (left pending); bits
        whose one side is the same bit s (a sign extension) are one test, [sum - n*s == 0];
        with one side constant, the AND of the other's bits or their negations (left pending,
        so it fuses with an AND it feeds: no stage of its own)."""
        W = len(a)
        if all(x.is_const for x in a):
            a, b = b, a
        if all(x.is_const for x in b):
            return self.sym("and", [x if c.c else self.negate(x) for x, c in zip(a, b)])
        is0 = lambda v: int(v == 0)
        pairs = [(x, y) for x, y in zip(a, b) if form_key(x) != form_key(y)]
        # bits whose one side is one bit s repeated (a sign extension): they all equal s iff
        # their other sides sum to n * s, one sum for all of them
        parts = []
        for side in (0, 1):
            groups: dict[tuple, list[tuple[Form, Form]]] = {}
            for pr in pairs:
                if pr[side].t:
                    groups.setdefault(form_key(pr[side]), []).append(pr)
            grouped = [g for g in groups.values() if 2 <= len(g) <= MAX_FANIN]
            for g in grouped:
                parts.append(lin([(1, pr[1 - side]) for pr in g] + [(-len(g), g[0][side])]))
            done = {id(pr) for g in grouped for pr in g}
            pairs = [pr for pr in pairs if id(pr) not in done]
        a = [x for x, _ in pairs]
        b = [y for _, y in pairs]
        W = len(a)
        for b0 in range(0, W, 8):
            T = lin([(1 << (j - b0), a[j]) for j in range(b0, min(W, b0 + 8))] +
                    [(-(1 << (j - b0)), b[j]) for j in range(b0, min(W, b0 + 8))])
            parts.append(T)
        if not parts:
            return const(1)
        if len(parts) == 1:
            return self.pending(parts[0], is0)
        # each part's lane is 0 where both sides are (an idle compare adds nothing)
        return self.sym("and", [self.fn(T, is0, center=True) for T in parts])
