"""calc's rare arithmetic paths, against Python's integers (issue 12: mutation survivors).

calc keeps integers in base 10^4 limbs (firmware/calc/bigint.c). Random expressions seldom
reach two paths: Knuth division's "add the divisor back" step (taken when the estimated
quotient digit is one too large, about 2 in 10^4 digits), and carries/borrows whose limb
sum is exactly the base at a given limb. These tests generate operands that take them:

- :func:`add_back_cases` runs Knuth's algorithm D in base 10^4 in Python (the same
  normalisation and qhat refinement as bigint.c) only to *choose* operands whose division
  takes the add-back step; the expected quotients and remainders are Python's ``//``/``%``;
- limb-boundary sums put limbs summing to exactly 10^4 (and 10^4 - 1 plus a carry) at
  several limb positions, with both signs.
"""
from __future__ import annotations

import random

import pytest

from tests.firmware.calc_oracle import batches
from tests.firmware.fw_engines import run_on

BASE = 10 ** 4


def limbs(x: int) -> list[int]:
    out = []
    while x:
        x, r = divmod(x, BASE)
        out.append(r)
    return out


def add_backs(a: int, b: int) -> int:
    """How many quotient digits of |a| // |b| take the add-back step in bigint.c's
    divmod_mag (0 when it uses the one-limb path or |a| < |b|)."""
    a, b = abs(a), abs(b)
    vb = limbs(b)
    nb = len(vb)
    if nb < 2 or a < b:
        return 0
    f = BASE // (vb[-1] + 1)
    un = limbs(a * f)
    na = len(limbs(a))
    un += [0] * (na + 1 - len(un))
    vn = limbs(b * f)
    vtop, vnext = vn[nb - 1], vn[nb - 2]
    v = b * f
    count = 0
    for j in range(na - nb, -1, -1):
        num = un[j + nb] * BASE + un[j + nb - 1]
        qhat, rhat = divmod(num, vtop)
        while qhat >= BASE or qhat * vnext > rhat * BASE + un[j + nb - 2]:
            qhat -= 1
            rhat += vtop
            if rhat >= BASE:
                break
        window = sum(d * BASE ** i for i, d in enumerate(un[j:j + nb + 1]))
        q = window // v
        count += qhat > q
        rest = window - q * v
        part = limbs(rest) + [0] * (nb + 1)
        un[j:j + nb + 1] = part[:nb + 1]
    return count


def add_back_cases(seed: int, count: int) -> list[tuple[int, int]]:
    """``count`` (a, b) pairs, all sign mixes, whose division takes the add-back step (the
    :func:`add_backs` model says so). Construction: a divisor b whose limbs below the top
    two are all 9999 and whose top limb is >= 5000 (no normalisation); a window
    W = q*b - d with a small d, so the top three limbs estimate q while the true digit is
    q - 1; the dividend is W followed by 0-2 random limbs (12 to 32 digits)."""
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    while len(out) < count:
        nb = rng.randint(3, 6)
        low = BASE ** (nb - 2)
        b = rng.randint(BASE // 2, BASE - 1) * BASE ** (nb - 1) + \
            rng.randint(0, BASE - 1) * low + low - 1
        q = rng.randint(2, BASE - 1)
        w = q * b - rng.randint(1, low // 2)
        k = rng.randint(0, 2)
        a = w * BASE ** k + rng.randint(0, BASE ** k - 1)
        if add_backs(a, b):
            out.append((rng.choice([1, -1]) * a, rng.choice([1, -1]) * b))
    return out


def test_the_model_finds_add_back_cases():
    """The operand model agrees with a hand-checked case and the generator's cases all take
    the step (so the calc test below really exercises it)."""
    assert add_backs(10 ** 8, 10 ** 4 + 1) == 0
    cases = add_back_cases(1, 40)
    assert all(add_backs(a, b) for a, b in cases)
    assert len({len(str(abs(a))) for a, _ in cases}) > 5


def check_lines(elf, engine, exprs: list[str], wants: list[str]) -> None:
    """Run ``exprs`` in batches and compare every output line with ``wants``."""
    i = 0
    for group in batches(exprs):
        out = run_on(engine, elf, "\n".join(group))
        assert out.fault is None and out.exit_code == 0, out.fault
        got = out.output.decode().split("\n")[:-1]
        for e, g in zip(group, got):
            assert g == wants[i], f"{e}: calc {g}, Python {wants[i]}"
            i += 1
        assert len(got) == len(group)
    assert i == len(exprs)


def test_division_add_back_step(firmware_elf, engine):
    """40 divisions whose quotient takes the add-back step: // and % with all sign mixes."""
    exprs, wants = [], []
    for a, b in add_back_cases(20261201, 40):
        exprs += [f"{a} // {b}", f"{a} % {b}"]
        wants += [str(a // b), str(a % b)]
    check_lines(firmware_elf("calc"), engine, exprs, wants)


def boundary_sums() -> list[tuple[int, int]]:
    """Operand pairs whose limb sums are exactly 10^4, or 10^4 - 1 plus an incoming carry,
    at limb positions 0, 1, 2, 3, 5 and 8 (also as differences: borrows at the same
    limbs)."""
    out = []
    for k in (0, 1, 2, 3, 5, 8):
        p = BASE ** k
        out += [(5000 * p, 5000 * p), (9999 * p + 1, p), (4321 * p + 7, 5679 * p + 3),
                (BASE ** (k + 1) - 1, 1), (1234 * BASE ** (k + 1) + 6000 * p, 4000 * p),
                (BASE ** (k + 2) + 4999 * p, 5001 * p + 12)]
    return out


@pytest.mark.parametrize("signs", ["++", "+-", "-+", "--"])
def test_limb_boundary_sums(firmware_elf, engine, signs):
    """a + b and a - b at several limb positions, with every sign mix, against Python."""
    exprs, wants = [], []
    for a, b in boundary_sums():
        a = a if signs[0] == "+" else -a
        b = b if signs[1] == "+" else -b
        exprs += [f"{a} + {b}", f"{a} - {b}", f"{b} - {a}"]
        wants += [str(a + b), str(a - b), str(b - a)]
    check_lines(firmware_elf("calc"), engine, exprs, wants)


def test_power_at_the_digit_limit(firmware_elf, engine):
    """The largest powers calc allows (1024 digits: 2**3401, 3**2145, 10**1023) are exact;
    one more factor is "too big" (exit 3), as the Python oracle says."""
    from tests.firmware.calc_oracle import oracle
    exprs = ["2 ** 3401", "(-2) ** 3401", "3 ** 2145", "10 ** 1023", "2 ** 3402", "10 ** 1024"]
    out = run_on(engine, firmware_elf("calc"), "\n".join(exprs))
    got = out.output.decode().split("\n")[:-1]
    assert len(got) == len(exprs) and out.fault is None
    for e, g in zip(exprs, got):
        want, code = oracle(e)
        if want is None:
            assert code == 3 and g == "error: number too big (over 1024 digits)", (e, g)
        else:
            assert g == want and len(want.lstrip("-")) == 1024, e
    assert out.exit_code == 3


def normalisation_cases(seed: int) -> list[tuple[int, int]]:
    """(a, b) pairs whose divisor's top limb sits at each edge of bigint.c's normalisation
    factor f = 10^4 // (top + 1): 9999 and 9998 (f = 1, the largest tops), 5000/4999
    (f = 1 / 2), 3333/3332 (2 / 3), 2 and 1 (f = 3333, 5000), with 2 to 5 divisor limbs and
    dividends 0 to 3 limbs longer, some exact multiples (remainder 0) and some one under."""
    rng = random.Random(seed)
    out = []
    for top in (9999, 9998, 5000, 4999, 3333, 3332, 2, 1):
        for nb in (2, 3, 5):
            b = top * BASE ** (nb - 1) + rng.randrange(BASE ** (nb - 1))
            for extra in (0, 1, 3):
                q = rng.randrange(1, BASE ** (extra + 1))
                r = rng.choice([0, b - 1, rng.randrange(b)])
                out.append((q * b + r, b))
    return out


def test_division_at_normalisation_edges(firmware_elf, engine):
    """// and % whose divisor's top limb is at each normalisation edge, every sign mix,
    against Python."""
    exprs, wants = [], []
    for i, (a, b) in enumerate(normalisation_cases(7)):
        a, b = (a, -a)[i % 2], (b, -b)[i // 2 % 2]
        exprs += [f"{a} // {b}", f"{a} % {b}"]
        wants += [str(a // b), str(a % b)]
    check_lines(firmware_elf("calc"), engine, exprs, wants)
