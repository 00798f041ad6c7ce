"""One suite, every engine: the same checks on each engine name
(:data:`backends.engines.registry.ENGINES`) and each kind of chip directory
(:data:`backends.engines.registry.KINDS`: compiled, routed merge, stock merge), each engine opened the
one way there is (:func:`backends.engines.registry.open_engine`).

Each is checked against the simulator position by position (:func:`backends.verify.check.check_engine`:
the token every position predicts, every memory after every step, every live residual
lane after every sublayer), on small chips by
default: the counter (registers only) and the stack machine (a ROM, a RAM, a stack), batch 2
in decode (each equal to the simulator, so all equal to one another). And their errors: an
id outside the chip's vocabulary is refused by each with the same error.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.verify.check import check_engine
from backends.engines.base import TokenIdError
from backends.engines.registry import ENGINES, KINDS, UnknownEngine, directory_kind, open_engine
from common.errors import UserError

CHIPS = ("counter", "stack")
STEPS = 40


@pytest.fixture(scope="module")
def directories(qchips, merged, stock, bases) -> dict[tuple[str, str], Path]:
    """(kind, chip) -> a directory of that kind holding that chip (compiled for the tiny
    bases' shapes, so the same chip merges in both layouts)."""
    from backends.merge.routed import merge_routed
    out = {}
    for chip in CHIPS:
        out["compiled", chip] = qchips[chip]
        routed = qchips[chip].parent.parent / f"routed-{chip}"
        if not routed.exists():
            merge_routed(bases["tied"], routed, qchips[chip])
        out["routed", chip] = routed
        out["stock", chip] = stock("tied", chip)[0]
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(ENGINES))
@pytest.mark.parametrize("chip", CHIPS)
def test_every_engine_on_every_kind_equals_the_simulator(directories, chip, name, kind):
    d = directories[kind, chip]
    assert directory_kind(d) == kind
    eng = open_engine(name, d, threads=1)
    rep = check_engine(eng, steps=STEPS, batch=2)
    assert rep.ok, rep.problems()
    assert rep.lane_checks > 0
    assert rep.positions >= 2 * 10 and rep.memory_checks == rep.positions   # to its halt


@pytest.fixture(scope="module")
def stack_run(directories) -> tuple[list[int], list[int]]:
    """The stack machine's ids from its start token to its halt, as the simulator steps it
    (the rung below every engine), and its halt kinds."""
    from hdl.sim import Simulator
    c = open_engine("fast", directories["compiled", "stack"]).circuit    # with its ROM images
    sim, tok, ids = Simulator(c), c.start, []
    while not ids or not c.kinds[tok.kind].halt:
        tok = sim.step(tok).next
        ids.append(c.token_id(tok))
    return ids, [k for k, kind in enumerate(c.kinds) if kind.halt]


# transformers on the routed merge free-runs the stack machine token by token through the
# whole merged model: the slowest pair by far (the routed merge's decode is checked against
# the simulator, token by token, in the default run above)
@pytest.mark.parametrize("name,kind", [
    pytest.param(n, k, marks=pytest.mark.slow if (n, k) == ("hf", "routed") else ())
    for n in ENGINES for k in KINDS])
def test_run_free_runs_to_the_stop_set_alike(directories, stack_run, name, kind):
    """``run`` and ``stop_bitmap`` (the protocol's free-running stream): every engine on
    every kind emits the simulator's ids and ends at the first id of a stop kind (the stack
    machine's halt), or after ``n`` ids."""
    import numpy as np
    want, halts = stack_run
    assert halts and len(want) > 10
    eng = open_engine(name, directories[kind, "stack"], threads=1)
    first = eng.token_id(eng.circuit.start)
    got = eng.run(eng.new_cache(1), 0, first, 10 * len(want), eng.stop_bitmap(halts))
    assert isinstance(got, np.ndarray) and got.tolist() == want
    assert eng.run(eng.new_cache(1), 0, first, 5, eng.stop_bitmap(halts)).tolist() == want[:5]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(ENGINES))
def test_an_id_outside_the_vocabulary_is_refused_alike(directories, name, kind):
    """Too large, or negative (which a merged model would otherwise read as one of the
    base's text ids): the same error from every engine, in decode and in prefill."""
    import torch
    eng = open_engine(name, directories[kind, "counter"], threads=1)
    n = eng.circuit.vocab_size
    for bad in (n, 10 ** 7, -1):
        with pytest.raises(TokenIdError) as e:
            eng.decode_step([0, bad], eng.new_cache(2))
        assert str(e.value) == f"token id {bad} is outside the chip's vocabulary 0..{n - 1}"
        with pytest.raises(TokenIdError):
            eng.prefill(torch.tensor([[0, bad]]))


def test_an_unknown_engine_is_named():
    with pytest.raises(UnknownEngine) as e:
        open_engine("qemu", ".")
    assert str(e.value) == "unknown engine 'qemu' (engines: hf, fast)"
    assert isinstance(e.value, UserError)
