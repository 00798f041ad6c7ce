"""The fast engine's stop messages (backends/engines/fast/errors.py), golden: a stream stopped on a
value every deltachip checkpoint keeps exact says how to tell damaged weights from a wrong
engine (`deltachip check DIR`) and what helps in each case; it never sends a damaged
checkpoint to another engine unasked."""
from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from safetensors.torch import load_file, save_file

import deltachip
from backends.chipdir import manifest
from backends.verify.check import check_engine
from backends.engines.fast.errors import REASONS, FastError, message
from common.errors import UserError

ROOT = Path(__file__).resolve().parents[3]


def _model(path="/m/chip", layers=3):
    return SimpleNamespace(path=Path(path), layers=[None] * layers)


def test_a_stop_on_a_value_kept_exact_names_the_check_and_the_remedies():
    e = message(_model(), 17, 3, 2, 4096.0, where="stream 4: ")
    assert isinstance(e, FastError) and isinstance(e, UserError)
    assert str(e) == (
        "fast engine: stream 4: at position 17, layer 2: a silu input outside the range "
        "where its value is exact (value 4096): every checkpoint deltachip writes keeps it "
        "exact, so the stream stops. `deltachip check /m/chip` runs the checkpoint in "
        "transformers against the simulator: if they differ, its weights are damaged: "
        "compile it again (a merged checkpoint: merge it again); if they agree, the fast "
        "engine is wrong here: run it with --engine hf")


@pytest.mark.parametrize("layer, at", [(-1, "the embedding"), (0, "layer 0"),
                                       (3, "the lm_head")])
def test_where_the_stream_stopped(layer, at):
    assert str(message(_model(), 0, 8, layer, 0.5)).startswith(
        f"fast engine: at position 0, {at}: {REASONS[8]} (value 0.5): every checkpoint")


@pytest.mark.parametrize("code", sorted(set(REASONS) - {1}) + [99])
def test_every_reason_points_at_check_before_another_engine(code):
    text = str(message(_model(), 5, code, 1, 1.0))
    assert (REASONS.get(code, f"error {code}")) in text
    assert text.index("deltachip check /m/chip") < text.index("merge it again") < \
        text.index("--engine hf")


def test_an_input_id_outside_the_vocabulary_is_the_input_s():
    assert str(message(_model(), 2, 1, -1, 999.0)) == (
        "fast engine: at position 2, the embedding: token id outside the vocabulary "
        "(value 999): the stream stops (its input names no token of the chip)")


def test_a_damaged_weight_stops_the_stream_with_the_directory_named(tmp_path):
    """A weight changed consistently with the digests (gate pre-activations scaled into
    silu's inexact range): the stop names the checkpoint to check."""
    from backends.engines.fast.engine import FastEngine
    d = tmp_path / "chip"
    deltachip.compile(deltachip.load(ROOT / "examples/counter/counter.hdl"),
                      target="compact", dtype="bf16").save(tmp_path / "good")
    shutil.copytree(tmp_path / "good", d)
    f = next(d.glob("*.safetensors"))
    t = load_file(f)
    g = t["model.layers.0.mlp.gate_proj.weight"]
    g[g != 0] = g[g != 0] / 64
    save_file(t, f, metadata={"format": "pt"})
    manifest.write(d, [p.name for p in d.iterdir() if p.name != manifest.MANIFEST])
    with pytest.raises(FastError) as e:
        check_engine(FastEngine(d), steps=12)
    text = str(e.value)
    assert "layer 0: a silu input outside" in text
    assert f"`deltachip check {d}`" in text and "compile it again" in text
