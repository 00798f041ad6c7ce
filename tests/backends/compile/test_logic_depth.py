"""The depth-optimal constructions (docs/backend.md, "Logic depth"): each construct is
compiled, run in transformers against the simulator (exact, token by token), and its depth
is pinned to the figure the issue asks for.

Every circuit walks a 16-bit token field x; the u32 operands a, b, c, d and the u5 amount n
are rotations and XORs of x (free in the weights), the result r is folded into the next x."""
from __future__ import annotations

import pytest
from transformers.utils import logging as hf_logging

from backends.verify.check import check_dir
from backends.compile.pipeline import compile_to_dir
from backends.compile.lower import Lowerer
from backends.compile.schedule import schedule
from backends.chipdir.target import get_target
from hdl.frontend import load_source
from hdl.ir import Token

hf_logging.disable_progress_bar()


def _rot(v: str, k: int, w: int = 32) -> str:
    return v if k == 0 else f"{{{v}[{k - 1}:0], {v}[{w - 1}:{k}]}}"


def circuit(body: str, result: str = "r") -> str:
    """A walking circuit whose step computes ``body`` (defining ``r``, u32 or u1)."""
    return f"""
circuit T {{
    token T(x: u16);
    start T(x: 12345);
    let x = tok.T.x;
    let a: u32 = {{x ^ 16'h5A3C, {_rot("x", 5, 16)}}};
    let b: u32 = {{{_rot("x", 3, 16)}, x ^ 16'hC3A5}};
    let c: u32 = {{x ^ 16'h0FF0, x ^ 16'h9999}};
    let d: u32 = {{{_rot("x", 11, 16)}, {_rot("x", 7, 16)}}};
    let n: u5 = x[4:0];
    {body}
    let rr: u32 = zext({result}, 32);
    next = T(x: {_rot("x", 1, 16)} ^ 16'h9D3B ^ rr[15:0] ^ rr[31:16]);
}}
"""


BITS = [f"a[{i}]" for i in range(32)]
MATCH = "var r: u32 = 0;\n    match n {\n" + "".join(
    f"        {k} => {{ r = {_rot('b', k)}; }}\n" for k in range(32)) + "    }"
IFELSE = "var r: u32 = c;\n" + "".join(
    f"    {'if' if k == 0 else 'else if'} n == {k} {{ r = {_rot('b', k)}; }}\n" for k in range(31))

#: name -> (body, most MLP stages allowed)
CASES = {
    "or32": ("let r = " + " || ".join(BITS) + ";", 1),
    "or32_mixed": ("let r = (" + " | ".join(BITS[:16]) + ") | !(" + " && ".join(BITS[16:]) + ");", 1),
    "and32": ("let r = " + " && ".join(BITS) + " && !(a[0] ^ b[3]);", 2),
    "xor32": ("let r = " + " ^ ".join(BITS) + " ^ !(b[1] | b[2]);", 2),
    "bitwise_chain": ("let r = (a & b & ~c) | (c ^ d ^ a) | ~(b | d);", 2),
    # a compare with a constant is an AND of literals: it fuses with the AND it feeds
    # an AND/OR of literals and one AND/OR is one threshold neuron
    "or_of_and": ("let r = a[0] | !b[1] | (a[2] & c[3] & !d[4]);", 1),
    "and_of_or": ("let r = (a[0] | b[1] | c[2]) & d[3] & !a[5];", 1),
    # "fits 13 bits signed": the bits equal to one repeated bit are one sum (n * s)
    "sext_eq": ("let r = sext(a[12:0], 32) == a;", 1),
    "sext_eq_or_keep": ("let r = (sext(a[12:0], 32) == a) | ((a[31:13] == b[31:13]) & !c[0]);", 2),
    # a priority chain whose pending selects are ANDs (their literals join the leaves) or
    # wait on later inputs than the values (the early values are materialised instead)
    "pending_chain": ("let t = a[0] | (sext(b[12:0], 32) == b);\n    "
                      "let k = (b[31:13] == c[31:13]) & !d[1];\n    var r: u32 = 0;\n    "
                      "if d[2] { r = c; } else if t { if d[3] { r = a; } "
                      "else if !d[4] & !a[9] { r = d; } else { r = b; } } "
                      "else if k { r = d; } else { r = a; }", 2),
    "eq_const_and": ("let r = (a[19:2] == 18'h2A5C3) & (c == 32'h0FF0F00F) & b[7];", 1),
    "match32": (MATCH, 2),
    "ifelse31": (IFELSE, 2),
    "shl": ("let r = a << n;", 1),
    "lshr": ("let r = a >> n;", 1),
    "ashr": ("let r = unsigned(signed(a) >> n);", 1),
    "shl_wide_amount": ("let r = a << zext(x[7:0], 8);", 1),
    "ashr_wide_amount": ("let r = unsigned(signed(a) >> zext(x[7:0], 8));", 1),
    "add4": ("let r = a + b + c + d;", 4),
    "add_sub": ("let r = a + b - c;", 4),
    "mulhu": ("let p = zext(a, 64) * zext(b, 64);\n    let r = p[63:32];", 6),
    "mulh": ("let p = sext(signed(a), 64) * sext(signed(b), 64);\n    let r = unsigned(p[63:32]);", 6),
    # operands sign- or zero-extended by a select (the core's multiplier): the extension
    # bits are ANDs that join the partial products' ANDs, no stage of their own
    "mul_ext_by_select": ("let sa = x[0] | x[1];\n    let sb = x[0] & !x[2];\n    "
                          "let wa: u64 = sa ? sext(a, 64) : zext(a, 64);\n    "
                          "let wb: u64 = sb ? sext(b, 64) : zext(b, 64);\n    "
                          "let p = wa * wb;\n    let r = x[3] ? p[31:0] : p[63:32];", 6),
    # a negation's carries never come from a generate: each is one threshold, each bit one
    # stage (an absolute value too: the select fuses)
    "abs": ("let r = (x[0] & a[31]) ? -a : a;", 1),
    "neg_wide": ("let p = -zext(a, 64);\n    let r = p[63:32] ^ p[31:0];", 2),
}


def _stages(c) -> int:
    """MLP stages from the token to the signal ``r`` (its deepest bit's MLP layer + 1)."""
    lw = Lowerer(c, get_target("compact"), {}, {})
    lw.run()
    slots = [lw.slot_of([lw.mat(f)]) for f in lw.bits[c.names["r"]]]
    return (max(slots) + 1) // 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_construct_is_shallow_and_exact(tmp_path, name):
    body, most = CASES[name]
    c = load_source(circuit(body), f"<{name}>")
    assert _stages(c) <= most
    dtype = "fp32" if name in ("match32", "ashr", "add4") else "bf16"
    compile_to_dir(c, tmp_path / name, dtype=dtype)
    starts = [Token(0, (v,)) for v in (12345, 0, 0xFFFF, 0x8000)]
    rep = check_dir(tmp_path / name, steps=10, batch=4, starts=starts)
    assert rep.ok, [str(m) for m in rep.mismatches]


@pytest.mark.parametrize("name", ["mulh", "mul_ext_by_select"])
def test_a_sign_extended_product_multiplies_the_lower_halves(name):
    """Operands that sign-extend their lower halves to 64 bits are each that half minus its
    sign bit times 2^32, so the product is the 32x32 partial products and two correction rows
    (1,088 ANDs), not the 2,080 of the 64-bit product's lower triangle: about 1,500 lanes
    and 4,000 neurons instead of 2,500 and 5,700 (6,400 through the selects), in the same
    stages; exact in transformers (the cases of the same names above)."""
    c = load_source(circuit(CASES[name][0]), f"<{name}>")
    prog = Lowerer(c, get_target("compact"), {}, {}).run()
    assert len(prog.lanes) < 1600
    assert sum(len(n) for n in prog.mlp.values()) < 4300


ROM_SRC = """
circuit R {
    token T(x: u16);
    start T(x: 7);
    rom big: u16[1024] = "big.hex";
    ram small: u16[64];
    let x = tok.T.x;
    let w = trunc(big[x[9:0] + x[15:6]], 16);
    small[x[5:0]] <= w ^ x;
    let s = small[x[11:6]];
    next = T(x: {x[0], x[15:1]} ^ w ^ s);
}
"""


@pytest.mark.parametrize("dtype,prefill", [("bf16", False), ("fp32", False), ("bf16", True),
                                           ("fp32", True)])
def test_byte_cell_rom_is_dense_and_exact(tmp_path, dtype, prefill):
    import random
    rng = random.Random(5)
    (tmp_path / "big.hex").write_text("\n".join(f"{rng.getrandbits(16):04x}" for _ in range(1024)))
    (tmp_path / "r.hdl").write_text(ROM_SRC)
    from hdl.frontend import load_circuit
    c = load_circuit(tmp_path / "r.hdl")
    comp = compile_to_dir(c, tmp_path / "chip", dtype=dtype)
    big = comp.chip["memories"]["big"]
    assert big["cell_bits"] == 8 and big["key_heads"] == 1      # 8 banks at 1 bit per cell
    assert comp.chip["memories"]["small"]["cell_bits"] == 1
    starts = [Token(0, (v,)) for v in (7, 0, 0xFFFF, 0x1234)]
    rep = check_dir(tmp_path / "chip", steps=24, batch=4, prefill=prefill, starts=starts)
    assert rep.ok, [str(m) for m in rep.mismatches]


def test_byte_cells_are_decode_only_where_fp32_prefill_is_inexact(tmp_path):
    """At d_k = 128 a large ROM takes byte cells by default only in bf16; asked for in fp32
    (``byte_cells=True``), the proof holds for decode and records that chunked prefill would
    not read them exactly."""
    from backends.compile.exact import prove
    from backends.compile.emit import choose_numerics
    from backends.chipdir.memory import byte_cells_exact
    src = ROM_SRC.replace(' = "big.hex"', "").replace("u16[1024]", "u32[65536]")
    c = load_source(src, "r.hdl")
    tgt = get_target("qwen3.5-4b")
    assert (byte_cells_exact(tgt, "bf16"), byte_cells_exact(tgt, "fp32")) == (True, False)
    assert schedule(c, tgt, byte_cells=False).mems["big"].cell == 1
    p = schedule(c, tgt)
    assert p.mems["big"].cell == 8 and p.mems["big"].kheads == 17     # 130 at 1 bit per cell
    from backends.compile import lanes
    lanes.allocate(p)
    assert prove(p, choose_numerics(p), "bf16").prefill
    fp32 = prove(p, choose_numerics(p), "fp32")
    assert not fp32.prefill and fp32.summary().endswith("; decode only (byte cells, two-hot queries)")


def test_an_fp32_byte_cell_chip_at_dk128_decodes_exactly_and_refuses_prefill(tmp_path):
    """Compiled so (qwen3.5-4b shapes, fp32, byte cells), the chip equals the simulator at
    every position in decode, and prefill is refused with the reason, not run inexactly."""
    import random
    from backends.engines.hf import ChipDirError
    rng = random.Random(9)
    (tmp_path / "big.hex").write_text("\n".join(f"{rng.getrandbits(32):08x}" for _ in range(4096)))
    (tmp_path / "r.hdl").write_text(ROM_SRC.replace("u16[1024]", "u32[4096]"))
    from hdl.frontend import load_circuit
    comp = compile_to_dir(load_circuit(tmp_path / "r.hdl"), tmp_path / "chip",
                          target="qwen3.5-4b", dtype="fp32", byte_cells=True)
    assert comp.chip["memories"]["big"]["cell_bits"] == 8
    assert comp.chip["proof"]["prefill"] is False
    starts = [Token(0, (v,)) for v in (7, 0xFFFF)]
    rep = check_dir(tmp_path / "chip", steps=24, batch=2, starts=starts)
    assert rep.ok, [str(m) for m in rep.mismatches]
    with pytest.raises(ChipDirError, match="fp32 chunked prefill does not read exactly at d_k = 128"):
        check_dir(tmp_path / "chip", steps=8, prefill=True)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_an_operation_wider_than_the_mlp_is_split_over_layers(tmp_path, dtype):
    """A 32-input XOR is one threshold function of 34 neurons; on a target whose MLP holds
    24 it takes layer 1's room and the rest of it in layer 2 (two lanes summed), exact."""
    import sys
    from pathlib import Path
    from tests.backends import circuits
    src = circuit(CASES["xor32"][0])
    wide = schedule(load_source(src), get_target(circuits.config_target(tmp_path / "w.json")))
    assert {L: len(n) for L, n in wide.mlp.items()} == {0: 1, 1: 34}
    spec = circuits.config_target(tmp_path / "n.json", inter=24)
    narrow = schedule(load_source(src), get_target(spec))
    assert {L: len(n) for L, n in narrow.mlp.items()} == {0: 1, 1: 24, 2: 10}
    compile_to_dir(load_source(src), tmp_path / "chip", target=spec, dtype=dtype)
    rep = check_dir(tmp_path / "chip", steps=20, batch=2, prefill=True,
                    starts=[Token(0, (v,)) for v in (12345, 777)])
    assert rep.ok, [str(m) for m in rep.mismatches]


BYPASS_SRC = """
circuit B {
    token T(x: u16);
    start T(x: 1);
    ram r: u8[4];
    ram w: u2[1];
    ram h: u8[1];
    let x = tok.T.x;
    let own = x[1] & !x[9];
    let wb: u8 = x[0] ? zext(x[15:14], 8) : (own ? x[15:8] : h[0]);
    let by = x[12] & (x[3:2] == w[0]);
    let v: u8 = by ? wb : r[x[5:4]];
    r[w[0]] <= wb;
    w[0] <= x[3:2];
    h[0] <= x[7:0];
    next = T(x: {x[7:0] ^ v, x[15:8]});
}
"""


def test_a_bypass_keeps_its_compare_pending_and_materialises_the_value(tmp_path):
    """A register-file bypass: ``by ? wb : r[..]`` where ``by`` is a compare with a memory
    read (pending) and ``wb`` a mux tree of earlier inputs. Materialising ``wb`` and fusing
    the compare into the select's stage puts the select in layer 1's MLP, beside the read of
    ``r`` (layer 1); materialising the compare first took one more layer (3 -> 4 in all)."""
    c = load_source(BYPASS_SRC)
    prog = schedule(c, get_target("compact"))
    assert prog.n_layers == 3 and prog.mems["r"].layer == 1
    lanes = {ln for f in prog.bits[c.names["v"]] for ln in getattr(f, "form", f).t}
    assert {prog.lanes[ln].slot for ln in lanes} == {3}          # layer 1's MLP
    compile_to_dir(load_source(BYPASS_SRC), tmp_path / "chip")
    rep = check_dir(tmp_path / "chip", steps=40, batch=3,
                    starts=[Token(0, (v,)) for v in (1, 0x5A3C, 0xF00F)])
    assert rep.ok, [str(m) for m in rep.mismatches]
