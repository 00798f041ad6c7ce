"""Lane-level checking (backends.compile.lanemap, backends.verify.check): every live residual lane after
every sublayer equals its designed value, and the check bites where the token-level check
does not.

The perturbation tests change one emission constant (the z-gate slope of packed ROM reads,
halved as in issue 12; an MLP down weight) and assert that ``check`` names the exact layer,
sublayer, lane and HDL signal (file:line:col) while the token and memory comparison alone
still passes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from transformers.utils import logging as hf_logging

from tests.backends import circuits  # noqa: E402

from hdl.frontend import load_circuit  # noqa: E402
from hdl.ir import Token  # noqa: E402
from backends.chipdir import manifest  # noqa: E402
from backends.compile import emit  # noqa: E402
from backends.verify.check import check_dir, check_engine  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from backends.engines.hf import HFEngine  # noqa: E402
from backends.compile.lanemap import LaneMap  # noqa: E402

hf_logging.disable_progress_bar()

# A pointer chase through a packed ROM (2 words per row at compact shapes: z-gate select).
WALK = """\
circuit Walk {
    token Step(i: u6, acc: u8);
    token Stop halt;
    start Step(i: 1, acc: 0);
    rom table: u8[64] = "table.hex";

    let word = table[tok.Step.i];
    let other = table[tok.Step.i + 1];
    next = Step(i: word[5:0], acc: tok.Step.acc ^ other);
}
"""
WORD_LINE = 7           # `let word = ...` (1-based), column 5


def walk_dir(root: Path, dtype: str = "bf16") -> Path:
    """WALK compiled into ``root/chip`` (its ROM: a fixed pseudo-random image)."""
    src = root / "walk.hdl"
    src.write_text(WALK)
    (root / "table.hex").write_text(" ".join(f"{(i * 157 + 91) % 256:02x}" for i in range(64)))
    out = root / "chip"
    compile_to_dir(load_circuit(src), out, dtype=dtype)
    return out


def _recorded(d: Path) -> None:
    """Record ``d``'s edited files in its manifest, as a compiler that wrote them would have
    (the edits here stand for compiler bugs, which the digests cannot see)."""
    manifest.write(d, [f.name for f in d.iterdir() if f.name != manifest.MANIFEST])


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("prefill", [False, True])
@pytest.mark.parametrize("name", ["counter", "alu", "ram", "rom"])
def test_every_lane_holds_its_design(tmp_path, name, dtype, prefill):
    builders = {"counter": lambda: circuits.counter(8, 9), "alu": lambda: circuits.alu(5),
                "ram": circuits.ram_circuit, "rom": circuits.rom_circuit}
    compile_to_dir(builders[name](), tmp_path / "c", dtype=dtype)
    rep = check_dir(tmp_path / "c", steps=20, prefill=prefill, batch=2)
    assert rep.ok, [str(x) for x in rep.lanes + rep.signals + rep.mismatches]
    lm = LaneMap(json.loads((tmp_path / "c" / "chip.json").read_text())["lanemap"],
                 HFEngine(tmp_path / "c").circuit)
    assert rep.lane_checks == rep.positions * lm.checks_per_position > 0


def test_halved_z_slope_is_caught_at_the_lane(tmp_path, monkeypatch):
    """Issue 12's example: the z gate of packed ROM reads at half slope leaks -1.6e-28 from
    the unselected word; no next token changes, so only the lane check sees it."""
    good = walk_dir(tmp_path)
    chip = json.loads((good / "chip.json").read_text())
    assert chip["memories"]["table"]["pack"] >= 1
    layer = chip["memories"]["table"]["layer"]
    assert check_dir(good, steps=30).ok
    monkeypatch.setattr(emit, "ZSEL", emit.ZSEL // 2)
    (tmp_path / "bad").mkdir()
    bad = walk_dir(tmp_path / "bad")
    for prefill in (False, True):
        tokens_only = check_dir(bad, steps=30, prefill=prefill, lanes=False)
        assert tokens_only.ok and tokens_only.memory_checks > 0
        rep = check_dir(bad, steps=30, prefill=prefill)
        assert not rep.ok and not rep.mismatches and not rep.signals
        d = rep.lanes[0]
        assert (d.row, d.position, d.layer, d.sublayer) == (0, 0, layer, "GDN")
        assert d.designed == 0 and d.model != 0 and abs(d.model) < 1e-20
        text = str(d)
        assert f"layer {layer} GDN: lane {d.lane} `table[].0` (residual dim {d.dim}) carrying " \
               f"bit 0 of signal `word` (mem_read at " in text, text
        assert f"walk.hdl:{WORD_LINE}:" in text, text


def test_mlp_weight_error_is_caught_at_its_lane(tmp_path):
    """A down-projection weight off by 2^-8 (below what the next argmax notices) in one
    neuron: reported after that MLP, at the lane the neuron writes."""
    good = walk_dir(tmp_path)
    chip = json.loads((good / "chip.json").read_text())
    lm = chip["lanemap"]
    L = min(int(k) for k, v in lm["layers"].items() if v["c"])
    x = lm["layers"][str(L)]
    lane = x["ol"][0]
    dim = lm["lanes"][lane][0]
    neuron = x["on"][0]
    sd = load_file(good / "model.safetensors")
    name = f"model.layers.{L}.mlp.down_proj.weight"
    col = (sd[name][dim] != 0).nonzero()[:, 0]
    assert len(col)
    sd[name][dim, col[0]] *= 1 + 2 ** -7
    save_file(sd, good / "model.safetensors", metadata={"format": "pt"})
    _recorded(good)
    assert check_dir(good, steps=30, lanes=False).ok
    rep = check_dir(good, steps=30)
    assert not rep.ok and not rep.mismatches
    d = rep.lanes[0]
    assert (d.layer, d.sublayer, d.dim) == (L, "MLP", dim)
    assert neuron >= 0


def test_lowering_error_is_a_signal_divergence(tmp_path):
    """A named signal whose recorded Program form disagrees with the simulator (what a
    lowering bug looks like: the weights follow the Program) is reported as such."""
    good = walk_dir(tmp_path)
    path = good / "chip.json"
    chip = json.loads(path.read_text())
    nid, bits = next((k, v) for k, v in chip["lanemap"]["signals"].items()
                     if chip["circuit"] and v and v[0] is not None)
    f = bits[0]
    bits[0] = [1 - f[0], f[1], [-w for w in f[2]]]          # the bit's negation
    path.write_text(json.dumps(chip))
    _recorded(good)
    rep = check_dir(good, steps=5)
    assert rep.signals and rep.signals[0].position == 0 and rep.signals[0].bit == 0
    assert str(rep.signals[0]).startswith("position 0: signal `")


def test_old_chip_without_lane_map_is_noted(tmp_path):
    good = walk_dir(tmp_path)
    path = good / "chip.json"
    chip = json.loads(path.read_text())
    del chip["lanemap"]
    path.write_text(json.dumps(chip))
    _recorded(good)
    rep = check_dir(good, steps=5)
    assert rep.ok and rep.lane_checks == 0
    assert rep.notes == ["chip.json has no lane map (compiled by an older deltachip): lanes "
                         "not compared; recompile it with `deltachip compile` to compare them"]


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_prefill_in_chunks_is_exact(tmp_path, dtype):
    """The cache carries over between prefill calls: chunks of 1, 3 and 7 positions give
    the same (exact) result as one call, on a RAM circuit (writes cross chunk borders); the
    memories are compared after every call."""
    compile_to_dir(circuits.ram_circuit(), tmp_path / "c", dtype=dtype)
    eng = HFEngine(tmp_path / "c")
    starts = [Token(0, (3, 7)), Token(0, (15, 128))]
    for chunk in (1, 3, 7, 2048):
        rep = check_engine(eng, 20, batch=2, prefill=True, starts=starts, chunk=chunk)
        assert rep.ok and rep.positions == 42 and rep.memory_checks == 2 * -(-21 // chunk), chunk


def test_prefill_never_builds_the_whole_stream(tmp_path, monkeypatch):
    """``--prefill --steps 100000000`` on a circuit that never halts: each call is at most
    one chunk; the run stops once ``max_mismatches`` are found (here the model is made to
    disagree at every position, so it stops after the first chunk)."""
    eng = HFEngine(walk_dir(tmp_path))          # WALK never emits its halt kind
    calls = []
    real = eng.prefill

    def spy(ids, cache=None):
        calls.append(ids.shape[1])
        pred, cache = real(ids, cache)
        return pred + 1, cache
    monkeypatch.setattr(eng, "prefill", spy)
    rep = check_engine(eng, 10 ** 8, prefill=True, chunk=64, lanes=False, max_mismatches=20)
    assert calls == [64] and len(rep.mismatches) == 20 and rep.positions == 64


def test_cli_prints_the_first_diverging_lane(tmp_path, monkeypatch, capsys):
    from deltachip.cli import main
    monkeypatch.setattr(emit, "ZSEL", emit.ZSEL // 2)
    bad = walk_dir(tmp_path)
    capsys.readouterr()
    assert main(["check", str(bad), "--steps", "10", "--no-lanes"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "OK: 11 positions (decode, bf16, batch 1), 11 memory comparisons, 0 lane values compared")
    assert main(["check", str(bad), "--steps", "10"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("LANE position 0: layer 0 GDN: lane ")
    assert "carrying bit 0 of signal `word` (mem_read at " in lines[0]
    assert "walk.hdl:7:16): designed 0, model -1.6" in lines[0]
    assert lines[-1].startswith("FAILED (1 mismatches shown): 11 positions (decode, bf16, "
                                "batch 1), 11 memory comparisons, ")


def test_tall_carry_save_column_stays_within_the_exact_span(tmp_path):
    """A sum of 51 four-bit terms: its columns are 51 rows tall, so the carry-save
    compressor's block width is set by the largest exact pre-activation (256 in bf16; one
    block more would reach 357). It compiles, and every lane holds its design."""
    terms = " + ".join(f"zext({v}[{i + 3}:{i}], 10)" for v in "xyz" for i in range(17))
    src = tmp_path / "tall.hdl"
    src.write_text(f"""circuit Tall {{
    token In(x: u20);
    start In(x: 12345);
    ram r: u20[1];
    ram q: u20[1];
    let x = tok.In.x;
    r[0] <= x;
    q[0] <= r[0];
    let y = r[0];
    let z = q[0];
    let s: u10 = {terms};
    next = In(x: (x * 3) + zext(s, 20) + 7);
}}
""")
    compile_to_dir(load_circuit(src), tmp_path / "chip", dtype="bf16")
    rep = check_dir(tmp_path / "chip", steps=24)
    assert rep.ok and rep.lane_checks > 0, [str(x) for x in rep.lanes + rep.mismatches]
