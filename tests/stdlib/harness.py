"""Shared helpers for the standard-library tests: load a stdlib module once per parameter set,
evaluate it on many input vectors with the batched evaluator, and compare every output with
a Python model, reporting the first mismatching vector in full.
"""
from __future__ import annotations

import functools
import itertools
import random
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from hdl.ir import Circuit

STDLIB = Path(__file__).resolve().parents[2] / "stdlib"


@functools.cache
def _load(file: str, name: str, params: tuple[tuple[str, int], ...]) -> Circuit:
    from hdl.frontend import load_module
    return load_module(STDLIB / file, name, dict(params))


def load(file: str, name: str, **params: int) -> Circuit:
    """The elaborated module ``name`` of ``stdlib/<file>`` with ``params`` (cached)."""
    return _load(file, name, tuple(sorted(params.items())))


def evaluate(file: str, name: str, params: Mapping[str, int],
             inputs: Mapping[str, int]) -> dict[str, int]:
    """One input vector through the module: ``{port: int}`` -> ``{port: int}``."""
    from hdl.sim import evaluate_module
    return evaluate_module(load(file, name, **params), dict(inputs))


def check(file: str, name: str, params: Mapping[str, int],
          inputs: Mapping[str, Sequence[int]], model: Callable[..., dict[str, int]]) -> int:
    """Evaluate the module on every vector of ``inputs`` (equal-length columns, one per input
    port) and compare each output port with ``model(**one_vector)``; raise AssertionError
    naming the first vector that differs. Returns the number of vectors checked."""
    from hdl.sim import evaluate_module_batch
    circuit = load(file, name, **params)
    cols = {k: np.asarray([int(x) for x in v], dtype=np.uint64) for k, v in inputs.items()}
    got = evaluate_module_batch(circuit, cols)
    names = list(inputs)
    n = len(next(iter(inputs.values())))
    for i in range(n):
        vec = {k: int(inputs[k][i]) for k in names}
        want = model(**vec)
        have = {port: int(got[port][i]) for port in want}
        if have != want:
            raise AssertionError(f"{name} {dict(params)} on {vec}: got {have}, expected {want}")
    return n


def grid(**ranges: Sequence[int]) -> dict[str, list[int]]:
    """Every combination of the given values, as equal-length columns."""
    keys = list(ranges)
    combos = list(itertools.product(*(ranges[k] for k in keys)))
    return {k: [c[j] for c in combos] for j, k in enumerate(keys)}


def edges(w: int) -> list[int]:
    """Edge values of a w-bit operand: 0, 1, 2, the top, INT_MIN, INT_MAX and neighbours."""
    m = (1 << w) - 1
    top = 1 << (w - 1)
    vals = {0, 1, 2, 3, m, m - 1, top, top - 1, top + 1, 0x55555555 & m, 0xAAAAAAAA & m}
    return sorted(v & m for v in vals)


def randoms(w: int, n: int, seed: int) -> list[int]:
    """n pseudo-random w-bit values (fixed seed: a failure reproduces); every other one has a
    random bit length, so small and large magnitudes both occur."""
    rng = random.Random(seed)
    return [rng.getrandbits(w) if i % 2 else rng.getrandbits(rng.randint(1, w)) for i in range(n)]


def mixed(w: int, n: int, *names: str, seed: int = 0) -> dict[str, list[int]]:
    """Columns for ``names``: all pairs (or tuples) of edge values, then n random vectors."""
    cols = grid(**{k: edges(w) for k in names})
    for j, k in enumerate(names):
        cols[k] += randoms(w, n, seed + j)
    return cols
