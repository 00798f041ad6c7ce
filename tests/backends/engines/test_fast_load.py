"""The fast engine's stored sparse form (backends/engines/fast/stored.py): made once, then mapped.

Loaded from the stored form the model equals the one made from the checkpoint, array for
array, and runs the same tokens and memories (and the same as transformers); a user's
directory is never written (the form goes to the cache, keyed by its digests), a core
cache entry keeps it beside its weights; a truncated, corrupt or stale form is found,
named and rebuilt, never used; the write is atomic (a failed write leaves nothing, a dead
process's leftovers are swept). The full core's form is tested in tests/cpu/test_core_fast.py.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import deltachip
from backends.chipdir import manifest
from backends.verify.check import compare_engines, load_engine
from backends.engines.fast import model as fmodel, stored
from backends.engines.fast.engine import FastEngine
from common.outputs import temp_name_prefix

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def chip_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("stack") / "chip"
    deltachip.compile(deltachip.load(ROOT / "examples/stack_machine/stack_machine.hdl"),
                      target="compact", dtype="bf16").save(d)
    return d


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh DELTACHIP_CACHE, and small checkpoints stored too."""
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stored, "STORE_FROM", 0)
    return tmp_path / "cache"


def _tree(d: Path) -> dict[str, tuple[int, int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino)
            for p in sorted(d.rglob("*"))}


def _form(cache: Path) -> Path:
    (d,) = (cache / stored.CACHE).iterdir()
    return d


def _engine(d: Path, capfd, said: str = "") -> FastEngine:
    """A fast engine of ``d``; what it said on stderr must be ``said``."""
    eng = FastEngine(d)
    assert capfd.readouterr().err == said
    return eng


def test_the_stored_form_equals_the_checkpoints_and_runs_the_same(chip_dir, cache, capfd):
    before = _tree(chip_dir)
    eng = FastEngine(chip_dir)
    form = _form(cache)
    assert capfd.readouterr().err == (f"fast engine: storing the sparse form of {chip_dir} in "
                                      f"{form} (first load only)\n")
    assert _tree(chip_dir) == before                    # the user's directory untouched
    assert form.name == stored.checkpoint_key(chip_dir)[0][:32]
    assert sorted(p.name for p in form.iterdir()) == [manifest.MANIFEST, stored.WEIGHTS,
                                                     manifest.STAMP]
    again = _engine(chip_dir, capfd)                    # mapped: nothing said, nothing made
    assert again.model.layers[0].ip.val.flags.writeable is False
    want = fmodel.load(chip_dir, "bf16")
    for m in (eng.model, again.model):
        assert stored.first_difference(m, want) is None
    # every array there, and no array the checkpoint's model lacks
    arrays, _ = stored.flatten(want)
    assert len(arrays) > 100 and set(arrays) == set(stored.flatten(again.model)[0])
    # the same tokens and memories as the model made from the checkpoint, and as hf
    cold = FastEngine(chip_dir, sparse_form=False)
    ca, cb = again.new_cache(2), cold.new_cache(2)
    ids = [0, 1]
    for _ in range(40):
        a, b = again.decode_step(ids, ca).tolist(), cold.decode_step(ids, cb).tolist()
        assert a == b
        ids = a
    for li in again._gdn:
        for row in range(2):
            assert np.array_equal(again.recurrent_state(ca, li, row).numpy(),
                                  cold.recurrent_state(cb, li, row).numpy())
    rep = compare_engines(again, load_engine("hf", chip_dir), steps=60, batch=2)
    assert rep.ok, "\n".join(rep.problems())
    assert rep.positions > 10 and rep.memory_checks > 0


def test_the_numpy_kernel_runs_the_stored_form(chip_dir, cache, capfd, monkeypatch):
    FastEngine(chip_dir)
    capfd.readouterr()
    monkeypatch.setenv("DELTACHIP_FAST_KERNEL", "python")
    mapped = _engine(chip_dir, capfd)                   # read-only arrays
    assert type(mapped.native).__name__ == "PyKernel"
    cold = FastEngine(chip_dir, sparse_form=False)
    ca, cb = mapped.new_cache(1), cold.new_cache(1)
    ids = [0]
    for _ in range(12):
        a, b = mapped.decode_step(ids, ca).tolist(), cold.decode_step(ids, cb).tolist()
        assert a == b
        ids = a


def test_a_core_cache_entry_keeps_its_form_beside_its_weights(chip_dir, cache, capfd):
    entry = cache / "cores" / "rv32-x-compact-bf16"
    shutil.copytree(chip_dir, entry)
    FastEngine(entry)
    assert capfd.readouterr().err == (f"fast engine: storing the sparse form of {entry} in "
                                      f"{entry / stored.BESIDE} (first load only)\n")
    assert (entry / stored.BESIDE / stored.WEIGHTS).is_file()
    assert not (cache / stored.CACHE).exists()
    assert manifest.problem(entry) is None              # the entry still matches its manifest


def _damage_cases():
    def truncate(f: Path) -> str:
        size = f.stat().st_size
        os.truncate(f, size - 100)
        return (f"damaged ({stored.WEIGHTS} has {size - 100:,} bytes, not the {size:,} "
                f"{manifest.MANIFEST} records)")

    def flip(f: Path) -> str:               # one bit of the data, the size kept
        with open(f, "r+b") as fh:
            fh.seek(f.stat().st_size - 5)
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 1]))
        return f"damaged ({stored.WEIGHTS} does not match its sha256 digest in manifest.json)"

    def header(f: Path) -> str:             # a bad header, recorded in the manifest
        raw = f.read_bytes()
        f.write_bytes(struct.pack("<Q", 10**12) + raw[8:])
        manifest.write(f.parent, [stored.WEIGHTS])
        return (f"damaged ({f}: corrupt (its header length field says 1,000,000,000,000 "
                "bytes, more than safetensors' limit of 104,857,600))")

    def metadata(f: Path) -> str:           # valid safetensors, not a model this code reads
        from safetensors.numpy import load_file, save_file
        from backends.chipdir.stfile import read_header
        md = read_header(f).metadata
        arrays = load_file(str(f))
        del arrays["nf"]
        f.unlink()
        save_file(arrays, str(f), metadata=md)
        manifest.write(f.parent, [stored.WEIGHTS])
        return "damaged (it lacks the array nf)"

    def manifest_gone(f: Path) -> str:
        (f.parent / manifest.MANIFEST).unlink()
        return f"damaged ({manifest.MANIFEST} is missing)"

    def not_a_dir(f: Path) -> str:
        shutil.rmtree(f.parent)
        f.parent.write_text("x")
        return "damaged (it is not a directory)"
    return [truncate, flip, header, metadata, manifest_gone, not_a_dir]


@pytest.mark.parametrize("damage", _damage_cases(), ids=lambda f: f.__name__)
def test_a_damaged_form_is_named_and_rebuilt(chip_dir, cache, capfd, damage):
    FastEngine(chip_dir)
    form = _form(cache)
    capfd.readouterr()
    why = damage(form / stored.WEIGHTS)
    eng = FastEngine(chip_dir)
    assert capfd.readouterr().err == (f"fast engine: the sparse form at {form} is {why}; "
                                      f"rebuilding it\n")
    assert stored.first_difference(eng.model, fmodel.load(chip_dir, "bf16")) is None
    assert stored.read(form, stored.checkpoint_key(chip_dir)[0], chip_dir,
                       eng.chip).__class__ is fmodel.FastModel     # rebuilt whole
    _engine(chip_dir, capfd)


def test_a_stale_form_is_named_and_rebuilt(chip_dir, cache, capfd, monkeypatch):
    entry = cache / "cores" / "rv32-x-compact-bf16"
    shutil.copytree(chip_dir, entry)
    FastEngine(entry)
    form = entry / stored.BESIDE
    capfd.readouterr()
    # made by another version of the code that makes the model
    real = stored.source_digest()
    monkeypatch.setattr(stored, "source_digest", lambda: "0" * 64)
    _engine(entry, capfd, f"fast engine: the sparse form at {form} is stale (made by another "
                          "version of the fast engine); rebuilding it\n")
    monkeypatch.setattr(stored, "source_digest", lambda: real)
    _engine(entry, capfd, f"fast engine: the sparse form at {form} is stale (made by another "
                          "version of the fast engine); rebuilding it\n")
    # the entry's weights changed (another core compiled there): another manifest
    cfg = json.loads((entry / "config.json").read_text())
    (entry / "config.json").write_text(json.dumps(cfg, indent=2))
    manifest.write(entry, [n for n in json.loads((entry / manifest.MANIFEST).read_text())
                           ["files"]])
    _engine(entry, capfd, f"fast engine: the sparse form at {form} is stale (made for "
                          "another checkpoint: its digests differ); rebuilding it\n")
    _engine(entry, capfd)


def test_a_failed_write_leaves_nothing_and_the_model_loads(chip_dir, cache, capfd, monkeypatch):
    import safetensors.numpy

    def dies(arrays, path, metadata=None):
        Path(path).write_bytes(b"half a file")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(safetensors.numpy, "save_file", dies)
    eng = FastEngine(chip_dir)
    err = capfd.readouterr().err.splitlines()
    folder = cache / stored.CACHE
    form = folder / stored.checkpoint_key(chip_dir)[0][:32]
    assert err == [f"fast engine: storing the sparse form of {chip_dir} in {form} (first load "
                   "only)",
                   f"fast engine: cannot write {form}: writing the fast engine's sparse form "
                   "failed: No space left on device (nothing was changed); not stored (the "
                   "next load tries again)"]
    assert list(folder.iterdir()) == []                 # no form, no temporary
    assert stored.first_difference(eng.model, fmodel.load(chip_dir, "bf16")) is None


def test_a_dead_writers_leftovers_are_swept_and_a_full_disk_is_said(chip_dir, cache, capfd,
                                                                      monkeypatch):
    form = cache / stored.CACHE / stored.checkpoint_key(chip_dir)[0][:32]
    form.parent.mkdir(parents=True)
    dead = form.parent / (temp_name_prefix(form).replace(f"-{os.getpid()}-", "-999999999-")
                          + "x")
    dead.mkdir()
    (dead / stored.WEIGHTS).write_bytes(b"half")
    FastEngine(chip_dir)
    assert sorted(p.name for p in form.parent.iterdir()) == [form.name]
    shutil.rmtree(form)
    capfd.readouterr()
    import common.outputs
    monkeypatch.setattr(common.outputs, "disk_shortfall",
                        lambda out, need: f"needs {need} bytes, there are 0 free")
    FastEngine(chip_dir)
    err = capfd.readouterr().err.splitlines()
    assert err[1].startswith(f"fast engine: cannot write {form}: it needs ") and \
        err[1].endswith(" bytes, there are 0 free; not stored (the next load tries again)")
    assert not form.exists()


def test_small_and_unkeyed_checkpoints_load_from_their_files(chip_dir, tmp_path, capfd,
                                                             monkeypatch):
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    FastEngine(chip_dir)                                # below STORE_FROM
    assert capfd.readouterr().err == "" and not (tmp_path / "cache" / stored.CACHE).exists()
    monkeypatch.setattr(stored, "STORE_FROM", 0)
    bare = tmp_path / "bare"
    shutil.copytree(chip_dir, bare)
    (bare / manifest.MANIFEST).unlink()                 # no digests to key it by
    FastEngine(bare)
    assert capfd.readouterr().err == "" and not (tmp_path / "cache" / stored.CACHE).exists()
