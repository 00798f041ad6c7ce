"""Elaboration: the IR that sources become, checked by evaluating it (hdl.sim) against Python
models, and by looking at its shape (folding, sharing, names, locations, write ports)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from hdl.diagnostics import CompileError
from hdl.frontend import list_tops, load_circuit, load_module, load_module_source, load_source
from hdl.ir import Op, Token
from hdl.sim import Simulator, evaluate_module, format_token

SRC = Path(__file__).parent / "sources"
ROOT = Path(__file__).parents[2]


def s(v: int, w: int) -> int:
    """Two's complement reading of a w-bit value."""
    return v - (1 << w) if v >> (w - 1) & 1 else v


def u(v: int, w: int) -> int:
    return v & ((1 << w) - 1)


def run(circuit, start: Token | None = None, steps: int = 100) -> list[str]:
    sim = Simulator(circuit, backend="python")
    return [format_token(circuit, t) for t in sim.run(start or circuit.start, steps)]


# ---- a module with most expression forms, against a Python model ------------------------

def features_model(a, b, s_, t, n, op):
    sv, tv = s(s_, 8), s(t, 8)
    x = (a & 0x0F) | ((b & 0x0F) << 4) | 1
    p = 0xFF if op == 3 else (a if op == 0 else b if op == 1 else a ^ b)
    return {
        "sum9": a + b, "shl_c": u(a << 3, 8), "shr_c": a >> 2, "sra_c": u(sv >> 3, 8),
        "shl_v": u(a << n, 8), "shr_v": a >> n, "sra_v": u(sv >> n, 8),
        "lt_u": int(a < b), "le_s": int(sv <= tv), "gt_s": int(sv > tv), "ge_u": int(a >= b),
        "cat": a << 8 | b, "rep": (a & 3) * 0b01010101, "sx": u(sv, 16), "bits": x,
        "pick": p, "alu_y": u(a - b, 8), "alu_z": int(a & b == 0), "cnt": bin(a).count("1"),
        "tern": u(~a, 8) if a >> 7 else u(-a, 8), "neg": u(-b, 8),
        "mixed": u(((a & 0x0F) | (b & 0xF0)) + 1, 8),
    }


def test_features_module_matches_python_model():
    c = load_module(SRC / "features.hdl", "features")
    c.check()
    rng = random.Random(1)
    edge = [0, 1, 0x7F, 0x80, 0xFF]
    for i in range(300):
        a, b, s_, t = (rng.choice(edge) if i % 3 == 0 else rng.randrange(256) for _ in range(4))
        n, op = rng.randrange(8), rng.randrange(4)
        got = evaluate_module(c, dict(a=a, b=b, s=s_, t=t, n=n, op=op), backend="python")
        assert got == features_model(a, b, s_, t, n, op), (a, b, s_, t, n, op)


def test_module_ports_and_hierarchical_names():
    c = load_module(SRC / "features.hdl", "alu", {"W": 16})
    assert c.ports == [("op", "in", 3, False), ("a", "in", 16, False), ("b", "in", 16, False),
                       ("y", "out", 16, False), ("zero", "out", 1, False)]
    assert [n.param for n in c.nodes if n.op is Op.INPUT] == ["op", "a", "b"]
    assert [n.param for n in c.nodes if n.op is Op.OUTPUT] == ["y", "zero"]
    f = load_module(SRC / "features.hdl", "features")
    # instance signals are flattened with the instance name in front
    assert {"u.y", "u.zero", "u.r", "u.a"} <= set(f.names)
    # a node made inside the instance carries the module's source location
    sub = next(n for n in f.nodes if n.op is Op.SUB and n.loc.line == 11)
    assert sub.loc.file.endswith("features.hdl") and sub.loc.col == 27


def test_counter_example_runs():
    c = load_circuit(ROOT / "examples/counter/counter.hdl")
    c.check()
    assert [k.name for k in c.kinds] == ["Count", "Done"]
    assert c.kinds[1].halt and c.start == Token(0, (0,))
    assert run(c) == [f"Count value={i}" for i in range(10)] + ["Done"]


def test_every_node_has_a_source_location_and_topological_order():
    for path in [ROOT / "examples/gcd/gcd.hdl", ROOT / "examples/stack_machine/stack_machine.hdl"]:
        c = load_circuit(path)
        c.check()
        for n in c.nodes:
            assert n.loc.line > 0, n
            assert all(a < n.id for a in n.args)


# ---- folding and sharing ---------------------------------------------------------------

def test_constants_fold_and_identical_nodes_are_shared():
    src = """
    module m (in a: u8, in b: u8, out x: u8, out y: u8, out z: u8, out k: u8) {
        x = a + b;
        y = a + b;
        z = (a + b) ^ (8'd3 + 8'd4);
        k = 3 * 5 + 1;
    }"""
    c = load_module_source(src, "m")
    assert sum(n.op is Op.ADD for n in c.nodes) == 1
    consts = {n.param for n in c.nodes if n.op is Op.CONST}
    assert consts == {7, 16}
    outs = {n.param: n.args[0] for n in c.nodes if n.op is Op.OUTPUT}
    assert outs["x"] == outs["y"]
    assert c.nodes[outs["k"]].op is Op.CONST and c.nodes[outs["k"]].param == 16


def test_constant_shift_becomes_slice_and_concat_variable_shift_an_op():
    src = """
    module m (in a: u8, in sa: s8, in n: u3, out p: u8, out q: u8, out r: s8, out v: u8, out w: s8) {
        p = a << 3;  q = a >> 3;  r = sa >> 3;  v = a >> n;  w = sa >> n;
    }"""
    c = load_module_source(src, "m")
    ops = {n.op for n in c.nodes}
    assert Op.SHL not in ops
    assert {Op.LSHR, Op.ASHR} <= ops and Op.SLICE in ops and Op.CONCAT in ops
    for a in range(256):
        got = evaluate_module(c, {"a": a, "sa": a, "n": a % 8}, backend="python")
        assert got == {"p": u(a << 3, 8), "q": a >> 3, "r": u(s(a, 8) >> 3, 8),
                       "v": a >> (a % 8), "w": u(s(a, 8) >> (a % 8), 8)}


def test_bit_index_at_run_time():
    c = load_module_source("module m (in a: u8, in i: u4, out y: u1) { y = a[i]; }", "m")
    for a in (0, 0x5A, 0xFF):
        for i in range(16):
            assert evaluate_module(c, {"a": a, "i": i}, backend="python")["y"] == (a >> i) & 1


def test_ext_and_trunc():
    src = """
    module m (in a: u4, in b: s4, out z: u8, out x: u8, out e: s8, out t: u2) {
        z = zext(a, 8); x = sext(a, 8); e = ext(b, 8); t = trunc(a, 2);
    }"""
    c = load_module_source(src, "m")
    for a in range(16):
        got = evaluate_module(c, {"a": a, "b": a}, backend="python")
        assert got == {"z": a, "x": u(s(a, 4), 8), "e": u(s(a, 4), 8), "t": a & 3}


# ---- vars, wires, control flow -----------------------------------------------------------

def test_var_merges_across_nested_if_and_match():
    src = """
    module m (in a: u4, in c: u1, out y: u4) {
        var v: u4 = a;
        if c {
            match a { 0 | 1 => { v = 9; } 2 => {} _ => { v = v + 1; } }
        } else {
            v[3] = 1;
        }
        y = v;
    }"""
    c = load_module_source(src, "m")
    for a in range(16):
        for cc in (0, 1):
            want = (9 if a < 2 else a if a == 2 else (a + 1) % 16) if cc else a | 8
            assert evaluate_module(c, {"a": a, "c": cc}, backend="python")["y"] == want


def test_wire_driven_in_exclusive_arms_and_read_before_driven():
    src = """
    module m (in a: u8, in sel: u1, out y: u8) {
        wire w: u8;
        y = w;          // read before the statement that drives it
        if sel { w = a; } else { w = ~a; }
    }"""
    c = load_module_source(src, "m")
    assert evaluate_module(c, {"a": 5, "sel": 1}, backend="python")["y"] == 5
    assert evaluate_module(c, {"a": 5, "sel": 0}, backend="python")["y"] == 250


def test_for_loop_scopes_and_enum_match():
    src = """
    enum Color { RED, GREEN = 4, BLUE }
    module m (in c: Color, out y: u8) {
        var acc: u8 = 0;
        for i in 0..4 { let k: u8 = i * 2; acc = acc + k; }
        match c { Color.RED => { y = acc; } GREEN => { y = 1; } Color.BLUE => { y = 2; } }
    }"""
    c = load_module_source(src, "m")
    assert c.ports[0] == ("c", "in", 3, False)
    assert [evaluate_module(c, {"c": v}, backend="python")["y"] for v in (0, 4, 5)] == [12, 1, 2]


# ---- circuits: tokens, memories --------------------------------------------------------

def test_memory_writes_merge_into_one_port_per_memory(tmp_path):
    (tmp_path / "img.hex").write_text("// header\n05\n0a\n")
    (tmp_path / "c.hdl").write_text("""
    circuit C {
        token Go(i: u2, d: u8);
        token Stop halt;
        start Go(i: 0, d: 1);
        rom table: u8[4] = "img.hex";
        ram mem: u8[4];
        match tok {
            Go => {
                if tok.Go.i == 3 { next = Stop(); }
                else { next = Go(i: tok.Go.i + 1, d: table[tok.Go.i] + mem[tok.Go.i]); }
                if tok.Go.d[0] { mem[tok.Go.i] <= tok.Go.d; }
                else { mem[tok.Go.i + 1] <= 8'd7; }
            }
            Stop => { next = Stop(); }
        }
    }""")
    c = load_circuit(tmp_path / "c.hdl")
    writes = c.writes()
    assert len(writes) == 1 and writes[0].param == "mem"
    assert c.memories["table"].init == (5, 10, 0, 0)
    assert c.memories["table"].image == str((tmp_path / "img.hex").resolve())
    en = c.nodes[writes[0].args[2]]
    assert en.op is not Op.CONST   # the write only happens in the Go arm
    # reads see the memory as it was at the start of the step: mem[1] <= 5 at step 1 is
    # not seen by the read of mem[1] in that step
    assert run(c) == ["Go i=0 d=1", "Go i=1 d=5", "Go i=2 d=10", "Go i=3 d=0", "Stop"]


def test_bin_rom_image_is_little_endian(tmp_path):
    (tmp_path / "img.bin").write_bytes(bytes([0x34, 0x12, 0xff, 0x00]))
    src = """
    circuit C {
        token T(v: u16) halt;
        rom r: u16[3] = "img.bin";
        next = T(v: r[0]);
    }"""
    c = load_source(src, str(tmp_path / "c.hdl"))
    assert c.memories["r"].init == (0x1234, 0xff, 0)


def test_tok_kind_compare_and_fields_of_other_kinds():
    src = """
    circuit C {
        token A(x: u4);
        token B(y: u4, z: u1) halt;
        start A(x: 3);
        if tok.kind == A { next = B(y: tok.A.x, z: 1); } else { next = B(y: 0, z: 0); }
    }"""
    c = load_source(src)
    assert run(c) == ["A x=3", "B y=3 z=1"]
    out = c.token_out()
    assert len(out.args) == 1 + 1 + 2   # kind, A.x, B.y, B.z


# ---- files -------------------------------------------------------------------------------

def test_imports_stdlib_relative_and_twice(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "twice.hdl").write_text(
        "const TWO = 2;\nmodule dbl #(W: int = 8) (in a: u[W], out y: u[W]) { y = a * TWO; }\n")
    (tmp_path / "top.hdl").write_text("""
    import "lib/twice.hdl";
    import "lib/twice.hdl";
    import arith;
    module m (in a: u8, in b: u8, out y: u8, out s: u8) {
        y = dbl(a);
        s = adder_prefix #(W: 8)(a, b, 0).sum;
    }""")
    c = load_module(tmp_path / "top.hdl", "m")
    assert evaluate_module(c, {"a": 100, "b": 200}, backend="python") == {"y": 200, "s": 44}


def test_list_tops_and_choosing_a_circuit(tmp_path):
    p = tmp_path / "two.hdl"
    p.write_text("""
    circuit A { token T halt; next = T(); }
    circuit B { token U(v: u1) halt; next = U(v: 1); }
    """)
    assert list_tops(p) == ["A", "B"]
    assert [k.name for k in load_circuit(p, "B").kinds] == ["U"]


def test_names_in_loops_are_numbered_and_vars_named_by_final_value():
    src = """
    module m (in a: u4, out y: u4) {
        var acc: u4 = 0;
        for i in 0..3 { let t: u4 = a + i; acc = acc ^ t; }
        y = acc;
    }"""
    c = load_module_source(src, "m")
    assert {"t", "t#2", "t#3", "acc", "y", "a"} <= set(c.names)
    assert c.names["acc"] == c.names["y"]
    assert c.nodes[c.names["y"]].name in ("y", "acc")
    assert evaluate_module(c, {"a": 5}, backend="python")["y"] == 5 ^ 6 ^ 7


def test_load_module_parameters_and_errors():
    src = "module m #(W: int = 4) (in a: u[W], out y: u[W]) { y = ~a; }"
    assert load_module_source(src, "m", {"W": 12}).ports[0] == ("a", "in", 12, False)
    with pytest.raises(CompileError, match="module 'm' has no parameter 'WW'; did you mean 'W'"):
        load_module_source(src, "m", {"WW": 3})
    with pytest.raises(CompileError, match="no module 'mm' in <string>; did you mean 'm'"):
        load_module_source(src, "mm")


def test_compile_time_if_elaborates_only_the_chosen_arm():
    src = """
    circuit C {
        token T(v: u8) halt;
        ram r: u8[4];
        for i in 0..4 { if i == 2 { r[i] <= tok.T.v; } }
        next = T(v: r[2]);
    }"""
    c = load_source(src)
    (w,) = c.writes()
    assert c.nodes[w.args[0]].param == 2 and c.nodes[w.args[2]].param == 1
