"""The source trace (backends/compile/trace.py) and `deltachip explain`: every neuron, lane and key head
of a compiled chip traced to an IR node and its file:line:col, checked against the weights
themselves; golden `explain` answers on the examples; errors that name the user's signal.

Golden files live in tests/backends/golden/; after a deliberate change of the backend's
layout, regenerate them with ``DELTACHIP_UPDATE_GOLDEN=1 pytest tests/backends/compile/test_trace.py``
and read the diff.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from deltachip import cli
from backends.compile.pipeline import compile_to_dir
from backends.compile.schedule import DepthRuleError
from backends.compile.trace import ChipTrace
from hdl.frontend import load_circuit, load_source

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parents[1] / "golden"
EXAMPLES = ["counter", "gcd", "stack_machine"]

#: The questions each golden file answers (`deltachip explain DIR <args>`).
QUESTIONS = {
    "counter": [["--layer", "0"], ["--layer", "1"], ["--source", "examples/counter/counter.hdl:8"],
                ["--source", "examples/counter/counter.hdl:13"], ["--source", "counter.hdl:14"],
                ["--source", "counter.hdl:5"]],
    "gcd": [["--layer", "0"], ["--source", "examples/gcd/gcd.hdl:17"],
            ["--source", "examples/gcd/gcd.hdl:9"], ["--source", "examples/gcd/gcd.hdl:20"],
            ["--source", "stdlib/muldiv.hdl:89"],
            ["--source", "muldiv.hdl:90"]],
    "stack_machine": [["--layer", "0"], ["--layer", "2"],
                      ["--source", "stack_machine.hdl:48"], ["--source", "stack_machine.hdl:56"],
                      ["--source", "stack_machine.hdl:59"], ["--source", "stack_machine.hdl:86"]],
}


def explain(*args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `deltachip explain ARGS` run in this process from the
    repository root (one test below runs it as a separate process, as a user would)."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(["explain", *args])
            except SystemExit as e:         # argparse usage errors
                status = e.code
    finally:
        os.chdir(cwd)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def chips(tmp_path_factory) -> dict[str, Path]:
    """The examples compiled (compact, bf16) from the repository root, paths as typed."""
    out = tmp_path_factory.mktemp("chips")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for name in EXAMPLES:
            compile_to_dir(load_circuit(f"examples/{name}/{name}.hdl"), out / name)
    finally:
        os.chdir(cwd)
    return {name: out / name for name in EXAMPLES}


def chip_json(path: Path) -> dict:
    return json.loads((path / "chip.json").read_text())


# ---- golden answers ------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXAMPLES)
def test_explain_answers_match_the_golden_file(chips, name):
    text = ""
    for args in QUESTIONS[name]:
        status, out, err = explain(str(chips[name]), *args)
        assert status == 0 and not err, err
        text += f"$ deltachip explain build/{name} {' '.join(args)}\n{out}\n"
    golden = GOLDEN / f"explain_{name}.txt"
    if os.environ.get("DELTACHIP_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


# ---- the trace against the weights ---------------------------------------------------------

@pytest.mark.parametrize("name", EXAMPLES)
def test_every_weight_row_and_head_is_traced(chips, name):
    """Every MLP row with a nonzero weight is a traced neuron (and every traced neuron has
    one), every residual dim a layer writes belongs to a lane traced to that layer, and every
    key head with a nonzero query or key row is a traced head."""
    chip = chip_json(chips[name])
    trace = ChipTrace(chip)
    sd = load_file(chips[name] / "model.safetensors")
    dk = chip["target"]["d_k"]
    nk = chip["shapes"]["key_heads"]
    for layer in range(chip["shapes"]["layers"]):
        pre = f"model.layers.{layer}."
        gate = sd[pre + "mlp.gate_proj.weight"]
        used_rows = set(torch.nonzero(gate.abs().sum(1)).flatten().tolist())
        assert used_rows == set(range(len(trace.rows[layer])))
        assert len(trace.rows[layer]) == chip["layers"][layer]["neurons"]
        assert all(node >= 0 for node in trace.rows[layer])
        written = set()
        for name in ("mlp.down_proj.weight", "linear_attn.out_proj.weight"):
            written |= set(torch.nonzero(sd[pre + name].abs().sum(1)).flatten().tolist())
        # lanes born in this layer, and lanes a later GDN writes whose dim this MLP clears
        # (a clear neuron is traced to the lane it makes room for)
        here = set(trace.rows[layer])
        lanes_here = {dim for node, dim, slot, _ in trace.lanes
                      if slot in (2 * layer, 2 * layer + 1) or (slot > 2 * layer + 1 and node in here)}
        assert written <= lanes_here, sorted(written - lanes_here)
        qk = sd[pre + "linear_attn.in_proj_qkv.weight"][:2 * nk * dk].abs().sum(1).view(2, nk, dk)
        used_heads = set(torch.nonzero(qk.sum((0, 2))).flatten().tolist())
        assert used_heads == {h.key_head for h in trace.heads if h.layer == layer}


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_neuron_and_lane_lands_on_one_source_line(chips, name):
    """Summed over the source lines of the chip, `explain --source` accounts for every
    neuron and every computed lane exactly once."""
    chip = chip_json(chips[name])
    trace = ChipTrace(chip)
    per_line: dict[tuple[str, int], int] = {}
    for node, cost in trace.costs.items():
        if node >= 0:
            loc = trace.circuit.nodes[node].loc
            per_line[(loc.file, loc.line)] = per_line.get((loc.file, loc.line), 0) + cost.neurons
    assert sum(per_line.values()) == sum(lay["neurons"] for lay in chip["layers"])
    computed = [lane for lane in trace.lanes if lane[0] >= 0]
    token = [lane for lane in trace.lanes if lane[0] < 0]
    assert all(label.startswith("tok.") for *_, label in token)
    assert len(computed) + len(token) == chip["lanes"]["logical"]


# ---- errors --------------------------------------------------------------------------------

def test_explain_errors_are_one_line_with_exit_2(chips, tmp_path):
    counter = str(chips["counter"])
    cases = [
        ([counter, "--layer", "2"], f"--layer 2: the chip has 2 layers (0..1)"),
        ([counter, "--source", "gcd.hdl:3"],
         "--source gcd.hdl:3: not one of the chip's source files (examples/counter/counter.hdl)"),
        ([counter, "--source", "counter.hdl"],
         "--source expects FILE.hdl:LINE (a line number from 1), got 'counter.hdl'"),
        ([counter, "--source", "counter.hdl:0"],
         "--source expects FILE.hdl:LINE (a line number from 1), got 'counter.hdl:0'"),
        ([str(tmp_path / "missing"), "--layer", "0"], f"{tmp_path / 'missing'}: no such directory"),
    ]
    old = tmp_path / "old"
    shutil.copytree(chips["counter"], old)
    chip = chip_json(old)
    del chip["trace"]
    (old / "chip.json").write_text(json.dumps(chip))
    cases.append(([str(old), "--layer", "0"],
                  f"{old}/chip.json: this checkpoint has no source trace (it was compiled before "
                  "deltachip recorded one): recompile it with `deltachip compile`"))
    for args, message in cases:
        assert explain(*args) == (2, "", message + "\n"), args


def test_explain_needs_one_question(chips):
    status, _, err = explain(str(chips["counter"]))
    assert status == 2 and "one of the arguments --layer --source is required" in err


def test_explain_runs_as_a_command(chips):
    """The installed entry point, in its own process, as a user runs it."""
    r = subprocess.run([sys.executable, "-m", "deltachip", "explain", str(chips["counter"]),
                        "--source", "examples/counter/counter.hdl:15"], cwd=ROOT,
                       capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == ("examples/counter/counter.hdl:15 became 1 MLP neuron in layer 0, 1 lane, "
                        "0 GDN key heads:\n"
                        "  add at 15:56, part of 'next.Count.value': 1 neuron (layer 0 row 0); "
                        "1 lane (dim 10)\n"
                        "  (1 more IR node on this line cost nothing: constants, slices, wiring)\n")


DEPTH_SOURCE = """\
circuit T {
    token Go(a: u4);
    start Go(a: 0);
    ram mem: u4[16];
    match tok {
        Go => {
            mem[mem[tok.Go.a] + 1] <= 1;
            next = Go(a: tok.Go.a);
        }
    }
}
"""

DEPTH_UNNAMED = """\
t.hdl:7:31: error: depth rule: the write to memory 'mem' depends on a read of 'mem' in the same step, through the unnamed 'add' at t.hdl:7:31 (part of 'mem write address'); a memory's reads and writes happen in one layer, so its address, data and enable must be computed before that layer
            mem[mem[tok.Go.a] + 1] <= 1;
                              ^
t.hdl:7:17: note: the read of 'mem' is here
t.hdl:7:13: note: the write is here
t.hdl:7:13: note: fix: compute the value at this step, carry it in a field of the next token, and write the memory from that token at the next step"""


def test_depth_rule_names_an_unnamed_expression_by_place_and_signal(tmp_path, monkeypatch):
    """No internal node number: an unnamed expression is named by its line and the signal
    it is part of."""
    monkeypatch.chdir(tmp_path)
    Path("t.hdl").write_text(DEPTH_SOURCE)
    with pytest.raises(DepthRuleError) as e:
        compile_to_dir(load_circuit("t.hdl"), "out")
    assert str(e.value) == DEPTH_UNNAMED
    assert "node " not in str(e.value)


def test_exactness_error_names_the_signal():
    from backends.compile import emit, exact
    from backends.compile.program import Form
    from backends.compile.schedule import schedule
    from backends.chipdir.target import COMPACT
    # (the next token reads `sum`: token-only logic a memory reads would be a table lane)
    c = load_source(DEPTH_SOURCE.replace("mem[mem[tok.Go.a] + 1] <= 1;\n            next = Go(a: tok.Go.a);",
                                         "let sum = tok.Go.a + 3;\n            mem[tok.Go.a] <= 1;\n"
                                         "            next = Go(a: sum);"),
                    "t.hdl")
    prog = schedule(c, COMPACT)
    num = emit.choose_numerics(prog)
    layer, neurons = next((L, ns) for L, ns in prog.mlp.items() if ns)
    neuron = neurons[0]
    neuron.gate = Form(neuron.gate.c, neuron.gate.t, -300, 300)
    with pytest.raises(exact.ExactnessError) as e:
        exact.prove(prog, num, "bf16")
    assert str(e.value) == (f"{c.nodes[neuron.node].loc}: error: cannot prove the compiled "
                            f"weights exact: a neuron in layer {layer} has pre-activation range "
                            "[-300, 300] (must stay within [-2^14, 256]) (in signal 'sum')")


def test_backend_doc_shows_a_golden_answer():
    """docs/backend.md's `explain --layer 0` and instance-line examples are the golden
    answers, verbatim."""
    doc = (ROOT / "docs/backend.md").read_text()
    golden = (GOLDEN / "explain_counter.txt").read_text().split("\n\n")[0]
    assert golden in doc
    instance = [block for block in (GOLDEN / "explain_gcd.txt").read_text().split("\n\n")
                if block.startswith("$ deltachip explain build/gcd --source examples/gcd/gcd.hdl:20")]
    assert len(instance) == 1 and instance[0] in doc


def test_trace_of_random_circuits_with_memories():
    """Random circuits (tests/hdl/ir_fuzz.py) with ROMs and RAMs: every layer can be
    explained, every MLP row is traced to a real node, and every key head of every memory is
    in the trace (each attributed to its read port, and to the write when there is one)."""
    import random
    from tests.hdl import ir_fuzz
    from backends.compile.pipeline import chip_record, plan_circuit
    from common.errors import UserError
    explained = 0
    for seed in range(40):
        c = ir_fuzz.random_circuit(random.Random(seed), n_nodes=50, max_width=12, n_memories=2)
        try:
            plan = plan_circuit(c)
        except UserError:           # a depth-rule violation: nothing to trace
            continue
        trace = ChipTrace(chip_record(plan, None, {}))
        for layer in range(trace.n_layers):
            assert trace.layer(layer).startswith(f"layer {layer} of {trace.n_layers} ")
            assert len(trace.rows[layer]) == plan.prog.neurons_in(layer)
            assert all(0 <= node < len(c.nodes) for node in trace.rows[layer])
        banks = sorted((L, k) for mem in plan.prog.mems.values() for L, k in mem.banks)
        assert sorted((h.layer, h.key_head) for h in trace.heads) == banks
        for mem in plan.prog.mems.values():
            for node in [port.node for port in mem.reads] + [w.node for w in mem.writes]:
                assert trace.costs[node].heads
        explained += 1
    assert explained >= 10


def test_explain_names_a_transparent_ram(tmp_path):
    """`explain --source` at a transparent RAM's declaration says where it is written and,
    on a target with two value heads per key head, that they hold different words."""
    from tests.backends import circuits
    src = tmp_path / "tram.hdl"
    src.write_text(circuits.transparent_ram_source(5))
    compile_to_dir(load_circuit(str(src)), tmp_path / "chip",
                   target=circuits.config_target(tmp_path / "dk128.json"))
    line = next(i for i, t in enumerate(src.read_text().split("\n"), 1) if "ram m:" in t)
    status, out, err = explain(str(tmp_path / "chip"), "--source", f"{src}:{line}")
    assert status == 0, err
    assert ("each write goes into every one at the step's own position (transparent: reads "
            "see it), its value heads holding different words") in out


NESTED = """\
module inner (in a: u8, in b: u8, out y: u8) {
    y = (a + b) ^ (a - b);
}

module outer (in a: u8, in b: u8, out y: u8) {
    let s = inner(a, b);
    let t = inner(s, a);
    y = t + s;
}

circuit Nest {
    token T(v: u8);
    start T(v: 3);
    ram m: u8[4];
    m[tok.T.v[1:0]] <= tok.T.v + 1;
    let r = m[tok.T.v[3:2]];
    let o = outer(r, tok.T.v);
    next = T(v: o);
}
"""


def test_explain_an_instance_line(tmp_path):
    """Issue 28, class 6: the line that instantiates a module answered "became no weights
    ... no IR node is on it"; it reports the instance's total and its breakdown by the
    module's own lines, an instance inside it counted on the line that makes it."""
    src = tmp_path / "nest.hdl"
    src.write_text(NESTED)
    compile_to_dir(load_circuit(src), tmp_path / "chip")
    chip = chip_json(tmp_path / "chip")
    trace = ChipTrace(chip)
    answer = trace.source(str(src), 17).splitlines()
    total = sum(lay["neurons"] for lay in chip["layers"])
    assert answer[0].startswith(f"{src}:17 became {total} MLP neurons in layers ")
    assert answer[1].startswith(f"  instance 'outer$1' of module outer: {total} MLP neurons")
    assert answer[1].endswith(", by its lines:")
    by_line = {ln.split(":")[1].split(" ")[0]: ln for ln in answer[2:]}
    assert sorted(by_line) == ["6", "7", "8"]
    assert "(instance 'outer$1.inner$2' of inner)" in by_line["6"]
    assert "(instance 'outer$1.inner$3' of inner)" in by_line["7"]
    assert sum(int(ln.split(": ")[1].split(" ")[0]) for ln in answer[2:]) == total
    inner = trace.source(str(src), 6).splitlines()
    assert inner[1].startswith("  instance 'outer$1.inner$2' of module inner: ")
    assert inner[2].startswith(f"    {src}:2: ")
    # a chip.json written before instances were kept answers as before, without failing
    for key in ("instances", "inst_of"):
        del chip["circuit"][key]
    assert ChipTrace(chip).source(str(src), 17).startswith(f"{src}:17 became no weights")
