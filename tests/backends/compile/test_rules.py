"""Compile-time rules: the depth rule, one write port, targets (golden error texts)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from transformers.utils import logging as hf_logging

from tests.backends import circuits  # noqa: E402

from hdl.ir import Op, Token  # noqa: E402
from backends.verify.check import check_dir  # noqa: E402
from backends.compile.pipeline import compile_circuit, compile_to_dir  # noqa: E402
from backends.compile.lower import LoweringError  # noqa: E402
from backends.compile.schedule import DepthRuleError  # noqa: E402
from backends.chipdir.target import TargetError, get_target  # noqa: E402

hf_logging.disable_progress_bar()

DEPTH_RULE = """\
test.hdl:5:1: error: depth rule: the write to memory 'mem' depends on a read of 'mem' in the same step, through signal 'bumped'; a memory's reads and writes happen in one layer, so its address, data and enable must be computed before that layer
test.hdl:4:1: note: the read of 'mem' is here
test.hdl:6:1: note: the write is here
test.hdl:6:1: note: fix: compute the value at this step, carry it in a field of the next token, and write the memory from that token at the next step"""


def test_depth_rule_error_names_signal_line_and_fix():
    with pytest.raises(DepthRuleError) as e:
        compile_circuit(circuits.self_feeding_ram())
    assert str(e.value) == DEPTH_RULE
    assert e.value.exit_code == 2


def test_cycle_between_memories_is_reported():
    c = circuits.self_feeding_ram()
    # rewire: a second RAM 'other' whose write reads 'mem', and mem's write reads 'other'
    from hdl.ir import Memory, Node
    c.memories["other"] = Memory("other", "ram", 4, 16, circuits.loc(9))
    a = c.names = {}
    nodes = c.nodes
    tf, rd_mem, inc = 0, 1, 3
    ro = c.add(Op.MEM_READ, 4, (tf,), param="other", loc=circuits.loc(10), name="from_other")
    one = c.add(Op.CONST, 1, param=1)
    c.add(Op.MEM_WRITE, 0, (tf, rd_mem, one), param="other", loc=circuits.loc(11))
    # mem's write now takes its data from 'other'
    w = next(n for n in nodes if n.op is Op.MEM_WRITE and n.param == "mem")
    nodes[w.id] = Node(w.id, w.op, w.width, (w.args[0], ro, w.args[2]), w.param, w.loc, w.name)
    # node order: the write must come after ro; move it to the end
    nodes.append(nodes.pop(w.id))
    for i, n in enumerate(nodes):
        nodes[i] = Node(i, n.op, n.width, tuple(x if x < w.id else x - 1 if x > w.id else None
                                                for x in n.args), n.param, n.loc, n.name)
    del a
    c.check()
    with pytest.raises(DepthRuleError) as e:
        compile_circuit(c)
    assert "read each other in the same step" in str(e.value)
    assert "mem -> other -> mem" in str(e.value) or "other -> mem -> other" in str(e.value)


def test_two_write_ports_rejected():
    c = circuits.ram_circuit()
    w = next(n for n in c.nodes if n.op is Op.MEM_WRITE)
    c.add(Op.MEM_WRITE, 0, w.args, param="ram", loc=circuits.loc(40))
    out = next(n for n in c.nodes if n.op is Op.TOKEN_OUT)
    c.nodes.remove(out)
    c.nodes.append(type(out)(len(c.nodes), out.op, 0, out.args, out.param, out.loc, out.name))
    c.check()
    with pytest.raises(LoweringError, match="second write port"):
        compile_circuit(c)


def test_target_errors(tmp_path):
    with pytest.raises(TargetError, match="unknown target 'tiny'"):
        get_target("tiny")
    bad = tmp_path / "cfg.json"
    bad.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(TargetError, match="not a Qwen3.5 text config"):
        get_target(str(bad))


@pytest.mark.parametrize("dk,width", [(128, 12), (16, 40)])
def test_config_target_two_hot_gqa(tmp_path, dk, width):
    """d_k = d_v = 128 (two-hot queries, 2 ballast value columns), 2 value heads per key
    head, fixed budgets: a RAM and a ROM circuit stay exact in bf16 decode + prefill."""
    p = circuits.config_target(tmp_path / "config.json", dk=dk)
    t = get_target(str(p))
    if dk == 128:
        assert t.two_hot and t.rows_per_bank == 127 and t.value_ballast == 2 and t.v_per_k == 2
    else:
        assert not t.two_hot and t.cols_per_bank == 30     # 40-bit words span 2 slices
    for build, starts in ((circuits.ram_circuit, [Token(0, (3, 7)), Token(0, (1, 200))]),
                          (lambda: circuits.rom_circuit(200, width), [Token(0, (1, 0)), Token(0, (150, 0))])):
        c = build()
        comp = compile_to_dir(c, tmp_path / c.name, target=str(p), dtype="bf16")
        assert comp.config["intermediate_size"] == 96
        assert all(lay["neurons"] <= 96 for lay in comp.chip["layers"])
        rep = check_dir(tmp_path / c.name, steps=16, batch=2, starts=starts)
        assert rep.ok, [str(m) for m in rep.mismatches]
        rep = check_dir(tmp_path / c.name, steps=16, batch=2, starts=starts, prefill=True)
        assert rep.ok, [str(m) for m in rep.mismatches]


def test_exactness_prover_names_the_line():
    """A neuron whose pre-activation could exceed +-256 is refused, naming its HDL line."""
    from backends.compile import emit, exact
    from backends.compile.program import Form
    from backends.compile.schedule import schedule
    from backends.chipdir.target import COMPACT
    c = circuits.counter(8, 9)
    prog = schedule(c, COMPACT)
    num = emit.choose_numerics(prog)
    exact.prove(prog, num, "bf16")            # the real program is fine
    layer, ns = next((L, ns) for L, ns in prog.mlp.items() if ns)
    n = ns[0]
    n.gate = Form(n.gate.c, n.gate.t, -300, 300)     # may reach +300
    with pytest.raises(exact.ExactnessError) as e:
        exact.prove(prog, num, "bf16")
    assert str(e.value).startswith(f"{c.nodes[n.node].loc}: error: cannot prove the compiled "
                                   f"weights exact: a neuron in layer {layer} has pre-activation "
                                   "range [-300, 300] (must stay within [-2^14, 256])")


def test_lane_reuse_keeps_results_exact(tmp_path):
    """Lane reuse shrinks the residual (clear neurons subtract the old occupant)."""
    c = circuits.alu(5)
    comp = compile_to_dir(c, tmp_path / "alu", dtype="bf16")
    assert comp.chip["lanes"]["count"] < comp.chip["lanes"]["logical"]
    rep = check_dir(tmp_path / "alu", steps=10)
    assert rep.ok, [str(m) for m in rep.mismatches]


@pytest.mark.parametrize("lanes", [1, 11, 44, 147, 1000, 2500, 6000])
@pytest.mark.parametrize("spec", ["compact", "qwen3.5-4b"])
@pytest.mark.parametrize("widened", [False, True])
def test_hidden_width_rule(spec, lanes, widened):
    """The hidden width is n_b * 4^k (exact pre-norms), holds ballast + lanes (and a widened
    merge's base block when one is asked for), and no smaller such width would do."""
    from backends.chipdir.target import MAX_BALLAST, is_power_of_4
    t = get_target(spec)
    if widened:
        t = dataclasses.replace(t, base_hidden=2560)
    h, n_b = t.hidden_for(lanes)
    base = t.base_hidden
    assert h % n_b == 0 and is_power_of_4(h // n_b)
    assert h >= base + lanes + n_b and h >= t.min_hidden
    smaller = [nb * 4 ** k for nb in range(1, MAX_BALLAST + 1) for k in range(12)
               if max(t.min_hidden, base + lanes + nb) <= nb * 4 ** k < h]
    assert not smaller
