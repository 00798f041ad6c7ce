"""Where a memory's words sit in Gated DeltaNet state, shared by the compiler and the engines.

A memory (a :class:`backends.compile.program.MemPlan`, or :class:`ProgView` of the same
facts read from chip.json) keeps its words in value-head columns of key rows of recurrent
state cells. This module says which cell holds which bits (:func:`head_cell`), makes the
state rows that hold a ROM image (:func:`rom_state` in torch, the compiler's;
:func:`rom_state_np` in numpy, the fast engine's: the same values bit for bit), and when
byte-valued cells read back exactly (:func:`byte_cells_exact`). Engines read words back
with :meth:`backends.engines.base.ChipEngine.read_memories`, this layout's inverse.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

    from backends.chipdir.target import Target

#: bits per int64 limb when words are read back from the recurrent state (a word of any
#: width is its limbs; 48 leaves room for a shifted 8-bit cell)
LIMB_BITS = 48


def word_row(pair: bool, rows: int, wi: int) -> int:
    """The key row where word ``wi`` of a bank's logical row 0 lives: 0 (every word of a
    row shares it), or with ``pair`` (:class:`backends.compile.program.MemPlan`) ``wi * rows``."""
    return wi * rows if pair else 0


def head_cell(p: Any, t: Any, sl: int, v: int, j: int) -> tuple[int, int, int, int, int] | None:
    """Data column ``j`` (after the ballast) of value head ``v`` of a bank of slice ``sl`` of
    memory ``p`` (a ``MemPlan`` or a :class:`MemView` with its fields) on target ``t`` -> (word of
    the logical row, first key row of that word (:func:`word_row`), cell of the word, first
    word bit in the cell, bits in the cell), or None when unused. Without ``vsel`` the value
    heads of a bank continue one row's columns; with it each holds its own words."""
    usable = t.d_v - t.value_ballast
    rc = sl * usable + j if p.vsel else sl * t.cols_per_bank + v * usable + j
    col = cell_column(rc, p.width, p.cell, p.pack)
    if col is None:
        return None
    wi, ci, b0, nb = col
    return wi + (v << p.pack if p.vsel else 0), word_row(p.pair, p.rows, wi), ci, b0, nb


def cell_column(rc: int, width: int, cell: int, pack: int) -> tuple[int, int, int, int] | None:
    """Row-column ``rc`` (0 .. slices * cols - 1, across the banks of one row) of a memory of
    ``width``-bit words, ``cell`` bits per cell and 2^pack words per row -> (word in the row,
    cell of the word, first word bit in the cell, bits in the cell), or None when unused."""
    cw = -(-width // cell)
    wi, ci = divmod(rc, cw)
    if wi >= 1 << pack:
        return None
    return wi, ci, ci * cell, min(cell, width - ci * cell)


def byte_cells_exact(target: Target, dtype: str) -> bool:
    """Whether byte-valued state cells read back exactly in every kernel: in bf16 always; in
    fp32 only with one-hot queries (d_k a power of 4), since transformers' chunked kernel
    scales a two-hot query to 2^-4 (1 - 2^-24), which only power-of-two cells survive
    (docs/backend.md, "Check")."""
    return dtype == "bf16" or not target.two_hot


def rom_state(prog: Any, num: Any, name: str, words: Sequence[int]
              ) -> dict[tuple[int, int], torch.Tensor]:
    """``prog`` and ``num`` as for :func:`rom_state_np`. Recurrent-state rows holding ``words`` for memory ``name``:
    {(layer, value head): [d_k, d_v] fp32}."""
    p = prog.mems[name]
    t = prog.target
    dv, g = t.d_v, t.v_per_k
    import torch
    out: dict[tuple[int, int], torch.Tensor] = {}
    VS, BV = 2.0 ** num.vs, 2.0 ** num.b_v
    wt = torch.tensor([int(w) for w in words[:p.depth]] + [0] * max(0, p.depth - len(words)),
                      dtype=torch.int64)
    P = p.per_row
    nrows = -(-p.depth // P)
    wt = torch.cat([wt, torch.zeros(nrows * P - p.depth, dtype=torch.int64)]).view(nrows, P)
    for pi in range(p.ports):
        for rb in range(p.rowblocks):
            lo, hi = rb * p.rows, min(nrows, (rb + 1) * p.rows)
            ws = wt[lo:hi]
            for sl in range(p.slices):
                layer, kh = p.bank(pi, rb, sl)
                for v in range(g):
                    st = torch.zeros(t.d_k, dv, dtype=torch.float32)
                    # a paired read sums two rows: every row holds the ballast, always
                    st[:t.d_k if p.pair else hi - lo, :num.n_bv] = BV
                    for j in range(dv - num.n_bv):
                        col = head_cell(p, t, sl, v, j)
                        if col is None:
                            break
                        wi, r0, _, b0, nb = col
                        st[r0:r0 + hi - lo, num.n_bv + j] = \
                            ((ws[:, wi] >> b0) & ((1 << nb) - 1)).float() * VS
                    out[(layer, kh * g + v)] = st
    return out


def rom_state_np(prog: Any, num: Any, name: str, words: Sequence[int]
                 ) -> dict[tuple[int, int], np.ndarray]:
    """:func:`rom_state` in numpy (no torch): recurrent-state rows holding
    ``words`` for memory ``name``, {(layer, value head): [d_k, d_v] float32}, the same values
    bit for bit (tests/backends/engines/test_fast_records.py). ``prog`` gives ``mems`` and
    ``target`` (a Program, or :class:`ProgView` of chip.json), ``num`` ``vs``, ``b_v`` and
    ``n_bv``."""
    p = prog.mems[name]
    t = prog.target
    dv, g, nbv = t.d_v, t.v_per_k, num.n_bv
    VS, BV = np.float32(2.0 ** num.vs), np.float32(2.0 ** num.b_v)
    P = p.per_row
    nrows = -(-p.depth // P)
    wt = np.zeros(nrows * P, dtype=np.int64)
    head = words[:p.depth]
    if len(head):
        # a word past 63 bits (none on the core: 32 at most) fits no int64: refused, as in
        # torch
        wt[:len(head)] = np.array(head, dtype=np.int64)
    wt = wt.reshape(nrows, P)
    # the data columns of each value head of a slice (the same for every port and
    # rowblock), up to the first unused one: per key row they start at, their j, word,
    # first bit and mask
    cols: dict[tuple[int, int], list[tuple[int, np.ndarray, ...]]] = {}
    for sl in range(p.slices):
        for v in range(g):
            used = []
            for j in range(dv - nbv):
                col = head_cell(p, t, sl, v, j)
                if col is None:
                    break
                used.append((j, *col))
            groups = []
            for r0 in sorted({c[2] for c in used}):
                js = [c for c in used if c[2] == r0]
                groups.append((r0, np.array([nbv + c[0] for c in js]),
                               np.array([c[1] for c in js]),
                               np.array([c[4] for c in js], dtype=np.int64),
                               np.array([(1 << c[5]) - 1 for c in js], dtype=np.int64)))
            cols[(sl, v)] = groups
    out: dict[tuple[int, int], np.ndarray] = {}
    for pi in range(p.ports):
        for rb in range(p.rowblocks):
            lo, hi = rb * p.rows, min(nrows, (rb + 1) * p.rows)
            ws = wt[lo:hi]
            for sl in range(p.slices):
                layer, kh = p.bank(pi, rb, sl)
                for v in range(g):
                    st = np.zeros((t.d_k, dv), dtype=np.float32)
                    # a paired read sums two rows: every row holds the ballast, always
                    st[:t.d_k if p.pair else hi - lo, :nbv] = BV
                    for r0, js, wis, b0s, masks in cols[(sl, v)]:
                        # each cell's bits as a float32, times VS (a power of two: exact)
                        st[r0:r0 + hi - lo, js] = \
                            ((ws[:, wis] >> b0s) & masks).astype(np.float32) * VS
                    out[(layer, kh * g + v)] = st
    return out


class ProgView:
    """The parts of a Program that :func:`rom_state` reads (its ``target`` and ``mems``), from
    chip.json."""

    def __init__(self, chip: dict[str, Any]):
        from backends.chipdir.target import Target
        t = dict(chip["target"])
        self.target = Target(**t)
        self.mems = {n: MemView(m) for n, m in chip["memories"].items()}


class Banks:
    """How a memory's plan names its banks and rows, shared by the compiler's
    ``MemPlan`` and :class:`MemView` (both give ``banks``, ``rowblocks``, ``slices``,
    ``pack`` and ``vsel``)."""
    banks: list[tuple[int, int]]
    rowblocks: int
    slices: int
    pack: int
    vsel: int

    def bank(self, port: int, rowblock: int, sl: int) -> tuple[int, int]:
        """(layer, key head) of the bank of read port ``port``, rowblock and slice ``sl``."""
        return self.banks[(port * self.rowblocks + rowblock) * self.slices + sl]

    @property
    def per_row(self) -> int:
        """Words per logical row (its address's low ``pack + vsel`` bits choose one)."""
        return 1 << (self.pack + self.vsel)


class MemView(Banks):
    """A memory's plan as chip.json records it: the fields of a ``MemPlan`` that the layout
    reads."""

    def __init__(self, m: dict[str, Any]):
        self.width, self.depth, self.rows = m["width"], m["depth"], m["rows_per_bank"]
        self.rowblocks, self.slices, self.pack = m["rowblocks"], m["slices"], m["pack"]
        self.cell = m.get("cell_bits", 1)
        self.pair = m.get("pair", False)
        self.vsel = m.get("vsel", 0)
        self.banks = [tuple(b) for b in m["banks"]]
        self.ports = max(1, m["read_ports"])


class NumView:
    """chip.json's ``numerics`` as attributes (``vs``, ``b_v``, ``n_bv``)."""

    def __init__(self, d: dict[str, Any]):
        self.__dict__.update(d)
