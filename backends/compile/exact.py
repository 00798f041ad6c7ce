"""The static exactness proof, run before any weight is written.

Takes: a scheduled :class:`backends.compile.program.Program`, its :class:`backends.compile.emit.Numerics`, the
dtype. Gives: a :class:`Proof` (the figures the proof rests on: ranges, significant bits,
ballast margins; chip.json keeps it as its ``proof`` section and ``deltachip compile`` prints
:meth:`Proof.summary`), or raises :class:`ExactnessError` naming the HDL line and the signal of
the first violation. What it proves (the construction is docs/backend.md, "Representation"
and "Numerics"; the float facts it rests on are checked in the weights by tests/backends,
e.g. test_matrix.py and test_two_hot_fp32.py):

- every MLP pre-activation K*T is an integer multiple of K with T <= 256, so where it is
  positive it has <= 8 significant bits and silu(K*T)/K is relu(T) exactly (K >= 128); where
  it is negative (T >= -2^14) any rounding keeps it <= -128 and silu gives exactly -0.0;
- every gate coefficient and constant is an integer with <= 8 significant bits (so K*coef*2^m
  is a bf16 number), and every dot product's L1 norm is < 2^24 times its LSB;
- every lane (residual value) is an integer with |v| <= 256, and every down_proj sum has an
  L1 norm < 2^24;
- the residual ballast dominates: n_b*B^2 >= 2^24 * sum(v^2) (fp32; 2^9 in bf16) and the mean
  square n_b*B^2/H >= 16, so every pre-norm is exactly x * 2^-m;
- GDN key/query forms stay within [-256, 1] (K*q exact, silu(<= -128) = -0.0, l2norm of the
  one-hot = 1); value forms are bits; a memory cell holds Vs times a bit or (byte-cell ROMs)
  a byte, read back as a lane <= 255; the value ballast dominates a row's cells
  (n_bv*B_v^2 >= 2^24 (fp32; 2^9 bf16) * cols * (Vs*255)^2); byte cells only where every
  kernel reads them exactly (bf16, or one-hot queries).
- a transparent RAM's value-head select (``vsel``): beta = sigmoid(1024 * match - 512) with
  the match form 1 or <= 0 over bits, and sigmoid(+-512) is exactly 1 / 0 in the dtype, so a
  write changes the chosen value head's row only.
- the target's ``rms_norm_eps`` vanishes: ``rsqrt(mean square + eps)`` in fp32 is exactly
  1/sqrt(mean square) for the residual pre-norm and the memory read norm (a huge eps is
  refused here, at compile time, not found by ``check``).

Emission then casts every weight with :func:`exact_cast`, which verifies it survives the cast.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import torch

from common.errors import UserError
from common.kinds import DType
from backends.compile.program import Allocated, Form, Program
from backends.chipdir.numbers import DTYPES, sig_bits
from backends.chipdir.memory import byte_cells_exact


class ExactnessError(UserError):
    """The construction cannot be proved exact (message names the HDL line)."""


@dataclass(frozen=True)
class MemoryMargin:
    """The value ballast of one memory: it dominates the largest row of cells
    (``cols * cell_max^2``) by 2^``margin_bits`` (the dtype needs 2^``Proof.need_bits``)."""
    memory: str
    cell_bits: int
    cell_max: int
    margin_bits: int


@dataclass(frozen=True)
class Proof:
    """What :func:`prove` established for one program, numerics and dtype (every figure is
    the worst case over the whole chip):

    - ``max_lane``: the largest |value| any residual lane may hold (<= 256);
    - ``max_pre`` / ``min_pre``: the largest and smallest MLP pre-activation T of any neuron
      (within [-2^14, 256]); ``neurons``: how many neurons were checked;
    - ``max_weight_bits``: the most significant bits of any gate coefficient or constant (<= 8);
    - ``max_gate_l1`` / ``max_down_l1``: the largest L1 norm of a gate dot product and of a
      down-projection term (each < 2^24);
    - ``need_bits``: how far a ballast must dominate the signal (24 in fp32, 9 in bf16);
      ``ballast_bits``: the residual ballast ``n_b * B^2`` dominates the sum of the lanes'
      squares by 2^ballast_bits (>= need_bits); ``mean_square_bits``: log2 of the pre-norm
      mean square ``n_b * B^2 / hidden`` (>= 4);
    - ``memories``: the value-ballast margin of each memory (:class:`MemoryMargin`);
    - ``rms_eps``: the target's eps, which vanishes in both norms (else no proof);
    - ``prefill``: whether chunked prefill is exact too (False only for byte-cell memories
      with two-hot queries in fp32, which decode reads exactly and transformers' chunked
      kernel does not: docs/backend.md, "Byte cells"; ``HFEngine.prefill`` refuses then).
    """
    dtype: str
    max_lane: int
    max_pre: int
    min_pre: int
    neurons: int
    max_weight_bits: int
    max_gate_l1: int
    max_down_l1: int
    need_bits: int
    ballast_bits: int
    mean_square_bits: int
    rms_eps: float
    memories: tuple[MemoryMargin, ...] = ()
    prefill: bool = True

    def record(self) -> dict[str, Any]:
        """The chip.json ``proof`` section (JSON types only)."""
        d = asdict(self)
        d["memories"] = {m.memory: {"cell_bits": m.cell_bits, "cell_max": m.cell_max,
                                    "margin_bits": m.margin_bits} for m in self.memories}
        del d["dtype"]
        return d

    def summary(self) -> str:
        """One line for ``deltachip compile``."""
        mem = ""
        if self.memories:
            low = min(self.memories, key=lambda m: m.margin_bits)
            mem = (f", value ballast >= 2^{low.margin_bits} ({len(self.memories)} "
                   f"memor{'y' if len(self.memories) == 1 else 'ies'})")
        return (f"proof ({self.dtype}): lanes |v| <= {self.max_lane}, pre-activations "
                f"[{self.min_pre}, {self.max_pre}], weights <= {self.max_weight_bits} "
                f"significant bits, ballast 2^{self.ballast_bits} (needs 2^{self.need_bits})"
                f"{mem}, eps {self.rms_eps:g} vanishes"
                f"{'' if self.prefill else '; decode only (byte cells, two-hot queries)'}")


@dataclass(frozen=True)
class Proven:
    """After :func:`run`: the allocated program, the numerics it was proved with
    (:class:`backends.compile.emit.Numerics`), the dtype and the :class:`Proof`; what emission takes."""
    prog: Program
    num: Any
    dtype: DType
    proof: Proof


def run(allocated: Allocated, num: Any, dtype: DType | str) -> Proven:
    """The proof stage: :func:`prove` ``allocated`` with ``num`` in ``dtype``, as a :class:`Proven`
    (or :class:`ExactnessError`)."""
    dtype = DType.parse(dtype)
    return Proven(allocated.prog, num, dtype, prove(allocated.prog, num, dtype))


def _dominance(ballast: int, signal: int) -> int:
    """The largest e with ``ballast >= 2^e * signal`` (``signal`` >= 1; may be negative)."""
    if ballast >= signal:
        return (ballast // signal).bit_length() - 1
    return -((-(-signal // ballast)) - 1).bit_length()


def _lane_max(prog: Program, f: Form) -> int:
    return sum(abs(w) * max(abs(prog.lanes[ln].lo), abs(prog.lanes[ln].hi)) for ln, w in f.t.items())


def prove(prog: Program, num, dtype: str) -> Proof:
    """Prove ``prog`` with numerics ``num`` exact in ``dtype`` (see the module docstring):
    the :class:`Proof`, or :class:`ExactnessError` for the first violation."""
    c = prog.circuit
    max_pre, min_pre, n_neurons, wbits, gate_l1, down_l1 = 0, 0, 0, 0, 0, 0

    def fail(node: int, msg: str) -> None:
        where = f"{c.nodes[node].loc}" if node >= 0 else c.name
        what = f" (in {c.describe(node)})" if node >= 0 else ""
        raise ExactnessError(f"{where}: error: cannot prove the compiled weights exact: "
                             f"{msg}{what}")
    for layer, ns in prog.mlp.items():
        for n in ns:
            T = n.gate
            n_neurons += 1
            max_pre, min_pre = max(max_pre, T.hi), min(min_pre, T.lo)
            if T.hi > 256 or T.lo < -(1 << 14):
                fail(n.node, f"a neuron in layer {layer} has pre-activation range "
                             f"[{T.lo}, {T.hi}] (must stay within [-2^14, 256])")
            for w in list(T.t.values()) + [T.c]:
                wbits = max(wbits, sig_bits(w))
                if sig_bits(w) > 8:
                    fail(n.node, f"weight {w} has more than 8 significant bits")
            g1 = _lane_max(prog, T) + abs(T.c)
            gate_l1 = max(gate_l1, g1)
            if g1 >= 1 << 24:
                fail(n.node, "a gate dot product's L1 norm reaches 2^24")
            d1 = sum(abs(w) for w in n.out.values()) * max(abs(T.hi), 1)
            down_l1 = max(down_l1, d1)
            if d1 >= 1 << 24:
                fail(n.node, "a down-projection term reaches 2^24")
    max_lane = 0
    for ln in prog.lanes:
        m = max(abs(ln.lo), abs(ln.hi))
        max_lane = max(max_lane, m)
        if m > 256:
            fail(ln.node, f"a residual lane may hold values up to {m} (more than 8 bits)")
    sumsq = prog.dim_sumsq()
    need = 24 if dtype == DType.FP32 else 9
    ballast = num.n_b * 4 ** num.b_res
    if ballast < (1 << need) * max(sumsq, 1):
        fail(-1, f"ballast 2^{num.b_res} x {num.n_b} does not dominate the signal lanes")
    if ballast < 16 * num.hidden:
        fail(-1, "the pre-norm mean square is below 16 (eps would show)")
    t = prog.target
    eps = t.rms_eps
    read_ms = Fraction(num.n_bv * 4 ** num.b_v, t.d_v)
    paired = any(p.pair for p in prog.mems.values())
    for what, ms in (("residual pre-norm", Fraction(num.n_b * 4 ** num.b_res, num.hidden)),
                     ("memory read norm", read_ms),
                     # a paired RAM's read sums two rows: twice the ballast
                     *([("paired memory read norm", 4 * read_ms)] if paired else [])):
        if not norm_is_exact(ms, eps):
            fail(-1, f"rms_norm_eps {eps!r} is too large: the {what} computes "
                     f"rsqrt({ms} + eps) in fp32, which is not exactly 1/sqrt({ms}) "
                     "(use a config with a smaller rms_norm_eps, e.g. 1e-6)")
    for p in prog.mems.values():    # a value-head select: beta = sigmoid(+-512) in dtype
        if p.vsel and not beta_is_exact(dtype):
            fail(p.writes[0].node, f"memory '{p.name}''s value-head write select is not an "
                                   f"exact 0/1 beta in {dtype}")
    margins = []
    prefill = byte_cells_exact(t, str(DType.parse(dtype).value)) or \
        all(p.cell == 1 for p in prog.mems.values())
    for p in prog.mems.values():
        node = (p.reads[0].node if p.reads else p.writes[0].node) if (p.reads or p.writes) else -1
        cell_max = (2 ** num.vs) * ((1 << p.cell) - 1)
        row = t.cols_per_bank * cell_max ** 2
        if num.n_bv * 4 ** num.b_v < (1 << need) * row:
            fail(node, f"value ballast 2^{num.b_v} does not dominate memory '{p.name}''s cells")
        margins.append(MemoryMargin(p.name, p.cell, cell_max,
                                    _dominance(num.n_bv * 4 ** num.b_v, row)))
        for port in p.reads:
            lo = -sum(1 for _ in port.addr)
            if lo < -256:
                fail(port.node, "memory address wider than 256 bits")
        for w in p.writes:
            for f in w.data + w.addr + [w.en]:
                if not f.is_const and (f.lo < 0 or f.hi > 1):
                    fail(w.node, f"memory write operand with range [{f.lo}, {f.hi}] is not a bit")
    return Proof(dtype=str(DType.parse(dtype).value), max_lane=max_lane, max_pre=max_pre,
                 min_pre=min_pre, neurons=n_neurons, max_weight_bits=wbits, max_gate_l1=gate_l1,
                 max_down_l1=down_l1, need_bits=need,
                 ballast_bits=_dominance(ballast, max(sumsq, 1)),
                 mean_square_bits=_dominance(ballast, num.hidden), rms_eps=float(eps),
                 memories=tuple(margins), prefill=prefill)


def beta_is_exact(dtype: str) -> bool:
    """Whether a write's beta, ``sigmoid(b)`` of b = +-512 (the value-head select of a
    transparent RAM, docs/backend.md), is exactly 1 and 0 when computed in ``dtype``."""
    b = torch.tensor([512.0, -512.0], dtype=DTYPES[dtype])
    return torch.sigmoid(b).float().tolist() == [1.0, 0.0]


def norm_is_exact(mean_square: Fraction, eps: float) -> bool:
    """Whether an RMSNorm whose input has ``mean_square`` (a power of 4, as the ballast makes
    it) scales by exactly 1/sqrt(mean_square) with ``eps`` added: evaluated as transformers
    does it, ``rsqrt(variance + eps)`` in fp32."""
    x = torch.tensor(float(mean_square), dtype=torch.float32)
    return float(torch.rsqrt(x + eps)) == float(mean_square) ** -0.5


def exact_cast(name: str, v: torch.Tensor, dtype: str, first: int = 0) -> torch.Tensor:
    """``v`` cast to ``dtype``; ExactnessError naming ``name``'s flat index (``first`` is the
    flat index of ``v``'s first element in the whole tensor) if a weight is not representable."""
    out = v.to(DTYPES[dtype])
    back = out.to(v.dtype)
    if not torch.equal(back, v):
        i = int((back != v).flatten().nonzero()[0])
        raise ExactnessError(f"error: weight {name}[{first + i}] = {v.flatten()[i].item()!r} "
                             f"is not representable in {dtype}")
    return out
