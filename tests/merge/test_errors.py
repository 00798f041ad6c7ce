"""A merge that cannot be done says why and leaves nothing behind: no OUT_DIR, no temporary
beside it, BASE_DIR and the chip untouched."""
from __future__ import annotations

import errno
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backends.chipdir import stfile
from backends.merge import routed
from backends.merge.routed import merge_routed
from backends.chipdir.stfile import MergeError


def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _refused(base: Path, chip: Path, out: Path, match: str | None = None, **kw) -> MergeError:
    """The merge fails with a message matching ``match`` (None: any, for a caller that
    compares the whole text); nothing is left in out's folder but what was there, and the
    base is unchanged."""
    before = _digest(base)
    around = sorted(p.name for p in out.parent.iterdir())
    with pytest.raises(MergeError, match=match) as e:
        merge_routed(base, out, chip, **kw)
    assert sorted(p.name for p in out.parent.iterdir()) == around
    assert _digest(base) == before
    return e.value


def test_a_non_qwen_base_is_refused(bases, chips, tmp_path):
    base = _copy(bases["tied"], tmp_path / "llama")
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(model_type="llama", architectures=["LlamaForCausalLM"])
    (base / "config.json").write_text(json.dumps(cfg))
    _refused(base, chips["counter"], tmp_path / "out",
             r"model_type is \"llama\", not 'qwen3_5_text': merge takes a Qwen3.5 text")


def test_a_routed_merge_is_not_a_base(merged, chips, tmp_path):
    """A routed merge's config.json says model_type qwen3_5_text (for AutoTokenizer): as a
    base it is still named for what it is."""
    base = _copy(merged("tied", "counter"), tmp_path / "merged")
    _refused(base, chips["counter"], tmp_path / "out",
             r"config\.json: is a routed merge's config \(deltachip merge's output, its base "
             r"in base_config\): merge takes a Qwen3\.5 text checkpoint; give the base it was "
             r"made from")


def test_a_vision_language_base_needs_its_text_config_and_text_model(bases, chips, tmp_path):
    base = _copy(bases["vl"], tmp_path / "vl")
    cfg = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**cfg, "text_config": None}))
    _refused(base, chips["counter"], tmp_path / "out",
             r"model_type is 'qwen3_5' \(the vision-language Qwen3\.5\) but it has no "
             r"text_config object to take the text model from")
    # its text model is checked as stored, under model.language_model.
    from safetensors.torch import load_file, save_file
    (base / "config.json").write_text(json.dumps(cfg))
    weights = load_file(str(base / "model.safetensors"))
    del weights["model.language_model.layers.0.mlp.up_proj.weight"]
    weights["model.stray.weight"] = weights["model.language_model.norm.weight"].clone()
    save_file(weights, str(base / "model.safetensors"), {"format": "pt"})
    _refused(base, chips["counter"], tmp_path / "out",
             r"does not fit its config.json: tensor model\.stray\.weight is not part of a "
             r"Qwen3\.5 model \(its text model is stored under model\.language_model\.\) "
             r"\(and 1 more\)")
    del weights["model.stray.weight"]
    save_file(weights, str(base / "model.safetensors"), {"format": "pt"})
    _refused(base, chips["counter"], tmp_path / "out", r"tensor model\.language_model\.layers"
             r"\.0\.mlp\.up_proj\.weight is missing$")


def test_a_truncated_shard_is_refused(bases, chips, tmp_path):
    base = _copy(bases["sharded"], tmp_path / "cut")
    shard = base / "model-00003-of-00011.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) - 1000])
    _refused(base, chips["counter"], tmp_path / "out",
             r"model-00003-of-00011\.safetensors: truncated")


def test_a_missing_shard_and_a_misfit_tensor_are_refused(bases, chips, tmp_path):
    base = _copy(bases["sharded"], tmp_path / "gone")
    (base / "model-00002-of-00011.safetensors").unlink()
    _refused(base, chips["counter"], tmp_path / "out", r"shard model-00002-of-00011\.safetensors "
             r"is missing")
    base = _copy(bases["untied"], tmp_path / "wide")
    cfg = json.loads((base / "config.json").read_text())
    cfg["intermediate_size"] = 256
    (base / "config.json").write_text(json.dumps(cfg))
    _refused(base, chips["counter"], tmp_path / "out2", r"does not fit its config\.json: tensor "
             r"model\.layers\.0\.mlp\.gate_proj\.weight is \[128, 64\], config\.json makes it "
             r"\[256, 64\] \(and 11 more\)")


def test_an_untied_base_without_lm_head_is_refused(bases, chips, tmp_path):
    base = _copy(bases["tied"], tmp_path / "untie")
    cfg = json.loads((base / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (base / "config.json").write_text(json.dumps(cfg))
    _refused(base, chips["counter"], tmp_path / "out", r"tensor lm_head\.weight is missing")


def test_a_full_disk_leaves_nothing(bases, chips, tmp_path, monkeypatch):
    real = stfile._copy

    def full(fi, fo, n, src):
        real(fi, fo, min(n, 1000), src)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(stfile, "_copy", full)
    _refused(bases["untied"], chips["counter"], tmp_path / "out",
             r"cannot write the merged checkpoint: No space left on device \(nothing was changed\)")


def test_an_interrupt_leaves_nothing_and_keeps_a_previous_merge(bases, chips, tmp_path,
                                                                monkeypatch):
    out = tmp_path / "out"
    merge_routed(bases["tied"], out, chips["counter"])
    before = _digest(out)

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(routed, "write_file", interrupt)
    with pytest.raises(KeyboardInterrupt):
        merge_routed(bases["untied"], out, chips["counter"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert _digest(out) == before


def test_out_dir_must_not_touch_the_base_or_hold_other_files(bases, chips, tmp_path):
    base = _copy(bases["tied"], tmp_path / "base")
    _refused(base, chips["counter"], base / "merged", r"overlaps the base directory")
    with pytest.raises(MergeError, match="is the base directory"):
        merge_routed(base, base, chips["counter"])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    _refused(base, chips["counter"], tmp_path / "mine", r"not a deltachip merge \(it holds "
             r"'notes\.txt'\)")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_the_chip_dtype_must_match(bases, chips, tmp_path):
    _refused(bases["tied"], chips["counter"], tmp_path / "out",
             r"compiled for bf16, not fp32: .*--dtype fp32", dtype="fp32")


def test_cli_merges_and_reports_errors_with_status_2(bases, chips, tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "deltachip", "merge", *map(str, args)],
                              capture_output=True, text=True)
    r = cli(bases["tied"], tmp_path / "ok", "--chip", chips["counter"])
    assert r.returncode == 0, r.stderr
    assert "routed merge, 2 shards" in r.stdout and "chip tokens 320..576" in r.stdout
    assert (tmp_path / "ok" / "modeling_deltachip.py").is_file()
    r = cli(tmp_path / "nowhere", tmp_path / "bad", "--chip", chips["counter"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "nowhere: no such directory" in r.stderr
    assert not (tmp_path / "bad").exists()
