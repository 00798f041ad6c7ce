"""Differential fuzzing: random small circuits (tests/hdl/ir_fuzz.py), compiled and run in
transformers, against the reference simulator, token by token and memory by memory.

Default run: a handful of examples; ``-m slow`` runs many more."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from transformers.utils import logging as hf_logging

from tests.hdl import ir_fuzz  # noqa: E402

from backends.verify.check import check_dir  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from backends.compile.schedule import DepthRuleError  # noqa: E402

hf_logging.disable_progress_bar()


def small_circuit(seed: int, transparent: float = 0.0):
    """A random circuit with a vocabulary <= 4096 that obeys the depth rule, or None; RAMs
    transparent with probability ``transparent``."""
    rng = random.Random(seed)
    c = ir_fuzz.random_circuit(rng, n_nodes=rng.randint(10, 30), max_width=rng.choice((4, 8, 12)),
                               n_kinds=rng.randint(1, 3), n_memories=rng.randint(0, 2),
                               transparent=transparent)
    if c.vocab_size > 4096:
        return None, None, None
    from backends.compile.schedule import check_depth_rule
    try:
        check_depth_rule(c)
    except DepthRuleError:
        return None, None, None
    images = ir_fuzz.random_images(rng, c)
    return c, images, ir_fuzz.random_token(rng, c)


def run_case(seed: int, dtype: str, tmp: Path, transparent: float = 0.0) -> None:
    c, images, start = small_circuit(seed, transparent)
    if c is None:
        return
    compile_to_dir(c, tmp / f"s{seed}", dtype=dtype, roms=images)
    rep = check_dir(tmp / f"s{seed}", steps=6, starts=[start])
    assert rep.ok, (seed, [str(m) for m in rep.mismatches])


def fuzz(examples: int, slow: bool = False):
    """A differential fuzz test over (seed, dtype): ``examples`` cases; the default-run ones
    derandomized (the same seeds every run), the slow ones drawn afresh."""
    def wrap(test):
        test = given(seed=st.integers(0, 10 ** (9 if slow else 6)),
                     dtype=st.sampled_from(["bf16", "fp32"]))(test)
        test = settings(max_examples=examples, deadline=None, derandomize=not slow,
                        suppress_health_check=[HealthCheck.function_scoped_fixture])(test)
        return pytest.mark.slow(test) if slow else test
    return wrap


@fuzz(6)
def test_random_circuits_match_simulator(tmp_path, seed, dtype):
    run_case(seed, dtype, tmp_path)


@fuzz(150, slow=True)
def test_random_circuits_match_simulator_many(tmp_path, seed, dtype):
    run_case(seed, dtype, tmp_path)


@fuzz(6)
def test_random_transparent_circuits_match_simulator(tmp_path, seed, dtype):
    run_case(seed, dtype, tmp_path, transparent=0.8)


@fuzz(60, slow=True)
def test_random_transparent_circuits_match_simulator_many(tmp_path, seed, dtype):
    run_case(seed, dtype, tmp_path, transparent=0.8)


def module_circuit(seed: int, max_width: int = 64):
    """A random combinational module (up to 64-bit ops) wrapped in a one-kind circuit: the
    8-bit token field, replicated and XORed with random constants, drives every input; every
    output is folded (XOR of 8-bit chunks) into the next token's field."""
    from hdl.ir import Circuit, Field, Loc, Op, Token, TokenKind
    rng = random.Random(seed)
    m = ir_fuzz.random_module(rng, n_nodes=rng.randint(8, 24), max_width=max_width)
    c = Circuit("Wrapped", Loc("<fuzz>", 0, 0))
    X = 8
    c.kinds = [TokenKind("T", (Field("x", X),), Loc("<fuzz>", 0, 0))]
    x = c.add(Op.TOKEN_FIELD, X, param=(0, 0))
    remap: dict[int, int] = {}
    outs = []

    def fold(v: int) -> int:
        w = c.nodes[v].width
        acc = None
        for lo in range(0, w, X):
            ch = c.add(Op.SLICE, min(X, w - lo), (v,), param=lo)
            if c.nodes[ch].width < X:
                ch = c.add(Op.CONCAT, X, (c.add(Op.CONST, X - c.nodes[ch].width, param=0), ch))
            acc = ch if acc is None else c.add(Op.XOR, X, (acc, ch))
        return acc
    for n in m.nodes:
        if n.op is Op.INPUT:
            w = n.width
            rep = c.add(Op.CONCAT, X * (-(-w // X)), tuple([x] * (-(-w // X)))) if w > X else x
            s = c.add(Op.SLICE, w, (rep,), param=0)
            remap[n.id] = c.add(Op.XOR, w, (s, c.add(Op.CONST, w, param=ir_fuzz.edge_value(rng, w))))
        elif n.op is Op.OUTPUT:
            outs.append(fold(remap[n.args[0]]))
        else:
            remap[n.id] = c.add(n.op, n.width, tuple(remap[a] for a in n.args), n.param, n.loc, n.name)
    acc = outs[0]
    for o in outs[1:]:
        acc = c.add(Op.XOR, X, (acc, o))
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, param=0), acc))
    c.start = Token(0, (rng.getrandbits(X),))
    c.check()
    return c


def run_module_case(seed: int, dtype: str, tmp: Path) -> None:
    c = module_circuit(seed)
    compile_to_dir(c, tmp / f"m{seed}", dtype=dtype)
    rep = check_dir(tmp / f"m{seed}", steps=5)
    assert rep.ok, (seed, [str(m) for m in rep.mismatches])


@fuzz(3)
def test_random_wide_logic_matches_simulator(tmp_path, seed, dtype):
    run_module_case(seed, dtype, tmp_path)


@fuzz(60, slow=True)
def test_random_wide_logic_matches_simulator_many(tmp_path, seed, dtype):
    run_module_case(seed, dtype, tmp_path)
