"""Lowering: IR ops -> lanes, ReLU neurons and GDN memory ports, placed into layers.

Takes: a checked :class:`hdl.ir.Circuit`, a :class:`backends.chipdir.target.Target` and the layer of
every memory (``backends.compile.schedule`` finds those). Gives: :class:`Program`, the whole chip in
integer terms (its types live in :mod:`backends.compile.program`), ready for retiming, lane
allocation, the exactness proof (``backends.compile.exact``) and emission (``backends.compile.emit``).

The lowering is one class, :class:`Lowerer`, split by concern: :mod:`.neurons` (lanes,
placement, neuron builders), :mod:`.logic` (pending bits, fusion, muxes), :mod:`.arith`
(adders, shifts, multipliers), :mod:`.memory` (memory plans and ports); :mod:`.bits`
holds the limits and the pending-bit types. This module is the driver.

Representation. Every IR signal bit is an affine :class:`Form` over *lanes* (residual
dimensions holding small integers, written once): ``c + sum(coef * lane)``. Token bits are
lanes filled by the embedding, and so is token-only logic that memory logic reads (a token
table, :mod:`backends.compile.tabulate`); SLICE, CONCAT, CONST, NOT, constant shifts are free (they only
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

from hdl.ir import Circuit, Node, Op
from backends.chipdir.target import Target
from backends.compile import tabulate
from backends.compile.program import Form, Lane, MemPlan, Neuron, PendingBit, Program, const, lin
from backends.compile.lower.bits import LoweringError
from backends.compile.lower.arith import Arith
from backends.compile.lower.logic import Logic
from backends.compile.lower.memory import Memories
from backends.compile.lower.neurons import Neurons


class Lowerer(Neurons, Logic, Arith, Memories):
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
        #: a mux leaf's early literals -> the lane of their AND (:meth:`Logic.leaf_gate`)
        self.leaf_gates: dict[tuple, Form] = {}

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
        """A token-only node: its bits are fresh embedding lanes (backends.compile.tabulate)."""
        lanes = [self.new_lane(-1, 0, 1, f"tok.fn.{n.id}.{i}") for i in range(n.width)]
        self.token_fns.append((n.id, lanes))
        self.bits[n.id] = [Form(0, {ln: 1}, 0, 1) for ln in lanes]

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
        # embedding (backends.compile.tabulate)
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
