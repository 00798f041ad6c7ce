"""stdlib/shift.hdl against Python models: every (value, amount) pair at 8 bits, widths that
are not powers of two (amounts >= W shift everything out), and edge plus random values at 32
and 64 bits."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings, strategies as st

import stdlib_models as M
from tests.stdlib.harness import check, evaluate, grid, mixed

NAMES = ["shl", "shr", "sra"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("w", [2, 5, 8])
def test_shifts_exhaustive(name, w):
    amounts = range(1 << M.clog2(w))
    check("shift.hdl", name, {"W": w}, grid(a=range(1 << w), n=amounts),
          functools.partial(getattr(M, name), w))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("w", [32, 64])
def test_shifts_wide(name, w):
    cols = grid(a=mixed(w, 150, "a", seed=w)["a"], n=range(w))   # edges and some randoms, every amount
    extra = mixed(w, 2000, "a", seed=w + 1)["a"]
    cols["a"] += extra
    cols["n"] += [i % w for i in range(len(extra))]
    check("shift.hdl", name, {"W": w}, cols, functools.partial(getattr(M, name), w))


@settings(max_examples=100, deadline=None)
@given(a=st.integers(0, 2**32 - 1), n=st.integers(0, 31), name=st.sampled_from(NAMES))
def test_shifts_hypothesis(a, n, name):
    assert evaluate("shift.hdl", name, {"W": 32}, {"a": a, "n": n}) \
        == getattr(M, name)(32, a, n)
