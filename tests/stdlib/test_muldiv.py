"""stdlib/muldiv.hdl against Python models of RISC-V RV32M: every operand pair at 8 bits
(the structural array and the `*` form), edge values (0, 1, -1, INT_MIN, INT_MAX, ...) and
random vectors at 32 bits, hypothesis at 32 bits, and the division special cases by name."""
from __future__ import annotations

import functools

import pytest
from hypothesis import example, given, settings, strategies as st

import stdlib_models as M
from tests.stdlib.harness import check, evaluate, grid, mixed

U32 = st.integers(0, 2**32 - 1)
INT_MIN = 2**31
NEG1 = 2**32 - 1


@pytest.mark.parametrize("name,model", [("mul", M.mul), ("mul_op", M.mul), ("divu", M.divu),
                                        ("divs", M.divs)])
def test_exhaustive_8bit(name, model):
    n = check("muldiv.hdl", name, {"W": 8}, grid(a=range(256), b=range(256)),
              functools.partial(model, 8))
    assert n == 65536


@pytest.mark.parametrize("name,model", [("mul", M.mul), ("divu", M.divu), ("divs", M.divs)])
@pytest.mark.parametrize("w", [1, 3])
def test_exhaustive_tiny(name, model, w):
    vals = range(1 << w)
    check("muldiv.hdl", name, {"W": w}, grid(a=vals, b=vals), functools.partial(model, w))


@pytest.mark.parametrize("name,model", [("mul", M.mul), ("mul_op", M.mul), ("divu", M.divu),
                                        ("divs", M.divs)])
def test_32bit_edges_and_random(name, model):
    check("muldiv.hdl", name, {"W": 32}, mixed(32, 4000, "a", "b", seed=11),
          functools.partial(model, 32))


@pytest.mark.parametrize("a,b,q,r", [
    (7, 0, NEG1, 7),                   # x / 0 = -1, x % 0 = x
    (INT_MIN, 0, NEG1, INT_MIN),
    (NEG1 - 6, 0, NEG1, NEG1 - 6),     # -7 / 0
    (INT_MIN, NEG1, INT_MIN, 0),       # overflow: INT_MIN / -1 = INT_MIN, remainder 0
    (NEG1 - 6, 2, NEG1 - 2, NEG1),     # -7 / 2 = -3 rem -1 (toward zero)
    (7, NEG1 - 1, NEG1 - 2, 1),        # 7 / -2 = -3 rem 1
])
def test_divs_riscv_cases(a, b, q, r):
    assert evaluate("muldiv.hdl", "divs", {"W": 32}, {"a": a, "b": b}) == {"q": q, "r": r}


@pytest.mark.parametrize("a,b,q,r", [(7, 0, NEG1, 7), (0, 0, NEG1, 0), (NEG1, 1, NEG1, 0),
                                     (NEG1, NEG1, 1, 0), (INT_MIN, NEG1, 0, INT_MIN)])
def test_divu_riscv_cases(a, b, q, r):
    assert evaluate("muldiv.hdl", "divu", {"W": 32}, {"a": a, "b": b}) == {"q": q, "r": r}


@settings(max_examples=100, deadline=None)
@given(a=U32, b=U32)
@example(a=INT_MIN, b=INT_MIN).via("INT_MIN squared")
@example(a=NEG1, b=NEG1).via("-1 * -1")
def test_mul_hypothesis(a, b):
    assert evaluate("muldiv.hdl", "mul", {"W": 32}, {"a": a, "b": b}) == M.mul(32, a, b)


@settings(max_examples=100, deadline=None)
@given(a=U32, b=st.one_of(U32, st.integers(0, 300)))
def test_div_hypothesis(a, b):
    assert evaluate("muldiv.hdl", "divu", {"W": 32}, {"a": a, "b": b}) == M.divu(32, a, b)
    assert evaluate("muldiv.hdl", "divs", {"W": 32}, {"a": a, "b": b}) == M.divs(32, a, b)


@pytest.mark.slow
@pytest.mark.parametrize("name,model", [("mul", M.mul), ("divu", M.divu), ("divs", M.divs)])
def test_32bit_heavy(name, model):
    check("muldiv.hdl", name, {"W": 32}, mixed(32, 200_000, "a", "b", seed=99),
          functools.partial(model, 32))


@pytest.mark.slow
@pytest.mark.parametrize("name,model", [("mul", M.mul), ("divu", M.divu), ("divs", M.divs)])
def test_exhaustive_10bit(name, model):
    check("muldiv.hdl", name, {"W": 10}, grid(a=range(1024), b=range(1024)),
          functools.partial(model, 10))
