"""Differential fuzzing: random small circuits (tests/hdl/ir_fuzz.py), compiled and run in
transformers, against the reference simulator, token by token and memory by memory.

Default run: a handful of examples; ``-m slow`` runs many more."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).parent.parent / "hdl"))
import ir_fuzz  # noqa: E402

from backends.check import check_dir  # noqa: E402
from backends.compiler import compile_to_dir  # noqa: E402
from backends.emit import token_table  # noqa: E402
from backends.schedule import DepthRuleError  # noqa: E402

hf_logging.disable_progress_bar()


def small_circuit(seed: int):
    """A random circuit with a vocabulary <= 4096 that obeys the depth rule, or None."""
    rng = random.Random(seed)
    c = ir_fuzz.random_circuit(rng, n_nodes=rng.randint(10, 30), max_width=rng.choice((4, 8, 12)),
                               n_kinds=rng.randint(1, 3), n_memories=rng.randint(0, 2))
    if sum(1 << k["payload_bits"] for k in token_table(c)) > 4096:
        return None, None, None
    from backends.schedule import check_depth_rule
    try:
        check_depth_rule(c)
    except DepthRuleError:
        return None, None, None
    images = ir_fuzz.random_images(rng, c)
    return c, images, ir_fuzz.random_token(rng, c)


def run_case(seed: int, dtype: str, tmp: Path) -> None:
    c, images, start = small_circuit(seed)
    if c is None:
        return
    compile_to_dir(c, tmp / f"s{seed}", dtype=dtype, roms=images)
    rep = check_dir(tmp / f"s{seed}", steps=6, starts=[start])
    assert rep.ok, (seed, [str(m) for m in rep.mismatches])


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10 ** 6), dtype=st.sampled_from(["bf16", "fp32"]))
def test_random_circuits_match_simulator(tmp_path, seed, dtype):
    run_case(seed, dtype, tmp_path)


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10 ** 9), dtype=st.sampled_from(["bf16", "fp32"]))
def test_random_circuits_match_simulator_many(tmp_path, seed, dtype):
    run_case(seed, dtype, tmp_path)
