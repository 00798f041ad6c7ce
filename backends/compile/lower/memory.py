"""Memories: each one's plan (banks of GDN key heads) and its read and write ports.

A part of :class:`backends.compile.lower.Lowerer` (its state: lanes, MLP neurons, bits, memory
plans; see that class)."""
from __future__ import annotations

from typing import Iterable

from hdl.ir import Node, Op
from backends.compile.program import Form, MemPlan, ReadPort, WritePort, const
from backends.compile.lower.bits import LoweringError, BYTE_CELL_BANKS, unmaterialised


class Memories:
    """Memory plans and ports (see the module docstring)."""

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
            data = [unmaterialised(x) for x in data]
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
