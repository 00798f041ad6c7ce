"""The standard library inside one circuit (walk.hdl): its token stream in the simulator
against the Python models, and (slow) the compiled weights against the simulator."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

import stdlib_models as M

WALK = Path(__file__).with_name("walk.hdl")


def model_walk(steps: int) -> list[tuple[int, int]]:
    """The operand pairs of the walk: X(a, b) -> X(na + 1, nb), from X(1, 2)."""
    a, b = 1, 2
    out = [(a, b)]
    for _ in range(steps):
        s = M.adder(8, a, b, a & 1)
        r = M.adder(8, a, ~b & 0xFF, b & 1)
        d = M.subtractor(8, a, b, b >> 7)
        cs, cu = M.cmp_s(8, a, b), M.cmp_u(8, a, b)
        sl, sr = M.shl(8, a, b & 7)["y"], M.sra(8, b, a & 7)["y"]
        lr = M.shr(8, a ^ b, (a >> 4) & 7)["y"]
        m, q, u = M.mul(8, a, b), M.divs(8, a, b), M.divu(8, b, a)
        pc = M.popcount(8, a ^ b)["count"]
        pe = M.priority_encoder(8, a & b)
        ng = M.negate(8, a)["y"]
        bits = [cs["lt"], cs["eq"], cu["gt"], s["cout"], d["bout"], r["cout"], pe["valid"],
                cu["le"]]
        flags = sum(bit << (7 - i) for i, bit in enumerate(bits))
        na = s["sum"] ^ m["hi_ss"] ^ m["hi_su"] ^ q["q"] ^ u["r"] ^ sl ^ flags
        nb = (d["diff"] ^ r["sum"] ^ m["lo"] ^ m["hi_uu"] ^ q["r"] ^ u["q"] ^ sr ^ lr ^ ng
              ^ (pe["y"] << 5 | pc))
        a, b = (na + 1) & 0xFF, nb
        out.append((a, b))
    return out


def test_walk_in_the_simulator_matches_the_models():
    from hdl.frontend import load_circuit
    from hdl.sim import Simulator
    c = load_circuit(WALK)
    toks = Simulator(c).run(c.start, 2000)
    want = model_walk(2000)
    assert [t.fields for t in toks] == want
    assert len(set(want)) >= 200, "the walk should visit many operand pairs"


@pytest.mark.slow
def test_walk_weights_match_the_simulator(tmp_path):
    from deltachip.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compile", str(WALK), "-o", str(tmp_path / "walk")]) == 0
        assert main(["check", str(tmp_path / "walk"), "--steps", "400", "--prefill"]) == 0
    assert "OK: 401 positions" in out.getvalue()   # the start token and 400 steps
