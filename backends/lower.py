"""Lowering: IR ops -> lanes, ReLU neurons and GDN memory ports, placed into layers.

Takes: a checked :class:`hdl.ir.Circuit`, a :class:`backends.target.Target` and the layer of
every memory (``backends.schedule`` finds those). Gives: :class:`Program`, the whole chip in
integer terms (its types live in :mod:`backends.program`), ready for retiming, lane
allocation, the exactness proof (``backends.exact``) and emission (``backends.emit``).

Representation. Every IR signal bit is an affine :class:`Form` over *lanes* (residual
dimensions holding small integers, written once): ``c + sum(coef * lane)``. Token bits are
lanes filled by the embedding, and so is token-only logic that memory logic reads (a token
table, :mod:`backends.tabulate`); SLICE, CONCAT, CONST, NOT, constant shifts are free (they only
relabel forms). Everything else becomes ReLU neurons ``relu(T)`` with ``T`` an integer form;
an MLP computes ``silu(K*T) * (1/K)`` = relu(T) exactly. A function f of one integer form T on
its range [lo, hi] is ``f(lo) + sum_c (D2 f)(c) * relu(T - c)`` (second differences), so every
output bit of a small integer form costs a few neurons that can be shared.

Slots: layer L has slot 2L (its GDN sublayer) and 2L+1 (its MLP). A lane written in slot s
can be read from slot s+1 on; token lanes have slot -1. Neurons go to the earliest MLP whose
slot is after all their inputs and that has room (greedy list scheduling in topological
order). Memory reads happen in the GDN of the memory's layer; writes of step t happen at
position t+1 in that layer from conv tap t-1, so their inputs must exist before that layer.

Exactness invariants the lowering keeps (``exact.py`` re-checks them): every neuron's T is
an integer with |T - threshold| <= 256 over its whole range; every lane holds an integer
in a small known range.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from common.errors import UserError
from hdl.ir import Circuit, Node, Op
from backends.numbers import sig_bits
from backends.program import (Form, Lane, MemPlan, MuxBit, Neuron, PendingBit, Program,
                              ReadPort, WritePort, const, lin)
from backends.target import Target
from backends import tabulate

MAX_SPAN = 256


class LoweringError(UserError):
    """The circuit uses something this backend cannot compile (message names the line)."""


SHIFT_GROUP = 5      # amount bits per one-hot shift stage (2^5 = 32 sources per bit)
BYTE_CELL_BANKS = 2   # a ROM taking more banks than this at 1 bit per cell uses byte cells
MUX_LEAVES = 128     # materialise a mux tree beyond this many leaves per bit
MIN_PRE = -(1 << 14) # lowest pre-activation allowed (negative ones all give silu = -0.0)


#: most literals one AND/OR/XOR neuron group takes (its pre-activation stays <= 256)
MAX_FANIN = 255

_SYM = {"and": None, "or": lambda v: int(v >= 1), "xor": lambda v: v & 1}


class SymBit(PendingBit):
    """The AND, OR or XOR (``kind``) of the bits ``lits``, not yet materialised. Chains of
    one op merge their literal lists, so an n-input AND/OR is one threshold pair
    ``relu(T - c) - relu(T - c - 1)`` over ``T = sum(lits)`` (one stage, 2 neurons) and an
    n-input XOR is parity(T) (one stage, n neurons), up to :data:`MAX_FANIN` literals. NOT
    of an AND/OR is the other op over the negated literals (De Morgan), NOT of an XOR adds
    the constant literal 1."""
    __slots__ = ("kind", "lits")

    def __init__(self, kind: str, lits: list[Form], node: int = -1):
        n = len(lits)
        f = _SYM[kind] or (lambda v, n=n: int(v >= n))
        super().__init__(lin([(1, x) for x in lits]), f, node)
        self.kind = kind
        self.lits = lits


class ThresholdBit(PendingBit):
    """[T >= theta], not yet materialised: an AND or OR of literals and one threshold
    (:meth:`Lowerer.sym`), so a two-level AND/OR is one stage."""
    __slots__ = ("theta",)

    def __init__(self, T: Form, theta: int, node: int = -1):
        super().__init__(T, lambda v, t=theta: int(v >= t), node)
        self.theta = theta


def as_threshold(x: object) -> tuple[Form, int] | None:
    """(T, theta) with x = [T >= theta] for an unmaterialised AND/OR or threshold, else None."""
    if isinstance(x, ThresholdBit) and x.form is None:
        return x.T, x.theta
    if isinstance(x, SymBit) and x.form is None and x.kind != "xor":
        return x.T, (len(x.lits) if x.kind == "and" else 1)
    return None


def thresholds(T: Form, f: Callable[[int], int]) -> tuple[int, dict[int, int]]:
    """(f(T.lo), {c: coef}) with f(T) = f(lo) + sum(coef * relu(T - c)) on [lo, hi]."""
    vs = [f(v) for v in range(T.lo, T.hi + 1)]
    cd: dict[int, int] = {}
    prev = 0
    for j in range(1, len(vs)):
        dj = vs[j] - vs[j - 1]
        if dj - prev:
            cd[T.lo + j - 1] = dj - prev
        prev = dj
    return vs[0], cd


def _is_and(v: object) -> bool:
    return isinstance(v, SymBit) and v.kind == "and" and v.form is None


def _fusable(v: object) -> bool:
    """A mux tree small enough to fuse into a mux on a pending select: its leaf values are
    bits, or ANDs of literals (which join the leaf's literals)."""
    return isinstance(v, MuxBit) and v.form is None and \
        len(v.leaves) <= MUX_LEAVES // 2 and \
        all(not isinstance(val, PendingBit) or _is_and(val) for _, val in v.leaves)


def _plain_leaves(v: MuxBit) -> list:
    """The leaves of a :func:`_fusable` tree as (literals, bit): an AND value's literals join
    the leaf's, its value the constant 1."""
    return [(lits + tuple(val.lits), const(1)) if _is_and(val) else (lits, val)
            for lits, val in v.leaves]


def _and_lits(sel: object, v: object) -> bool:
    """``sel`` is a pending AND of literals and ``v`` a tree or function whose leaves can
    take those literals (a mux tree small enough, or a pending bit)."""
    if not (isinstance(sel, SymBit) and sel.kind == "and" and sel.form is None):
        return False
    if isinstance(v, MuxBit):
        return v.form is None and len(v.leaves) <= MUX_LEAVES // 2
    return isinstance(v, PendingBit) and v.form is None


def _tree(v: object) -> bool:
    """A mux value that is a tree or function not yet materialised and cannot fuse."""
    return isinstance(v, (PendingBit, MuxBit)) and v.form is None and not _fusable(v)


def _unabsorbed_trees(s: object, ns: object, x: object, y: object) -> list:
    """The values of ``s ? y : x`` that are trees (:func:`_tree`) its pending select cannot
    fuse: a value under a select that is an AND of literals takes them into its leaves,
    whatever the value, so it is not one of them."""
    return [v for v, sel in ((x, ns), (y, s)) if _tree(v) and not _and_lits(sel, v)]


def _bit_key(x: object) -> tuple:
    """A key equal for bits that are the same: a Form's terms, a mux tree's leaves, a
    pending function's identity."""
    if isinstance(x, (MuxBit, PendingBit)) and x.form is not None:
        x = x.form
    if isinstance(x, Form):
        return ("form", x.c, tuple(sorted(x.t.items())))
    if isinstance(x, MuxBit):
        return ("tree", tuple((tuple(_bit_key(l) for l in lits), _bit_key(v))
                              for lits, v in x.leaves))
    return ("pending", id(x))


def _span_groups(terms: list[tuple[int, Form]]) -> list[list[tuple[int, Form]]]:
    """``terms`` (weight, bit) cut, in order, into groups whose weighted sum spans at most
    :data:`MAX_SPAN` (one neuron's pre-activation range; constants cost nothing)."""
    groups: list[list[tuple[int, Form]]] = [[]]
    span = 0
    for w, x in terms:
        d = w * (x.hi - x.lo)
        if span + d > MAX_SPAN and groups[-1]:
            groups.append([])
            span = 0
        groups[-1].append((w, x))
        span += d
    return groups


class _Not:
    """``1 - f(v)``: the NOT of a pending function. The NOT of a ``_Not`` is its function
    again, so a chain of 100,000 NOTs is never 100,000 nested calls."""
    __slots__ = ("f",)

    def __init__(self, f: Callable[[int], int]):
        self.f = f

    def __call__(self, v: int) -> int:
        return 1 - self.f(v)


def _not(f: Callable[[int], int]) -> Callable[[int], int]:
    return f.f if isinstance(f, _Not) else _Not(f)


def _extension(v: Sequence[object]) -> object | None:
    """The bit that the upper half of ``v`` repeats (a sign or zero extension of its lower
    half: :meth:`Lowerer.mul_bits`), or None."""
    h = len(v) // 2
    if len(v) % 2 or h < 4:
        return None
    k = _bit_key(v[h])
    return v[h] if all(_bit_key(x) == k for x in v[h + 1:]) else None


def _unmaterialised(x: object) -> object:
    """``x`` as a tree or pending function a select can fuse: a copy without its Form when
    it was materialised for another reader (its neurons are then made again, gated)."""
    if isinstance(x, MuxBit) and x.form is not None and len(x.leaves) <= MUX_LEAVES // 2:
        return MuxBit(x.leaves, x.node)
    if isinstance(x, PendingBit) and x.form is not None:
        return PendingBit(x.T, x.f, x.node)
    return x


class Lowerer:
    """Lowers one circuit with fixed memory layers; records needed layer bumps."""

    def __init__(self, circuit: Circuit, target: Target, mem_layer: dict[str, int],
                 mem_last: dict[str, int] | None = None, byte_cells: bool = True,
                 tables: bool = True):
        self.c = circuit
        self.byte_cells = byte_cells
        self.tables = tables
        self.target = target
        self.mem_layer = mem_layer
        self.mem_last = {m: max(mem_layer[m], (mem_last or {}).get(m, 0)) for m in mem_layer}
        self.lanes: list[Lane] = []
        self.mlp: dict[int, list[Neuron]] = {}
        self.bits: dict[int, list[Form]] = {}
        self.bumps: dict[str, int] = {}
        self.cur = -1
        self.mems: dict[str, MemPlan] = {}
        self.absorbed: set[int] = set()

    # ---- lanes, slots, placement ---------------------------------------------------------
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

    # ---- neuron builders -----------------------------------------------------------------
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

    # ---- arithmetic helpers ----------------------------------------------------------------
    def prefix_pos(self, e: Sequence[Form], idx: Sequence[int], lazy: bool = False
                   ) -> dict[int, "Form | PendingBit"]:
        """For each i in idx: 1 if the sign of the digit string e[i], e[i-1], ..., e[0]
        (digits in {-1, 0, 1}, e[i] most significant) is positive, else 0 (``lazy``: the
        last stage left pending, so a select can fuse it)."""
        final = self.pending if lazy else self.fn
        res: dict[int, Form] = {}
        step1 = lambda v: int(v >= 1)
        sign = lambda v: (v > 0) - (v < 0)
        blocks: dict[int, Form] = {}

        def block_sign(b: int) -> Form:
            if b not in blocks:
                blocks[b] = self.fn(lin([(1 << (j - 8 * b), e[j]) for j in range(8 * b, 8 * b + 8)]), sign)
            return blocks[b]
        q: dict[int, Form] = {}
        for i in idx:
            b = i // 8
            if b == 0:
                res[i] = final(lin([(1 << j, e[j]) for j in range(i + 1)]), step1)
            elif b > 7:
                raise LoweringError(f"{self.loc()}: compare/add wider than 64 bits")
            else:
                q[i] = block_sign(b) if i == 8 * b + 7 else \
                    self.fn(lin([(1 << (j - 8 * b), e[j]) for j in range(8 * b, i + 1)]), sign)
        for i, qi in q.items():
            b = i // 8
            T = lin([(1 << b, qi)] + [(1 << bb, block_sign(bb)) for bb in range(b)])
            res[i] = final(T, step1)
        return res

    def add_bits(self, a: Sequence[Form], b: Sequence[Form], sub: bool) -> list[Form]:
        """a + b (or a - b = a + ~b + 1), W bits. Bits 0..6 are read straight off the chunk
        sum sum(2^k (a_k + b_k)) + cin (<= 255): one stage. Bits 7..13 likewise from their
        chunk sum plus the carry into bit 7 (one sign-network stage): two stages. Higher bits
        are parity(a_i + b_i + c_i) with c_i from the two-stage carry-sign network."""
        W = len(a)
        bb = [lin([(-1, x)], 1) if sub else x for x in b]
        cin = 1 if sub else 0
        e = [const(1 if sub else -1)] + [lin([(1, a[j]), (1, bb[j])], -1) for j in range(W)]
        if W > 7 and (all(x.hi <= 0 for x in e[1:W]) or all(x.lo >= 0 for x in e[1:W])):
            return self.one_sided_add(a, bb, e)
        want = ([7] if W > 7 else []) + list(range(14, W))
        carries = self.prefix_pos(e, want) if want else {}
        out = []
        for i in range(W):
            if i < 14:
                k0 = 0 if i < 7 else 7
                c0: list[tuple[int, Form]] = [(1, carries[7])] if k0 else []
                T = lin([(1 << (k - k0), a[k]) for k in range(k0, i + 1)] +
                        [(1 << (k - k0), bb[k]) for k in range(k0, i + 1)] + c0,
                        cin if k0 == 0 else 0)
                out.append(self.pending(T, lambda v, q=i - k0: (v >> q) & 1))
            else:
                out.append(self.pending(lin([(1, a[i]), (1, bb[i]), (1, carries[i])]),
                                        lambda v: v & 1))
        return out

    def one_sided_add(self, a: Sequence[Form], bb: Sequence[Form], e: Sequence[Form]
                      ) -> list["Form | PendingBit"]:
        """:meth:`add_bits` when no digit e_j (j >= 1) can generate a carry (one side a
        constant 0, as in a negation ~x + 1) or none can kill one: the carry into bit i is
        then [S_i >= 1] with S_i = e_1 + ... + e_i + [e_0 > 0], one sum, and bit i, the
        parity of x_i = a_i + bb_i and that carry, is one function of M * x_i + S_i
        (M > the range of S_i): every bit one stage."""
        c0 = int(e[0].c > 0)
        out = []
        for i in range(len(a)):
            S = lin([(1, x) for x in e[1:i + 1]], c0)
            x = lin([(1, a[i]), (1, bb[i])])
            M = S.hi - S.lo + 1
            T = lin([(M, x), (1, S)], -S.lo)
            out.append(self.pending(T, lambda v, M=M, lo=S.lo: (v // M + (v % M + lo >= 1)) & 1))
        return out

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
            return PendingBit(x.T, _not(x.f), x.node)
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
        trees = _unabsorbed_trees(s, ns, x, y)
        if trees and not trees_first:        # a tree or function as a value: select it
            return self.mux_lazy(self.mat(s), x, y)
        out = []
        for v, sel in ((x, ns), (y, s)):
            if _and_lits(sel, v):
                if isinstance(v, MuxBit):
                    out += [(lits + tuple(sel.lits), val) for lits, val in v.leaves]
                else:
                    out.append((tuple(sel.lits), v))
                continue
            if _tree(v):                         # trees_first: materialise it
                v = self.mat(v)
            if isinstance(v, (PendingBit, MuxBit)) and v.form is not None:
                v = v.form
            if _fusable(v):
                out += [(lits + ((val,) if not val.is_const else ()), sel)
                        for lits, val in _plain_leaves(v) if not (val.is_const and not val.c)]
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
        stage = lambda q: 2 * ((q + 1) // 2) + 1       # output slot of a stage on inputs at q
        ss = self.slot_of([s])
        ns = self.negate(s)
        keep = mat = -1
        for x, y in zip(xs, ys):
            trees = _unabsorbed_trees(s, ns, x, y)
            rest = self.slot_of([v for v in (x, y) if all(v is not t for t in trees)])
            if trees:
                keep = max(keep, stage(max(stage(self.slot_of(trees)), ss, rest)))
            else:
                keep = max(keep, stage(max(ss, rest)))
            mat = max(mat, stage(max(stage(ss), self.slot_of([x, y]))))
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

    # ---- per-op lowering -------------------------------------------------------------------
    def lower_node(self, n: Node) -> None:
        op = n.op
        A = [self.bits[a] for a in n.args if a in self.bits]
        if op not in (Op.MUX, Op.SLICE, Op.CONCAT, Op.AND, Op.OR, Op.XOR, Op.NOT, Op.MUL,
                      Op.MEM_WRITE):
            A = [[self.mat(x) for x in bits] for bits in A]
        W = n.width
        if op is Op.CONST:
            r = [const((n.param >> i) & 1) for i in range(W)]
        elif op is Op.TOKEN_KIND:
            r = [Form(0, {ln: 1}, 0, 1) for ln in self.kind_lane_ids]
        elif op is Op.TOKEN_FIELD:
            k, f = n.param
            r = [Form(0, {ln: 1}, 0, 1) for ln in self.field_lane_ids[k][f]]
        elif op is Op.NOT:
            r = [self.negate(x) for x in A[0]]
        elif op in (Op.AND, Op.OR, Op.XOR):
            r = [self.sym(op.value, (x, y)) for x, y in zip(A[0], A[1])]
        elif op in (Op.ADD, Op.SUB):
            if n.id in self.absorbed:       # its one reader (an add) sums its operands
                return
            terms = self.add_terms(n.id, 1)
            if len(terms) == 2 and terms[0][0] == 1:
                x, y = ([self.mat(v) for v in self.bits[t]] for _, t in terms)
                r = self.add_bits(x, y, terms[1][0] < 0)
            else:
                r = self.multi_add(terms, W)
        elif op is Op.MUL:
            r = self.mul_bits(A[0], A[1])
        elif op is Op.EQ:
            r = [self.eq_bits(A[0], A[1])]
        elif op in (Op.ULT, Op.SLT):
            a, b = A
            Wa = len(a)
            e = [lin([(1, b[j]), (-1, a[j])]) for j in range(Wa)]
            if op is Op.SLT:
                e[-1] = lin([(1, a[-1]), (-1, b[-1])])
            r = [self.prefix_pos(e, [Wa - 1], lazy=True)[Wa - 1]]
        elif op in (Op.SHL, Op.LSHR, Op.ASHR):
            r = self.shift_bits(op, A[0], A[1])
        elif op is Op.SLICE:
            r = A[0][n.param:n.param + W]
        elif op is Op.CONCAT:
            r = [x for part in reversed(A) for x in part]
        elif op is Op.MUX:
            s = A[0][0]
            ns = self.negate(s) if isinstance(s, PendingBit) and s.form is None else None
            first = ns is not None and self.trees_first(s, A[1], A[2])
            r = [self.mux_lazy(s, x, y, ns, first) for x, y in zip(A[1], A[2])]
        elif op is Op.MEM_READ:
            r = self.mem_read(n, A[0])
        elif op is Op.MEM_WRITE:
            self.mem_write(n, A[0], A[1], A[2][0])
            r = []
        elif op is Op.TOKEN_OUT:
            self.out_args = A
            r = []
        else:
            raise LoweringError(f"{n.loc}: the transformer backend compiles top circuits only "
                                f"(found a {op.value} node); wrap the module in a circuit")
        self.bits[n.id] = r

    def tabulated(self, n: Node) -> None:
        """A token-only node: its bits are fresh embedding lanes (backends.tabulate)."""
        lanes = [self.new_lane(-1, 0, 1, f"tok.fn.{n.id}.{i}") for i in range(n.width)]
        self.token_fns.append((n.id, lanes))
        self.bits[n.id] = [Form(0, {ln: 1}, 0, 1) for ln in lanes]

    def add_terms(self, nid: int, sign: int) -> list[tuple[int, int]]:
        """The (sign, node) operands of the chain of adds and subtracts rooted at ``nid``
        (inner ones absorbed: read by this chain only, same width)."""
        out = []
        stack = [(nid, sign)]       # iterative: a chain may be 100,000 adds long
        while stack:
            node, s = stack.pop()
            if node != nid and node not in self.absorbed:
                out.append((s, node))
                continue
            n = self.c.nodes[node]
            for k in reversed(range(len(n.args))):      # left to right, as they come off
                stack.append((n.args[k], s if (n.op is Op.ADD or k == 0) else -s))
        return out

    def multi_add(self, terms: list[tuple[int, int]], W: int) -> list[Form]:
        """sum of sign * operand mod 2^W (carry-save: -x is ~x + 1; the columns are
        compressed to two rows, then one adder)."""
        cols: list[list[Form]] = [[] for _ in range(W)]
        neg = 0
        for sign, a in terms:
            bits = [self.mat(x) for x in self.bits[a]]
            for i, x in enumerate(bits):
                y = x if sign > 0 else lin([(-1, x)], 1)
                if not (y.is_const and y.c == 0):
                    cols[i].append(y)
            neg += sign < 0
        for i in range(W):
            if (neg >> i) & 1:
                cols[i].append(const(1))
        return self.sum_columns(cols)

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
        key = lambda x: (x.c, tuple(sorted(x.t.items())))
        pairs = [(x, y) for x, y in zip(a, b) if key(x) != key(y)]
        # bits whose one side is one bit s repeated (a sign extension): they all equal s iff
        # their other sides sum to n * s, one sum for all of them
        parts = []
        for side in (0, 1):
            groups: dict[tuple, list[tuple[Form, Form]]] = {}
            for pr in pairs:
                if pr[side].t:
                    groups.setdefault(key(pr[side]), []).append(pr)
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
        return self.sym("and", [self.fn(T, is0) for T in parts])

    def shift_bits(self, op: Op, a: Sequence[Form], amt: Sequence[Form]) -> list[Form]:
        """A variable shift as one-hot selection: the amount bits that shift within the
        width are cut into groups of at most :data:`SHIFT_GROUP` bits (one stage each: W = 32
        is one stage, 64 two); in a group, output bit i is sum over the group's values k of
        relu(src(i, k) + [amount bits == k] - H), where H (the sum of the amount bits worth
        >= W) switches every term off in the first group (ASHR then selects the sign)."""
        W = len(a)
        fill = a[-1] if op is Op.ASHR else const(0)
        if all(x.is_const for x in amt):
            k = sum(x.c << i for i, x in enumerate(amt))
            if op is Op.SHL:
                return [a[i - k] if 0 <= i - k < W else const(0) for i in range(W)]
            return [a[i + k] if i + k < W else fill for i in range(W)]
        low = [i for i in range(len(amt)) if (1 << i) < W]
        high = [amt[i] for i in range(len(amt)) if (1 << i) >= W]
        H = lin([(1, x) for x in high]) if high else None
        if H is not None and H.is_const:
            if H.c:
                return [fill] * W if op is Op.ASHR else [const(0)] * W
            H = None
        if not low:                      # W == 1: only the overflow test remains
            if H is None or op is Op.ASHR:
                return list(a)
            return [self.relu_sum([(lin([(1, a[0]), (-1, H)]), 1)], 0, 1)]
        ng = -(-len(low) // SHIFT_GROUP)
        groups = [low[g * len(low) // ng:(g + 1) * len(low) // ng] for g in range(ng)]
        cur = list(a)
        for gi, grp in enumerate(groups):
            hh = [(-1, H)] if H is not None and gi == 0 else []
            nxt = []
            for i in range(W):
                terms = []
                for k in range(1 << len(grp)):
                    d = sum(((k >> j) & 1) << b for j, b in enumerate(grp))
                    j = i - d if op is Op.SHL else i + d
                    src = cur[j] if 0 <= j < W else (fill if op is not Op.SHL else const(0))
                    if src.is_const and src.c == 0:
                        continue
                    match = [(1, amt[b]) if (k >> q) & 1 else (-1, amt[b])
                             for q, b in enumerate(grp)]
                    nzero = sum(1 for q in range(len(grp)) if not (k >> q) & 1)
                    terms.append((lin([(1, src)] + match + hh, nzero - len(grp)), 1))
                if hh and op is Op.ASHR:     # amount >= W: the sign, whatever the low bits
                    M = H.hi
                    terms += [(lin([(1, H), (M, fill)], -M), 1),
                              (lin([(1, H), (M, fill)], -M - 1), -1)]
                nxt.append(self.relu_sum(terms, 0, 1))
            cur = nxt
        return cur

    def mul_bits(self, a: Sequence[object], b: Sequence[object]) -> list[Form]:
        """Low W bits of a*b: partial-product ANDs (one stage), column compression
        (:meth:`compress`), then one adder. An operand bit still pending (a sign extension
        chosen by a select is an AND) joins each of its partial products' ANDs
        (:meth:`sym`), so it costs no stage of its own."""
        W = len(a)
        cols: list[list[Form]] = [[] for _ in range(W)]
        h = W // 2
        ea, eb = _extension(a), _extension(b)
        if ea is not None and eb is not None:
            # both operands sign- (or zero-) extend their lower halves: x = x_lo - e_x 2^h
            # (mod 2^W), so a*b = a_lo*b_lo - 2^h (e_a b_lo + e_b a_lo): h*h partial products
            # and two rows whose negation is their complement plus 1 (W*W/2 products before)
            for e, v in ((ea, b), (eb, a)):
                if isinstance(e, Form) and e.is_const and e.c == 0:
                    continue
                for j in range(h):
                    cols[h + j].append(lin([(-1, self.mat(self.sym("and", (e, v[j]))))], 1))
                cols[h].append(const(1))
            a, b = a[:h], b[:h]
        for j in range(len(b)):
            for i in range(min(len(a), W - j)):
                p = self.mat(self.sym("and", (a[i], b[j])))
                if not (p.is_const and p.c == 0):
                    cols[i + j].append(p)
        return self.sum_columns(cols)

    def sum_columns(self, cols: list[list[Form]]) -> list[Form]:
        """The low len(cols) bits of sum over k of 2^k * sum(cols[k]) (entries are bits or
        constants): :meth:`compress` to two rows, then one adder."""
        cols = self.compress(cols)
        r0 = [col[0] if col else const(0) for col in cols]
        r1 = [col[1] if len(col) > 1 else const(0) for col in cols]
        if all(x.is_const and x.c == 0 for x in r1):
            return r0
        return self.add_bits(r0, r1, False)

    def compress(self, cols: list[list[Form]]) -> list[list[Form]]:
        """Columns of bits -> columns of at most two bits with the same weighted sum (mod
        2^len(cols)). One stage per round: the columns are cut into blocks of b adjacent
        columns, each block's weighted sum T = sum 2^(c-k) * col[c] (<= 255) is written
        out in binary (shared neurons relu(T - v)), bit q going to column k + q. With h rows,
        b is chosen so that ceil(bits(h * (2^b - 1)) / b) is smallest: 3 rows -> 2, 4 -> 2,
        8 -> 2 (b = 3), 32 -> 3 -> 2."""
        W = len(cols)
        for _ in range(32):
            h = max(len(col) for col in cols)
            if h <= 2:
                break
            best = None
            for bw in range(1, 9):
                top = h * ((1 << bw) - 1)
                if top > MAX_SPAN:
                    break
                rows = -(-top.bit_length() // bw)
                if best is None or rows < best[0]:
                    best = (rows, bw)
            bw = best[1] if best else 1
            new: list[list[Form]] = [[] for _ in range(W)]
            for k in range(0, W, bw):
                blk = range(k, min(W, k + bw))
                if sum(len(cols[c]) for c in blk) <= 1:
                    for c in blk:
                        new[c].extend(cols[c])
                    continue
                # a block taller than one neuron's span (a column of 2,000 bits) is summed
                # in groups of at most MAX_SPAN, each written out in binary
                for group in _span_groups([(1 << (c - k), x) for c in blk for x in cols[c]]):
                    T = lin(group)
                    if T.is_const:
                        outs = [const((T.c >> q) & 1) for q in range(max(1, T.c.bit_length()))]
                    else:
                        nb = max(1, T.hi.bit_length())
                        outs = self.fns(T, [lambda v, q=q: (v >> q) & 1 for q in range(nb)])
                    for q, o in enumerate(outs):
                        if k + q < W and not (o.is_const and o.c == 0):
                            new[k + q].append(o)
            cols = new
        if max(len(col) for col in cols) > 2:
            raise LoweringError(f"{self.loc()}: internal: columns not compressed to two rows")
        return cols

    # ---- memories --------------------------------------------------------------------------
    def plan(self, name: str) -> MemPlan:
        """The memory's banking: a RAM stores one word per row (a GDN write replaces a whole
        row), one bit per cell, and a transparent RAM one word per row of each value head
        (``vsel``); a ROM packs 2^pack words per row, and a ROM that would take more than
        :data:`BYTE_CELL_BANKS` banks stores 8 bits per cell (when the Lowerer allows byte
        cells) if that takes fewer banks and the MLP can unpack a word (255 neurons per
        byte) in one layer."""
        if name not in self.mems:
            m = self.c.memories[name]
            t = self.target
            rows = t.rows_per_bank
            has_write = any(n.op is Op.MEM_WRITE and n.param == name for n in self.c.nodes)
            transparent = m.read_under_write == "new"
            g = t.v_per_k
            vsel = (g.bit_length() - 1) if transparent and has_write and g & (g - 1) == 0 else 0

            def layout(cell: int, pair: bool = False) -> MemPlan:
                cw = -(-m.width // cell)
                pack = int(pair)
                if not has_write:   # ROM: pack words into a row while they fit one bank
                    while (2 << pack) * cw <= t.cols_per_bank and (1 << pack) < m.depth:
                        pack += 1
                # value heads split only whole rows: a write's key cannot tell the heads
                # apart, so no row may hold both words in range and words past the depth
                vs = vsel if m.depth % (1 << (pack + vsel)) == 0 else 0
                nrows = -(-m.depth // (1 << (pack + vs)))
                r = t.d_k // 2 if pair else rows
                cols = t.d_v - t.value_ballast if vs else t.cols_per_bank
                return MemPlan(name, m.kind, m.width, m.depth, self.mem_layer[name],
                               self.mem_last[name], r, -(-nrows // r),
                               -(-(cw << pack) // cols), pack, cell, pair, transparent, vs)
            p = layout(1)
            if has_write and t.two_hot and layout(1, True).kheads < p.kheads:
                p = layout(1, True)     # d_k words per bank instead of d_k - 1
            if not has_write and self.byte_cells and p.kheads > BYTE_CELL_BANKS and m.width > 1:
                q = layout(8)
                unpack = 255 * q.cells          # neurons one read's unpacking takes
                if q.kheads < p.kheads and (t.mlp_width is None or t.mlp_width >= unpack):
                    p = q
            self.mems[name] = p
        return self.mems[name]

    def need(self, name: str, forms: Iterable[Form]) -> None:
        slot = self.slot_of(forms)
        L = slot // 2 + 1
        if L > self.mem_layer[name]:
            self.bumps[name] = max(self.bumps.get(name, 0), L)

    def mem_read(self, n: Node, addr: list[Form]) -> list[Form]:
        """One lane per cell of the word, read in the memory's GDN layers; byte cells are
        unpacked into bits by the next MLP (255 shared neurons per byte, one stage)."""
        p = self.plan(n.param)
        self.need(n.param, addr)
        slot = 2 * p.last
        nbs = [min(p.cell, n.width - ci * p.cell) for ci in range(p.cells)]
        lanes = [self.new_lane(slot, 0, (1 << nb) - 1, f"{n.param}[].{i}")
                 for i, nb in enumerate(nbs)]
        p.reads.append(ReadPort(n.id, list(addr), lanes))
        if p.cell == 1:
            return [Form(0, {ln: 1}, 0, 1) for ln in lanes]
        out: list[Form] = []
        for ln, nb in zip(lanes, nbs):
            out += self.fns(Form(0, {ln: 1}, 0, (1 << nb) - 1),
                            [lambda v, q=q: (v >> q) & 1 for q in range(nb)])
        return out

    def mem_write(self, n: Node, addr: list, data: list, en: object) -> None:
        """The memory's write port; a paired RAM's data is two copies gated by the address's
        low bit (:class:`MemPlan`), each a select that fuses with the data's own last stage."""
        p = self.plan(n.param)
        addr, en = [self.mat(x) for x in addr], self.mat(en)
        if p.pair:      # (a tree materialised for another reader is fused again here)
            zero = const(0)
            data = [_unmaterialised(x) for x in data]
            data = [self.mux_lazy(addr[0], x, zero) for x in data] + \
                   [self.mux_lazy(addr[0], zero, x) for x in data]
        data = [self.mat(x) for x in data]
        if p.writes:
            raise LoweringError(
                f"{n.loc}: memory '{n.param}' has a second write port (the first is at "
                f"{self.c.nodes[p.writes[0].node].loc}); a GDN head performs one write per "
                f"step: merge the writes into one (address, data, enable) with multiplexers")
        self.need(n.param, list(addr) + list(data) + [en])
        p.writes.append(WritePort(n.id, list(addr), list(data), en))

    # ---- driver ----------------------------------------------------------------------------
    def run(self) -> Program:
        c = self.c
        self.kind_lane_ids = [self.new_lane(-1, 0, 1, f"tok.kind.{i}") for i in range(c.kind_width)]
        self.field_lane_ids = [[[self.new_lane(-1, 0, 1, f"tok.{k.name}.{f.name}.{i}")
                                 for i in range(f.width)] for f in k.fields] for k in c.kinds]
        self.out_args: list[list[Form]] = []
        for name in c.state_memories:
            self.plan(name)
        users: dict[int, list[int]] = {}
        for n in c.nodes:   # (a transparent read's write arguments are the write's own)
            for a in n.args[:1] if n.op is Op.MEM_READ else n.args:
                users.setdefault(a, []).append(n.id)
        self.absorbed = {n.id for n in c.nodes if n.op in (Op.ADD, Op.SUB)
                         and len(users.get(n.id, ())) == 1
                         and c.nodes[users[n.id][0]].op in (Op.ADD, Op.SUB)
                         and c.nodes[users[n.id][0]].width == n.width}
        # nodes some memory write or the next token reads; token-only logic comes from the
        # embedding (backends.tabulate)
        tab = tabulate.plan(c, self.tables)
        self.absorbed -= set(tab.tabulated)
        self.token_fns: list[tuple[int, list[int]]] = []
        for n in c.nodes:
            if n.id not in tab.live:   # e.g. a named signal nothing reads: no neurons
                continue
            self.cur = n.id
            if n.id in tab.tabulated:
                self.tabulated(n)
            else:
                self.lower_node(n)
        self.cur = -1
        if not self.out_args:
            raise LoweringError(f"{c.loc}: circuit {c.name} has no next-token output")
        out_kind = self.out_args[0]
        out_fields = []
        i = 1
        for k in c.kinds:
            out_fields.append(self.out_args[i:i + len(k.fields)])
            i += len(k.fields)
        last = max([self.slot_of(f for fs in self.out_args for f in fs)] +
                   [2 * p.last for p in self.mems.values()] +
                   [2 * L + 1 for L, ns in self.mlp.items() if ns] + [0])
        n_layers = last // 2 + 1
        return Program(c, self.target, self.lanes, self.mlp, self.mems, self.kind_lane_ids,
                       self.field_lane_ids, out_kind, out_fields, n_layers, bits=self.bits,
                       token_fns=self.token_fns)
