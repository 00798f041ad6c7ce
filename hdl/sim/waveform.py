"""Write a simulated run as a VCD waveform (GTKWave opens it), with pyvcd.

Takes: the circuit, then the run one step at a time (:class:`Waveform`), or a whole run at
once (:func:`write_vcd`: the token stream ``[t0, ..., tn]`` and the traced StepResults of
steps 0..n-1, as ``Simulator.run(..., trace=True)`` leaves them in ``Simulator.trace``).
Gives: a ``.vcd`` file. Time unit: 1 ns = 1 step (VCD has no "step" unit), so the value at
time t is the value during step t. Scopes:

- ``<circuit name>``: every named signal, hierarchical names as nested scopes
  (``alu.sum`` -> scope ``Top.alu``, variable ``sum``);
- ``token``: ``kind`` (the kind's name, a string variable), ``kind_index``, and every field as
  ``token.<Kind>.<field>`` (0 while the token is of another kind);
- ``memory``: per memory, ``we``/``waddr``/``wdata`` of each write port (``we1``... for a second
  port): the writes step t makes (visible to reads at t+1).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vcd import VCDWriter

from hdl.ir import Circuit, Token
from hdl.sim.simulator import StepResult


class Waveform:
    """A VCD file being written: call :meth:`add` for t = 0, 1, ... then :meth:`close`
    (or use it as a context manager)."""

    def __init__(self, path: str | Path, circuit: Circuit):
        self.circuit = c = circuit
        top = c.name
        self._file = open(path, "w")
        self._w = w = VCDWriter(self._file, timescale="1 ns", version="deltachip",
                                comment=f"deltachip sim {top}: 1 ns = 1 step (one token)")
        self._signals = []
        for name, nid in sorted(c.names.items()):
            node = c.nodes[nid]
            if node.width:
                scope, _, leaf = name.rpartition(".")
                var = w.register_var(f"{top}.{scope}" if scope else top, leaf, "wire",
                                     node.width)
                self._signals.append((nid, var))
        self._kind = w.register_var("token", "kind", "string")
        self._kind_index = w.register_var("token", "kind_index", "wire", c.kind_width)
        self._fields = [[w.register_var(f"token.{k.name}", f.name, "wire", f.width)
                         for f in k.fields] for k in c.kinds]
        self._ports: dict[str, list[tuple]] = {}
        for mname, mem in c.memories.items():
            for j in range(len(c.writes(mname))):
                sfx = str(j) if j else ""
                self._ports.setdefault(mname, []).append((
                    w.register_var(f"memory.{mname}", f"we{sfx}", "wire", 1),
                    w.register_var(f"memory.{mname}", f"waddr{sfx}", "wire", mem.addr_width),
                    w.register_var(f"memory.{mname}", f"wdata{sfx}", "wire", mem.width)))
        self._end = 0

    def add(self, t: int, tok: Token, result: StepResult | None = None) -> None:
        """Record token ``tok`` at time ``t`` and, if given, what step t computed from it."""
        w = self._w
        w.change(self._kind, t, self.circuit.kinds[tok.kind].name)
        w.change(self._kind_index, t, tok.kind)
        for k, vars_ in enumerate(self._fields):
            for j, var in enumerate(vars_):
                w.change(var, t, tok.fields[j] if tok.kind == k else 0)
        self._end = t + 1
        if result is None:
            return
        if result.values is not None:
            for nid, var in self._signals:
                w.change(var, t, result.values[nid])
        used = {m: 0 for m in self._ports}
        for mname, addr, data in result.writes:
            ports = self._ports[mname]
            we, wa, wd = ports[min(used[mname], len(ports) - 1)]
            used[mname] += 1
            w.change(we, t, 1)
            w.change(wa, t, addr)
            w.change(wd, t, data)
        for mname, n in used.items():
            for we, _, _ in self._ports[mname][n:]:
                w.change(we, t, 0)

    def close(self) -> None:
        self._w.close(self._end)
        self._file.close()

    def __enter__(self) -> "Waveform":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_vcd(path: str | Path, circuit: Circuit, tokens: Sequence[Token],
              steps: Sequence[StepResult]) -> None:
    """Write ``tokens`` (n+1) and ``steps`` (n traced StepResults) to ``path``."""
    if len(steps) not in (len(tokens) - 1, len(tokens)):
        raise ValueError("expected one traced StepResult per step")
    with Waveform(path, circuit) as wave:
        for t, tok in enumerate(tokens):
            wave.add(t, tok, steps[t] if t < len(steps) else None)
