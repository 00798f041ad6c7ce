"""Where the compiled step function finds its inputs and puts its outputs.

Takes: a :class:`hdl.ir.Circuit`. Gives: :class:`Layout`, the flat-array layout shared by the
C and Python step functions (and by the Python wrapper that fills and reads those arrays):

- the **token vector** ``[kind, <fields of kind 0>, <fields of kind 1>, ...]``: the current
  token goes in with the fields of every other kind set to 0 (so ``TOKEN_FIELD`` is a plain
  load), and ``TOKEN_OUT``'s arguments come out in exactly this order;
- the **memory array**: every memory's words one after another (``mem_offset``), one
  ``uint64`` per word, in ``Circuit.memories`` order;
- the **write records**: one ``(memory index, address, data)`` triple per effective write.
"""
from __future__ import annotations

from dataclasses import dataclass

from hdl.ir import Circuit, Op


@dataclass(frozen=True)
class Layout:
    """Offsets into the flat arrays of one circuit (see the module docstring)."""
    field_offset: tuple[tuple[int, ...], ...]   # [kind][field] -> index in the token vector
    token_len: int                               # 1 + all fields of all kinds
    halt: tuple[bool, ...]                       # per kind
    mem_names: tuple[str, ...]
    mem_offset: tuple[int, ...]                  # per memory, index of word 0
    mem_depth: tuple[int, ...]
    mem_words: int                               # total words of all memories
    write_ports: int                             # number of MEM_WRITE nodes
    inputs: tuple[tuple[str, int], ...]          # module INPUT ports: (name, node id)
    outputs: tuple[tuple[str, int], ...]         # module OUTPUT ports: (name, value node id)

    @staticmethod
    def of(circuit: Circuit) -> "Layout":
        offs: list[tuple[int, ...]] = []
        pos = 1
        for k in circuit.kinds:
            offs.append(tuple(range(pos, pos + len(k.fields))))
            pos += len(k.fields)
        names, moffs, depths = [], [], []
        total = 0
        for name, m in circuit.memories.items():
            names.append(name)
            moffs.append(total)
            depths.append(m.depth)
            total += m.depth
        ins = tuple((n.param, n.id) for n in circuit.nodes if n.op is Op.INPUT)
        outs = tuple((n.param, n.args[0]) for n in circuit.nodes if n.op is Op.OUTPUT)
        return Layout(
            field_offset=tuple(offs), token_len=pos,
            halt=tuple(k.halt for k in circuit.kinds),
            mem_names=tuple(names), mem_offset=tuple(moffs), mem_depth=tuple(depths),
            mem_words=total,
            write_ports=sum(1 for n in circuit.nodes if n.op is Op.MEM_WRITE),
            inputs=ins, outputs=outs)

    def mem_index(self, name: str) -> int:
        return self.mem_names.index(name)
