"""The reference simulator: every op's edge semantics, memories and tokens, and the C and
Python backends against each other and against a plain interpreter on random IR."""
from __future__ import annotations

import random

import numpy as np
import pytest

from hdl.ir import Circuit, Field, Memory, NOLOC, Op, Token, TokenKind
from hdl.sim import (ImageError, SimError, Simulator, TokenSyntaxError, evaluate_module,
                     evaluate_module_batch, format_token, load_image, parse_token, to_signed)
from hdl.sim.modules import ModuleEvaluator
from tests.hdl.ir_fuzz import random_circuit, random_images, random_module, random_token

BACKENDS = ["c", "python"]


# ---- an independent oracle: the docs/ir.md semantics, one op at a time, on Python ints ----

def _s(v: int, w: int) -> int:
    return v - (1 << w) if v >> (w - 1) else v


def interpret(c: Circuit, mem: dict[str, list[int]], tok: Token | None,
              inputs: dict[str, int] | None = None):
    """Returns (node values, next token or None, effective writes, outputs); applies writes."""
    val: list[int] = []
    writes, outs, nxt = [], {}, None
    for n in c.nodes:
        a = [val[x] for x in n.args]
        w, m, op = n.width, (1 << n.width) - 1, n.op
        aw = c.nodes[n.args[0]].width if n.args else 0
        v = 0
        if op is Op.CONST: v = n.param
        elif op is Op.TOKEN_KIND: v = tok.kind
        elif op is Op.TOKEN_FIELD: v = tok.fields[n.param[1]] if tok.kind == n.param[0] else 0
        elif op is Op.INPUT: v = inputs[n.param]
        elif op is Op.AND: v = a[0] & a[1]
        elif op is Op.OR: v = a[0] | a[1]
        elif op is Op.XOR: v = a[0] ^ a[1]
        elif op is Op.NOT: v = m - a[0]
        elif op is Op.ADD: v = (a[0] + a[1]) % (1 << w)
        elif op is Op.SUB: v = (a[0] - a[1]) % (1 << w)
        elif op is Op.MUL: v = (a[0] * a[1]) % (1 << w)
        elif op is Op.EQ: v = int(a[0] == a[1])
        elif op is Op.ULT: v = int(a[0] < a[1])
        elif op is Op.SLT: v = int(_s(a[0], aw) < _s(a[1], aw))
        elif op is Op.SHL: v = (a[0] * 2 ** a[1]) % (1 << w) if a[1] < 200 else 0
        elif op is Op.LSHR: v = a[0] // 2 ** min(a[1], 200)
        elif op is Op.ASHR: v = (_s(a[0], w) // 2 ** min(a[1], 200)) % (1 << w)
        elif op is Op.SLICE: v = (a[0] // 2 ** n.param) % (1 << w)
        elif op is Op.CONCAT:
            for x in n.args:
                v = v * 2 ** c.nodes[x].width + val[x]
        elif op is Op.MUX: v = a[2] if a[0] == 1 else a[1]
        elif op is Op.MEM_READ:     # (a transparent one sees an enabled write there)
            words = mem[n.param]
            v = words[a[0]] if a[0] < len(words) else 0
            if len(a) == 4 and a[3] == 1 and a[1] == a[0] < len(words):
                v = a[2]
        elif op is Op.MEM_WRITE:
            if a[2] == 1 and a[0] < c.memories[n.param].depth:
                writes.append((n.param, a[0], a[1]))
        elif op is Op.OUTPUT: outs[n.param] = a[0]
        elif op is Op.TOKEN_OUT:
            k, pos = a[0], 1
            for kk, kd in enumerate(c.kinds):
                if kk == k:
                    nxt = Token(k, tuple(a[pos:pos + len(kd.fields)]))
                pos += len(kd.fields)
        else:
            raise AssertionError(op)
        assert 0 <= v < (1 << max(w, 1))
        val.append(v)
    for name, addr, data in writes:
        mem[name][addr] = data
    return val, nxt, writes, outs


# ---- building blocks ---------------------------------------------------------------------

def module(op: Op, width: int, arg_widths: list[int], param=None) -> Circuit:
    c = Circuit("M", NOLOC)
    args = []
    for i, w in enumerate(arg_widths):
        args.append(c.add(Op.INPUT, w, (), f"a{i}"))
        c.ports.append((f"a{i}", "in", w, False))
    y = c.add(op, width, tuple(args), param)
    c.add(Op.OUTPUT, 0, (y,), "y")
    c.ports.append(("y", "out", width, False))
    return c


def one(op: Op, width: int, args: list[tuple[int, int]], param=None) -> dict[str, int]:
    """Evaluate ``op`` on (value, width) args with every backend; check they agree."""
    c = module(op, width, [w for _, w in args], param)
    ins = {f"a{i}": v for i, (v, _) in enumerate(args)}
    results = [ModuleEvaluator(c, b)(ins)["y"] for b in BACKENDS]
    results += [int(ModuleEvaluator(c, b).batch({k: [v] for k, v in ins.items()})["y"][0])
                for b in BACKENDS]
    results.append(interpret(c, {}, None, ins)[3]["y"])
    assert len(set(results)) == 1, results
    return results[0]


M64 = (1 << 64) - 1
INT64_MIN = 1 << 63


@pytest.mark.parametrize("op,width,args,param,want", [
    (Op.SHL, 8, [(0x81, 8), (1, 4)], None, 0x02),
    (Op.SHL, 8, [(0xFF, 8), (7, 4)], None, 0x80),
    (Op.SHL, 8, [(0xFF, 8), (8, 4)], None, 0),          # amount == width
    (Op.SHL, 8, [(0xFF, 8), (15, 4)], None, 0),
    (Op.SHL, 64, [(M64, 64), (63, 64)], None, INT64_MIN),
    (Op.SHL, 64, [(M64, 64), (64, 64)], None, 0),
    (Op.SHL, 64, [(1, 64), (M64, 64)], None, 0),        # huge amount
    (Op.LSHR, 8, [(0x80, 8), (7, 3)], None, 1),
    (Op.LSHR, 8, [(0x80, 8), (8, 4)], None, 0),
    (Op.LSHR, 64, [(M64, 64), (64, 7)], None, 0),
    (Op.ASHR, 8, [(0x80, 8), (1, 3)], None, 0xC0),      # sign fill
    (Op.ASHR, 8, [(0x80, 8), (7, 3)], None, 0xFF),
    (Op.ASHR, 8, [(0x80, 8), (8, 4)], None, 0xFF),      # >= width: all sign
    (Op.ASHR, 8, [(0x7F, 8), (9, 4)], None, 0),
    (Op.ASHR, 8, [(0x7F, 8), (3, 4)], None, 0x0F),
    (Op.ASHR, 64, [(INT64_MIN, 64), (63, 6)], None, M64),
    (Op.ASHR, 64, [(INT64_MIN, 64), (200, 8)], None, M64),
    (Op.ASHR, 1, [(1, 1), (0, 1)], None, 1),
    (Op.ASHR, 1, [(1, 1), (1, 1)], None, 1),
    (Op.SLT, 1, [(INT64_MIN, 64), (0, 64)], None, 1),   # INT_MIN < 0
    (Op.SLT, 1, [(0, 64), (INT64_MIN, 64)], None, 0),
    (Op.SLT, 1, [(INT64_MIN, 64), (INT64_MIN - 1, 64)], None, 1),  # MIN < MAX
    (Op.SLT, 1, [(M64, 64), (0, 64)], None, 1),         # -1 < 0
    (Op.SLT, 1, [(0x80, 8), (0x7F, 8)], None, 1),
    (Op.SLT, 1, [(1, 1), (0, 1)], None, 1),             # 1-bit: -1 < 0
    (Op.SLT, 1, [(5, 8), (5, 8)], None, 0),
    (Op.ULT, 1, [(M64, 64), (0, 64)], None, 0),
    (Op.ULT, 1, [(0, 64), (M64, 64)], None, 1),
    (Op.MUL, 64, [(M64, 64), (M64, 64)], None, 1),      # (-1)(-1) mod 2^64
    (Op.MUL, 64, [(1 << 32, 64), (1 << 32, 64)], None, 0),
    (Op.MUL, 64, [(0xDEADBEEFCAFEBABE, 64), (0x123456789, 64)], None,
     (0xDEADBEEFCAFEBABE * 0x123456789) & M64),
    (Op.MUL, 8, [(16, 8), (16, 8)], None, 0),
    (Op.ADD, 64, [(M64, 64), (1, 64)], None, 0),
    (Op.ADD, 3, [(7, 3), (7, 3)], None, 6),
    (Op.SUB, 64, [(0, 64), (1, 64)], None, M64),
    (Op.SUB, 5, [(3, 5), (4, 5)], None, 31),
    (Op.NOT, 64, [(0, 64)], None, M64),
    (Op.NOT, 3, [(5, 3)], None, 2),
    (Op.AND, 8, [(0xF0, 8), (0x3C, 8)], None, 0x30),
    (Op.OR, 8, [(0xF0, 8), (0x0F, 8)], None, 0xFF),
    (Op.XOR, 64, [(M64, 64), (1, 64)], M64 - 1, M64 - 1),
    (Op.EQ, 1, [(M64, 64), (M64, 64)], None, 1),
    (Op.EQ, 1, [(3, 2), (2, 2)], None, 0),
    (Op.SLICE, 4, [(0xABCD, 16)], 4, 0xC),
    (Op.SLICE, 1, [(INT64_MIN, 64)], 63, 1),
    (Op.SLICE, 64, [(M64 - 5, 64)], 0, M64 - 5),
    (Op.CONCAT, 12, [(0xA, 4), (0xBC, 8)], None, 0xABC),   # first arg = high bits
    (Op.CONCAT, 64, [(1, 1), (0, 62), (1, 1)], None, INT64_MIN | 1),
    (Op.MUX, 8, [(0, 1), (11, 8), (22, 8)], None, 11),     # (sel, if0, if1)
    (Op.MUX, 8, [(1, 1), (11, 8), (22, 8)], None, 22),
])
def test_op_edge_semantics(op, width, args, param, want):
    if op is Op.XOR:
        param = None
    assert one(op, width, args, param) == want


# ---- circuits with tokens and memories ---------------------------------------------------

def counter(limit: int = 9) -> Circuit:
    """Count value=0..limit then Done (halt); logs value+1 at address value of RAM `log`."""
    c = Circuit("Counter", NOLOC)
    c.kinds = [TokenKind("Count", (Field("value", 8),), NOLOC),
               TokenKind("Done", (), NOLOC, halt=True)]
    c.memories["log"] = Memory("log", "ram", 8, 4, NOLOC)
    v = c.add(Op.TOKEN_FIELD, 8, (), (0, 0), name="value")
    done = c.add(Op.EQ, 1, (v, c.add(Op.CONST, 8, (), limit)), name="ctl.done")
    inc = c.add(Op.ADD, 8, (v, c.add(Op.CONST, 8, (), 1)), name="inc")
    kind = c.add(Op.MUX, 1, (done, c.add(Op.CONST, 1, (), 0), c.add(Op.CONST, 1, (), 1)))
    c.add(Op.MEM_WRITE, 0, (v, inc, c.add(Op.CONST, 1, (), 1)), "log")
    c.add(Op.TOKEN_OUT, 0, (kind, inc))
    c.names = {"value": v, "ctl.done": done, "inc": inc}
    c.start = Token(0, (0,))
    c.check()
    return c


@pytest.mark.parametrize("backend", BACKENDS)
def test_counter_runs_to_halt_and_writes_in_range_only(backend):
    c = counter()
    sim = Simulator(c, backend=backend)
    assert sim.backend == backend
    toks = sim.run(c.start, 100)
    assert [format_token(c, t) for t in toks] == [f"Count value={i}" for i in range(10)] + ["Done"]
    assert sim.memories == {"log": [1, 2, 3, 4]}      # writes to 4..9 >= depth were ignored


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_budget_and_halting_start(backend):
    c = counter()
    sim = Simulator(c, backend=backend)
    assert len(sim.run(c.start, 3)) == 4
    assert sim.run(Token(1, ()), 5) == [Token(1, ())]
    assert sim.run(c.start, 0) == [c.start]


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_reports_writes_and_trace(backend):
    c = counter()
    sim = Simulator(c, backend=backend)
    r = sim.step(Token(0, (2,)), trace=True)
    assert r.next == Token(0, (3,))
    assert r.writes == [("log", 2, 3)]
    assert sim.named(r.values) == {"value": 2, "ctl.done": 0, "inc": 3}
    r = sim.step(Token(0, (7,)))
    assert r.writes == [] and r.values is None            # address 7 >= depth 4


def rw_circuit() -> Circuit:
    """One kind T(a: u3, d: u8, en: u1); reads ram[a] and rom[a]; writes ram[a] = d if en;
    the next token carries the RAM read in d. RAM u8[5], ROM u8[3]."""
    c = Circuit("RW", NOLOC)
    c.kinds = [TokenKind("T", (Field("a", 3), Field("d", 8), Field("en", 1)), NOLOC),
               TokenKind("U", (Field("x", 8, signed=True),), NOLOC)]
    c.memories["ram"] = Memory("ram", "ram", 8, 5, NOLOC)
    c.memories["rom"] = Memory("rom", "rom", 8, 3, NOLOC, init=(7, 8, 9))
    a = c.add(Op.TOKEN_FIELD, 3, (), (0, 0))
    d = c.add(Op.TOKEN_FIELD, 8, (), (0, 1))
    en = c.add(Op.TOKEN_FIELD, 1, (), (0, 2))
    x = c.add(Op.TOKEN_FIELD, 8, (), (1, 0), name="x")
    r = c.add(Op.MEM_READ, 8, (a,), "ram", name="ram_read")
    q = c.add(Op.MEM_READ, 8, (a,), "rom", name="rom_read")
    c.add(Op.MEM_WRITE, 0, (a, d, en), "ram")
    kind = c.add(Op.TOKEN_KIND, 1, ())
    c.add(Op.TOKEN_OUT, 0, (kind, a, r, c.add(Op.CONST, 1, (), 0), c.add(Op.XOR, 8, (x, q))))
    c.names = {"x": x, "ram_read": r, "rom_read": q}
    c.check()
    return c


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_under_write_is_old_and_out_of_range_reads_zero(backend):
    c = rw_circuit()
    sim = Simulator(c, backend=backend)
    r = sim.step(Token(0, (1, 42, 1)), trace=True)
    assert r.next == Token(0, (1, 0, 0))                  # the read saw the old 0
    assert sim.named(r.values)["ram_read"] == 0
    r = sim.step(Token(0, (1, 43, 0)), trace=True)          # enable 0: no write
    assert r.next == Token(0, (1, 42, 0)) and r.writes == []
    r = sim.step(Token(0, (6, 99, 1)), trace=True)          # address 6 >= depth 5
    assert r.writes == [] and sim.named(r.values) == {"x": 0, "ram_read": 0, "rom_read": 0}
    assert sim.memories == {"ram": [0, 42, 0, 0, 0], "rom": [7, 8, 9]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_field_of_another_kind_reads_zero_and_roms_load(backend):
    c = rw_circuit()
    sim = Simulator(c, roms={"rom": [0x80, 1]}, backend=backend)
    r = sim.step(Token(1, (0x0F,)), trace=True)
    # kind U: a = 0 so rom[0] = 0x80 is read; fields of T read 0
    assert r.next == Token(1, (0x8F,))
    assert format_token(c, r.next) == "U x=-113"
    assert sim.memories["rom"] == [0x80, 1, 0]


def test_memory_image_errors():
    c = rw_circuit()
    with pytest.raises(SimError) as e:
        Simulator(c, roms={"rom": [1, 2, 3, 4]})
    assert str(e.value) == "image for rom 'rom' has 4 words, but rom holds only 3 (u8[3])"
    with pytest.raises(SimError) as e:
        Simulator(c, roms={"rmo": [1]})
    assert str(e.value) == "unknown memory 'rmo' (the circuit's memories: ram, rom)"
    with pytest.raises(SimError) as e:
        Simulator(c, roms={"rom": [256]})
    assert str(e.value) == "image for rom 'rom': word 0 is 256, which does not fit 8 bits"


@pytest.mark.parametrize("backend", BACKENDS)
def test_undeclared_kind_emitted_is_an_error(backend):
    c = Circuit("Bad", NOLOC)
    c.kinds = [TokenKind(n, (), NOLOC) for n in "ABC"]
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 2, (), 3),))
    sim = Simulator(c, backend=backend)
    with pytest.raises(SimError) as e:
        sim.run(Token(0, ()), 10)
    assert str(e.value) == ("step 0: circuit 'Bad' emitted token kind index 3, but it declares "
                            "only 3 kinds")


def test_bad_tokens_and_backend():
    c = counter()
    sim = Simulator(c)
    with pytest.raises(SimError, match="field value = 256 does not fit 8 bits"):
        sim.step(Token(0, (256,)))
    with pytest.raises(SimError, match="token Count has 1 fields, got 0"):
        sim.step(Token(0, ()))
    with pytest.raises(SimError, match="kind index 2 is out of range"):
        sim.step(Token(2, ()))
    with pytest.raises(SimError, match="unknown simulator backend 'java'"):
        Simulator(c, backend="java")


# ---- token text and images ----------------------------------------------------------------

def test_token_text_round_trip_and_errors():
    c = rw_circuit()
    t = parse_token(c, "T en=1 a=0x7 d=0b101")
    assert t == Token(0, (7, 5, 1)) and format_token(c, t) == "T a=7 d=5 en=1"
    assert parse_token(c, "U x=-128") == Token(1, (128,))
    cases = {
        "": "empty token text: expected 'Kind field=value ...'",
        "V a=1": "unknown token kind 'V' in 'V a=1' (kinds: T, U)",
        "T a=1 d=2": "token T is missing field en (token T(a: u3, d: u8, en: u1))",
        "T a=1": "token T is missing fields d, en (token T(a: u3, d: u8, en: u1))",
        "T a=8 d=0 en=0": "field a = 8 is out of range for u3 (0..7)",
        "U x=128": "field x = 128 is out of range for s8 (-128..127)",
        "T a=1 a=2": "field 'a' given twice in 'T a=1 a=2'",
        "T b=1": "token T has no field 'b' (token T(a: u3, d: u8, en: u1))",
        "T a": "expected field=value, got 'a' in 'T a' (token T(a: u3, d: u8, en: u1))",
        "T a=one": "field a: 'one' is not an integer",
    }
    for text, msg in cases.items():
        with pytest.raises(TokenSyntaxError) as e:
            parse_token(c, text)
        assert str(e.value) == msg


def test_load_image(tmp_path):
    hx = tmp_path / "a.hex"
    hx.write_text("// header\nff\n0x1_0 // sixteen\n\n7\n")
    assert load_image(hx, 8, 4, "rom") == [255, 16, 7]
    bn = tmp_path / "a.bin"
    bn.write_bytes(bytes([1, 2, 3, 4, 5, 6]))
    assert load_image(bn, 16, 3, "rom") == [0x201, 0x403, 0x605]
    assert load_image(bn, 12, 3, "rom") == [0x201, 0x403, 0x605]
    with pytest.raises(ImageError) as e:
        load_image(bn, 16, 2, "rom")
    assert str(e.value) == f"{bn}: image has 3 words, but 'rom' holds only 2 (u16[2])"
    hx.write_text("1ff\n")
    with pytest.raises(ImageError) as e:
        load_image(hx, 8, 4, "rom")
    assert str(e.value) == f"{hx}:1: 0x1ff does not fit 8 bits (image for 'rom', u8)"
    hx.write_text("zz\n")
    with pytest.raises(ImageError, match="'zz' is not a hexadecimal word"):
        load_image(hx, 8, 4, "rom")


# ---- modules ------------------------------------------------------------------------------

def test_evaluate_module_signed_inputs_and_errors():
    c = module(Op.ADD, 8, [8, 8])
    c.ports[0] = ("a0", "in", 8, True)
    assert evaluate_module(c, {"a0": -1, "a1": 2}) == {"y": 1}
    out = evaluate_module_batch(c, {"a0": [-1, 5, -128], "a1": np.array([1, 2, 3], np.uint64)})
    assert out["y"].tolist() == [0, 7, 131]
    assert to_signed(131, 8) == -125
    with pytest.raises(ValueError, match="missing inputs"):
        evaluate_module(c, {"a0": 1})
    with pytest.raises(ValueError, match="does not fit 8 bits"):
        evaluate_module(c, {"a0": 1, "a1": 256})
    with pytest.raises(ValueError, match="does not fit 8 bits"):
        evaluate_module_batch(c, {"a0": [1], "a1": [-1]})


# ---- differential: C = Python = interpreter on random IR ---------------------------------

def differential(seed: int, sizes: tuple[int, ...], steps: int, transparent: float = 0.0
                 ) -> None:
    """A random circuit stepped in both backends and the interpreter: every node value, the
    next token, the writes and the memories must agree at every step; then run() agrees."""
    rng = random.Random(seed)
    c = random_circuit(rng, n_nodes=rng.choice(sizes), write_ports=rng.choice((1, 1, 2)),
                       transparent=transparent)
    images = random_images(rng, c)
    sims = [Simulator(c, roms=images, backend=b) for b in BACKENDS]
    mem = {n: list(m.init) + [0] * (m.depth - len(m.init)) for n, m in c.memories.items()}
    for n, words in images.items():
        mem[n] = list(words) + [0] * (c.memories[n].depth - len(words))
    tok = random_token(rng, c)
    for _ in range(steps):
        rs = [s.step(tok, trace=True) for s in sims]
        vals, nxt, writes, _ = interpret(c, mem, tok)
        for r in rs:
            assert list(r.values) == vals
            assert r.next == nxt
            assert r.writes == writes
        for s in sims:
            assert s.memories == mem
        tok = nxt if rng.random() < 0.7 else random_token(rng, c)
    start = random_token(rng, c)
    assert sims[0].run(start, 3 * steps) == sims[1].run(start, 3 * steps)
    assert sims[0].memories == sims[1].memories


@pytest.mark.parametrize("seed", range(40))
def test_random_circuits_backends_agree(seed):
    differential(seed, (20, 60, 150), 12)


@pytest.mark.parametrize("seed", range(20))
def test_random_transparent_circuits_backends_agree(seed):
    """Random circuits whose RAMs are mostly transparent (read-under-write "new")."""
    differential(5000 + seed, (20, 60, 150), 12, transparent=0.7)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 400))
def test_random_circuits_backends_agree_more(seed):
    differential(seed, (100, 400, 1000), 25)


@pytest.mark.parametrize("seed", range(30))
def test_random_modules_backends_agree(seed):
    rng = random.Random(1000 + seed)
    c = random_module(rng, n_nodes=rng.choice((10, 40, 120)))
    widths = {nm: w for nm, d, w, _ in c.ports if d == "in"}
    vectors = [{nm: (rng.getrandbits(w) if rng.random() < 0.5 else
                     rng.choice((0, 1, (1 << w) - 1, 1 << (w - 1))))
                for nm, w in widths.items()} for _ in range(40)]
    want = [interpret(c, {}, None, v)[3] for v in vectors]
    cols = {nm: np.array([v[nm] for v in vectors], dtype=np.uint64) for nm in widths}
    for b in BACKENDS:
        ev = ModuleEvaluator(c, b)
        assert [ev(v) for v in vectors] == want
        got = ev.batch(cols)
        assert {k: a.tolist() for k, a in got.items()} == \
            {k: [w[k] for w in want] for k in want[0]}


def test_auto_falls_back_to_python_without_a_compiler(monkeypatch, tmp_path):
    from hdl.sim import cbuild
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))     # nothing cached on disk
    monkeypatch.setattr(cbuild, "_LOADED", {})
    monkeypatch.setattr(cbuild, "find_compiler", lambda: None)
    c = counter(limit=3)
    sim = Simulator(c)
    assert sim.backend == "python"
    assert len(sim.run(c.start, 10)) == 5
    with pytest.raises(SimError) as e:
        Simulator(c, backend="c")
    assert str(e.value) == ("the C simulator backend is unavailable: no C compiler found "
                            "(set CC, or install gcc)")
    assert ModuleEvaluator(module(Op.ADD, 4, [4, 4])).backend == "python"



def test_a_broken_compiler_counts_as_none(monkeypatch, tmp_path):
    """Regression: CC=/bin/false (or a compiler that cannot build a shared library) used to
    escape as a BuildError traceback; now "auto" falls back and "c" says why."""
    from hdl.sim import cbuild
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))
    monkeypatch.setattr(cbuild, "_LOADED", {})
    monkeypatch.setattr(cbuild, "find_compiler", lambda: ("/bin/false",))
    c = counter(limit=3)
    assert Simulator(c).backend == "python"
    with pytest.raises(SimError) as e:
        Simulator(c, backend="c")
    assert str(e.value) == ("the C simulator backend is unavailable: C compiler /bin/false "
                            "does not work with flags -O1 -shared -fPIC -w")

def test_c_build_is_cached_on_disk(monkeypatch, tmp_path):
    from hdl.sim import cbuild
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))
    monkeypatch.setattr(cbuild, "_LOADED", {})
    Simulator(counter(limit=4), backend="c")
    built = sorted(p.name for p in (tmp_path / "sim").iterdir())
    assert len(built) == 1 and built[0].endswith(".so")
    monkeypatch.setattr(cbuild, "_LOADED", {})
    monkeypatch.setattr(cbuild.subprocess, "run", None)      # a rebuild would fail
    assert Simulator(counter(limit=4), backend="c").run(Token(0, (0,)), 9)[-1] == Token(1, ())


def test_token_vocabulary_numbering():
    """docs/ir.md: kind after kind, 2**payload ids each, first field in the low bits."""
    c = Circuit("V", NOLOC)
    c.kinds = [TokenKind("Count", (Field("value", 8),), NOLOC),
               TokenKind("Done", (), NOLOC, halt=True),
               TokenKind("Pair", (Field("x", 4), Field("y", 3, signed=True)), NOLOC)]
    assert c.kind_offsets() == [0, 256, 257]
    assert c.vocab_size == 256 + 1 + 128
    assert c.token_id(Token(0, (9,))) == 9
    assert c.token_id(Token(1, ())) == 256
    assert c.token_id(Token(2, (0xA, 0b101))) == 257 + (0b101 << 4 | 0xA)
    for tid in range(c.vocab_size):
        assert c.token_id(c.token_from_id(tid)) == tid
    with pytest.raises(ValueError, match=r"token id 385 is outside the vocabulary 0..384"):
        c.token_from_id(385)


@pytest.mark.parametrize("suffix", [".hex", ".bin"])
def test_any_image_file_loads_or_raises_image_error(tmp_path, suffix):
    """Random bytes and mangled hex text: the image reader returns fitting words or raises
    ImageError (a UserError), nothing else."""
    from hypothesis import given, settings, strategies as st
    path = tmp_path / f"img{suffix}"
    text = st.text(alphabet="0123456789abcdefxX_ -+/\n\r\tzé\ufeff", max_size=60)

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.one_of(st.binary(max_size=40), text.map(str.encode)), st.integers(1, 64),
           st.integers(1, 20))
    def check(data, width, depth):
        path.write_bytes(data)
        try:
            words = load_image(path, width, depth, "m")
        except ImageError as e:
            assert str(e) and e.problem
            return
        assert len(words) <= depth and all(0 <= w < 1 << width for w in words)
    check()


TRANSPARENT = """
circuit t {
    token W(a: u3, d: u8, en: u1);
    ram m: u8[5] transparent;
    ram o: u8[5];
    if tok.W.en { m[tok.W.a] <= tok.W.d; o[tok.W.a] <= tok.W.d; }
    let seen = m[tok.W.a];
    let other = m[tok.W.a + 3'd1];
    next = W(a: tok.W.a, d: seen ^ o[tok.W.a], en: other[0]);
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_transparent_memory_reads_this_steps_write(backend):
    from hdl.frontend import load_source
    c = load_source(TRANSPARENT)
    assert c.memories["m"].read_under_write == "new"
    assert c.memories["o"].read_under_write == "old"
    reads = [n for n in c.nodes if n.op is Op.MEM_READ and n.param == "m"]
    assert reads and all(len(n.args) == 4 for n in reads)
    sim = Simulator(c, backend=backend)
    # m[1] reads the 42 written now; the old-style o[1] still reads 0
    assert sim.step(Token(0, (1, 42, 1))).next == Token(0, (1, 42, 0))
    # not enabled: both read the stored 42; m[2] (0) is not the written address
    assert sim.step(Token(0, (1, 7, 0))).next == Token(0, (1, 0, 0))
    # written at 0: the read of address 1 (other) sees the stored 42, not the write
    assert sim.step(Token(0, (0, 9, 1))).next == Token(0, (0, 9, 0))
    # address 5 >= depth: nothing written, both read 0
    assert sim.step(Token(0, (5, 3, 1))).next == Token(0, (5, 0, 0))
    assert sim.memories["m"] == [9, 42, 0, 0, 0] == sim.memories["o"]


def test_the_transparent_example_of_the_language_docs():
    """docs/language.md's transparent RAM example does what its comment says."""
    from pathlib import Path
    from hdl.frontend import load_source
    text = (Path(__file__).parents[2] / "docs" / "language.md").read_text()
    block = text.split("**Transparent RAMs**")[1].split("```")[1]
    sim = Simulator(load_source(block))
    assert sim.step(Token(0, (1, 42, 1))).next == Token(0, (1, 42, 0))
    assert sim.memories["m"] == [0, 42, 0, 0, 0]


def test_the_ir_checks_a_transparent_read():
    """Circuit.check: a transparent memory's reads carry exactly its write's arguments; an
    "old" memory's reads carry none."""
    for transparent, read_args, ok in ((True, "write", True), (True, "none", False),
                                       (True, "other", False), (False, "write", False)):
        c = Circuit("T", NOLOC)
        c.kinds = [TokenKind("W", (Field("a", 3), Field("d", 8)), NOLOC)]
        c.memories["m"] = Memory("m", "ram", 8, 8, NOLOC,
                                 read_under_write="new" if transparent else "old")
        a = c.add(Op.TOKEN_FIELD, 3, (), (0, 0))
        d = c.add(Op.TOKEN_FIELD, 8, (), (0, 1))
        en = c.add(Op.CONST, 1, (), 1)
        extra = {"write": (a, d, en), "none": (), "other": (a, d, c.add(Op.CONST, 1, (), 0))}
        r = c.add(Op.MEM_READ, 8, (a, *extra[read_args]), "m")
        c.add(Op.MEM_WRITE, 0, (a, d, en), "m")
        c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, (), 0), a, r))
        if ok:
            c.check()
        else:
            with pytest.raises(ValueError, match="IR node 4 \\(mem_read\\)"):
                c.check()
