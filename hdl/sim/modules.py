"""Evaluate a combinational module (INPUT/OUTPUT ports) on one or many input vectors.

Takes: an elaborated module :class:`hdl.ir.Circuit` (``hdl.frontend.load_module``) and input
values by port name. Gives: output values by port name, as unsigned encodings (a signed
port's value -1 at 8 bits is 255; :func:`to_signed` converts).

- :func:`evaluate_module` - one vector, ints in, ints out;
- :func:`evaluate_module_batch` - many vectors at once (lists or numpy arrays in, numpy
  ``uint64`` arrays out): one C loop, or numpy vector ops without a C compiler. This is the
  fast path for property tests.

Inputs may be given signed for signed ports (``-1`` for an ``s8`` port means 255); a value
outside the port's range raises ``ValueError``. Compiled evaluators are cached per circuit
object, so calling these functions many times on one module compiles it once.
"""
from __future__ import annotations

import weakref
from typing import Mapping, Sequence

import numpy as np

from hdl.ir import Circuit
from hdl.sim import cbuild
from hdl.sim.engines import CBatchEngine, PyModuleEngine
from hdl.sim.layout import Layout


def to_signed(value: int, width: int) -> int:
    """The two's complement reading of an unsigned ``width``-bit value."""
    return value - (1 << width) if value >> (width - 1) & 1 else value


class ModuleEvaluator:
    """A module compiled once; see the module docstring. ``backend``: "auto", "c", "python"."""

    def __init__(self, circuit: Circuit, backend: str = "auto"):
        if circuit.kinds:
            raise ValueError(f"'{circuit.name}' is a circuit with token kinds, not a module; "
                             "simulate it with hdl.sim.Simulator")
        circuit.check()
        self.circuit = circuit
        self.layout = Layout.of(circuit)
        self.ports = {p[0]: p for p in circuit.ports}
        self._in_widths = [circuit.nodes[nid].width for _, nid in self.layout.inputs]
        self._in_signed = [self.ports.get(name, (name, "in", 0, False))[3]
                           for name, _ in self.layout.inputs]
        self._engine: CBatchEngine | PyModuleEngine
        if backend not in ("auto", "c", "python"):
            raise ValueError(f"unknown backend {backend!r}")
        if backend == "python":
            self._engine = PyModuleEngine(circuit, self.layout)
        else:
            try:
                self._engine = CBatchEngine(circuit, self.layout)
            except cbuild.NoCompiler:
                if backend == "c":
                    raise
                self._engine = PyModuleEngine(circuit, self.layout)
        self.backend = self._engine.name

    def _missing(self, inputs: Mapping[str, object]) -> None:
        want = [name for name, _ in self.layout.inputs]
        missing = [n for n in want if n not in inputs]
        extra = [n for n in inputs if n not in want]
        if missing or extra:
            raise ValueError(f"module {self.circuit.name}: "
                             + (f"missing inputs {missing} " if missing else "")
                             + (f"unknown inputs {extra} " if extra else "")
                             + f"(inputs: {want})")

    def _encode(self, name: str, value: int, width: int, signed: bool) -> int:
        lo = -(1 << (width - 1)) if signed else 0
        if not lo <= value < (1 << width):
            raise ValueError(f"input {name} = {value} does not fit {width} bits")
        return value & ((1 << width) - 1)

    def __call__(self, inputs: Mapping[str, int]) -> dict[str, int]:
        self._missing(inputs)
        vals = [self._encode(name, int(inputs[name]), w, s) for (name, _), w, s
                in zip(self.layout.inputs, self._in_widths, self._in_signed)]
        outs = self._engine.one(vals)
        return {name: int(v) for (name, _), v in zip(self.layout.outputs, outs)}

    def batch(self, inputs: Mapping[str, Sequence[int] | np.ndarray]) -> dict[str, np.ndarray]:
        self._missing(inputs)
        cols = []
        n = None
        for (name, _), w, s in zip(self.layout.inputs, self._in_widths, self._in_signed):
            a = np.asarray(inputs[name])
            if a.ndim != 1:
                raise ValueError(f"input {name}: expected a 1-D sequence")
            if n is None:
                n = len(a)
            elif len(a) != n:
                raise ValueError(f"input {name} has {len(a)} values, expected {n}")
            if a.dtype != np.uint64:
                a = np.asarray(inputs[name], dtype=object)
                lo = -(1 << (w - 1)) if s else 0
                if len(a) and (a.min() < lo or a.max() >= (1 << w)):
                    raise ValueError(f"input {name}: a value does not fit {w} bits")
                a = np.array([int(x) & ((1 << w) - 1) for x in a], dtype=np.uint64)
            elif w < 64 and len(a) and int(a.max()) >= (1 << w):
                raise ValueError(f"input {name}: a value does not fit {w} bits")
            cols.append(a)
        n = n or 0
        mat = np.stack(cols) if cols else np.zeros((0, n), dtype=np.uint64)
        outs = self._engine.batch(mat, n)
        return {name: outs[j] for j, (name, _) in enumerate(self.layout.outputs)}


_CACHE: dict[tuple[int, str], tuple[weakref.ref, int, ModuleEvaluator]] = {}


def evaluator(circuit: Circuit, backend: str = "auto") -> ModuleEvaluator:
    """The cached :class:`ModuleEvaluator` of ``circuit`` (rebuilt if its nodes changed)."""
    key = (id(circuit), backend)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is circuit and hit[1] == len(circuit.nodes):
        return hit[2]
    ev = ModuleEvaluator(circuit, backend)
    _CACHE[key] = (weakref.ref(circuit, lambda _r, k=key, cache=_CACHE: cache.pop(k, None)),
                   len(circuit.nodes), ev)
    return ev


def evaluate_module(circuit: Circuit, inputs: Mapping[str, int],
                    backend: str = "auto") -> dict[str, int]:
    """Evaluate module ``circuit`` on one input vector: ``{port: value}`` -> ``{port: value}``."""
    return evaluator(circuit, backend)(inputs)


def evaluate_module_batch(circuit: Circuit, inputs: Mapping[str, Sequence[int] | np.ndarray],
                          backend: str = "auto") -> dict[str, np.ndarray]:
    """Evaluate module ``circuit`` on many vectors: ``{port: N values}`` -> ``{port: uint64[N]}``."""
    return evaluator(circuit, backend).batch(inputs)
