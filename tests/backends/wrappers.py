"""Token wrappers around every standard-library module, for the backend verification matrix.

Takes: nothing but the ``stdlib/*.hdl`` files. Gives: :data:`WRAPPERS` (one :class:`Wrapper`
per stdlib module, in file order), :func:`stdlib_modules` (every module the library declares,
so a test can tell when one has no wrapper), :func:`wrapper_source` (the generated text), and
:func:`estimated_gb` (the memory a compile for a fixed-shape target will take, so that the
matrix and benchmarks/backend_figures.py can skip what the machine cannot hold).

Each wrapper is a one-kind circuit ``token T(x: u8, y: u8)`` (16 bits of payload) that walks
its own inputs, so that a run of N steps (N <= 256) feeds the module N different input
vectors:

- ``x`` is the walk state: ``next x = x + 0x9D`` (odd, so x visits all 256 values);
- every input port gets an operand made from ``x`` by a fixed rotate-and-xor ("mix"), cut
  to the port's width (two mixes side by side for ports wider than 8 bits, two bits of x
  xored for 1-bit ports). The second operand of the same width as the first equals the first
  when ``x % 8 == 0`` and is 0 when ``x % 8 == 4``, so equal operands, zero divisors and the
  like come up every few steps;
- ``y`` is the module's result at the previous step: all output ports concatenated; when
  that is wider than 8 bits, its bytes are rotated by their index and xored together, so
  every output bit reaches the next token on every step.

The module runs at a small width (:data:`PARAMS`: 8 bits for most), which keeps the circuits
small enough to compile for every target.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from hdl.ir import Circuit

STDLIB = Path(__file__).resolve().parents[2] / "stdlib"

#: Parameters of each module in its wrapper (small widths; every module needs an entry).
PARAMS: dict[str, dict[str, int]] = {
    # arith
    "adder_ripple": {"W": 8}, "adder_prefix": {"W": 8}, "subtractor": {"W": 8},
    "incrementer": {"W": 8}, "negate": {"W": 8}, "cmp_eq": {"W": 8}, "cmp_u": {"W": 8},
    "cmp_s": {"W": 8},
    # bits
    "mux2": {"W": 8}, "mux4": {"W": 8}, "mux_tree": {"W": 4, "N": 4}, "decoder": {"N": 8},
    "onehot_encoder": {"N": 8}, "priority_encoder": {"N": 8}, "popcount": {"W": 8},
    "sign_extend": {"W": 6, "N": 8}, "zero_extend": {"W": 6, "N": 8},
    # muldiv
    "mul": {"W": 8}, "mul_op": {"W": 8}, "divu": {"W": 8}, "divs": {"W": 8},
    # shift
    "shl": {"W": 8}, "shr": {"W": 8}, "sra": {"W": 8},
}

#: The walk's step (odd: x + STEP visits every byte once in 256 steps).
STEP = 0x9D
#: The constants of the operand mixes: operand k is rotl(x, 3k) ^ MIX[k].
MIX = (0x00, 0xA5, 0x3C, 0x96, 0x5A, 0xC3, 0x69, 0xF0)

_MODULE_RE = re.compile(r"^\s*module\s+([A-Za-z_][A-Za-z0-9_]*)", re.M)


@dataclass(frozen=True)
class Wrapper:
    """The token wrapper of stdlib module ``module`` from ``stdlib/<library>.hdl``."""
    library: str
    module: str
    params: tuple[tuple[str, int], ...]

    @property
    def name(self) -> str:
        """``library.module``, the id used in test names."""
        return f"{self.library}.{self.module}"

    @property
    def source(self) -> str:
        return wrapper_source(self.library, self.module, dict(self.params))

    def circuit(self) -> Circuit:
        """The elaborated wrapper circuit (raises the front end's CompileError if it fails)."""
        return _elaborate(self.library, self.module, self.params)


def stdlib_modules() -> list[tuple[str, str]]:
    """Every ``(library, module)`` declared in ``stdlib/*.hdl``, in file order."""
    out = []
    for f in sorted(STDLIB.glob("*.hdl")):
        out += [(f.stem, m) for m in _MODULE_RE.findall(f.read_text())]
    return out


def _ports(library: str, module: str, params: dict[str, int]) -> list[tuple[str, str, int, bool]]:
    from hdl.frontend import load_module
    return load_module(STDLIB / f"{library}.hdl", module, params).ports


def _mix(k: int) -> str:
    """Operand mix k of the walk state ``x`` (an 8-bit expression)."""
    r = (3 * k) % 8
    rot = "x" if r == 0 else f"{{x[{7 - r}:0], x[7:{8 - r}]}}"
    return rot if MIX[k % len(MIX)] == 0 else f"({rot} ^ 8'h{MIX[k % len(MIX)]:02X})"


def _operand(k: int, width: int, first: dict[int, str]) -> str:
    """The expression fed to the k-th input port of ``width`` bits."""
    if width == 1:
        return f"(x[{k % 8}] ^ x[{(k + 3) % 8}])"
    if width > 8:
        parts = [_mix(k + j) for j in range((width + 7) // 8)]
        v = "{" + ", ".join(parts) + "}"
        return v if width % 8 == 0 else f"{v}[{width - 1}:0]"
    base = _mix(k) if width == 8 else f"{_mix(k)}[{width - 1}:0]"
    if width in first:
        # the second operand of this width: equal to the first at x % 8 == 0, zero at 4
        return f"((x[2:0] == 0) ? {first[width]} : (x[2:0] == 4) ? {width}'d0 : {base})"
    first[width] = f"op{k}"
    return base


def wrapper_source(library: str, module: str, params: dict[str, int]) -> str:
    """The .hdl text of the wrapper circuit ``Wrap_<module>`` (see the module docstring)."""
    ports = _ports(library, module, params)
    ins = [(n, w) for n, d, w, _ in ports if d == "in"]
    outs = [(n, w) for n, d, w, _ in ports if d == "out"]
    plist = ", ".join(f"{k}: {v}" for k, v in params.items())
    lines = [f"// generated by tests/backends/wrappers.py: {library}.{module} #({plist})",
             f"import {library};", "", f"circuit Wrap_{module} {{",
             "    token T(x: u8, y: u8);", "    start T(x: 0, y: 0);", "    let x = tok.T.x;"]
    first: dict[int, str] = {}
    conns = []
    for k, (n, w) in enumerate(ins):
        lines.append(f"    let op{k}: u[{w}] = {_operand(k, w, first)};")
        conns.append(f"{n}: op{k}")
    lines.append(f"    inst m = {module} #({plist}) ({', '.join(conns)});")
    total = sum(w for _, w in outs)
    cat = "{" + ", ".join(f"m.{n}" for n, _ in reversed(outs)) + "}"
    if total <= 8:
        lines.append(f"    let y: u8 = zext({cat}, 8);")
    else:
        nbytes = (total + 7) // 8
        lines.append(f"    let v: u[{8 * nbytes}] = zext({cat}, {8 * nbytes});")
        terms = []
        for j in range(nbytes):
            lo, r = 8 * j, j % 8
            byte = f"v[{lo + 7}:{lo}]"
            terms.append(byte if r == 0 else f"{{v[{lo + 7 - r}:{lo}], v[{lo + 7}:{lo + 8 - r}]}}")
        lines.append(f"    let y: u8 = {' ^ '.join(terms)};")
    lines += [f"    next = T(x: x + 8'h{STEP:02X}, y: y);", "}", ""]
    return "\n".join(lines)


@functools.cache
def _elaborate(library: str, module: str, params: tuple[tuple[str, int], ...]) -> Circuit:
    from hdl.frontend import load_source
    text = wrapper_source(library, module, dict(params))
    # named as if it sat in stdlib/, so that `import <library>;` resolves there
    return load_source(text, str(STDLIB / f"wrap_{module}.hdl"), f"Wrap_{module}")


def _wrappers() -> list[Wrapper]:
    return [Wrapper(lib, mod, tuple(PARAMS[mod].items()))
            for lib, mod in stdlib_modules() if mod in PARAMS]


#: One wrapper per stdlib module that has an entry in :data:`PARAMS`, in file order.
WRAPPERS: list[Wrapper] = _wrappers()


#: Peak resident bytes per dense weight, by dtype: loading the checkpoint for ``check`` (the
#: compile itself holds one layer at a time). Measured for qwen3.5-4b with `/usr/bin/time -v
#: deltachip check`: example.gcd bf16, 6.6 GB peak for 2.96 G dense weights (2.2 bytes per
#: weight; 2.3 kept as margin); fp32 weights take twice the bytes.
BYTES_PER_WEIGHT = {"bf16": 2.3, "fp32": 4.6}


def estimated_gb(c: Circuit, target: str, dtype: str = "bf16") -> float:
    """Peak memory to compile ``c`` for ``target`` in ``dtype`` and load it, in GB (an estimate).

    Dense weights counted from the schedule and the target's per-layer shapes (MLP, GDN
    projections, embedding and lm_head, plus the trailing attention layer), times
    :data:`BYTES_PER_WEIGHT` for ``dtype``. Returns 0 for targets sized to fit the circuit (compact),
    whose chips are small."""
    from backends.compile.schedule import schedule
    from backends.chipdir.target import get_target
    t = get_target(target)
    if t.mlp_width is None or t.k_heads is None:
        return 0.0
    prog = schedule(c, t)
    H = t.hidden_for(len(prog.lanes))[0]
    nk, nv = t.k_heads, t.k_heads * t.v_per_k
    gdn = H * (2 * nk * t.d_k + 2 * nv * t.d_v + 2 * nv) + nv * t.d_v * H
    layer = 3 * H * t.mlp_width + gdn
    vocab = sum(1 << k.payload_bits for k in c.kinds)
    weights = (prog.n_layers + 1) * layer + 2 * vocab * H
    return BYTES_PER_WEIGHT[dtype] * weights / 1e9
