"""The core cache ($DELTACHIP_CACHE/cores): one entry per (core source, sizes, target,
dtype); compiling a new entry removes the stale ones of the same sizes, target and dtype."""
from __future__ import annotations

import backends.compiler
from cpu.rv32 import engines
from cpu.rv32.build import TINY


def test_compiling_a_core_removes_only_its_stale_entries(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))
    want = engines.compiled_core_path(TINY, "compact", "bf16")
    suffix = want.name.split("-", 2)[2]
    root = want.parent
    stale = root / f"rv32-0123456789abcdef-{suffix}"
    other_dtype = root / f"rv32-0123456789abcdef-{suffix.replace('bf16', 'fp32')}"
    other_sizes = root / "rv32-0123456789abcdef-full-compact-bf16"
    foreign = root / f"notes-{suffix}"
    for d in (stale, other_dtype, other_sizes, foreign):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x" * 1000)
    assert engines.stale_cores(TINY, "compact", "bf16") == [stale]

    def fake_compile(circuit, out, target, dtype, progress=None, byte_cells=None):
        out.mkdir(parents=True, exist_ok=True)
        (out / "chip.json").write_text("{}")
    monkeypatch.setattr(backends.compiler, "compile_to_dir", fake_compile)
    assert engines.compiled_core(TINY, "compact", "bf16") == want
    assert not stale.exists()
    assert other_dtype.is_dir() and other_sizes.is_dir() and foreign.is_dir()
    assert f"removed the stale compiled core {stale} (0.0 GB" in capsys.readouterr().err
    # a cached entry is used as it is: nothing compiled, nothing removed
    stale.mkdir()
    assert engines.compiled_core(TINY, "compact", "bf16") == want
    assert stale.is_dir()
