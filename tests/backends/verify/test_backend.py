"""Compiled weights vs the reference simulator on small hand-built circuits.

Every test compiles a circuit (tests/backends/circuits.py), runs it in transformers'
Qwen3_5ForCausalLM and compares every position's next token and every memory with
hdl.sim.Simulator (backends.verify.check)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers.utils import logging as hf_logging

from tests.backends import circuits  # noqa: E402

from hdl.ir import Token  # noqa: E402
from hdl.sim import Simulator  # noqa: E402
from backends.verify.check import check_dir  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402

hf_logging.disable_progress_bar()

BUILDERS = {"counter": lambda: circuits.counter(8, 9), "alu": lambda: circuits.alu(5),
            "ram": circuits.ram_circuit, "rom": circuits.rom_circuit,
            "tram": lambda: circuits.ram_circuit(transparent=True)}
STARTS = {"counter": [Token(0, (v,)) for v in (0, 3, 200, 255)],
          "alu": [Token(0, (a, b, o)) for a, b, o in ((5, 3, 0), (31, 31, 1), (16, 1, 5), (0, 7, 3))],
          "ram": [Token(0, (a, d)) for a, d in ((3, 7), (0, 255), (15, 128), (9, 1))],
          "rom": [Token(0, (i, 0)) for i in (1, 0, 39, 17)]}
STARTS["tram"] = STARTS["ram"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache: dict[tuple[str, str], Path] = {}

    def get(name: str, dtype: str) -> Path:
        if (name, dtype) not in cache:
            d = tmp_path_factory.mktemp(f"{name}_{dtype}")
            compile_to_dir(BUILDERS[name](), d / "chip", dtype=dtype)
            cache[(name, dtype)] = d / "chip"
        return cache[(name, dtype)]
    return get


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("name", ["counter", "alu", "ram", "rom", "tram"])
def test_decode_matches_simulator(built, name, dtype):
    rep = check_dir(built(name, dtype), steps=24)
    assert rep.ok, [str(m) for m in rep.mismatches]
    assert rep.positions >= 11 and rep.memory_checks == rep.positions


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("name", ["alu", "ram", "rom", "tram"])
def test_prefill_and_batch(built, name, dtype):
    starts = STARTS[name]
    rep = check_dir(built(name, dtype), steps=20, batch=4, starts=starts, prefill=True)
    assert rep.ok, [str(m) for m in rep.mismatches]
    assert rep.positions == 4 * 21
    rep = check_dir(built(name, dtype), steps=12, batch=4, starts=starts)
    assert rep.ok, [str(m) for m in rep.mismatches]


@pytest.mark.parametrize("prefill", [False, True])
def test_each_batch_row_runs_its_own_images(built, prefill):
    """``roms``: one image per row, over the engine's own. The ROM walk differs with the
    image (three images, three different streams, none the chip's own), so a row that ran
    on any image but its own would diverge from its simulator."""
    from backends.verify.check import CheckError, check_engine
    from backends.engines.hf import HFEngine
    eng = HFEngine(built("rom", "bf16"))
    images = [{"table": [(i * k + 5) % 4096 for i in range(40)]} for k in (7, 13, 3)]
    start = Token(0, (1, 0))
    ends = {str(Simulator(eng.circuit, im).run(start, 12)[-1]) for im in images}
    ends.add(str(Simulator(eng.circuit, eng.roms).run(start, 12)[-1]))
    assert len(ends) == 4
    rep = check_engine(eng, steps=12, batch=3, starts=[start] * 3, roms=images, prefill=prefill)
    assert rep.ok, [str(m) for m in rep.mismatches]
    assert rep.positions == 3 * 13
    with pytest.raises(CheckError, match="2 memory images for batch 3"):
        check_engine(eng, steps=4, batch=3, starts=[start] * 3, roms=images[:2])


WIDE_SRC = """
circuit Wide {
    token T(x: u8);
    start T(x: 200);
    ram m: u64[4];
    let x = tok.T.x;
    m[x[1:0]] <= {x, x, x, x, x, x, x, x};
    let w = m[x[3:2]];
    next = T(x: x + 37 ^ w[63:56]);
}
"""


def test_64_bit_words_read_back_unsigned(tmp_path):
    """A word with bit 63 set is read back from the recurrent state as the simulator holds
    it (the words are assembled in 48-bit limbs, not one signed int64)."""
    from hdl.frontend import load_source
    c = load_source(WIDE_SRC, "wide.hdl")
    sim = Simulator(c)
    tok = c.start
    for _ in range(12):
        tok = sim.step(tok).next
    assert max(sim.memory("m")) >= 1 << 63
    compile_to_dir(c, tmp_path / "chip", dtype="bf16")
    rep = check_dir(tmp_path / "chip", steps=12)
    assert rep.ok, [str(m) for m in rep.mismatches]
    assert rep.memory_checks == 13


def test_generate_and_from_pretrained(built):
    """The checkpoint is an ordinary model: from_pretrained + generate() runs the counter."""
    from transformers import AutoModelForCausalLM
    from backends.engines.hf import HFEngine
    d = built("counter", "bf16")
    model = AutoModelForCausalLM.from_pretrained(str(d))
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    eng = HFEngine(d)
    c = circuits.counter(8, 9)
    want = [eng.token_id(t) for t in Simulator(c).run(Token(0, (2,)), 8)]
    out = model.generate(torch.tensor([want[:1]]), max_new_tokens=len(want) - 1, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
    assert out[0].tolist() == want


def test_perturbed_weight_is_caught(built, tmp_path):
    """Changing emitted weights must make check fail (the check can fail): one residual
    lane's down-projection doubled (every neuron writing it; a single neuron's weight may
    belong to a neuron no step of the run activates, e.g. an adder's overflow term)."""
    src = built("ram", "bf16")
    dst = tmp_path / "bad"
    dst.mkdir()
    for f in ("config.json", "chip.json"):
        (dst / f).write_text((src / f).read_text())
    sd = load_file(str(src / "model.safetensors"))
    key = "model.layers.0.mlp.down_proj.weight"
    w = sd[key]
    row = int(w.nonzero()[0, 0])
    w[row] = w[row] * 2
    save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
    rep = check_dir(dst, steps=24)
    assert not rep.ok
    # located in the layer changed, at the lane it writes
    assert rep.lanes and rep.lanes[0].layer == 0 and rep.lanes[0].dim == row


def test_chip_json_describes_the_chip(built):
    chip = json.loads((built("ram", "bf16") / "chip.json").read_text())
    assert chip["memories"]["ram"]["depth"] == 16
    assert chip["tokens"]["vocab"] == 2 * 2 ** 12
    assert chip["nonzero_weights"] > 0
    assert len(chip["layers"]) == chip["shapes"]["layers"]
    assert chip["circuit"]["name"] == "Ram"


ENUM_SOURCE = """
enum Op { ADD, SUB, NEG = 5 }

circuit Calc {
    token T(op: Op, x: u4);
    token Done halt;
    start T(op: Op.ADD, x: 1);

    match tok {
        T => {
            match tok.T.op {
                Op.ADD => { next = T(op: Op.SUB, x: tok.T.x + 3); }
                Op.SUB => { next = T(op: Op.NEG, x: tok.T.x - 1); }
                _ => { next = Done(); }
            }
        }
        Done => { next = Done(); }
    }
}
"""


def test_enum_fields_survive_the_checkpoint(tmp_path, capsys):
    """chip.json keeps each field's enum, so `check` reads and prints members by name."""
    from backends.chipdir.chipfile import circuit_from_json, circuit_to_json
    from backends.engines.hf import HFEngine
    from deltachip.cli import main
    from hdl.frontend import load_source
    from hdl.sim import format_token
    c = load_source(ENUM_SOURCE, "calc.hdl")
    back = circuit_from_json(json.loads(json.dumps(circuit_to_json(c))))
    assert back.kinds == c.kinds
    assert back.kinds[0].fields[0].enum == ("Op", (("ADD", 0), ("SUB", 1), ("NEG", 5)))
    compile_to_dir(c, tmp_path / "calc", dtype="fp32")
    eng = HFEngine(tmp_path / "calc")
    assert format_token(eng.circuit, Token(0, (5, 2))) == "T op=NEG x=2"
    assert main(["check", str(tmp_path / "calc"), "--steps", "5", "--start", "T op=SUB x=9"]) == 0
    assert capsys.readouterr().out.startswith("OK: 3 positions")
