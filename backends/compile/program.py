"""The backend's own intermediate form: the chip in integer terms, between lowering and emission.

Takes: nothing (types only). Gives: :class:`Form` (an affine integer form over lanes) with
:func:`const` / :func:`lin`, :class:`Lane`, :class:`Neuron`, :class:`ReadPort`,
:class:`WritePort`, :class:`MemPlan`, :class:`Program`, and the unmaterialised bits
:class:`MuxBit` / :class:`PendingBit` that ``Program.bits`` may hold. docs/backend.md, "The
backend's IR (backends/compile/program.py)", describes each type with a worked example.

Stage artefacts. The pipeline (:func:`backends.compile.pipeline.plan_circuit`) passes typed
artefacts from stage to stage, each wrapping the :class:`Program` as that stage left it:
:class:`Placed` (``backends.compile.schedule.run``), :class:`Retimed` (``backends.compile.retime.run``),
:class:`Allocated` (``backends.compile.lanes.run``), then ``backends.compile.exact.Proven`` and
``backends.compile.emit.Emission``.

Ownership. :mod:`backends.compile.lower` builds a :class:`Program` (``Lowerer.run``) and
:mod:`backends.compile.schedule` re-lowers until the memory layers settle. A stage that changes a
Program works on its own copy of what it changes, so an artefact's Program never changes
once the artefact exists:

- ``retime.run`` copies the lanes and ``mlp``, may move neurons to later layers (``mlp`` and
  the ``slot`` of the lanes they write) and sets ``sched``;
- ``lanes.run`` copies ``mlp``, appends "clear" neurons to it and sets ``phys`` / ``n_phys``;
- everything after (:mod:`backends.compile.exact`, :mod:`backends.compile.emit`, :mod:`backends.compile.trace`,
  :mod:`backends.compile.lanemap`) only reads it.

Forms, neurons, memory plans and the circuit are shared between the copies (nothing after
lowering changes them). The in-place helpers ``retime.retime(prog)`` and
``lanes.allocate(prog, cap)`` remain for tests and benchmarks that study one step.

Invariants every stage keeps (:mod:`backends.compile.exact` re-checks the numeric ones):

- lanes are numbered ``0 .. len(lanes) - 1`` in creation order; a lane is written exactly
  once, in its ``slot`` (-1: the embedding; 2L: the GDN sublayer of layer L; 2L+1: its MLP),
  and read only in later slots;
- a :class:`Form` refers to lanes only, its range [lo, hi] contains every value it takes,
  and all its coefficients are nonzero integers;
- every neuron of ``mlp[L]`` reads lanes written before slot 2L+1 and writes lanes whose
  ``slot`` is 2L+1 (clear neurons: lanes written later into a reused dimension);
- a memory's banks sit in layers ``layer .. last``; its write operands are bits.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from common.kinds import MemKind
from hdl.ir import Circuit

from backends.chipdir.memory import Banks, word_row
from backends.chipdir.target import Target


class Form:
    """``c + sum(t[lane] * lane)`` with a known integer range [lo, hi].

    Invariants: ``c``, the coefficients and the bounds are ints; ``t`` has no zero
    coefficient; ``lo <= value <= hi`` for every value the lanes can take (a bound, not
    necessarily tight); a constant form (``t`` empty) has ``lo == hi == c``. Forms are shared
    between bits and stages: a form is not changed once another bit or stage holds it (make a
    new one with :func:`lin`)."""
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
    bits are all 1; the bit is sum over leaves of relu(value + sum(literals) - len(literals)).
    ``node``: the IR node that made it (its neurons are traced to that node)."""
    __slots__ = ("leaves", "form", "node")

    def __init__(self, leaves: list[tuple[tuple[Form, ...], Form]], node: int = -1):
        self.leaves = leaves
        self.form: Form | None = None
        self.node = node


class PendingBit:
    """A bit f(T) not yet materialised: as a mux leaf it is computed *gated* in the mux's
    own stage (relu(T - c + M*(sum(literals) - n)) per threshold c, M from gated_terms), so "compute, then
    select" costs one MLP stage less. ``node``: the IR node that made it."""
    __slots__ = ("T", "f", "form", "node")

    def __init__(self, T: Form, f: Callable[[int], int], node: int = -1):
        self.T = T
        self.f = f
        self.form: Form | None = None
        self.node = node


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
    """relu(gate) added with weight ``out[lane]`` to each output lane; ``clear``: a neuron
    :mod:`backends.compile.lanes` adds to empty a reused dimension (not part of the lane's value)."""
    gate: Form
    out: dict[int, int]
    node: int
    clear: bool = False


@dataclass
class ReadPort:
    """One read of a memory (the IR READ node ``node``): the address bits ``addr`` (forms,
    LSB first, each a bit) select a word whose bits the GDN read adds to ``lanes`` (one lane
    per cell, LSB first; a byte cell's lane holds 0..255), written in slot 2 * ``last``."""
    node: int
    addr: list[Form]
    lanes: list[int]


@dataclass
class WritePort:
    """The write of a memory (IR WRITE node ``node``): at step t the word ``data`` goes to
    address ``addr`` when ``en`` is 1 (all bit forms, read by the GDNs of the memory's layers
    from the previous position, so they must exist before slot 2 * ``layer``)."""
    node: int
    addr: list[Form]
    data: list[Form]
    en: Form


@dataclass
class MemPlan(Banks):
    """Where a memory lives. Bank (port, rowblock, slice) is one key head (with its GQA
    value heads) holding rows ``rowblock*rows ..`` and word bits ``slice*cols ..``; every
    bank gets every write, read port p queries its own banks. ``banks[i]`` = (layer, key
    head) of bank i = (port * rowblocks + rowblock) * slices + slice. Banks may spread over
    layers ``layer .. last``: reads complete after ``last``; writes need their inputs before
    ``layer``.

    ``pair`` (a RAM on a two-hot target): logical row i of a bank is the two key rows i and
    i + rows, holding its words 0 and 1 (pack = 1, the word is the address's low bit) in
    their own columns; a query reads both rows (its two hot entries), the z gate picks the
    word, and a write's data comes as two gated copies (``WritePort.data``: word 0's bits,
    then word 1's, each zero unless the address's low bit selects it). So a bank holds
    d_k words instead of d_k - 1 without a reserved row.

    ``transparent`` (read-under-write "new"): the write is made at the step's own position
    (keys and values from the current token), so a read sees it. ``vsel`` (a transparent RAM
    on a target with 2^vsel value heads per key head): the value heads of a bank hold
    different words, chosen by address bits ``pack .. pack+vsel-1``; a write's beta is 1 on
    the chosen value head and 0 on the others (computed from the address at that position),
    so a bank holds 2^vsel times the words. A logical row holds :attr:`per_row` words.

    Invariants: ``len(banks) == kheads`` once placed; ``layer <= L <= last`` for every bank
    layer L; ``rows * rowblocks * per_row >= depth``; ``cell`` is 1 or 8 (8 only for ROMs); at
    most one write port, and none when ``pack`` > 0 unless ``pair``."""
    name: str
    kind: MemKind
    width: int
    depth: int
    layer: int
    last: int
    rows: int            # rows per bank
    rowblocks: int
    slices: int
    pack: int = 0        # ROMs: 2**pack words per row, selected per column by the z gate
    cell: int = 1        # bits per state cell (value column): 1, or 8 for byte-cell ROMs
    pair: bool = False   # RAMs on two-hot targets: two key rows per logical row (above)
    transparent: bool = False   # the write at the step's own position (above)
    vsel: int = 0        # address bits choosing the value head (transparent RAMs)
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

    @property
    def cells(self) -> int:
        """Cells (value columns) one word takes."""
        return -(-self.width // self.cell)

    def key_rows(self, i: int) -> list[tuple[int, int]]:
        """(key row, word) of logical row ``i`` of a bank: one row holding its 2^pack words,
        or with ``pair`` rows i and i + rows holding words 0 and 1."""
        if not self.pair:
            return [(i, -1)]
        return [(i + word_row(True, self.rows, w), w) for w in (0, 1)]



@dataclass
class Program:
    """The lowered chip: lanes, neurons per layer, memories, token lanes and output forms.

    ``lanes[i]`` is logical lane i; ``mlp[L]`` the neurons of layer L's MLP; ``mems`` each
    memory's plan; ``kind_lanes[k]`` the one-hot lane of token kind k and
    ``field_lanes[k][f]`` the bit lanes (LSB first) of field f of kind k, all written by the
    embedding (slot -1); ``out_kind`` / ``out_fields`` the forms the lm_head reads (the next
    token). ``n_layers`` decoder layers. Filled by later stages: ``sched`` (retiming),
    ``phys`` / ``n_phys`` (lane allocation: lane -> residual dim after the ballast; empty
    before, when :meth:`dim` is the identity). ``bits``: IR node id -> its bits (a
    :class:`Form`, or a :class:`MuxBit` / :class:`PendingBit` whose ``form`` is set once
    materialised), for tracing and the lane map. See the module docstring for who may change
    what."""
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
    sched: dict | None = None   # retiming outcome (backends.compile.retime): dims before/after, moves
    bits: dict = field(default_factory=dict)   # IR node id -> its bits (Form, MuxBit, PendingBit)
    #: token-only nodes the embedding holds (backends.compile.tabulate): (IR node, its lanes, LSB first)
    token_fns: list[tuple[int, list[int]]] = field(default_factory=list)

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


def copy_for_change(prog: Program, lanes: bool = False) -> Program:
    """A shallow copy of ``prog`` whose ``mlp`` (the dict and its lists) and, with ``lanes``,
    its :class:`Lane` objects are its own: what a stage changes. Everything else is shared."""
    return replace(prog, mlp={L: list(ns) for L, ns in prog.mlp.items()},
                   lanes=[replace(ln) for ln in prog.lanes] if lanes else prog.lanes)


@dataclass(frozen=True)
class Placed:
    """After :func:`backends.compile.schedule.run`: every neuron in the earliest MLP layer its inputs
    and the MLP budget allow (ASAP), every memory in its GDN layers, the layer count fixed;
    no physical dims yet (``prog.phys`` empty)."""
    prog: Program


@dataclass(frozen=True)
class Retimed:
    """After :func:`backends.compile.retime.run`: some neuron groups moved to later layers where that
    needs fewer dims (``prog.sched`` is the record); ``mlp_width``: the MLP budget retiming
    kept to, which lane allocation must keep to too (None: no limit)."""
    prog: Program
    mlp_width: int | None


@dataclass(frozen=True)
class Allocated:
    """After :func:`backends.compile.lanes.run`: ``prog.phys`` maps every lane to a residual dim
    (``prog.n_phys`` of them, after the ballast), clear neurons added."""
    prog: Program

    @property
    def dims(self) -> int:
        """Residual dims the lanes take (the ballast not counted)."""
        return self.prog.n_dims
