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


def test_config_targets_are_keyed_by_their_shapes(tmp_path, monkeypatch):
    """A config file named like a built-in target, or two configs that share a file name,
    never share a cache entry: the entry's name carries a digest of the target's shapes."""
    import json
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    cfg = {"hidden_size": 256, "intermediate_size": 96, "linear_num_key_heads": 2,
           "linear_num_value_heads": 4, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
           "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6}
    paths = []
    for d, heads in (("a", 2), ("b", 4)):
        (tmp_path / d).mkdir()
        p = tmp_path / d / "compact"
        p.write_text(json.dumps({**cfg, "linear_num_key_heads": heads,
                                 "linear_num_value_heads": 2 * heads}))
        paths.append(engines.compiled_core_path(TINY, str(p), "bf16"))
    builtin = engines.compiled_core_path(TINY, "compact", "bf16")
    assert len({builtin, *paths}) == 3
    assert builtin.name.endswith("-compact-bf16") and paths[0].name.split("-")[-3] == "compact"
    # the same shapes under another file name: the same digest
    (tmp_path / "c.json").write_text((tmp_path / "a" / "compact").read_text())
    other = engines.compiled_core_path(TINY, str(tmp_path / "c.json"), "bf16")
    assert other.name.split("-")[-2] == paths[0].name.split("-")[-2]
