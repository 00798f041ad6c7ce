"""Token tables (backends.compile.tabulate): which token-only logic the embedding holds, its values on
every token id against the simulator, and what it saves (a memory written from it moves up a
layer) on a compiled, checked chip."""
from __future__ import annotations

import numpy as np
import pytest

from hdl.frontend import load_source
from hdl.ir import Op, Token
from hdl.sim import Simulator
from backends.compile import tabulate
from backends.verify.check import check_dir
from backends.compile.pipeline import compile_to_dir
from backends.compile.schedule import schedule
from backends.chipdir.target import COMPACT

#: a state RAM written at an address and with data computed from the token alone, and a
#: next token that also does arithmetic on the token alone
SOURCE = """\
circuit T {
    token W(a: u4, d: u6);
    token R(a: u4, d: u6);
    start W(a: 3, d: 9);
    ram m: u8[16];
    ram last: u8[1];
    let a: u4 = tok.W.a | tok.R.a;
    let sum: u8 = zext(tok.W.d, 8) * 3 + zext(a, 8);
    if tok.kind == W { m[a + 1] <= sum; }
    last[0] <= (tok.kind == R) ? zext(tok.R.d, 8) : sum;
    let old = m[a];
    match tok {
        W => { next = R(a: a + 7, d: old[5:0] ^ last[0][5:0]); }
        R => { next = W(a: a ^ 5, d: tok.R.d + old[5:0]); }
    }
}
"""


def circuit():
    return load_source(SOURCE, "t.hdl")


def test_plan_tabulates_what_memory_logic_reads_and_not_the_next_tokens_own_logic():
    c = circuit()
    plan = tabulate.plan(c)
    ops = sorted(c.nodes[i].op.value for i in plan.tabulated)
    # m's write address a + 1, the data `sum`, the kind compares of the write enable and
    # of last's select
    assert "add" in ops and "eq" in ops
    for i in plan.tabulated:
        assert i in plan.live and i in tabulate.token_only(c)
        assert c.nodes[i].op not in (Op.SLICE, Op.CONCAT, Op.CONST, Op.TOKEN_FIELD)
    # `a ^ 5` and `a + 7` feed only the next token: lowered, not tabulated
    out = next(n for n in c.nodes if n.op is Op.TOKEN_OUT)
    for a in out.args:
        assert a not in plan.tabulated
    # the cone of a tabulated node is not lowered unless something lowered reads it
    mul = next(n for n in c.nodes if n.op is Op.MUL)
    assert mul.id not in plan.live
    assert not tabulate.plan(c, tabulate=False).tabulated


def test_a_circuit_without_memories_stays_in_the_layers():
    c = load_source("circuit G { token S(a: u8, b: u8); start S(a: 1, b: 2);\n"
                    "  match tok { S => { next = S(a: tok.S.a + tok.S.b, b: tok.S.a); } } }",
                    "g.hdl")
    assert not tabulate.plan(c).tabulated


def test_table_values_match_the_simulator_on_every_token_id():
    c = circuit()
    plan = tabulate.plan(c)
    table = tabulate.TokenTable(c, plan.tabulated)
    for kind in range(len(c.kinds)):
        payload = np.arange(1 << 10, dtype=np.uint64)
        got = table.values(kind, payload)
        for p in range(0, 1 << 10, 37):
            fields = (p & 15, p >> 4)
            values = Simulator(c).step(Token(kind, fields), trace=True).values
            assert [int(v[p]) for v in got] == [values[i] for i in plan.tabulated], (kind, p)


def test_tables_move_the_memories_written_from_the_token_to_layer_0():
    c = circuit()
    with_tables = schedule(c, COMPACT)
    without = schedule(circuit(), COMPACT, tables=False)
    assert {m.name: m.layer for m in with_tables.mems.values()} == {"m": 0, "last": 0}
    # lowered: a multiply and two adds first (3 and 4 layers of MLP stages)
    assert {m.name: m.layer for m in without.mems.values()} == {"m": 3, "last": 4}
    assert with_tables.n_layers < without.n_layers
    lanes = [ln for ln in with_tables.lanes if ln.label.startswith("tok.fn.")]
    assert lanes and all(ln.slot == -1 and ln.node in tabulate.plan(c).tabulated for ln in lanes)


@pytest.mark.parametrize("target", ["compact", "qwen3.5-4b"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_compiled_tables_match_the_simulator_lane_by_lane(tmp_path, target, dtype):
    """The embedding's table lanes hold the simulator's values at every position (the lane
    check compares them with the traced node values), decode and prefill."""
    compile_to_dir(circuit(), tmp_path / "t", target=target, dtype=dtype)
    for prefill in (False, True):
        rep = check_dir(tmp_path / "t", steps=40, prefill=prefill)
        assert rep.ok, [str(m) for m in rep.mismatches + rep.lanes]
        assert rep.lane_checks > 0
