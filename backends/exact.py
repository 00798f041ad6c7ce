"""The static exactness proof, run before any weight is written.

Takes: a scheduled :class:`backends.lower.Program`, its :class:`backends.emit.Numerics`, the
dtype. Gives: nothing, or raises :class:`ExactnessError` naming the HDL line of the first
violation. What it proves (BRIEF section 4, measured in shared/research/numerics):

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
  one-hot = 1); value forms are bits.

Emission then casts every weight with :func:`exact_cast`, which verifies it survives the cast.
"""
from __future__ import annotations

import torch

from deltachip.errors import UserError
from backends.lower import Form, Program


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class ExactnessError(UserError):
    """The construction cannot be proved exact (message names the HDL line)."""


def sig_bits(v: int) -> int:
    v = abs(v)
    if v == 0:
        return 0
    while v % 2 == 0:
        v //= 2
    return v.bit_length()


def _lane_max(prog: Program, f: Form) -> int:
    return sum(abs(w) * max(abs(prog.lanes[ln].lo), abs(prog.lanes[ln].hi)) for ln, w in f.t.items())


def prove(prog: Program, num, dtype: str) -> None:
    c = prog.circuit

    def fail(node: int, msg: str) -> None:
        where = str(c.nodes[node].loc) if node >= 0 else c.name
        raise ExactnessError(f"{where}: error: cannot prove the compiled weights exact: {msg}")
    for layer, ns in prog.mlp.items():
        for n in ns:
            T = n.gate
            if T.hi > 256 or T.lo < -(1 << 14):
                fail(n.node, f"a neuron in layer {layer} has pre-activation range "
                             f"[{T.lo}, {T.hi}] (must stay within [-2^14, 256])")
            for w in list(T.t.values()) + [T.c]:
                if sig_bits(w) > 8:
                    fail(n.node, f"weight {w} has more than 8 significant bits")
            if _lane_max(prog, T) + abs(T.c) >= 1 << 24:
                fail(n.node, "a gate dot product's L1 norm reaches 2^24")
            if sum(abs(w) for w in n.out.values()) * max(abs(T.hi), 1) >= 1 << 24:
                fail(n.node, "a down-projection term reaches 2^24")
    sumsq = 0
    for i, ln in enumerate(prog.lanes):
        m = max(abs(ln.lo), abs(ln.hi))
        if m > 256:
            fail(ln.node, f"residual lane {i} may hold values up to {m} (more than 8 bits)")
    sumsq = prog.dim_sumsq()
    need = 24 if dtype == "fp32" else 9
    if num.n_b * 4 ** num.b_res < (1 << need) * max(sumsq, 1):
        fail(-1, f"ballast 2^{num.b_res} x {num.n_b} does not dominate the signal lanes")
    if num.n_b * 4 ** num.b_res < 16 * num.hidden:
        fail(-1, "the pre-norm mean square is below 16 (eps would show)")
    for p in prog.mems.values():
        for port in p.reads:
            lo = -sum(1 for _ in port.addr)
            if lo < -256:
                fail(port.node, "memory address wider than 256 bits")
        for w in p.writes:
            for f in w.data + w.addr + [w.en]:
                if not f.is_const and (f.lo < 0 or f.hi > 1):
                    fail(w.node, f"memory write operand with range [{f.lo}, {f.hi}] is not a bit")


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
