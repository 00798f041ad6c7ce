"""A bounded last token field (``token Step(v: u3, i: u4 < 11)``): the kind owns
``11 * 2**3`` ids instead of ``2**7``; the simulator stops a circuit that emits a value at or
past the bound; the compiled chip has exactly that many rows per table, and hf and fast run
it as the simulator does; a chip whose winning payload is past the bound stops the fast
engine (both kernels, the same token and text) instead of running on with another kind's id.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backends.chipdir.chipfile import circuit_from_json, circuit_to_json
from backends.compile.pipeline import compile_to_dir
from hdl.frontend import load_source
from hdl.ir import Token
from hdl.sim import Simulator, SimError

from tests.backends.engines.test_fast_pykernel import _pair, lockstep  # noqa: E402

SRC = """
circuit C {
    token Step(v: u3, i: u4 < 11);
    token Done halt;
    start Step(v: 0, i: 0);
    if tok.Step.i == LAST {
        next = Done();
    } else {
        next = Step(v: tok.Step.v + 3, i: tok.Step.i + 1);
    }
}
"""


def circuit(last: int = 10):
    return load_source(SRC.replace("LAST", str(last)), "bounded.hdl")


def test_the_kind_owns_bound_times_the_other_fields_ids():
    c = circuit()
    step, done = c.kinds
    assert (step.payload_bits, step.ids, done.ids) == (7, 88, 1)
    assert c.vocab_size == 89 and c.kind_offsets() == [0, 88]
    assert c.token_id(Token(0, (5, 10))) == 5 + (10 << 3) == 85
    assert c.token_from_id(85) == Token(0, (5, 10)) and c.token_from_id(88) == Token(1, ())
    with pytest.raises(ValueError, match="outside the vocabulary 0..88"):
        c.token_from_id(89)
    back = circuit_from_json(json.loads(json.dumps(circuit_to_json(c))))
    assert back.kinds[0].fields[1].bound == 11 and back.vocab_size == 89


def test_the_simulator_stops_at_a_value_past_the_bound():
    sim = Simulator(circuit())
    toks = sim.run(circuit().start, 20)
    assert [t.fields[1] for t in toks[:-1]] == list(range(11)) and toks[-1].kind == 1
    with pytest.raises(SimError, match=r"^step 10: circuit 'C' emitted Step with i = 11, not "
                                       r"below the bound 11 its kind declares at "
                                       r"bounded.hdl:3:5$"):
        Simulator(circuit(12)).run(circuit(12).start, 20)
    with pytest.raises(SimError, match="field i = 11 is not below its bound 11"):
        Simulator(circuit()).step(Token(0, (0, 11)))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_compiled_tables_have_the_bounded_ids_and_run_as_the_simulator(tmp_path, dtype):
    from backends.engines.fast.engine import FastEngine
    from backends.engines.hf import HFEngine
    c = circuit()
    compile_to_dir(c, tmp_path / "chip", dtype=dtype)
    chip = json.loads((tmp_path / "chip" / "chip.json").read_text())
    assert [(k["ids"], k["payload_bits"]) for k in chip["tokens"]["kinds"]] == [(88, 7), (1, 0)]
    assert HFEngine(tmp_path / "chip", dtype=dtype).config.vocab_size == 89
    want = [c.token_id(t) for t in Simulator(c).run(c.start, 20)]
    for eng in (HFEngine(tmp_path / "chip", dtype=dtype), FastEngine(tmp_path / "chip")):
        got = [want[0]]
        cache = eng.new_cache(1)
        while len(got) < len(want):
            got.append(int(eng.decode_step([got[-1]], cache)[0]))
        assert got == want, type(eng).__name__


def test_a_payload_past_the_bound_stops_both_fast_kernels(tmp_path):
    """The circuit counts i to 12 under a bound of 11: the structured argmax's best payload
    of Step is then i = 11, an id the tables do not have (it would be Done's)."""
    c = circuit(12)
    compile_to_dir(c, tmp_path / "chip", dtype="bf16")
    eng, ck, py = _pair(tmp_path / "chip")
    n, err, _ = lockstep(eng.model, [ck, py], eng.token_id(c.start), 20, eng=eng)
    assert n == 10 and err is not None
    assert "at position 10, the lm_head: the winning payload is past its kind's bound" in err
    assert np.int64(eng.model.kinds[3][0]) == 88
