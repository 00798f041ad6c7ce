"""The lane map: what every residual lane of a compiled chip is designed to hold, and where.

Takes (at compile time): a scheduled, allocated :class:`backends.compile.program.Program` and its
:class:`backends.compile.emit.Numerics`; :func:`record` gives the ``lanemap`` entry of chip.json.
Takes (at check time): that entry and the circuit; :class:`LaneMap` gives

- :meth:`LaneMap.designed`: every logical lane's integer value at each position, computed
  from the token and the simulator's traced memory-read values by the Program's own neurons
  in exact integer arithmetic (``relu`` of integer forms), i.e. the value the compiler
  designed the lane to hold, independent of the weights;
- :meth:`LaneMap.signal_divergence`: the first named HDL signal bit whose Program form, over
  those designed lanes, differs from the simulator's traced value (a lowering bug);
- :attr:`LaneMap.tap_dims` / :meth:`LaneMap.first_divergence`: which residual dims to read
  after every sublayer (slot 2L: layer L's GDN, 2L+1: its MLP) and the first (position,
  slot, lane) whose dim in the model differs from the designed value;
- :meth:`LaneMap.describe`: a lane as text: its label, residual dim and the HDL signal it
  carries, with the signal's file:line:col.

A lane is checked from the slot that writes it (for a memory read spread over several
layers: the last one, when the word is complete) up to the slot before its last reader (the
lm_head's lanes: up to the last sublayer); the ballast dims are checked after every sublayer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from hdl.ir import Circuit, Token

GDN, MLP = "GDN", "MLP"


def _form(f: Any) -> list | None:
    """A materialised form of one IR bit as [c, lanes, coefs]; None when the bit was never
    materialised (a mux tree or pending bit fused into its reader)."""
    from backends.compile.program import Form
    if not isinstance(f, Form):
        f = f.form
    if f is None:
        return None
    return [int(f.c), [int(x) for x in f.t], [int(w) for w in f.t.values()]]


def record(prog: Any, num: Any) -> dict[str, Any]:
    """The ``lanemap`` entry of chip.json for an allocated ``prog`` with numerics ``num``:
    per logical lane [residual dim, write slot, last checked slot, IR node, label]; per MLP
    layer the lane-defining neurons (clear neurons left out) as flat arrays; the read ports
    (IR node, lanes, bits per state cell); the token lanes; and the bit forms of every named signal."""
    from backends.compile.lanes import END, reads
    last = reads(prog)
    final = 2 * prog.n_layers - 1
    lanes = []
    for i, ln in enumerate(prog.lanes):
        r = last.get(i)
        until = ln.slot if r is None else final if r >= END else max(ln.slot, r - 1)
        lanes.append([num.n_b + prog.dim(i), ln.slot, until, ln.node, ln.label])
    layers = {}
    for L, ns in sorted(prog.mlp.items()):
        d: dict[str, list[int]] = {k: [] for k in ("c", "gn", "gl", "gw", "on", "ol", "ow")}
        k = 0
        for n in ns:
            if n.clear:
                continue
            d["c"].append(int(n.gate.c))
            for lane, w in n.gate.t.items():
                d["gn"].append(k), d["gl"].append(int(lane)), d["gw"].append(int(w))
            for lane, w in n.out.items():
                d["on"].append(k), d["ol"].append(int(lane)), d["ow"].append(int(w))
            k += 1
        layers[str(L)] = d
    c = prog.circuit
    signals = {}
    for nid, bits in prog.bits.items():
        node = c.nodes[nid]
        if node.name is not None and bits:
            signals[str(nid)] = [_form(b) for b in bits]
    return {"lanes": lanes, "layers": layers, "n_layers": prog.n_layers,
            "ballast": [num.n_b, num.b_res],
            "reads": [[p.node, list(p.lanes), m.cell] for m in prog.mems.values() for p in m.reads],
            "kind_lanes": list(prog.kind_lanes), "field_lanes": prog.field_lanes,
            "token_fns": [[nid, list(ls)] for nid, ls in prog.token_fns],
            "signals": signals}


@dataclass(frozen=True)
class LaneDivergence:
    """The first residual value that differs from its design: at batch row ``row``,
    position ``position``, after sublayer ``slot`` (layer slot // 2, GDN when even, MLP when
    odd), logical lane ``lane`` (-1: a ballast dim) in residual dim ``dim``; ``text``
    describes the lane and the HDL signal it carries."""
    row: int
    position: int
    slot: int
    lane: int
    dim: int
    designed: float
    model: float
    text: str
    count: int = 1

    @property
    def layer(self) -> int:
        return self.slot // 2

    @property
    def sublayer(self) -> str:
        return MLP if self.slot % 2 else GDN

    def __str__(self) -> str:
        r = f"row {self.row} " if self.row else ""
        more = f" ({self.count} lane values differ in this call)" if self.count > 1 else ""
        return (f"{r}position {self.position}: layer {self.layer} {self.sublayer}: {self.text}: "
                f"designed {_num(self.designed)}, model {_num(self.model)}{more}")


@dataclass(frozen=True)
class SignalDivergence:
    """A named signal's bit whose Program form disagrees with the simulator (a lowering
    bug): batch row, position, node, bit, both values and the signal's text."""
    row: int
    position: int
    node: int
    bit: int
    program: int
    simulator: int
    text: str

    def __str__(self) -> str:
        r = f"row {self.row} " if self.row else ""
        return (f"{r}position {self.position}: {self.text} bit {self.bit}: compiled program "
                f"{self.program}, simulator {self.simulator}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class LaneMap:
    """A chip's lane map (see the module docstring) for ``circuit``."""

    def __init__(self, d: dict[str, Any], circuit: Circuit):
        self.c = circuit
        lanes = d["lanes"]
        self.n = len(lanes)
        self.dim = [int(x[0]) for x in lanes]
        self.slot = [int(x[1]) for x in lanes]
        self.until = [int(x[2]) for x in lanes]
        self.node = [int(x[3]) for x in lanes]
        self.label = [str(x[4]) for x in lanes]
        self.n_layers = int(d["n_layers"])
        self.n_b, b_res = d["ballast"]
        self.ballast = float(2.0 ** b_res)
        self.kind_lanes = list(d["kind_lanes"])
        self.field_lanes = d["field_lanes"]
        self.token_fns = [(int(n), list(ls)) for n, ls in d.get("token_fns", [])]
        # per read port: IR node, its lanes (one per state cell), bits per cell
        self.reads = [(int(r[0]), torch.tensor(r[1], dtype=torch.long),
                       int(r[2]) if len(r) > 2 else 1) for r in d["reads"]]
        self.read_slot = {i: self.slot[int(r[1][0])] for i, r in enumerate(d["reads"]) if r[1]}
        self.layers = {}
        for L, x in d["layers"].items():
            t = {k: torch.tensor(v, dtype=torch.long) for k, v in x.items()}
            self.layers[int(L)] = t
        self.signals = {int(k): v for k, v in d["signals"].items()}
        self.carries: dict[int, tuple[int, int]] = {}
        for nid, bits in sorted(self.signals.items()):
            for b, f in enumerate(bits):
                if f is not None and f[0] == 0 and f[2] == [1]:
                    self.carries.setdefault(f[1][0], (nid, b))
        # the signal bits as flat arrays: bit k = c[k] + sum w * lane over (k, lane, w)
        sig = [(nid, b, f) for nid, bits in sorted(self.signals.items())
               for b, f in enumerate(bits) if f is not None]
        self.sig_bits = [(nid, b) for nid, b, _ in sig]
        self.sig_c = torch.tensor([f[0] for _, _, f in sig], dtype=torch.long)
        self.sig_k = torch.tensor([k for k, (_, _, f) in enumerate(sig) for _ in f[1]],
                                  dtype=torch.long)
        self.sig_l = torch.tensor([x for _, _, f in sig for x in f[1]], dtype=torch.long)
        self.sig_w = torch.tensor([x for _, _, f in sig for x in f[2]], dtype=torch.long)
        # per slot: the residual dims to read (ballast first) and the lanes they hold
        self.slots = 2 * self.n_layers
        self.tap_dims: list[torch.Tensor] = []
        self.tap_lanes: list[torch.Tensor] = []
        slot, until = torch.tensor(self.slot), torch.tensor(self.until)
        dim = torch.tensor(self.dim, dtype=torch.long)
        for s in range(self.slots):
            live = ((slot >= 0) & (slot <= s) & (until >= s)).nonzero()[:, 0]
            self.tap_lanes.append(live)
            self.tap_dims.append(torch.cat([torch.arange(self.n_b), dim[live]]))

    @property
    def checks_per_position(self) -> int:
        """Residual values compared per position (all slots)."""
        return sum(len(d) for d in self.tap_dims)

    def designed(self, tokens: Sequence[Token], values: Sequence[Sequence[int]]) -> torch.Tensor:
        """[T, lanes] int64: every lane's designed value at positions with ``tokens`` and the
        simulator's traced node values ``values`` (one tuple per position)."""
        T = len(tokens)
        V = torch.zeros(T, self.n, dtype=torch.long)
        for p, tok in enumerate(tokens):
            for i, ln in enumerate(self.kind_lanes):
                V[p, ln] = (tok.kind >> i) & 1
            for fl, v in zip(self.field_lanes[tok.kind], tok.fields):
                for i, ln in enumerate(fl):
                    V[p, ln] = (v >> i) & 1
        for p, vals in enumerate(values):      # token tables: the token-only nodes' bits
            for n, ls in self.token_fns:
                for i, ln in enumerate(ls):
                    V[p, ln] = (vals[n] >> i) & 1
        for L in range(self.n_layers):
            for i, (n, ls, cell) in enumerate(self.reads):
                if self.read_slot.get(i) == 2 * L:
                    mask = (1 << cell) - 1
                    for p, vals in enumerate(values):
                        V[p, ls] = torch.tensor([(vals[n] >> (cell * j)) & mask
                                                 for j in range(len(ls))])
            x = self.layers.get(L)
            if x is None or not len(x["c"]):
                continue
            pre = x["c"][None, :].repeat(T, 1)
            pre.index_add_(1, x["gn"], V[:, x["gl"]] * x["gw"][None, :])
            h = pre.clamp(min=0)
            V.index_add_(1, x["ol"], h[:, x["on"]] * x["ow"][None, :])
        return V

    def signal_divergence(self, V: torch.Tensor, values: Sequence[Sequence[int]],
                          row: int = 0, pos0: int = 0) -> SignalDivergence | None:
        """The first named signal bit (by position, then node) whose form over the designed
        lanes ``V`` [T, lanes] is not the simulator's value in ``values``."""
        if not self.sig_bits:
            return None
        got = self.sig_c[None, :].repeat(V.shape[0], 1)
        got.index_add_(1, self.sig_k, V[:, self.sig_l] * self.sig_w[None, :])
        want = torch.tensor([[(vals[n] >> b) & 1 for n, b in self.sig_bits] for vals in values],
                            dtype=torch.long)
        bad = (got[:len(values)] != want).nonzero()
        if not len(bad):
            return None
        p, k = int(bad[0, 0]), int(bad[0, 1])
        nid, b = self.sig_bits[k]
        return SignalDivergence(row, pos0 + p, nid, b, int(got[p, k]), int(want[p, k]),
                                self.signal_text(nid))

    def first_divergence(self, V: torch.Tensor, taps: Sequence[torch.Tensor], row: int = 0,
                         pos0: int = 0) -> LaneDivergence | None:
        """The first (position, slot, lane) where the model's residual ``taps[s]`` ([T,
        len(tap_dims[s])] float64, read after sublayer s) differs from the designed values
        ``V`` [T, lanes] (ballast dims: from 2**b_res); None when all agree."""
        T = V.shape[0]
        bad_pos = torch.full((T,), self.slots, dtype=torch.long)      # first bad slot per pos
        diffs = []
        for s in range(self.slots):
            want = torch.cat([torch.full((T, self.n_b), self.ballast, dtype=torch.float64),
                              V[:, self.tap_lanes[s]].double()], 1)
            d = taps[s][:T] != want
            diffs.append(d)
            any_s = d.any(1)
            bad_pos = torch.where(any_s & (bad_pos == self.slots), torch.full_like(bad_pos, s), bad_pos)
        bad = (bad_pos < self.slots).nonzero()
        if not len(bad):
            return None
        p = int(bad[0, 0])
        s = int(bad_pos[p])
        j = int(diffs[s][p].nonzero()[0, 0])
        lane = -1 if j < self.n_b else int(self.tap_lanes[s][j - self.n_b])
        dim = int(self.tap_dims[s][j])
        count = int(sum(int(d.sum()) for d in diffs))
        want = self.ballast if lane < 0 else float(V[p, lane])
        return LaneDivergence(row, pos0 + p, s, lane, dim, want, float(taps[s][p, j]),
                              self.describe(lane, dim), count)

    # ---- text ----------------------------------------------------------------------------
    def signal_text(self, nid: int) -> str:
        """``name (op at file:line:col)`` for IR node ``nid``."""
        n = self.c.nodes[nid]
        name = f"signal `{n.name}`" if n.name else f"unnamed {n.op.value} node {nid}"
        return f"{name} ({n.op.value} at {n.loc})"

    def describe(self, lane: int, dim: int) -> str:
        """A lane as text: label, dim, and the HDL signal it carries or was made for."""
        if lane < 0:
            return f"ballast dim {dim}"
        lab = f" `{self.label[lane]}`" if self.label[lane] else ""
        head = f"lane {lane}{lab} (residual dim {dim})"
        if lane in self.carries:
            nid, b = self.carries[lane]
            return f"{head} carrying bit {b} of {self.signal_text(nid)}"
        if self.node[lane] >= 0:
            return f"{head} made for {self.signal_text(self.node[lane])}"
        return head
