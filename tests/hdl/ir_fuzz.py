"""Random valid IR, for differential tests (simulator backends, simulator vs weights).

Takes: a ``random.Random`` (seed it: a failing case is then reproducible from its seed) and
size/shape knobs. Gives: circuits and modules that pass ``Circuit.check``, over every op,
widths 1..``max_width`` (edge widths 1, 8, 31..33, 63, 64 favoured), constants and token fields
at edge values (0, 1, all ones, sign bit, sign bit - 1), shift amounts both below and >= the
width, memory addresses both below and >= the depth, ROMs with images and RAMs with writes.

- :func:`random_circuit` - a top circuit (token kinds, memories, one TOKEN_OUT);
- :func:`random_module` - a module (INPUT/OUTPUT ports, no kinds or memories);
- :func:`random_token` - a valid token of a circuit;
- :func:`random_images` - memory images (every ROM, some RAMs) for ``Simulator(roms=...)``.

Example::

    rng = random.Random(seed)
    c = random_circuit(rng, n_nodes=80, ops=ALL_OPS - {Op.MUL})
    sim = Simulator(c, roms=random_images(rng, c))
    sim.step(random_token(rng, c))
"""
from __future__ import annotations

import random
from typing import Iterable, Sequence

from hdl.ir import Circuit, Field, Loc, Memory, Op, Token, TokenKind

#: Ops that compute a value, which the generator draws from (TOKEN_OUT, MEM_WRITE, INPUT and
#: OUTPUT are placed structurally).
ALL_OPS = frozenset({Op.CONST, Op.TOKEN_KIND, Op.TOKEN_FIELD, Op.AND, Op.OR, Op.XOR, Op.NOT,
                     Op.ADD, Op.SUB, Op.MUL, Op.EQ, Op.ULT, Op.SLT, Op.SHL, Op.LSHR, Op.ASHR,
                     Op.SLICE, Op.CONCAT, Op.MUX, Op.MEM_READ})
MODULE_OPS = ALL_OPS - {Op.TOKEN_KIND, Op.TOKEN_FIELD, Op.MEM_READ}

_EDGE_WIDTHS = (1, 1, 2, 3, 7, 8, 8, 16, 31, 32, 32, 33, 63, 64, 64)


def random_width(rng: random.Random, max_width: int = 64) -> int:
    """A width in 1..max_width, edge widths favoured."""
    if rng.random() < 0.6:
        w = rng.choice(_EDGE_WIDTHS)
        if w <= max_width:
            return w
    return rng.randint(1, max_width)


def edge_value(rng: random.Random, width: int) -> int:
    """A value of ``width`` bits: often 0, 1, all ones, the sign bit or sign bit - 1."""
    m = (1 << width) - 1
    r = rng.random()
    if r < 0.5:
        return rng.choice((0, 1, m, 1 << (width - 1), (1 << (width - 1)) - 1)) & m
    if r < 0.7:
        return rng.randint(0, min(m, 70))
    return rng.getrandbits(width)


class _Builder:
    def __init__(self, rng: random.Random, c: Circuit, ops: Iterable[Op], max_width: int):
        self.rng, self.c, self.max_width = rng, c, max_width
        self.ops = sorted(set(ops), key=lambda o: o.value)
        self.by_width: dict[int, list[int]] = {}
        self.writes: dict[str, tuple[int, int, int]] = {}   # a transparent memory's write

    def add(self, op: Op, width: int, args=(), param=None) -> int:
        nid = len(self.c.nodes)
        name = None
        if width and self.rng.random() < 0.3:
            name = self.rng.choice(("", "u.", "u.v.")) + f"s{nid}"
        self.c.add(op, width, tuple(args), param, Loc("<fuzz>", nid + 1, 1), name)
        if name:
            self.c.names[name] = nid
        if width:
            self.by_width.setdefault(width, []).append(nid)
        return nid

    def value(self, width: int) -> int:
        """A node of exactly ``width`` bits: an existing one, or one adapted from another
        width with SLICE / CONCAT, or a constant."""
        rng = self.rng
        same = self.by_width.get(width)
        if same and rng.random() < 0.7:
            return rng.choice(same[-12:] if rng.random() < 0.6 else same)
        others = [n for ns in self.by_width.values() for n in ns[-6:]]
        if not others or rng.random() < 0.15:
            return self.add(Op.CONST, width, (), edge_value(rng, width))
        src = rng.choice(others)
        sw = self.c.nodes[src].width
        if sw > width:
            return self.add(Op.SLICE, width, (src,), rng.randint(0, sw - width))
        if sw < width:
            pad = self.value(width - sw) if rng.random() < 0.5 else \
                self.add(Op.CONST, width - sw, (), 0)
            args = (pad, src) if rng.random() < 0.7 else (src, pad)
            return self.add(Op.CONCAT, width, args)
        return src

    def amount(self, width: int) -> int:
        """A shift amount: usually narrow (so values both below and above the width occur)."""
        return self.value(rng_choice_width(self.rng, width))

    def random_node(self) -> None:
        rng, c = self.rng, self.c
        op = rng.choice(self.ops)
        w = random_width(rng, self.max_width)
        if op is Op.CONST:
            self.add(op, w, (), edge_value(rng, w))
        elif op is Op.TOKEN_KIND:
            self.add(op, c.kind_width)
        elif op is Op.TOKEN_FIELD:
            choices = [(k, f) for k, kd in enumerate(c.kinds) for f in range(len(kd.fields))]
            if choices:
                k, f = rng.choice(choices)
                self.add(op, c.kinds[k].fields[f].width, (), (k, f))
        elif op in (Op.AND, Op.OR, Op.XOR, Op.ADD, Op.SUB, Op.MUL):
            self.add(op, w, (self.value(w), self.value(w)))
        elif op is Op.NOT:
            self.add(op, w, (self.value(w),))
        elif op in (Op.EQ, Op.ULT, Op.SLT):
            a = self.value(w)
            b = self.value(w) if rng.random() < 0.8 else a
            self.add(op, 1, (a, b))
        elif op in (Op.SHL, Op.LSHR, Op.ASHR):
            self.add(op, w, (self.value(w), self.amount(w)))
        elif op is Op.SLICE:
            sw = rng.randint(w, self.max_width)
            self.add(op, w, (self.value(sw),), rng.randint(0, sw - w))
        elif op is Op.CONCAT:
            parts, left = [], w
            while left:
                pw = rng.randint(1, left) if rng.random() < 0.7 else left
                parts.append(self.value(pw))
                left -= pw
            self.add(op, w, parts)
        elif op is Op.MUX:
            self.add(op, w, (self.value(1), self.value(w), self.value(w)))
        elif op is Op.MEM_READ:
            if c.memories:
                m = c.memories[rng.choice(sorted(c.memories))]
                sees = self.write_args(m) if m.read_under_write == "new" else ()
                self.add(op, m.width, (self.addr(m), *sees), m.name)
        else:
            raise AssertionError(op)

    def write_args(self, m: Memory) -> tuple[int, int, int]:
        """(address, data, enable) of a write to ``m``: new ones each time, but one triple
        for a transparent memory (its reads carry it)."""
        if m.name in self.writes:
            return self.writes[m.name]
        en = self.value(1)
        args = (self.addr(m), self.value(m.width), en)
        if m.read_under_write == "new":
            self.writes[m.name] = args
        return args

    def addr(self, m: Memory) -> int:
        return self.value(max(1, m.addr_width + self.rng.choice((0, 0, 1, 2))))


def rng_choice_width(rng: random.Random, width: int) -> int:
    r = rng.random()
    if r < 0.6:
        return max(1, min(64, width.bit_length() + rng.choice((0, 1))))
    if r < 0.85:
        return rng.randint(1, 8)
    return rng.randint(1, 64)


def random_circuit(rng: random.Random, n_nodes: int = 60, max_width: int = 64,
                   n_kinds: int | None = None, n_memories: int | None = None,
                   ops: Iterable[Op] = ALL_OPS, write_ports: int = 1,
                   halt_kinds: bool = True,
                   mem_depths: Sequence[int] = (1, 2, 3, 5, 16, 17, 64),
                   transparent: float = 0.0) -> Circuit:
    """A random top circuit with about ``n_nodes`` value nodes.

    ``n_kinds`` token kinds (1..4 when None) with 0..3 fields each; ``n_memories`` memories
    (0..3 when None), ROMs with images and RAMs with ``write_ports`` MEM_WRITE nodes each
    (applied in IR order), depths drawn from ``mem_depths``. With ``halt_kinds`` the last kind
    may be a halt kind. The next token's kind index is always a declared kind. With
    ``transparent`` > 0 and one write port, a RAM is transparent with that probability (its
    write's arguments are drawn at its first read, so they never depend on its reads)."""
    c = Circuit("Fuzz", Loc("<fuzz>", 0, 0))
    nk = n_kinds if n_kinds is not None else rng.randint(1, 4)
    for k in range(nk):
        fields = tuple(Field(f"f{j}", random_width(rng, max_width), rng.random() < 0.3)
                       for j in range(rng.randint(0, 3)))
        halt = halt_kinds and k == nk - 1 and nk > 1 and rng.random() < 0.5
        c.kinds.append(TokenKind(f"K{k}", fields, Loc("<fuzz>", 0, 0), halt))
    nm = n_memories if n_memories is not None else rng.randint(0, 3)
    for i in range(nm):
        kind = rng.choice(("rom", "ram"))
        w = random_width(rng, max_width)
        depth = rng.choice(tuple(mem_depths))
        init = tuple(edge_value(rng, w) for _ in range(rng.randint(0, depth))) \
            if kind == "rom" else ()
        ruw = "new" if (kind == "ram" and transparent and write_ports == 1
                        and rng.random() < transparent) else "old"
        c.memories[f"m{i}"] = Memory(f"m{i}", kind, w, depth, Loc("<fuzz>", 0, 0), init=init,
                                     read_under_write=ruw)
    b = _Builder(rng, c, ops, max_width)
    if nk > 1:
        b.add(Op.TOKEN_KIND, c.kind_width)
    for k, kd in enumerate(c.kinds):
        for f in range(len(kd.fields)):
            b.add(Op.TOKEN_FIELD, kd.fields[f].width, (), (k, f))
    while len(c.nodes) < n_nodes:
        b.random_node()
    for m in c.memories.values():
        if m.kind == "ram":
            for _ in range(write_ports):
                b.add(Op.MEM_WRITE, 0, b.write_args(m), m.name)
    kw = c.kind_width
    kind = b.value(kw)
    if nk < (1 << kw):   # keep the kind index declared: x < nk ? x : 0
        lim = b.add(Op.CONST, kw, (), nk)
        ok = b.add(Op.ULT, 1, (kind, lim))
        kind = b.add(Op.MUX, kw, (ok, b.add(Op.CONST, kw, (), 0), kind))
    fields = [b.value(f.width) for kd in c.kinds for f in kd.fields]
    c.add(Op.TOKEN_OUT, 0, (kind, *fields), None, Loc("<fuzz>", len(c.nodes) + 1, 1))
    c.check()
    return c


def random_module(rng: random.Random, n_nodes: int = 40, max_width: int = 64,
                  n_inputs: int | None = None, n_outputs: int | None = None,
                  ops: Iterable[Op] = MODULE_OPS) -> Circuit:
    """A random module: INPUT ports ``a0, a1, ...`` (1..4 when None), OUTPUT ports ``y0, ...``
    (1..3 when None), ``Circuit.ports`` filled in (some inputs signed)."""
    c = Circuit("FuzzModule", Loc("<fuzz>", 0, 0))
    b = _Builder(rng, c, set(ops) & MODULE_OPS, max_width)
    for i in range(n_inputs if n_inputs is not None else rng.randint(1, 4)):
        w = random_width(rng, max_width)
        b.add(Op.INPUT, w, (), f"a{i}")
        c.ports.append((f"a{i}", "in", w, rng.random() < 0.3))
    while len(c.nodes) < n_nodes:
        b.random_node()
    for i in range(n_outputs if n_outputs is not None else rng.randint(1, 3)):
        w = random_width(rng, max_width)
        v = b.value(w)
        c.add(Op.OUTPUT, 0, (v,), f"y{i}", Loc("<fuzz>", len(c.nodes) + 1, 1))
        c.ports.append((f"y{i}", "out", w, False))
    c.check()
    return c


def random_token(rng: random.Random, c: Circuit, kind: int | None = None) -> Token:
    """A valid token of ``c`` (field values at edges often)."""
    k = rng.randrange(len(c.kinds)) if kind is None else kind
    return Token(k, tuple(edge_value(rng, f.width) for f in c.kinds[k].fields))


def random_images(rng: random.Random, c: Circuit) -> dict[str, list[int]]:
    """Images for every ROM and about half of the RAMs (the rest start from their init)."""
    out = {}
    for m in c.memories.values():
        if m.kind == "rom" or rng.random() < 0.5:
            out[m.name] = [edge_value(rng, m.width) for _ in range(rng.randint(0, m.depth))]
    return out
