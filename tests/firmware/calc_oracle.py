"""The Python side of the calc tests: an oracle and a seeded expression generator.

:func:`oracle` evaluates an expression the way calc must: Python's own parser (so Python's
precedence and associativity are the reference) over ``fractions.Fraction`` values, with
calc's limits (1024 digits, integer exponents, gcd of integers). It returns the expected
output line and exit code. :func:`generate` produces a seeded list of expressions cycling
through :data:`KINDS`; :func:`batches` packs them into multi-line inputs that fit calc's
1 KiB input buffer.
"""
from __future__ import annotations

import ast
import math
import random
import re
import warnings
from fractions import Fraction
from typing import Callable

MAX_DIGITS = 1024
LIMIT = 10 ** MAX_DIGITS
INPUT_CAPACITY = 1024          # bytes, including the NUL (docs/firmware.md)

SYNTAX, MATH, TOO_BIG = 1, 2, 3


class CalcError(Exception):
    """An expected calc error: its exit code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _check(v: Fraction) -> Fraction:
    if abs(v.numerator) >= LIMIT or v.denominator >= LIMIT:
        raise CalcError(TOO_BIG)
    return v


def _pow(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1:
        raise CalcError(MATH)
    e = exp.numerator
    if base == 0 and e < 0:
        raise CalcError(MATH)
    if base in (0, 1, -1):
        return base ** e
    if abs(e) > 3402:           # |num| or den >= 2: over 1024 digits
        raise CalcError(TOO_BIG)
    return base ** e


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _check(Fraction(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        op = node.op
        if isinstance(op, ast.Pow):
            return _check(_pow(a, b))
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
            raise CalcError(MATH)
        ops: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
            ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
            ast.Mult: lambda x, y: x * y, ast.Div: lambda x, y: x / y,
            ast.FloorDiv: lambda x, y: Fraction(x // y), ast.Mod: lambda x, y: x % y,
        }
        if type(op) in ops:
            return _check(ops[type(op)](a, b))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "gcd" and len(node.args) == 2 and not node.keywords):
        a, b = _eval(node.args[0]), _eval(node.args[1])
        if a.denominator != 1 or b.denominator != 1:
            raise CalcError(MATH)
        return Fraction(math.gcd(a.numerator, b.numerator))
    raise CalcError(SYNTAX)


def oracle(expr: str) -> tuple[str | None, int]:
    """The expected (output line, exit code) of calc for one expression; the line is None
    for an error (calc prints "error: ..."), whose exit code is 1, 2 or 3."""
    if re.search(r",\s*\)", expr):     # Python allows gcd(a, b,); calc does not
        return None, SYNTAX
    try:
        with warnings.catch_warnings():       # e.g. "2(3)": 'int' object is not callable
            warnings.simplefilter("ignore")
            tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        return None, SYNTAX
    try:
        return str(_eval(tree)), 0
    except CalcError as e:
        return None, e.code


# ---------------------------------------------------------------- generator

def _int(rng: random.Random, max_digits: int = 6) -> int:
    digits = rng.randint(1, max_digits)
    return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10 ** digits - 1)


def _signed(rng: random.Random, max_digits: int = 6, nonzero: bool = False) -> str:
    """An integer literal, negative ones in one of the ways Python reads them."""
    v = _int(rng, max_digits)
    if nonzero and v == 0:
        v = rng.randint(1, 9)
    if rng.random() < 0.5:
        return str(v)
    return rng.choice([f"-{v}", f"(-{v})", f"-({v})"])


def _frac(rng: random.Random, max_digits: int = 4) -> str:
    return f"({_signed(rng, max_digits)}/{_signed(rng, max_digits, nonzero=True)})"


def k_power(rng):
    base = rng.choice([2, 3, 7, 10, 12, 99, 123, 65537])
    e = rng.randint(0, int(900 / math.log10(base)))
    form = rng.choice(["{b}**{e}", "(-{b})**{e}", "-{b}**{e}", "{b}**{e} // {b}**{e2}",
                       "1**(10**100)", "(-1)**(10**100+1)", "0**(10**50)", "2**3**2**2"])
    return form.format(b=base, e=e, e2=rng.randint(0, e))


def k_floordiv(rng):
    return f"{_signed(rng, 9)} // {_signed(rng, 4, nonzero=True)}"


def k_mod(rng):
    return f"{_signed(rng, 9)} % {_signed(rng, 4, nonzero=True)}"


def k_fraction(rng):
    ops = ["+", "-", "*", "/"]
    parts = [_frac(rng) for _ in range(rng.randint(2, 4))]
    expr = parts[0]
    for p in parts[1:]:
        expr += f" {rng.choice(ops)} {p}"
    return expr


def k_fraction_floor_mod(rng):
    return f"{_frac(rng)} {rng.choice(['//', '%'])} {_frac(rng)}"


def k_gcd(rng):
    g = _int(rng, 5)
    a, b = g * _int(rng, 5), g * _int(rng, 5)
    sa, sb = rng.choice(["", "-"]), rng.choice(["", "-"])
    form = rng.choice(["gcd({sa}{a}, {sb}{b})", "gcd(gcd({a}, {b}), {g})", "gcd({a}, 0)",
                       "gcd(0, 0)", "gcd({a}*{b}, {b}) // {b}"])
    return form.format(a=a, b=b, g=g, sa=sa, sb=sb)


def _tree(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return _signed(rng, 3)
    op = rng.choice(["+", "-", "*", "//", "%", "/", "+", "*"])
    left, right = _tree(rng, depth - 1), _tree(rng, depth - 1)
    return f"({left} {op} {right})"


def k_nesting(rng):
    return _tree(rng, rng.randint(2, 4))


def k_precedence(rng):
    expr = _signed(rng, 3)
    for _ in range(rng.randint(2, 5)):
        op = rng.choice(["+", "-", "*", "//", "%", "/", "**"])
        rhs = str(rng.randint(0, 4)) if op == "**" else _signed(rng, 3)
        expr += f" {op} {rhs}"
    return expr


def k_unary(rng):
    a, n = _int(rng, 4), rng.randint(0, 5)
    form = rng.choice(["-{a}", "- -{a}", "-(-{a})", "+{a}", "-{a}**{n}", "(-{a})**{n}",
                       "-{a}**-{n}", "{a} - -{a}", "-+-{a}", "2**-{n}", "-(({a}))"])
    return form.format(a=a, n=n)


def k_zero(rng):
    a = _int(rng, 6) or 1
    return rng.choice(["0", "0*{a}", "0**0", "0**{a}", "{a}-{a}", "0//{a}", "0%{a}",
                       "{a}%1", "(1/2)*0", "0/{a}", "-0", "(-{a})%{a}", "{a}//({a}+1)",
                       "(0/{a})**0"]).format(a=a)


def k_bignum(rng):
    a = _int(rng, 1) + 10 ** rng.randint(40, 300) * _int(rng, 6)
    b = _int(rng, 3) + 10 ** rng.randint(20, 150) * _int(rng, 6)
    form = rng.choice(["{a} * {b}", "{a} // {b}", "{a} % {b}", "{a} - {b}", "-{a} // {b}",
                       "({a} * {b}) // {b}", "{a} / {b}", "gcd({a}, {b})"])
    return form.format(a=a, b=b)


def k_negative_exponent(rng):
    a, n = _int(rng, 3) or 2, rng.randint(1, 30)
    return rng.choice(["{a}**-{n}", "{f}**-{n}", "(-{a})**-{n}", "{f}**{n}"]).format(
        a=a, n=n, f=_frac(rng, 3))


def k_errors(rng):
    a = _int(rng, 4)
    return rng.choice([
        "{a}/0", "{a}//0", "{a}%(3-3)", "0**-1", "2**(1/2)", "gcd(1/2, {a})", "(1/3)//0",
        "10**1024", "7**1300", "(10**600)*(10**600)", "2**10**10", "{a} +", "({a}", "{a})",
        "*{a}", "2 ** ** 3", "gcd({a})", "gcd {a}, 2", "{a} {a}", "007", "",
    ]).format(a=a)


KINDS: dict[str, Callable[[random.Random], str]] = {
    "power": k_power, "floordiv": k_floordiv, "mod": k_mod, "fraction": k_fraction,
    "fraction_floor_mod": k_fraction_floor_mod, "gcd": k_gcd, "nesting": k_nesting,
    "precedence": k_precedence, "unary": k_unary, "zero": k_zero, "bignum": k_bignum,
    "negative_exponent": k_negative_exponent, "errors": k_errors,
}


def _big_operand(rng: random.Random) -> str:
    """A big or finely fractional operand: integers up to 1,024 digits, fractions with
    denominators up to 10**1023, powers of ten."""
    sign = rng.choice(["", "-"])
    k = rng.random()
    if k < 0.3:
        return f"{sign}{rng.randint(1, 10 ** rng.choice([1, 5, 50, 200, 500, 900, 1000, 1020]))}"
    if k < 0.6:
        return (f"({sign}{rng.randint(1, 10 ** rng.choice([1, 3, 30]))}/"
                f"10**{rng.choice([10, 300, 700, 1000, 1023])})")
    if k < 0.8:
        return (f"({sign}{rng.randint(1, 10 ** rng.choice([5, 50, 500, 1000]))}/"
                f"{rng.randint(1, 10 ** rng.choice([2, 20, 200]))})")
    return f"{sign}10**{rng.choice([3, 30, 300, 1000, 1023])}"


def big_operands(seed: int, count: int) -> list[str]:
    """``count`` expressions ``a // b``, ``a % b`` and ``a ** n`` whose operands are big or
    finely fractional while the result is often small (a tiny fraction // 10**30): the
    cases where a cross product of the operands would not fit calc's 1,024 digits."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        op = rng.choice(["//", "%", "//", "%", "**"])
        a = _big_operand(rng)
        if op == "**":
            if rng.random() < 0.5:
                a = f"({rng.randint(-9, 9)}/{rng.randint(1, 9)})"
            b = str(rng.choice([0, 1, 2, 3, -1, -2, 10, 100, -50, 1000]))
        else:
            b = _big_operand(rng)
        expr = f"{a} {op} {b}"
        if len(expr) < INPUT_CAPACITY - 2:
            out.append(expr)
    return out


def generate(seed: int, count: int) -> list[tuple[str, str]]:
    """``count`` (kind, expression) pairs, cycling through the kinds, from a seeded RNG.
    Empty expressions are dropped (a blank line is not an expression), and so are any whose
    text is too long for the input buffer."""
    rng = random.Random(seed)
    kinds = list(KINDS.items())
    out: list[tuple[str, str]] = []
    i = 0
    while len(out) < count:
        name, make = kinds[i % len(kinds)]
        i += 1
        expr = make(rng)
        if expr.strip() and len(expr) < INPUT_CAPACITY - 2:
            out.append((name, expr))
    return out


def mutate(rng: random.Random, expr: str, edits: int = 2) -> str:
    """``expr`` with a few random single-character deletions, insertions and replacements
    (from calc's own alphabet), for robustness tests: the result is usually invalid."""
    alphabet = "0123456789+-*/%(), gcd"
    chars = list(expr)
    for _ in range(edits):
        i = rng.randrange(len(chars) + 1)
        action = rng.choice(["delete", "insert", "replace"])
        if action == "insert" or not chars or i == len(chars):
            chars.insert(i, rng.choice(alphabet))
        elif action == "delete":
            del chars[i]
        else:
            chars[i] = rng.choice(alphabet)
    return "".join(chars).replace("\n", " ")


def batches(exprs: list[str], capacity: int = INPUT_CAPACITY - 1) -> list[list[str]]:
    """Split expressions into groups whose newline-joined text fits ``capacity`` bytes."""
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for e in exprs:
        extra = len(e) + (1 if current else 0)
        if current and size + extra > capacity:
            groups.append(current)
            current, size = [], 0
            extra = len(e)
        current.append(e)
        size += extra
    if current:
        groups.append(current)
    return groups
