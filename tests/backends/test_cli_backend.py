"""`deltachip compile` / `deltachip check` end to end on the shipped counter example."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[2]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"


@pytest.mark.skipif(not COUNTER.exists(), reason="examples/counter not present")
def test_compile_then_check(tmp_path, capsys):
    out = tmp_path / "counter"
    assert main(["compile", str(COUNTER), "-o", str(out), "--dtype", "fp32"]) == 0
    assert {p.name for p in out.iterdir()} == {"config.json", "model.safetensors", "chip.json"}
    printed = capsys.readouterr().out
    assert "nonzero weights" in printed
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["architectures"] == ["Qwen3_5ForCausalLM"]
    assert main(["check", str(out), "--steps", "20"]) == 0
    assert "OK: 11 positions (decode, fp32, batch 1)" in capsys.readouterr().out
    assert main(["check", str(out), "--steps", "20", "--dtype", "bf16", "--prefill",
                 "--batch", "2", "--start", "Count value=4"]) == 0
    assert "OK:" in capsys.readouterr().out
    # recompiling over an existing directory replaces it atomically
    assert main(["compile", str(COUNTER), "-o", str(out)]) == 0
    assert json.loads((out / "chip.json").read_text())["dtype"] == "bf16"


def test_check_bad_directory(tmp_path, capsys):
    assert main(["check", str(tmp_path), "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path}: not a compiled chip directory (cannot read chip.json")


@pytest.mark.skipif(not COUNTER.exists(), reason="examples/counter not present")
def test_compile_bad_target(tmp_path, capsys):
    assert main(["compile", str(COUNTER), "-o", str(tmp_path / "x"), "--target", "huge"]) == 2
    assert "unknown target 'huge': expected compact, qwen3.5-4b or the path of a Qwen3.5 " \
           "config.json" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
