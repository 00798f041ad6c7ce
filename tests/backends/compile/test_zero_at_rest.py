"""Lanes that are 0 at rest (docs/backend.md, "Lanes that are 0 at rest"): where a
subtracter's, a compare's or a signed multiplier's operands are 0, every lane the lowering
made for it holds 0, so the sparse engine adds nothing for an idle datapath; and the
centered decomposition that does it is the function it stands for."""
from __future__ import annotations

import random

import pytest

from backends.compile.lower.bits import thresholds
from backends.compile.lower.neurons import centered
from backends.compile.program import Form


def test_centered_is_the_function_and_all_off_at_its_center():
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randint(1, 12)
        vs = [rng.randint(-4, 4) for _ in range(n)]
        k0 = rng.randrange(n)
        cuts = centered(vs, k0)
        for j in range(n):
            terms = [a * max(0, s * (j - k)) for (s, k), a in cuts.items()]
            assert vs[k0] + sum(terms) == vs[j], (vs, k0, cuts)
            if j == k0:
                assert not any(terms)
        # centered at the least value, it is the plain decomposition
        _, plain = thresholds(Form(0, {0: 1}, 0, n - 1), lambda v: vs[v])
        assert centered(vs, 0) == {(1, k): a for k, a in plain.items()}


SRC = """
circuit Z {
    token T(a: u8, b: u8);
    start T(a: 0, b: 0);
    ram m: u16[1];
    m[0] <= {tok.T.a, tok.T.b};
    let v = m[0];
    let x: u32 = {v[15:8], v[15:8], v[15:8], v[15:8]};
    let y: u32 = {v[7:0], v[7:0], v[7:0], v[7:0]};
    let d: u32 = x - y;
    let e = x == y;
    let p: u64 = sext(x, 64) * sext(y, 64);
    next = T(a: d[7:0] ^ p[47:40], b: {p[7:1], e});
}
"""


def _compile(tmp, plain: bool):
    """chip.json of SRC compiled as shipped, or (``plain``) with every lane built from its
    least value as before the centered lanes (for comparison)."""
    import json
    from unittest import mock

    from backends.compile.lower.neurons import Neurons
    from backends.compile.pipeline import compile_to_dir
    from hdl.frontend import load_source
    c = load_source(SRC, "zero.hdl")
    fns = Neurons.fns
    with mock.patch.object(Neurons, "fns", lambda self, T, funcs, center=False:
                           fns(self, T, funcs, center and not plain)):
        compile_to_dir(c, tmp / "z", "compact", "bf16")
    return c, json.loads((tmp / "z" / "chip.json").read_text())


@pytest.fixture(scope="module")
def chips(tmp_path_factory):
    return {plain: _compile(tmp_path_factory.mktemp(f"zero{plain}"), plain)
            for plain in (False, True)}


def _lanes_at(c, chip, pairs):
    """The designed value of every lane at the step that reads each (a, b) of ``pairs``
    from the stash, and the lane map."""
    from backends.compile.lanemap import LaneMap
    from hdl.ir import Token
    from hdl.sim import Simulator
    lm = LaneMap(chip["lanemap"], c)
    sim = Simulator(c)
    toks, vals = [], []
    for a, b in pairs + [(0, 0)]:
        tok = Token(0, (a, b))
        toks.append(tok)
        vals.append(sim.step(tok, trace=True).values)
    V = lm.designed(toks, vals)
    return lm, V[1:]          # at step i + 1 the stash holds pairs[i]


def _resting(c, chip, name):
    """Lanes made for signal ``name``: how many, and how many are nonzero where the
    operands are 0, then 5 and 0 (nothing to borrow); and whether any moves at 200 and 3."""
    lm, V = _lanes_at(c, chip, [(0, 0), (5, 0), (200, 3)])
    nid = next(i for i, n in enumerate(c.nodes) if n.name == name)
    mine = [ln for ln in range(lm.n) if lm.node[ln] == nid]
    return (len(mine), int((V[0, mine] != 0).sum()), int((V[1, mine] != 0).sum()),
            bool(V[2, mine].any()))


def test_an_idle_multiplier_holds_no_lane(chips):
    """mulh's sign rows are e * (~v + 1), 0 where e is: every lane 0 at 0 * 0."""
    n, at_rest, _, busy = _resting(*chips[False], "p")
    assert n and busy and at_rest == 0


@pytest.mark.parametrize("name", ["d", "e"])
def test_an_idle_subtracter_and_compare_hold_fewer_lanes(chips, name):
    """a - b's borrows and a == b's byte tests are 0 where both sides are (and a - 0's
    borrows where b alone is); what stays is a result bit built from its least value (d)
    and the compare's own answer, 1 (e)."""
    n, at_rest, b_zero, busy = _resting(*chips[False], name)
    _, plain_rest, plain_b_zero, _ = _resting(*chips[True], name)
    assert n and busy
    assert at_rest <= 1 and at_rest < plain_rest
    if name == "d":
        assert b_zero < plain_b_zero


GATED = """
circuit G {
    token T(a: u8, b: u8, en: u1);
    start T(a: 0, b: 0, en: 0);
    ram m: u17[1];
    m[0] <= {tok.T.en, tok.T.a, tok.T.b};
    let v = m[0];
    let en = v[16];
    let x: u32 = {v[15:8], v[15:8], v[15:8], v[15:8]};
    let y: u32 = {v[7:0], v[7:0], v[7:0], v[7:0]};
    let sa = v[0];
    let g: u32 = GATE;
    let p: u64 = (sa ? sext(g, 64) : zext(g, 64)) * sext(y, 64);
    let s: u32 = en ? x + y : 32'd0;
    next = T(a: p[47:40] ^ s[15:8], b: p[7:0], en: p[63] ^ s[31]);
}
"""


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """GATED compiled with the multiplier's a gated by en, and with it plain."""
    import json

    from backends.compile.pipeline import compile_to_dir
    from hdl.frontend import load_source
    out = {}
    for name, gate in (("gated", "en ? x : 32'd0"), ("plain", "x")):
        c = load_source(GATED.replace("GATE", gate), "gated.hdl")
        d = tmp_path_factory.mktemp(name)
        compile_to_dir(c, d / "g", "compact", "bf16")
        out[name] = c, json.loads((d / "g" / "chip.json").read_text())
    return out


def test_a_gated_datapath_holds_no_lane_when_off_and_costs_no_depth(gated):
    """A multiplier whose a is `en ? x : 0`, sign- or zero-extended by a select as the
    core's is (its sign rows read NOT of that select: an OR of the complements, fused into
    the rows' ANDs; materialised, it took a layer more here, 8 against 7) and a sum
    `en ? x + y : 0` (the gate joins the sum's last stage): with en = 0 and both operands
    nonzero every product lane and every sum bit is 0, and the circuit is as deep as with
    the multiplier ungated."""
    from backends.compile.lanemap import LaneMap
    from hdl.ir import Token
    from hdl.sim import Simulator
    c, chip = gated["gated"]
    assert chip["shapes"]["layers"] == gated["plain"][1]["shapes"]["layers"]
    lm = LaneMap(chip["lanemap"], c)
    sim = Simulator(c)
    toks = [Token(0, (200, 3, 0)), Token(0, (200, 3, 1)), Token(0, (0, 0, 0))]
    vals = [sim.step(t, trace=True).values for t in toks]
    V = lm.designed(toks, vals)[1:]     # at step i + 1 the stash holds toks[i]
    for name in ("p", "s"):
        nid = next(i for i, n in enumerate(c.nodes) if n.name == name)
        mine = [ln for ln in range(lm.n) if lm.node[ln] == nid]
        assert mine and not V[0, mine].any() and V[1, mine].any(), name
