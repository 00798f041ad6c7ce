"""Structural properties of the standard library that the value tests cannot see: the
faster-depth variants really are shallower. Depth = the most operations on any path from an
input to an output (constants, ports, slices and concatenations count 0: they are wiring)."""
from __future__ import annotations

import pytest

from tests.stdlib.harness import load
from hdl.ir import Circuit, Op

WIRING = frozenset({Op.CONST, Op.INPUT, Op.SLICE, Op.CONCAT, Op.OUTPUT})


def depth(c: Circuit) -> int:
    d: dict[int, int] = {}
    for n in c.nodes:
        d[n.id] = max((d[a] for a in n.args), default=0) + (n.op not in WIRING)
    return max(d.values())


@pytest.mark.parametrize("w", [16, 32, 64])
def test_prefix_adder_is_logarithmic(w):
    prefix = depth(load("arith.hdl", "adder_prefix", W=w))
    ripple = depth(load("arith.hdl", "adder_ripple", W=w))
    assert prefix <= 2 * (w - 1).bit_length() + 6      # a few ops per prefix level
    assert ripple >= 2 * w                             # the carry chain
    assert 2 * prefix < ripple


@pytest.mark.parametrize("name", ["shl", "shr", "sra"])
def test_shifter_has_one_stage_per_amount_bit(name):
    assert depth(load("shift.hdl", name, W=32)) <= 2 * 5


@pytest.mark.parametrize("w", [8, 16, 32])
def test_multiplier_adder_tree_is_balanced(w):
    # gate + clog2(W) adders + the signed corrections; a chain of adds would be ~W deep
    assert depth(load("muldiv.hdl", "mul", W=w)) <= (w - 1).bit_length() + 5


def test_divider_has_one_row_per_quotient_bit():
    # each row: subtract, then select (2 levels); 32 rows
    assert depth(load("muldiv.hdl", "divu", W=32)) <= 2 * 32 + 2


def test_popcount_and_encoders_are_trees():
    assert depth(load("bits.hdl", "popcount", W=64)) <= 8
    assert depth(load("bits.hdl", "priority_encoder", N=64)) <= 8
