"""Lowering: IR ops -> lanes, ReLU neurons and GDN memory ports, placed into layers.

Takes: a checked :class:`hdl.ir.Circuit`, a :class:`backends.target.Target` and the layer of
every memory (``backends.schedule`` finds those). Gives: :class:`Program`, the whole chip in
integer terms, ready for the exactness proof (``backends.exact``) and for emission
(``backends.emit``).

Representation. Every IR signal bit is an affine :class:`Form` over *lanes* (residual
dimensions holding small integers, written once): ``c + sum(coef * lane)``. Token bits are
lanes filled by the embedding; SLICE, CONCAT, CONST, NOT, constant shifts are free (they only
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

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from deltachip.errors import UserError
from hdl.ir import Circuit, Node, Op
from backends.target import Target

MAX_SPAN = 256


class LoweringError(UserError):
    """The circuit uses something this backend cannot compile (message names the line)."""


class Form:
    """``c + sum(t[lane] * lane)`` with a known integer range [lo, hi]."""
    __slots__ = ("c", "t", "lo", "hi")

    def __init__(self, c: int = 0, t: dict[int, int] | None = None,
                 lo: int | None = None, hi: int | None = None):
        self.c = c
        self.t = t or {}
        self.lo = c if lo is None else lo
        self.hi = c if hi is None else hi

    @property
    def is_const(self) -> bool:
        return not self.t

    def __repr__(self) -> str:
        return f"Form({self.c}, {self.t}, [{self.lo},{self.hi}])"


def const(v: int) -> Form:
    return Form(v)


def lin(pairs: Iterable[tuple[int, Form]], c: int = 0) -> Form:
    """The form ``c + sum(k * f)``; its range is the interval sum of the parts' ranges."""
    t: dict[int, int] = {}
    lo = hi = c
    cc = c
    for k, f in pairs:
        if k == 0:
            continue
        cc += k * f.c
        for lane, w in f.t.items():
            t[lane] = t.get(lane, 0) + k * w
        lo += k * (f.lo if k > 0 else f.hi)
        hi += k * (f.hi if k > 0 else f.lo)
    t = {a: w for a, w in t.items() if w}
    if not t:
        return Form(cc)
    return Form(cc, t, lo, hi)


class MuxBit:
    """A bit chosen by a tree of multiplexers, kept unmaterialised so that a chain of muxes
    costs one MLP stage: ``leaves`` are (literals, value) with exactly one leaf whose literal
    bits are all 1; the bit is sum over leaves of relu(value + sum(literals) - len(literals))."""
    __slots__ = ("leaves", "form")

    def __init__(self, leaves: list[tuple[tuple[Form, ...], Form]]):
        self.leaves = leaves
        self.form: Form | None = None


MUX_LEAVES = 8       # materialise a mux tree beyond this many leaves per bit
GATE = 256           # slope that switches a gated neuron off when a literal is 0
MIN_PRE = -(1 << 14) # lowest pre-activation allowed (negative ones all give silu = -0.0)


class PendingBit:
    """A bit f(T) not yet materialised: as a mux leaf it is computed *gated* in the mux's
    own stage (relu(T - c + GATE*(sum(literals) - n)) per threshold c), so "compute, then
    select" costs one MLP stage less."""
    __slots__ = ("T", "f", "form")

    def __init__(self, T: Form, f: Callable[[int], int]):
        self.T = T
        self.f = f
        self.form: Form | None = None


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


@dataclass
class Lane:
    """One residual dimension: written in ``slot`` (-1: by the embedding), value range
    [lo, hi], made for IR node ``node`` (-1: none), ``label`` for chip.json."""
    slot: int
    lo: int
    hi: int
    node: int
    label: str


@dataclass
class Neuron:
    """relu(gate) added with weight ``out[lane]`` to each output lane."""
    gate: Form
    out: dict[int, int]
    node: int


@dataclass
class ReadPort:
    node: int
    addr: list[Form]
    lanes: list[int]


@dataclass
class WritePort:
    node: int
    addr: list[Form]
    data: list[Form]
    en: Form


@dataclass
class MemPlan:
    """Where a memory lives. Bank (port, rowblock, slice) is one key head (with its GQA
    value heads) holding rows ``rowblock*rows ..`` and word bits ``slice*cols ..``; every
    bank gets every write, read port p queries its own banks. ``banks[i]`` = (layer, key
    head) of bank i = (port * rowblocks + rowblock) * slices + slice. Banks may spread over
    layers ``layer .. last``: reads complete after ``last``; writes need their inputs before
    ``layer``."""
    name: str
    kind: str
    width: int
    depth: int
    layer: int
    last: int
    rows: int            # rows per bank
    rowblocks: int
    slices: int
    pack: int = 0        # ROMs: 2**pack words per row, selected per column by the z gate
    banks: list[tuple[int, int]] = field(default_factory=list)
    reads: list[ReadPort] = field(default_factory=list)
    writes: list[WritePort] = field(default_factory=list)

    @property
    def ports(self) -> int:
        return max(1, len(self.reads))

    @property
    def kheads(self) -> int:
        return self.ports * self.rowblocks * self.slices

    def input_forms(self) -> list[Form]:
        """Every form the memory reads in its layers: read addresses, write address, data
        and enable."""
        return ([f for port in self.reads for f in port.addr] +
                [f for w in self.writes for f in w.addr + w.data + [w.en]])

    def bank(self, port: int, rowblock: int, sl: int) -> tuple[int, int]:
        return self.banks[(port * self.rowblocks + rowblock) * self.slices + sl]


@dataclass
class Program:
    """The lowered chip: lanes, neurons per layer, memories, token lanes and output forms."""
    circuit: Circuit
    target: Target
    lanes: list[Lane]
    mlp: dict[int, list[Neuron]]
    mems: dict[str, MemPlan]
    kind_lanes: list[int]
    field_lanes: list[list[list[int]]]      # [kind][field] -> lanes, LSB first
    out_kind: list[Form]
    out_fields: list[list[list[Form]]]      # [kind][field] -> bit forms
    n_layers: int
    phys: list[int] = field(default_factory=list)   # lane -> residual dim (after ballast)
    n_phys: int = 0
    sched: dict | None = None   # retiming outcome (backends.retime): dims before/after, moves

    def dim(self, lane: int) -> int:
        """Physical residual dim of ``lane``, not counting the ballast dims."""
        return self.phys[lane] if self.phys else lane

    def dim_sumsq(self) -> int:
        """sum over physical dims of the largest square any occupant may hold."""
        m: dict[int, int] = {}
        for i, ln in enumerate(self.lanes):
            d = self.dim(i)
            m[d] = max(m.get(d, 0), ln.lo * ln.lo, ln.hi * ln.hi)
        return sum(m.values())

    @property
    def n_dims(self) -> int:
        return self.n_phys if self.phys else len(self.lanes)

    def kheads_in(self, layer: int) -> int:
        return sum(1 for p in self.mems.values() for L, _ in p.banks if L == layer)

    def neurons_in(self, layer: int) -> int:
        return len(self.mlp.get(layer, []))


class _Bump(Exception):
    pass


class Lowerer:
    """Lowers one circuit with fixed memory layers; records needed layer bumps."""

    def __init__(self, circuit: Circuit, target: Target, mem_layer: dict[str, int],
                 mem_last: dict[str, int] | None = None):
        self.c = circuit
        self.target = target
        self.mem_layer = mem_layer
        self.mem_last = {m: max(mem_layer[m], (mem_last or {}).get(m, 0)) for m in mem_layer}
        self.lanes: list[Lane] = []
        self.mlp: dict[int, list[Neuron]] = {}
        self.bits: dict[int, list[Form]] = {}
        self.bumps: dict[str, int] = {}
        self.cur = -1
        self.mems: dict[str, MemPlan] = {}

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

    def place(self, slot: int, n: int) -> int:
        """The MLP layer for ``n`` neurons whose inputs are complete at ``slot``."""
        layer = max(0, (slot + 1) // 2)
        cap = self.target.mlp_width
        if cap is not None:
            if n > cap:
                raise LoweringError(f"{self.loc()}: one operation needs {n} neurons in a "
                                    f"layer but the target's MLP has {cap}")
            while len(self.mlp.get(layer, [])) + n > cap:
                layer += 1
        return layer

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
        layer = self.place(self.slot_of([T]), len(cuts))
        lanes: dict[int, int] = {}
        for i, cd in enumerate(coefs):
            if out[i] is not None:
                continue
            vs = vals[i]
            g = [v - vs[0] for v in vs]
            lanes[i] = self.new_lane(2 * layer + 1, min(g), max(g))
            out[i] = Form(vs[0], {lanes[i]: 1}, min(vs), max(vs))
        neurons = self.mlp.setdefault(layer, [])
        for c in cuts:
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
        layer = self.place(self.slot_of(T for T, _ in live), len(live))
        if linear:          # the lane holds the result minus the linear part: bound it
            llo = sum(min(k * max(0, T.lo), k * T.hi) for T, k in live)
            lhi = sum(max(k * max(0, T.lo), k * T.hi) for T, k in live)
        else:               # the lane holds the result itself, known to lie in [lo, hi]
            llo, lhi = lo, hi
        lane = self.new_lane(2 * layer + 1, llo, lhi)
        neurons = self.mlp.setdefault(layer, [])
        for T, k in live:
            neurons.append(Neuron(T, {lane: k}, self.cur))
        f = lin([(1, Form(0, {lane: 1}, llo, lhi))] + linear)
        f.lo, f.hi = lo, hi
        return f

    # ---- arithmetic helpers ----------------------------------------------------------------
    def prefix_pos(self, e: Sequence[Form], idx: Sequence[int]) -> dict[int, Form]:
        """For each i in idx: 1 if the sign of the digit string e[i], e[i-1], ..., e[0]
        (digits in {-1, 0, 1}, e[i] most significant) is positive, else 0."""
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
                res[i] = self.fn(lin([(1 << j, e[j]) for j in range(i + 1)]), step1)
            elif b > 7:
                raise LoweringError(f"{self.loc()}: compare/add wider than 64 bits")
            else:
                q[i] = block_sign(b) if i == 8 * b + 7 else \
                    self.fn(lin([(1 << (j - 8 * b), e[j]) for j in range(8 * b, i + 1)]), sign)
        for i, qi in q.items():
            b = i // 8
            T = lin([(1 << b, qi)] + [(1 << bb, block_sign(bb)) for bb in range(b)])
            res[i] = self.fn(T, step1)
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

    def pending(self, T: Form, f: Callable[[int], int]) -> "Form | PendingBit":
        """f(T) as a PendingBit when it would need neurons, else its Form right away."""
        if T.lo == T.hi:
            return const(f(T.lo))
        if len(T.t) <= 1:
            return self.fn(T, f)
        return PendingBit(T, f)

    def mat(self, x: "Form | MuxBit | PendingBit") -> Form:
        """The Form of a bit, materialising a mux tree or a pending function (once)."""
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
        from backends.exact import sig_bits
        f0, cd = thresholds(v.T, v.f)
        n = len(lits)
        out = []
        for cth, k in cd.items():
            for M in range(max(1, v.T.hi - cth), 4096):
                T = lin([(1, v.T)] + [(M, lit) for lit in lits], -cth - M * n)
                if sig_bits(T.c) <= 8 and all(sig_bits(w) <= 8 for w in T.t.values()):
                    out.append((T, k))
                    break
            else:
                return None
        if f0:
            out.append((lin([(1, lit) for lit in lits], 1 - n), f0))
        return out

    def mux_lazy(self, s: Form, x: Form | MuxBit, y: Form | MuxBit) -> Form | MuxBit:
        """s ? y : x as a MuxBit (fused with the trees of x and y while they stay small)."""
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
        return MuxBit(out)

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
        c, op = self.c, n.op
        A = [self.bits[a] for a in n.args if a in self.bits]
        if op not in (Op.MUX, Op.SLICE, Op.CONCAT):
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
            r = [lin([(-1, x)], 1) for x in A[0]]
        elif op in (Op.AND, Op.OR, Op.XOR):
            f = {Op.AND: lambda v: int(v >= 2), Op.OR: lambda v: int(v >= 1),
                 Op.XOR: lambda v: v & 1}[op]
            r = [self.pending(lin([(1, x), (1, y)]), f) for x, y in zip(A[0], A[1])]
        elif op in (Op.ADD, Op.SUB):
            r = self.add_bits(A[0], A[1], op is Op.SUB)
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
            r = [self.prefix_pos(e, [Wa - 1])[Wa - 1]]
        elif op in (Op.SHL, Op.LSHR, Op.ASHR):
            r = self.shift_bits(op, A[0], A[1])
        elif op is Op.SLICE:
            r = A[0][n.param:n.param + W]
        elif op is Op.CONCAT:
            r = [x for part in reversed(A) for x in part]
        elif op is Op.MUX:
            s = self.mat(A[0][0])
            r = [self.mux_lazy(s, x, y) for x, y in zip(A[1], A[2])]
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

    def eq_bits(self, a: Sequence[Form], b: Sequence[Form]) -> Form:
        W = len(a)
        is0 = lambda v: int(v == 0)
        parts = []
        for b0 in range(0, W, 8):
            T = lin([(1 << (j - b0), a[j]) for j in range(b0, min(W, b0 + 8))] +
                    [(-(1 << (j - b0)), b[j]) for j in range(b0, min(W, b0 + 8))])
            parts.append(self.fn(T, is0))
        if len(parts) == 1:
            return parts[0]
        return self.fn(lin([(1, p) for p in parts]), lambda v: int(v >= len(parts)))

    def shift_bits(self, op: Op, a: Sequence[Form], amt: Sequence[Form]) -> list[Form]:
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
        cur = list(a)
        first = True
        for k in low:
            s = amt[k]
            d = 1 << k
            nxt = []
            for i in range(W):
                src = (cur[i - d] if i - d >= 0 else const(0)) if op is Op.SHL else \
                      (cur[i + d] if i + d < W else fill)
                hh = H if first else None
                if op is Op.ASHR and hh is not None:
                    M = len(high) + 1
                    terms = [(lin([(1, cur[i]), (-1, s), (-1, hh)]), 1),
                             (lin([(1, src), (1, s), (-1, hh)], -1), 1),
                             (lin([(M, fill), (1, hh)], -M), 1),
                             (lin([(M, fill), (1, hh)], -M - 1), -1)]
                    nxt.append(self.relu_sum(terms, 0, 1))
                else:
                    nxt.append(self.mux(s, cur[i], src, hh))
            cur = nxt
            first = False
        if first and H is not None:      # W == 1: only the overflow test remains
            if op is Op.ASHR:
                return cur
            return [self.relu_sum([(lin([(1, cur[0]), (-1, H)]), 1)], 0, 1)]
        return cur

    def mul_bits(self, a: Sequence[Form], b: Sequence[Form]) -> list[Form]:
        """Low W bits of a*b: partial-product ANDs (one stage), column compression with
        counters (each column's bit count, as binary, goes to the next columns: heights
        W -> log2(W+1) -> ... -> 2), then one adder."""
        W = len(a)
        AND = lambda v: int(v >= 2)
        cols: list[list[Form]] = [[] for _ in range(W)]
        for j in range(W):
            for i in range(W - j):
                p = self.fn(lin([(1, a[i]), (1, b[j])]), AND)
                if not (p.is_const and p.c == 0):
                    cols[i + j].append(p)
        for _ in range(16):
            if all(len(col) <= 2 for col in cols):
                break
            new: list[list[Form]] = [[] for _ in range(W)]
            for k, col in enumerate(cols):
                if len(col) <= 2:
                    new[k].extend(col)
                    continue
                T = lin([(1, x) for x in col])
                nb = max(1, T.hi.bit_length())
                outs = self.fns(T, [lambda v, q=q: (v >> q) & 1 for q in range(nb)])
                for q, o in enumerate(outs):
                    if k + q < W and not (o.is_const and o.c == 0):
                        new[k + q].append(o)
            cols = new
        r0 = [col[0] if col else const(0) for col in cols]
        r1 = [col[1] if len(col) > 1 else const(0) for col in cols]
        if all(x.is_const and x.c == 0 for x in r1):
            return r0
        return self.add_bits(r0, r1, False)

    # ---- memories --------------------------------------------------------------------------
    def plan(self, name: str) -> MemPlan:
        if name not in self.mems:
            m = self.c.memories[name]
            t = self.target
            rows = t.rows_per_bank
            pack = 0
            has_write = any(n.op is Op.MEM_WRITE and n.param == name for n in self.c.nodes)
            if not has_write:       # ROM: pack words into a row while they fit one bank
                while (2 << pack) * m.width <= t.cols_per_bank and (1 << pack) < m.depth:
                    pack += 1
            nrows = -(-m.depth // (1 << pack))
            self.mems[name] = MemPlan(name, m.kind, m.width, m.depth, self.mem_layer[name],
                                      self.mem_last[name], rows, -(-nrows // rows),
                                      -(-(m.width << pack) // t.cols_per_bank), pack)
        return self.mems[name]

    def need(self, name: str, forms: Iterable[Form]) -> None:
        slot = self.slot_of(forms)
        L = slot // 2 + 1
        if L > self.mem_layer[name]:
            self.bumps[name] = max(self.bumps.get(name, 0), L)

    def mem_read(self, n: Node, addr: list[Form]) -> list[Form]:
        p = self.plan(n.param)
        self.need(n.param, addr)
        slot = 2 * p.last
        lanes = [self.new_lane(slot, 0, 1, f"{n.param}[].{i}") for i in range(n.width)]
        p.reads.append(ReadPort(n.id, list(addr), lanes))
        return [Form(0, {ln: 1}, 0, 1) for ln in lanes]

    def mem_write(self, n: Node, addr: list[Form], data: list[Form], en: Form) -> None:
        p = self.plan(n.param)
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
        for name in c.memories:
            self.plan(name)
        for n in c.nodes:
            self.cur = n.id
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
                       self.field_lane_ids, out_kind, out_fields, n_layers)
