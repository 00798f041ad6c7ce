"""Write a simulated run as a VCD waveform (GTKWave opens it), with pyvcd.

Takes: the circuit, the token stream ``[t0, t1, ..., tn]`` and the traced StepResults of
steps 0..n-1 (``Simulator.run(..., trace=True)`` leaves them in ``Simulator.trace``).
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


def write_vcd(path: str | Path, circuit: Circuit, tokens: Sequence[Token],
              steps: Sequence[StepResult]) -> None:
    """Write ``tokens`` (n+1) and ``steps`` (n StepResults with values) to ``path``."""
    if len(steps) not in (len(tokens) - 1, len(tokens)):
        raise ValueError("expected one traced StepResult per step")
    top = circuit.name
    with open(path, "w") as f, VCDWriter(
            f, timescale="1 ns", comment=f"deltachip sim {top}: 1 ns = 1 step (one token)",
            version="deltachip") as w:
        signals = []
        for name, nid in sorted(circuit.names.items()):
            node = circuit.nodes[nid]
            if not node.width:
                continue
            scope, _, leaf = name.rpartition(".")
            var = w.register_var(f"{top}.{scope}" if scope else top, leaf, "wire", node.width)
            signals.append((nid, var))
        kind_name = w.register_var("token", "kind", "string")
        kind_index = w.register_var("token", "kind_index", "wire", circuit.kind_width)
        fields = [[w.register_var(f"token.{k.name}", f.name, "wire", f.width)
                   for f in k.fields] for k in circuit.kinds]
        ports: dict[str, list[tuple]] = {}
        for mname, mem in circuit.memories.items():
            for j in range(len(circuit.writes(mname))):
                sfx = str(j) if j else ""
                ports.setdefault(mname, []).append((
                    w.register_var(f"memory.{mname}", f"we{sfx}", "wire", 1),
                    w.register_var(f"memory.{mname}", f"waddr{sfx}", "wire", mem.addr_width),
                    w.register_var(f"memory.{mname}", f"wdata{sfx}", "wire", mem.width)))
        for t, tok in enumerate(tokens):
            w.change(kind_name, t, circuit.kinds[tok.kind].name)
            w.change(kind_index, t, tok.kind)
            for k, vars_ in enumerate(fields):
                for j, var in enumerate(vars_):
                    w.change(var, t, tok.fields[j] if tok.kind == k else 0)
            if t >= len(steps):
                continue
            r = steps[t]
            if r.values is not None:
                for nid, var in signals:
                    w.change(var, t, r.values[nid])
            used = {m: 0 for m in ports}
            for mname, addr, data in r.writes:
                j = used[mname]
                used[mname] += 1
                we, wa, wd = ports[mname][min(j, len(ports[mname]) - 1)]
                w.change(we, t, 1)
                w.change(wa, t, addr)
                w.change(wd, t, data)
            for mname, n in used.items():
                for we, _, _ in ports[mname][n:]:
                    w.change(we, t, 0)
        w.flush(len(tokens))
