"""stdlib/arith.hdl against Python models: exhaustive at 8 bits (and small odd widths),
edge values plus random vectors at 32 and 64 bits, and hypothesis at 32 bits."""
from __future__ import annotations

import functools

import pytest
from hypothesis import example, given, settings, strategies as st

import stdlib_models as M
from tests.stdlib.harness import check, edges, evaluate, grid, mixed

U32 = st.integers(0, 2**32 - 1)


@pytest.mark.parametrize("name", ["adder_ripple", "adder_prefix"])
@pytest.mark.parametrize("w", [1, 3, 8])
def test_adders_exhaustive(name, w):
    vals = range(1 << w)
    n = check("arith.hdl", name, {"W": w}, grid(a=vals, b=vals, cin=[0, 1]),
              functools.partial(M.adder, w))
    assert n == 2 * 4**w


@pytest.mark.parametrize("name", ["adder_ripple", "adder_prefix"])
@pytest.mark.parametrize("w", [13, 32, 64])
def test_adders_wide(name, w):
    cols = mixed(w, 3000, "a", "b", seed=w)
    cols["cin"] = [i % 2 for i in range(len(cols["a"]))]
    check("arith.hdl", name, {"W": w}, cols, functools.partial(M.adder, w))


@pytest.mark.parametrize("w", [1, 5, 8])
def test_subtractor_exhaustive(w):
    vals = range(1 << w)
    check("arith.hdl", "subtractor", {"W": w}, grid(a=vals, b=vals, bin=[0, 1]),
          functools.partial(M.subtractor, w))


def test_subtractor_32():
    cols = mixed(32, 3000, "a", "b", seed=7)
    cols["bin"] = [(i // 3) % 2 for i in range(len(cols["a"]))]
    check("arith.hdl", "subtractor", {"W": 32}, cols, functools.partial(M.subtractor, 32))


@pytest.mark.parametrize("w", [1, 2, 7, 8])
def test_incrementer_negate_exhaustive(w):
    vals = list(range(1 << w))
    check("arith.hdl", "incrementer", {"W": w}, {"a": vals}, functools.partial(M.incrementer, w))
    check("arith.hdl", "negate", {"W": w}, {"a": vals}, functools.partial(M.negate, w))


@pytest.mark.parametrize("w", [32, 64])
def test_incrementer_negate_wide(w):
    cols = mixed(w, 2000, "a", seed=w)
    check("arith.hdl", "incrementer", {"W": w}, cols, functools.partial(M.incrementer, w))
    check("arith.hdl", "negate", {"W": w}, cols, functools.partial(M.negate, w))


@pytest.mark.parametrize("name", ["cmp_eq", "cmp_u", "cmp_s"])
@pytest.mark.parametrize("w", [1, 3, 8])
def test_comparators_exhaustive(name, w):
    vals = range(1 << w)
    check("arith.hdl", name, {"W": w}, grid(a=vals, b=vals),
          functools.partial(getattr(M, name), w))


@pytest.mark.parametrize("name", ["cmp_eq", "cmp_u", "cmp_s"])
def test_comparators_32(name):
    cols = mixed(32, 3000, "a", "b", seed=3)
    # near-equal pairs: the interesting boundary for every comparison
    cols["a"] += cols["a"][:500]
    cols["b"] += [(x + d) % 2**32 for x, d in zip(cols["a"][:500], [-1, 0, 1] * 200)]
    check("arith.hdl", name, {"W": 32}, cols, functools.partial(getattr(M, name), 32))


@settings(max_examples=150, deadline=None)
@given(a=U32, b=U32, cin=st.integers(0, 1))
@example(a=2**32 - 1, b=1, cin=0).via("carry out of the top")
@example(a=2**31, b=2**31 - 1, cin=1).via("INT_MIN + INT_MAX + 1")
def test_prefix_adder_hypothesis(a, b, cin):
    assert evaluate("arith.hdl", "adder_prefix", {"W": 32}, {"a": a, "b": b, "cin": cin}) \
        == M.adder(32, a, b, cin)


@settings(max_examples=150, deadline=None)
@given(a=U32, b=U32)
@example(a=2**31, b=2**31 - 1).via("INT_MIN vs INT_MAX")
@example(a=2**32 - 1, b=0).via("-1 vs 0")
def test_signed_compare_hypothesis(a, b):
    assert evaluate("arith.hdl", "cmp_s", {"W": 32}, {"a": a, "b": b}) == M.cmp_s(32, a, b)


def test_edges_cover_sign_boundary():
    assert {0, 2**31 - 1, 2**31, 2**32 - 1} <= set(edges(32))
