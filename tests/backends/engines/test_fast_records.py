"""What a second run keeps from the first, checked before use (issue 41: a second `deltachip
run` in two seconds): the records of backends/engines/fast/records.py (whole and for the same
inputs, else named and made again), chip.json's run record (:func:`backends.engines.base.run_chip`:
keyed on chip.json's digest in the manifest, the engine it gives equal to one that read
chip.json whole), and the ROM images' recurrent state made in numpy, equal bit for bit to
the compiler's torch rows (:func:`backends.chipdir.memory.rom_state`). The core's own: tests/cpu/
test_core_run_load.py."""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

import deltachip
from backends.chipdir import manifest
from backends.engines import base as chip_engine
from backends.chipdir.checkpoint import ChipDirError, load_chip_json
from backends.chipdir.memory import rom_state
from backends.chipdir.memory import NumView, ProgView, rom_state_np
from backends.engines.base import RUN_OMITS, run_chip
from backends.engines.fast import records, stored
from backends.engines.fast.engine import FastEngine

ROOT = Path(__file__).resolve().parents[3]


# ---- records ------------------------------------------------------------------------------

def test_a_record_is_read_back_only_whole_and_for_its_key(tmp_path):
    rec = tmp_path / "r" / "a.json"
    assert records.read(rec, "k", {"x": 1}) == (None, None)              # none yet
    assert records.write(rec, "k", {"x": 1}, {"body": [1, 2, 3]})
    assert records.read(rec, "k", {"x": 1}) == ({"body": [1, 2, 3]}, None)
    assert records.read(rec, "k", {"x": 2}) == (None, "stale (made for other inputs)")
    assert records.read(rec, "other", {"x": 1})[1].startswith("stale (a 'k' record")
    assert [p.name for p in rec.parent.iterdir()] == ["a.json"]         # no temporary left
    whole = rec.read_text()
    data = json.loads(whole)
    data["body"] = data["body"].replace("3", "4")                       # valid JSON, changed
    rec.write_text(json.dumps(data))
    assert records.read(rec, "k", {"x": 1}) == (
        None, "damaged (its body does not match its sha256 digest)")
    rec.write_text(whole[:len(whole) // 2])                             # cut short
    body, why = records.read(rec, "k", {"x": 1})
    assert body is None and why.startswith("damaged (not JSON: ")
    rec.write_text('{"format": "something else"}')
    assert records.read(rec, "k", {"x": 1}) == (None, "damaged (not a deltachip-record)")


def test_a_record_that_cannot_be_used_is_named_and_made_again(tmp_path, capfd):
    rec = tmp_path / "a.json"
    made = []

    def make():
        made.append(1)
        return {"n": len(made)}
    assert records.cached(rec, "k", 1, "the record of n", make) == {"n": 1}
    assert records.cached(rec, "k", 1, "the record of n", make) == {"n": 1}
    assert len(made) == 1 and capfd.readouterr().err == ""              # absent: nothing said
    assert records.cached(rec, "k", 2, "the record of n", make) == {"n": 2}
    assert capfd.readouterr().err == (f"deltachip: the record of n at {rec} is stale (made "
                                      "for other inputs); making it again\n")
    rec.write_bytes(b"\x00garbage")
    assert records.cached(rec, "k", 2, "the record of n", make) == {"n": 3}
    assert f"the record of n at {rec} is damaged (not JSON: " in capfd.readouterr().err
    assert records.read(rec, "k", 2) == ({"n": 3}, None)


def test_a_record_that_cannot_be_written_is_skipped(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        if os.access(d, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        assert records.write(d / "a.json", "k", 1, {}) is False
        assert list(d.iterdir()) == []
        assert records.cached(d / "a.json", "k", 1, "x", lambda: {"n": 1}) == {"n": 1}
    finally:
        d.chmod(0o700)


# ---- chip.json's run record ---------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("stack") / "chip"
    deltachip.compile(deltachip.load(ROOT / "examples/stack_machine/stack_machine.hdl"),
                      target="compact", dtype="bf16").save(d)
    return d


@pytest.fixture
def chip_dir(compiled, tmp_path, monkeypatch):
    """A copy of the compiled chip (the tests change it), and a fresh DELTACHIP_CACHE."""
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "chip"
    shutil.copytree(compiled, d)
    return d


def _same_run(a: FastEngine, b: FastEngine, steps: int = 40) -> None:
    ca, cb = a.new_cache(2), b.new_cache(2)
    ids = [0, 1]
    for _ in range(steps):
        x, y = a.decode_step(ids, ca).tolist(), b.decode_step(ids, cb).tolist()
        assert x == y
        ids = x
    assert a.read_memories(ca, 1) == b.read_memories(cb, 1)


def test_the_run_record_gives_the_engine_chip_json_gives(chip_dir, tmp_path, capfd,
                                                         monkeypatch):
    rec = tmp_path / "run-chip.json"
    full = FastEngine(chip_dir)
    eng = FastEngine(chip_dir, chip_record=rec)
    assert capfd.readouterr().err == "" and rec.is_file()
    want = load_chip_json(chip_dir)
    assert set(RUN_OMITS) <= set(want)
    assert eng.chip == {k: v for k, v in want.items() if k not in RUN_OMITS}
    assert eng.circuit.nodes == full.circuit.nodes and eng.circuit.kinds == full.circuit.kinds
    _same_run(eng, full)
    # read from the record: chip.json is not parsed again
    monkeypatch.setattr(chip_engine, "load_chip_json",
                        lambda p: pytest.fail("chip.json read though its record is whole"))
    again = FastEngine(chip_dir, chip_record=rec)
    assert capfd.readouterr().err == "" and again.chip == eng.chip
    _same_run(again, full)


def test_a_damaged_or_stale_run_record_is_named_and_made_again(chip_dir, tmp_path, capfd):
    rec = tmp_path / "run-chip.json"
    FastEngine(chip_dir, chip_record=rec)
    whole = rec.read_bytes()
    rec.write_bytes(whole[:100])
    eng = FastEngine(chip_dir, chip_record=rec)
    err = capfd.readouterr().err
    assert err.startswith(f"deltachip: the record of chip.json at {rec} is damaged (not JSON: ")
    assert err.endswith("; making it again\n") and rec.read_bytes() == whole
    # a chip.json rewritten with its manifest (a new compile there): the record is stale
    chip = load_chip_json(chip_dir)
    chip["circuit"]["name"] = "renamed"
    (chip_dir / "chip.json").write_text(json.dumps(chip))
    manifest.write(chip_dir, [n for n in json.loads(
        (chip_dir / manifest.MANIFEST).read_text())["files"]])
    eng = FastEngine(chip_dir, chip_record=rec)
    assert capfd.readouterr().err == (f"deltachip: the record of chip.json at {rec} is stale "
                                      "(made for other inputs); making it again\n")
    assert eng.circuit.name == "renamed" and eng.chip["circuit"]["name"] == "renamed"


def test_a_chip_json_that_fails_its_manifest_is_refused_as_without_a_record(chip_dir,
                                                                            tmp_path, capfd):
    """chip.json changed behind its manifest's back: the record is not used (nor made) and
    the load fails as one without a record does."""
    rec = tmp_path / "run-chip.json"
    FastEngine(chip_dir, chip_record=rec)
    before = rec.read_bytes()
    cj = chip_dir / "chip.json"
    text = cj.read_text()
    assert ", " in text
    cj.write_text(text.replace(", ", ",\n", 1))        # the same size and data, other bytes
    with pytest.raises(ChipDirError) as plain:
        FastEngine(chip_dir)
    with pytest.raises(ChipDirError) as recorded:
        FastEngine(chip_dir, chip_record=rec)
    assert str(recorded.value) == str(plain.value)
    assert "chip.json does not match its sha256 digest in manifest.json" in str(plain.value)
    assert rec.read_bytes() == before and capfd.readouterr().err == ""


def test_a_directory_without_a_manifest_is_read_whole(chip_dir, tmp_path):
    (chip_dir / manifest.MANIFEST).unlink()
    rec = tmp_path / "run-chip.json"
    assert run_chip(chip_dir, rec) is None
    eng = FastEngine(chip_dir, chip_record=rec)
    assert not rec.exists() and "lanemap" in eng.chip


# ---- the ROM images' state in numpy ---------------------------------------------------------

def _random_images(chip: dict, seed: int) -> dict[str, list[int]]:
    rnd = random.Random(seed)
    return {name: [rnd.getrandbits(m["width"]) if rnd.random() < 0.7 else 0
                   for _ in range(m["depth"])] for name, m in chip["memories"].items()}


def assert_rom_states_equal(chip: dict, images: dict[str, list[int]]) -> int:
    """numpy's rows equal the compiler's torch rows, bit for bit, for every memory of
    ``chip`` with an image in ``images`` (and the paired ones); how many rows compared."""
    prog, num = ProgView(chip), NumView(chip["numerics"])
    n = 0
    for name, m in chip["memories"].items():
        words = images.get(name, [])
        if not (any(words) or m.get("pair")):
            continue
        want, got = rom_state(prog, num, name, words), rom_state_np(prog, num, name, words)
        assert list(got) == list(want), name
        for k, t in want.items():
            assert got[k].dtype == np.float32 and got[k].shape == tuple(t.shape)
            assert got[k].tobytes() == t.numpy().tobytes(), (name, k)
            n += 1
    return n


@pytest.mark.parametrize("seed", [0, 1])
def test_the_rom_state_in_numpy_is_the_compilers(compiled, seed):
    chip = load_chip_json(compiled)
    images = {**{k: list(v) for k, v in chip["roms"].items()}, **_random_images(chip, seed)}
    assert assert_rom_states_equal(chip, images) > 0
    # short images, and one whose words run past the memory's depth
    assert assert_rom_states_equal(chip, {n: [5, 0, 7] for n in chip["memories"]}) > 0
    assert assert_rom_states_equal(chip, {n: [1] * (m["depth"] + 3)
                                          for n, m in chip["memories"].items()}) > 0


def test_the_fast_engine_preloads_the_rows_hf_preloads(compiled):
    """The fast engine's cache holds the numpy rows where hf's holds the torch ones: the
    same recurrent state, layer by layer."""
    from backends.engines.hf import HFEngine
    chip = load_chip_json(compiled)
    images = _random_images(chip, 2)
    images = {k: v for k, v in images.items() if chip["memories"][k]["kind"] == "rom"} or images
    fast, hf = FastEngine(compiled, roms=images), HFEngine(compiled, roms=images)
    cf, ch = fast.new_cache(1), hf.new_cache(1)
    for li in fast._gdn:
        assert np.array_equal(fast.recurrent_state(cf, li, 0).numpy(),
                              hf.recurrent_state(ch, li, 0).float().numpy())
