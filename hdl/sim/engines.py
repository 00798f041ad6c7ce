"""The two compiled evaluators behind :class:`hdl.sim.Simulator` and the module evaluators.

Takes: a checked circuit. Gives: an engine object with one interface, whichever backend:

- circuits (:class:`CStepEngine`, :class:`PyStepEngine`): ``load(i, words)``, ``read(i)``,
  ``step(tokvec, trace) -> (out, writes, values)``, ``run(tokvec, n) -> (vectors, status)``;
- modules (:class:`CBatchEngine`, :class:`PyModuleEngine`): ``batch(cols, n)`` from a
  (inputs, n) ``uint64`` array to an (outputs, n) one, and ``one(values) -> list[int]``.

Vectors are in the flat layout of :mod:`hdl.sim.layout`. The IR is compiled once, at
construction: to C via :mod:`hdl.sim.cbuild`, or to Python source that is ``exec``'d.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hdl.ir import Circuit
from hdl.sim import cbuild
from hdl.sim.codegen import c_source, numpy_source, python_source
from hdl.sim.layout import Layout

Vec = list[int]
Write = tuple[int, int, int]


def _exec(source: str, name: str) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(source, f"<deltachip sim {name}>", "exec"), ns)
    return ns


def _next_vector(lay: Layout, out: Sequence[int]) -> Vec:
    """The token vector of the next token: its kind's fields kept, every other field 0."""
    vec = [0] * lay.token_len
    vec[0] = out[0]
    for j in lay.field_offset[out[0]]:
        vec[j] = out[j]
    return vec


class CStepEngine:
    """A circuit compiled to C; memories in one numpy ``uint64`` array."""
    name = "c"

    def __init__(self, circuit: Circuit, lay: Layout):
        self.lay = lay
        self.lib = cbuild.build(c_source(circuit))
        self.ffi = cbuild.ffi()
        self.mem = np.zeros(max(1, lay.mem_words), dtype=np.uint64)
        self.nodes = len(circuit.nodes)
        self.work = np.zeros(self.nodes + 1, dtype=np.uint64)
        self._out = np.zeros(lay.token_len, dtype=np.uint64)
        self._wr = np.zeros(3 * lay.write_ports + 3, dtype=np.uint64)
        self._p = lambda a: self.ffi.cast("uint64_t *", a.ctypes.data)
        self._pmem, self._pwork = self._p(self.mem), self._p(self.work)
        self._pout, self._pwr = self._p(self._out), self._p(self._wr)

    def load(self, i: int, words: Sequence[int]) -> None:
        off, depth = self.lay.mem_offset[i], self.lay.mem_depth[i]
        self.mem[off:off + depth] = 0
        self.mem[off:off + len(words)] = np.asarray(words, dtype=np.uint64)

    def read(self, i: int) -> list[int]:
        off = self.lay.mem_offset[i]
        return self.mem[off:off + self.lay.mem_depth[i]].tolist()

    def step(self, tokvec: Vec, trace: bool) -> tuple[Vec, list[Write], list[int] | None]:
        tok = np.asarray(tokvec, dtype=np.uint64)
        nw = self.lib.dc_step(self._pmem, self._p(tok), self._pout, self._pwr, self._pwork)
        writes: list[Write] = []
        if nw:
            flat = self._wr[:3 * nw].tolist()
            writes = [(flat[3 * j], flat[3 * j + 1], flat[3 * j + 2]) for j in range(nw)]
        return self._out.tolist(), writes, (self.work[:self.nodes].tolist() if trace else None)

    def run(self, tokvec: Vec, n: int, chunk: int = 1 << 16) -> tuple[list[Vec], int]:
        lay, p = self.lay, self._p
        tok = np.asarray(tokvec, dtype=np.uint64)
        status = self.ffi.new("int *")
        vectors: list[Vec] = []
        while n > 0:
            m = min(n, chunk)
            outs = np.zeros((m, lay.token_len), dtype=np.uint64)
            done = self.lib.dc_run(self._pmem, p(tok), m, p(outs), status, self._pwork)
            vectors += outs[:done].tolist()
            if done < m or status[0] or (done and lay.halt[vectors[-1][0]]):
                break
            n -= m
        return vectors, status[0]


class PyStepEngine:
    """A circuit compiled to straight-line Python; memories as Python lists."""
    name = "python"

    def __init__(self, circuit: Circuit, lay: Layout):
        self.lay = lay
        self.fn = _exec(python_source(circuit), circuit.name)["step"]
        self.mem = [[0] * d for d in lay.mem_depth]
        self.nodes = len(circuit.nodes)

    def load(self, i: int, words: Sequence[int]) -> None:
        m = self.mem[i]
        m[:] = [int(w) for w in words] + [0] * (len(m) - len(words))

    def read(self, i: int) -> list[int]:
        return list(self.mem[i])

    def step(self, tokvec: Vec, trace: bool) -> tuple[Vec, list[Write], list[int] | None]:
        tr = [0] * self.nodes if trace else None
        out, writes = self.fn(self.mem, tokvec, tr)
        return out, writes, tr

    def run(self, tokvec: Vec, n: int) -> tuple[list[Vec], int]:
        lay, fn, mem = self.lay, self.fn, self.mem
        nk = len(lay.halt)
        tok, vectors = tokvec, []
        for _ in range(n):
            out, _ = fn(mem, tok, None)
            if out[0] >= nk:
                vectors.append(out)
                return vectors, 1
            tok = _next_vector(lay, out)
            vectors.append(tok)
            if lay.halt[tok[0]]:
                break
        return vectors, 0


class CBatchEngine:
    """A module compiled to a C loop over input vectors."""
    name = "c"

    def __init__(self, circuit: Circuit, lay: Layout):
        self.lay = lay
        self.lib = cbuild.build(c_source(circuit))
        self.ffi = cbuild.ffi()
        self.work = np.zeros(len(circuit.nodes) + 1, dtype=np.uint64)

    def batch(self, cols: np.ndarray, n: int) -> np.ndarray:
        """``cols``: uint64 array (inputs, n), C order. Returns (outputs, n)."""
        out = np.zeros((max(1, len(self.lay.outputs)), n), dtype=np.uint64)
        cols = np.ascontiguousarray(cols, dtype=np.uint64)
        p = lambda a: self.ffi.cast("uint64_t *", a.ctypes.data)  # noqa: E731
        self.lib.dc_batch(n, p(cols) if cols.size else self.ffi.NULL, p(out), p(self.work))
        return out[:len(self.lay.outputs)]

    def one(self, values: list[int]) -> list[int]:
        return self.batch(np.asarray(values, dtype=np.uint64).reshape(-1, 1), 1)[:, 0].tolist()


class PyModuleEngine:
    """A module compiled to Python: scalar ints for one vector, numpy for a batch."""
    name = "python"

    def __init__(self, circuit: Circuit, lay: Layout):
        self.lay = lay
        self.fn = _exec(python_source(circuit), circuit.name)["evaluate"]
        self.vec = _exec(numpy_source(circuit), circuit.name)["batch"]

    def batch(self, cols: np.ndarray, n: int) -> np.ndarray:
        outs = self.vec([np.asarray(c, dtype=np.uint64) for c in cols], n)
        if not outs:
            return np.zeros((0, n), dtype=np.uint64)
        return np.stack([np.broadcast_to(o, (n,)) for o in outs]).astype(np.uint64)

    def one(self, values: list[int]) -> list[int]:
        return self.fn(values)
