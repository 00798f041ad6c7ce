"""Why two calc mutants are equivalent: a Python model of bigint.c's divmod_mag (Knuth's
algorithm D in base 10^4, 32-bit products checked) run as written and with the qhat
refinement loop mutated (``nobreak``: without ``if (rhat >= BIG_BASE) break;``; ``gt``:
``qhat > BIG_BASE`` for ``qhat >= BIG_BASE``). Every variant must give Python's quotient and
remainder on random divisions, on the add-back operands of tests/firmware/test_calc_limbs.py
and on divisors at the normalisation edges. A control variant, ``weak`` (f = 10^4 // (top + 2),
the mutant the normalisation-edge test kills), shows the model does tell wrong from right.

    python benchmarks/mutation/knuth_variants.py [--count N]
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "firmware"))
from test_calc_limbs import BASE, add_back_cases, limbs, normalisation_cases  # noqa: E402

U32 = 1 << 32


def divmod_mag(a: int, b: int, variant: str) -> tuple[int, int]:
    """|a| // |b|, |a| % |b| the way bigint.c computes them for b of two limbs or more."""
    al, bl = limbs(a), limbs(b)
    na, nb = len(al), len(bl)
    f = BASE // (bl[-1] + (2 if variant == "weak" else 1))
    if f == 0:
        return -1, -1
    un = limbs(a * f) + [0] * (na + 1)
    un = un[:na + 1]
    vn = limbs(b * f)
    vtop, vnext = vn[nb - 1], vn[nb - 2]
    quot = [0] * (na - nb + 1)
    for j in range(na - nb, -1, -1):
        num = un[j + nb] * BASE + un[j + nb - 1]
        qhat, rhat = divmod(num, vtop)
        while True:
            big = qhat > BASE if variant == "gt" else qhat >= BASE
            lhs, rhs = qhat * vnext, rhat * BASE + un[j + nb - 2]
            assert lhs < U32 and rhs < U32, "32-bit overflow"
            if not (big or lhs > rhs):
                break
            qhat -= 1
            rhat += vtop
            if rhat >= BASE and variant != "nobreak":
                break
        mcarry = borrow = 0
        for i in range(nb):
            p = qhat * vn[i] + mcarry
            assert p < U32
            mcarry = p // BASE
            t = un[i + j] - (p - mcarry * BASE) - borrow
            borrow = int(t < 0)
            un[i + j] = t + BASE if borrow else t
        top = un[j + nb] - mcarry - borrow
        if top < 0:
            qhat -= 1
            c = 0
            for i in range(nb):
                s = un[i + j] + vn[i] + c
                c = int(s >= BASE)
                un[i + j] = s - BASE if c else s
            top += c
        un[j + nb] = top & 0xFFFF
        assert 0 <= qhat < BASE, "quotient digit out of range"
        quot[j] = qhat
    rem = sum(d * BASE ** i for i, d in enumerate(un[:nb])) // f
    return sum(d * BASE ** i for i, d in enumerate(quot)), rem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000, help="random divisions (default 20000)")
    n = ap.parse_args().count
    rng = random.Random(1)
    cases = [(abs(a), abs(b)) for a, b in add_back_cases(5, 200) + normalisation_cases(3)]
    for _ in range(n):
        b = rng.randrange(BASE, BASE ** rng.randint(2, 6))
        cases.append((b * rng.randrange(1, BASE ** 3) + rng.randrange(b), b))
    for variant in ("as written", "nobreak", "gt", "weak"):
        bad = 0
        for a, b in cases:
            try:
                bad += divmod_mag(a, b, variant) != divmod(a, b)
            except AssertionError:
                bad += 1
        print(f"{variant:10}: {len(cases) - bad}/{len(cases)} divisions exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
