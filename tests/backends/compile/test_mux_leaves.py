"""A mux leaf's early literals as one lane (backends/compile/lower/logic.py, ``leaf_gate``):
the selects of a mux tree that are known before its values (an instruction's class and op
bits, here a token's field) are ANDed once per leaf into a lane shared by every bit of the
word, so each leaf neuron reads that one lane instead of every select on its path. The
circuit computes the same thing (the fast engine equals the simulator, every lane checked),
is no deeper, and where the values are 0 and only the selects move, its MLP gates do a
fraction of the work."""
from __future__ import annotations

from unittest import mock

import pytest

from backends.compile.lower.logic import Logic

SRC = """
circuit L {
    token T(a: u8, b: u8, s: u3);
    start T(a: 0, b: 0, s: 0);
    ram m: u16[1];
    m[0] <= {tok.T.a, tok.T.b};
    let v = m[0];
    let x: u8 = v[15:8] + v[7:0];      // values a stage or two after the selects
    let y: u8 = v[15:8] - v[7:0];
    let s = tok.T.s;
    let r: u8 = s[2] ? (s[1] ? (s[0] ? x + y : x - y) : (s[0] ? x ^ y : x & y))
                     : (s[1] ? (s[0] ? x | y : y - x) : (s[0] ? y : x));
    next = T(a: r, b: x ^ {y[6:0], y[7]}, s: s + 1);
}
"""


def _build(tmp, gate: bool):
    from backends.compile.pipeline import compile_to_dir
    from hdl.frontend import load_source
    c = load_source(SRC, "leaves.hdl")
    d = tmp / ("gated" if gate else "plain")
    if gate:
        compile_to_dir(c, d, "compact", "bf16")
    else:
        with mock.patch.object(Logic, "leaf_gate", lambda self, lits, v: lits):
            compile_to_dir(c, d, "compact", "bf16")
    return d


@pytest.fixture(scope="module")
def chips(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("leaves")
    return {gate: _build(tmp, gate) for gate in (True, False)}


def _gate_work(d, steps: int) -> tuple[int, list[int], int]:
    """Gate multiply-adds over ``steps`` free-running tokens on the numpy kernel, the ids,
    and the layer count."""
    from backends.engines.fast.engine import FastEngine
    from backends.engines.fast.pykernel import CountingKernel
    eng = FastEngine(d, "bf16", threads=1)
    eng.native = k = CountingKernel(eng.model)
    cache = eng.new_cache(1)
    ids = eng.run(cache, 0, eng.token_id(eng.circuit.start), steps)
    work = k.gate_work()
    return work, list(ids), len(eng.model.layers)


def test_leaf_gates_compute_the_same_and_delay_nothing(chips):
    from backends.verify.check import check_engine
    from backends.engines.fast.engine import FastEngine
    from hdl.ir import Token
    # from the start (values 0, the selects counting) and from values that are not 0
    rep = check_engine(FastEngine(chips[True]), steps=200, batch=2,
                       starts=[Token(0, (0, 0, 0)), Token(0, (3, 250, 5))])
    assert rep.ok, "\n".join(rep.problems())
    assert rep.positions >= 400 and rep.lane_checks > 0
    gated, plain = _gate_work(chips[True], 200), _gate_work(chips[False], 200)
    assert gated[1] == plain[1]                       # the same stream, token for token
    assert gated[2] <= plain[2]                       # no deeper
    assert gated[0] < 0.6 * plain[0], (gated[0], plain[0])     # 34,750 against 80,000
