"""Python reference models of the standard-library modules (stdlib/*.hdl).

Takes: plain Python ints (unsigned bit patterns of the stated width). Gives: the outputs of
the matching module as a dict ``{port: int}``, computed with Python's arbitrary-precision
arithmetic rather than the circuit's structure, so a structural slip in the .hdl shows up as
a mismatch.
"""
from __future__ import annotations


def mask(w: int) -> int:
    return (1 << w) - 1


def to_signed(x: int, w: int) -> int:
    """The two's complement value of the w-bit pattern x."""
    return x - (1 << w) if x >> (w - 1) & 1 else x


def clog2(x: int) -> int:
    return (x - 1).bit_length()


# ---- arith.hdl -------------------------------------------------------------------------------

def adder(w: int, a: int, b: int, cin: int) -> dict[str, int]:
    t = a + b + cin
    return {"sum": t & mask(w), "cout": t >> w}


def subtractor(w: int, a: int, b: int, bin: int) -> dict[str, int]:
    t = a - b - bin
    return {"diff": t & mask(w), "bout": int(t < 0)}


def incrementer(w: int, a: int) -> dict[str, int]:
    return {"y": (a + 1) & mask(w), "cout": (a + 1) >> w}


def negate(w: int, a: int) -> dict[str, int]:
    return {"y": -a & mask(w)}


def cmp_eq(w: int, a: int, b: int) -> dict[str, int]:
    return {"eq": int(a == b)}


def _cmp(x: int, y: int) -> dict[str, int]:
    return {"eq": int(x == y), "lt": int(x < y), "le": int(x <= y), "gt": int(x > y),
            "ge": int(x >= y)}


def cmp_u(w: int, a: int, b: int) -> dict[str, int]:
    return _cmp(a, b)


def cmp_s(w: int, a: int, b: int) -> dict[str, int]:
    return _cmp(to_signed(a, w), to_signed(b, w))


# ---- shift.hdl -------------------------------------------------------------------------------

def shl(w: int, a: int, n: int) -> dict[str, int]:
    return {"y": (a << n) & mask(w)}


def shr(w: int, a: int, n: int) -> dict[str, int]:
    return {"y": a >> n}


def sra(w: int, a: int, n: int) -> dict[str, int]:
    return {"y": (to_signed(a, w) >> n) & mask(w)}


# ---- muldiv.hdl ------------------------------------------------------------------------------

def mul(w: int, a: int, b: int) -> dict[str, int]:
    """RISC-V mul / mulhu / mulh / mulhsu for XLEN = w."""
    sa, sb = to_signed(a, w), to_signed(b, w)
    return {"lo": (a * b) & mask(w), "hi_uu": (a * b) >> w,
            "hi_ss": ((sa * sb) >> w) & mask(w), "hi_su": ((sa * b) >> w) & mask(w)}


def divu(w: int, a: int, b: int) -> dict[str, int]:
    """RISC-V divu / remu: x / 0 = all ones, x % 0 = x."""
    if b == 0:
        return {"q": mask(w), "r": a}
    return {"q": a // b, "r": a % b}


def divs(w: int, a: int, b: int) -> dict[str, int]:
    """RISC-V div / rem: rounds toward zero; x / 0 = -1, x % 0 = x; INT_MIN / -1 = INT_MIN,
    INT_MIN % -1 = 0 (both fall out of the truncating definition modulo 2^w)."""
    if b == 0:
        return {"q": mask(w), "r": a}
    sa, sb = to_signed(a, w), to_signed(b, w)
    q = abs(sa) // abs(sb)
    if (sa < 0) != (sb < 0):
        q = -q
    r = sa - q * sb
    return {"q": q & mask(w), "r": r & mask(w)}


# ---- bits.hdl --------------------------------------------------------------------------------

def mux2(w: int, sel: int, a: int, b: int) -> dict[str, int]:
    return {"y": b if sel else a}


def mux4(w: int, sel: int, a: int, b: int, c: int, d: int) -> dict[str, int]:
    return {"y": (a, b, c, d)[sel]}


def mux_tree(w: int, n: int, data: int, sel: int) -> dict[str, int]:
    return {"y": (data >> (w * sel)) & mask(w) if sel < n else 0}


def decoder(n: int, x: int) -> dict[str, int]:
    return {"y": (1 << x) if x < n else 0}


def onehot_encoder(n: int, x: int) -> dict[str, int]:
    """Exact for one-hot x; for other x, bit k is the OR over set bits i of bit k of i."""
    y = 0
    for i in range(n):
        if x >> i & 1:
            y |= i
    return {"y": y}


def priority_encoder(n: int, x: int) -> dict[str, int]:
    if x == 0:
        return {"y": 0, "valid": 0}
    return {"y": (x & -x).bit_length() - 1, "valid": 1}


def popcount(w: int, x: int) -> dict[str, int]:
    return {"count": bin(x).count("1")}


def sign_extend(w: int, n: int, x: int) -> dict[str, int]:
    return {"y": to_signed(x, w) & mask(n)}


def zero_extend(w: int, n: int, x: int) -> dict[str, int]:
    return {"y": x}
