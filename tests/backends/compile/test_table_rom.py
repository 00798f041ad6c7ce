"""Table ROMs (``rom name: u8[N] table;``): a ROM read only at addresses the current token
decides, so its words become token-table lanes of the embedding instead of GDN state.
Checked against the simulator on every token id, compiled and checked lane by lane on both
targets, baked from ``--rom`` at compile time, and refused as a run-time image."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.errors import UserError
from hdl.frontend import load_circuit
from hdl.ir import Op, Token
from hdl.sim import Simulator
from backends.compile import tabulate
from backends.verify.check import check_dir
from backends.chipdir.chipfile import circuit_from_json, circuit_to_json
from backends.compile.pipeline import compile_to_dir
from backends.engines.hf import HFEngine
from backends.compile.schedule import schedule
from backends.chipdir.target import COMPACT

#: squares from a table rom of 12 words read at a 4-bit field (12..15 read 0): one read
#: feeds a RAM's data, one (at another address) only the next token
SOURCE = """\
circuit Sq {
    token In(x: u4);
    token Out(y: u8, z: u8);
    start In(x: 3);
    rom sq: u8[12] = "sq.hex" table;
    ram seen: u8[16];
    if tok.kind == In { seen[tok.In.x] <= sq[tok.In.x] + 1; }
    match tok {
        In => { next = Out(y: sq[tok.In.x ^ 4'd1], z: seen[tok.In.x]); }
        Out => { next = In(x: tok.Out.y[3:0] ^ tok.Out.z[3:0] ^ 4'd5); }
    }
}
"""


def source(tmp_path: Path) -> Path:
    (tmp_path / "sq.hex").write_text("\n".join(f"{i * i:x}" for i in range(12)) + "\n")
    (tmp_path / "sq.hdl").write_text(SOURCE)
    return tmp_path / "sq.hdl"


def test_a_table_rom_is_token_only_and_holds_no_state(tmp_path):
    c = load_circuit(source(tmp_path))
    assert c.memories["sq"].table and not c.memories["seen"].table
    assert list(c.state_memories) == ["seen"]
    reads = [n for n in c.nodes if n.op is Op.MEM_READ and n.param == "sq"]
    assert len(reads) == 2 and all(r.id in c.token_only() for r in reads)
    # no read is lowered: each is a table lane (the one only the next token reads too) or
    # inside the cone of one (sq[x] + 1, the RAM's data)
    for tables in (True, False):
        plan = tabulate.plan(c, tabulate=tables)
        assert all(r.id in plan.tabulated or r.id not in plan.live for r in reads)
        nxt = next(r for r in reads if c.nodes[r.args[0]].op is Op.XOR)
        assert nxt.id in plan.tabulated
    prog = schedule(c, COMPACT)
    assert set(prog.mems) == {"seen"} and prog.mems["seen"].layer == 0


def test_table_values_are_the_image_on_every_token_id(tmp_path):
    c = load_circuit(source(tmp_path))
    plan = tabulate.plan(c)
    table = tabulate.TokenTable(c, plan.tabulated)
    got = table.values(0, np.arange(16, dtype=np.uint64))
    for x in range(16):
        values = Simulator(c).step(Token(0, (x,)), trace=True).values
        assert [int(v[x]) for v in got] == [values[i] for i in plan.tabulated], x
    read = next(n.id for n in c.nodes if n.op is Op.MEM_READ and n.param == "sq"
                and c.nodes[n.args[0]].op is Op.XOR)           # sq[x ^ 1]
    col = got[plan.tabulated.index(read)]
    assert [int(v) for v in col] == [(x ^ 1) ** 2 if x ^ 1 < 12 else 0 for x in range(16)]


def test_the_chip_json_keeps_the_table_flag(tmp_path):
    c = load_circuit(source(tmp_path))
    d = circuit_to_json(c)
    assert [m.get("table", False) for m in d["memories"]] == [True, False]
    back = circuit_from_json(d, {"sq": list(c.memories["sq"].init)})
    assert back.memories["sq"].table and back.memories["sq"].init == c.memories["sq"].init
    del d["memories"][0]["table"]           # a chip.json written before table roms
    assert not circuit_from_json(d).memories["sq"].table


@pytest.mark.parametrize("target", ["compact", "qwen3.5-4b"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_compiled_table_rom_matches_the_simulator(tmp_path, target, dtype):
    """Every position, every memory and every lane against the simulator, decode and
    prefill, on transformers' modules; and on the fast engine."""
    compile_to_dir(load_circuit(source(tmp_path)), tmp_path / "chip", target=target,
                   dtype=dtype)
    for prefill in (False, True):
        rep = check_dir(tmp_path / "chip", steps=48, prefill=prefill)
        assert rep.ok, [str(m) for m in rep.mismatches + rep.lanes]
        assert rep.lane_checks > 0
    rep = check_dir(tmp_path / "chip", steps=48, batch=2, engine="fast", lanes=False)
    assert rep.ok, [str(m) for m in rep.mismatches]


def test_an_image_given_at_compile_time_is_baked_into_the_embedding(tmp_path):
    c = load_circuit(source(tmp_path))
    other = [(7 * i + 3) % 256 for i in range(12)]
    comp = compile_to_dir(c, tmp_path / "chip", roms={"sq": other})
    assert comp.chip["roms"]["sq"] == other
    eng = HFEngine(tmp_path / "chip")
    assert list(eng.circuit.memories["sq"].init) == other
    rep = check_dir(tmp_path / "chip", steps=40)
    assert rep.ok, [str(m) for m in rep.mismatches + rep.lanes]
    # the run differs from the default image's: the image is really in the weights
    ref = Simulator(c).run(c.start, 40)
    got = Simulator(eng.circuit).run(eng.circuit.start, 40)
    assert ref != got


def test_a_run_time_image_for_a_table_rom_is_refused(tmp_path):
    compile_to_dir(load_circuit(source(tmp_path)), tmp_path / "chip")
    eng = HFEngine(tmp_path / "chip")
    same = list(eng.circuit.memories["sq"].init)
    HFEngine(tmp_path / "chip", roms={"sq": same})          # the compiled image: fine
    msg = ("memory 'sq' is a table rom: its words are rows of the embedding, fixed when the "
           "chip was compiled; compile it again with --rom sq=FILE to change them")
    with pytest.raises(UserError) as e:
        HFEngine(tmp_path / "chip", roms={"sq": [1, 2, 3]})
    assert str(e.value) == msg
    with pytest.raises(UserError) as e:
        eng.new_cache(2, roms=[{}, {"sq": [5]}])
    assert str(e.value) == msg
