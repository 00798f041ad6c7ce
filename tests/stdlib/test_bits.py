"""stdlib/bits.hdl against Python models: multiplexers, decoder, encoders, popcount and
extension, exhaustively where the input space is small and on random plus edge values
where it is not."""
from __future__ import annotations

import functools

import pytest

import stdlib_models as M
from tests.stdlib.harness import check, grid, mixed, randoms


def test_mux2_mux4_exhaustive():
    v = range(8)
    check("bits.hdl", "mux2", {"W": 3}, grid(sel=[0, 1], a=v, b=v), functools.partial(M.mux2, 3))
    v = range(4)
    check("bits.hdl", "mux4", {"W": 2}, grid(sel=range(4), a=v, b=v, c=v, d=v),
          functools.partial(M.mux4, 2))


@pytest.mark.parametrize("w,n", [(8, 4), (8, 8), (4, 3), (1, 2), (5, 12)])
def test_mux_tree(w, n):
    data = randoms(w * n, 300, seed=w * 100 + n)
    cols = grid(data=data, sel=range(1 << M.clog2(n)))
    check("bits.hdl", "mux_tree", {"W": w, "N": n}, cols, functools.partial(M.mux_tree, w, n))


@pytest.mark.parametrize("n", [2, 5, 8, 32])
def test_decoder_exhaustive(n):
    check("bits.hdl", "decoder", {"N": n}, {"x": list(range(1 << M.clog2(n)))},
          functools.partial(M.decoder, n))


@pytest.mark.parametrize("n", [2, 5, 8])
def test_onehot_encoder_all_inputs(n):
    check("bits.hdl", "onehot_encoder", {"N": n}, {"x": list(range(1 << n))},
          functools.partial(M.onehot_encoder, n))


@pytest.mark.parametrize("n", [13, 64])
def test_onehot_encoder_onehots(n):
    check("bits.hdl", "onehot_encoder", {"N": n}, {"x": [1 << i for i in range(n)]},
          functools.partial(M.onehot_encoder, n))


@pytest.mark.parametrize("n", [2, 7, 8, 12])
def test_priority_encoder_exhaustive(n):
    check("bits.hdl", "priority_encoder", {"N": n}, {"x": list(range(1 << n))},
          functools.partial(M.priority_encoder, n))


@pytest.mark.parametrize("n", [32, 64])
def test_priority_encoder_wide(n):
    check("bits.hdl", "priority_encoder", {"N": n}, mixed(n, 3000, "x", seed=n),
          functools.partial(M.priority_encoder, n))


@pytest.mark.parametrize("w", [1, 3, 8, 12])
def test_popcount_exhaustive(w):
    check("bits.hdl", "popcount", {"W": w}, {"x": list(range(1 << w))},
          functools.partial(M.popcount, w))


@pytest.mark.parametrize("w", [32, 33, 64])
def test_popcount_wide(w):
    check("bits.hdl", "popcount", {"W": w}, mixed(w, 3000, "x", seed=w),
          functools.partial(M.popcount, w))


@pytest.mark.parametrize("w,n", [(1, 4), (8, 8), (8, 32), (12, 64)])
def test_extend(w, n):
    xs = list(range(1 << w)) if w <= 12 else mixed(w, 1000, "x", seed=1)["x"]
    check("bits.hdl", "sign_extend", {"W": w, "N": n}, {"x": xs},
          functools.partial(M.sign_extend, w, n))
    check("bits.hdl", "zero_extend", {"W": w, "N": n}, {"x": xs},
          functools.partial(M.zero_extend, w, n))
