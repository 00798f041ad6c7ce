"""The lowering's limits, its error, and the pending bits it fuses (:class:`SymBit`,
:class:`ThresholdBit`) with the helpers that decide when they fuse."""
from __future__ import annotations

from typing import Callable, Sequence

from common.errors import UserError
from backends.compile.program import Form, MuxBit, PendingBit, const, lin

MAX_SPAN = 256


class LoweringError(UserError):
    """The circuit uses something this backend cannot compile (message names the line)."""


SHIFT_GROUP = 5      # amount bits per one-hot shift stage (2^5 = 32 sources per bit)
BYTE_CELL_BANKS = 2   # a ROM taking more banks than this at 1 bit per cell uses byte cells
MUX_LEAVES = 128     # materialise a mux tree beyond this many leaves per bit
MIN_PRE = -(1 << 14) # lowest pre-activation allowed (negative ones all give silu = -0.0)


#: most literals one AND/OR/XOR neuron group takes (its pre-activation stays <= 256)
MAX_FANIN = 255

SYM = {"and": None, "or": lambda v: int(v >= 1), "xor": lambda v: v & 1}


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
        f = SYM[kind] or (lambda v, n=n: int(v >= n))
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


def is_and(v: object) -> bool:
    return isinstance(v, SymBit) and v.kind == "and" and v.form is None


def fusable(v: object) -> bool:
    """A mux tree small enough to fuse into a mux on a pending select: its leaf values are
    bits, or ANDs of literals (which join the leaf's literals)."""
    return isinstance(v, MuxBit) and v.form is None and \
        len(v.leaves) <= MUX_LEAVES // 2 and \
        all(not isinstance(val, PendingBit) or is_and(val) for _, val in v.leaves)


def plain_leaves(v: MuxBit) -> list:
    """The leaves of a :func:`fusable` tree as (literals, bit): an AND value's literals join
    the leaf's, its value the constant 1."""
    return [(lits + tuple(val.lits), const(1)) if is_and(val) else (lits, val)
            for lits, val in v.leaves]


def and_lits(sel: object, v: object) -> bool:
    """``sel`` is a pending AND of literals and ``v`` a tree or function whose leaves can
    take those literals (a mux tree small enough, or a pending bit)."""
    if not (isinstance(sel, SymBit) and sel.kind == "and" and sel.form is None):
        return False
    if isinstance(v, MuxBit):
        return v.form is None and len(v.leaves) <= MUX_LEAVES // 2
    return isinstance(v, PendingBit) and v.form is None


def is_tree(v: object) -> bool:
    """A mux value that is a tree or function not yet materialised and cannot fuse."""
    return isinstance(v, (PendingBit, MuxBit)) and v.form is None and not fusable(v)


def unabsorbed_trees(s: object, ns: object, x: object, y: object) -> list:
    """The values of ``s ? y : x`` that are trees (:func:`is_tree`) its pending select cannot
    fuse: a value under a select that is an AND of literals takes them into its leaves,
    whatever the value, so it is not one of them."""
    return [v for v, sel in ((x, ns), (y, s)) if is_tree(v) and not and_lits(sel, v)]


def bit_key(x: object) -> tuple:
    """A key equal for bits that are the same: a Form's terms, a mux tree's leaves, a
    pending function's identity."""
    if isinstance(x, (MuxBit, PendingBit)) and x.form is not None:
        x = x.form
    if isinstance(x, Form):
        return ("form", x.c, tuple(sorted(x.t.items())))
    if isinstance(x, MuxBit):
        return ("tree", tuple((tuple(bit_key(l) for l in lits), bit_key(v))
                              for lits, v in x.leaves))
    return ("pending", id(x))


def span_groups(terms: list[tuple[int, Form]]) -> list[list[tuple[int, Form]]]:
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


class NotOf:
    """``1 - f(v)``: the NOT of a pending function. The NOT of a ``NotOf`` is its function
    again, so a chain of 100,000 NOTs is never 100,000 nested calls."""
    __slots__ = ("f",)

    def __init__(self, f: Callable[[int], int]):
        self.f = f

    def __call__(self, v: int) -> int:
        return 1 - self.f(v)


def not_of(f: Callable[[int], int]) -> Callable[[int], int]:
    return f.f if isinstance(f, NotOf) else NotOf(f)


def extension(v: Sequence[object]) -> object | None:
    """The bit that the upper half of ``v`` repeats (a sign or zero extension of its lower
    half: :meth:`Lowerer.mul_bits`), or None."""
    h = len(v) // 2
    if len(v) % 2 or h < 4:
        return None
    k = bit_key(v[h])
    return v[h] if all(bit_key(x) == k for x in v[h + 1:]) else None


def unmaterialised(x: object) -> object:
    """``x`` as a tree or pending function a select can fuse: a copy without its Form when
    it was materialised for another reader (its neurons are then made again, gated)."""
    if isinstance(x, MuxBit) and x.form is not None and len(x.leaves) <= MUX_LEAVES // 2:
        return MuxBit(x.leaves, x.node)
    if isinstance(x, PendingBit) and x.form is not None:
        return PendingBit(x.T, x.f, x.node)
    return x
