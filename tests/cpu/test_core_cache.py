"""The core cache ($DELTACHIP_CACHE/cores): one entry per (core source, sizes, target,
dtype); compiling a new entry removes the stale ones of the same sizes, target and dtype;
every entry records its files' digests, is checked at each use (hashing only files that
changed since the last check) and heals itself when damaged, or is refused with words
about the cache. Entries here are compiled from a small circuit, never the core."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import backends.compile.pipeline
from backends.chipdir import manifest
from common import cachedir
from cpu.rv32 import engines
from cpu.rv32.build import TINY
from hdl.frontend import load_circuit


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

    def fake_compile(circuit, out, target, dtype, progress=None, byte_cells=None,
                     approve=None):
        out.mkdir(parents=True, exist_ok=True)
        (out / "chip.json").write_text("{}")
        manifest.write(out, ["chip.json"])
    monkeypatch.setattr(backends.compile.pipeline, "compile_to_dir", fake_compile)
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


# ---- integrity and self-healing: the entries are built from a small circuit ----------------
ROOT = Path(__file__).resolve().parents[2]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"


@pytest.fixture
def small_cache(tmp_path, monkeypatch):
    """The core cache in ``tmp_path``, every entry compiled from the counter circuit (in
    shards: a few KB, in a second) in place of the core; gives the list of entries
    compiled."""
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    real = backends.compile.pipeline.compile_to_dir
    made: list[Path] = []

    def compile_small(circuit, out, target, dtype, progress=None, byte_cells=None,
                      approve=None):
        made.append(out)
        return real(load_circuit(COUNTER), out, target=target, dtype=dtype, single_file_limit=0,
                    approve=approve)
    monkeypatch.setattr(backends.compile.pipeline, "compile_to_dir", compile_small)
    return made


def _entry(capsys) -> Path:
    """The TINY entry, compiled (its first-run line read off stderr)."""
    entry = engines.compiled_core(TINY)
    assert capsys.readouterr().err == (f"compiling the core into compact layers (bf16); first "
                                       f"run only, cached in {entry.parent}\n")
    return entry


def _second_shard(entry: Path) -> Path:
    return sorted(entry.glob("model-*.safetensors"))[1]


def test_an_entry_records_its_digests_and_is_hashed_once(small_cache, capsys, monkeypatch):
    entry = _entry(capsys)
    files = json.loads((entry / manifest.MANIFEST).read_text())["files"]
    assert set(files) == {p.name for p in entry.iterdir()} - {manifest.MANIFEST, manifest.STAMP}
    for name, rec in files.items():
        assert rec == {"size": (entry / name).stat().st_size,
                       "sha256": hashlib.sha256((entry / name).read_bytes()).hexdigest()}
    assert (entry / manifest.STAMP).is_file()      # stamped when written
    hashed = []
    real = manifest.digest
    monkeypatch.setattr(manifest, "digest", lambda p: hashed.append(Path(p).name) or real(p))
    assert engines.compiled_core(TINY) == entry
    assert hashed == [] and small_cache == [entry]
    shard = _second_shard(entry)
    shard.write_bytes(shard.read_bytes())         # the same bytes, a new mtime: hashed again
    assert engines.compiled_core(TINY) == entry
    assert hashed == [shard.name] and small_cache == [entry]
    assert capsys.readouterr().err == ""


def _overwrite_data(shard: Path, keep_mtime: bool = False) -> None:
    """A few bytes of the shard's tensor data overwritten, its header intact (issue 1)."""
    st = shard.stat()
    with open(shard, "r+b") as f:
        f.seek(st.st_size - 16)
        f.write(b"\xff" * 8)
    if keep_mtime:
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))


DAMAGE = {
    "chip.json removed": (lambda e: (e / "chip.json").unlink(), "chip.json is missing"),
    "shard data overwritten": (lambda e: _overwrite_data(_second_shard(e)),
                               "{shard} does not match its sha256 digest in manifest.json"),
    "shard data overwritten, mtime put back": (
        lambda e: _overwrite_data(_second_shard(e), keep_mtime=True),
        "{shard} does not match its sha256 digest in manifest.json"),
    "shard truncated": (lambda e: os.truncate(_second_shard(e), 10),
                        "{shard} has 10 bytes, not the {size:,} manifest.json records"),
    "shard removed": (lambda e: _second_shard(e).unlink(), "{shard} is missing"),
    "manifest removed": (lambda e: (e / manifest.MANIFEST).unlink(), "manifest.json is missing"),
    "manifest not JSON": (lambda e: (e / manifest.MANIFEST).write_text("{"),
                          "manifest.json is corrupt (Expecting property name enclosed in "
                          "double quotes: line 1 column 2 (char 1))"),
    "a file, not a directory": (lambda e: (shutil.rmtree(e), e.write_text("x")),
                                "it is not a directory"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_entry_is_rebuilt(case, small_cache, capsys):
    """Issues 1 and 4: a damaged entry (chip.json removed, a shard's data overwritten with
    its header intact, ...) is found, named on stderr, rebuilt and swapped in; the run goes
    on with a whole entry, and no temporary is left in the cache."""
    damage, why = DAMAGE[case]
    entry = _entry(capsys)
    shard = _second_shard(entry)
    size = shard.stat().st_size
    damage(entry)
    assert engines.compiled_core(TINY) == entry
    why = why.format(shard=shard.name, size=size)
    assert capsys.readouterr().err == (f"the cached core at {entry} is damaged ({why}); "
                                       "rebuilding it\n")
    assert small_cache == [entry, entry]
    assert manifest.problem(entry) is None and (entry / manifest.STAMP).is_file()
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]
    assert engines.compiled_core(TINY) == entry                  # and whole from now on
    assert capsys.readouterr().err == "" and len(small_cache) == 2


def test_an_entry_that_cannot_be_moved_is_refused(small_cache, capsys, monkeypatch):
    entry = _entry(capsys)
    (entry / "chip.json").unlink()
    real = os.rename

    def deny(src, dst):
        if Path(src) == entry:
            raise PermissionError(13, "Permission denied", str(src))
        return real(src, dst)
    monkeypatch.setattr(os, "rename", deny)
    with pytest.raises(engines.CoreCacheError) as e:
        engines.compiled_core(TINY)
    assert e.value.exit_code == 2
    assert str(e.value) == (f"the cached core at {entry} is damaged (chip.json is missing) and "
                            f"cannot be moved out of the way (Permission denied); remove it "
                            f"(rm -r {entry}) and run again")
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]      # no temporary left


def test_an_entry_that_cannot_be_written_is_refused(small_cache, capsys, monkeypatch):
    """A full disk while the entry is built: the message is about the cache, not an -o the
    user never gave."""
    import safetensors.torch as st

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(st, "save_file", full)
    entry = engines.compiled_core_path(TINY)
    with pytest.raises(engines.CoreCacheError) as e:
        engines.compiled_core(TINY)
    assert str(e.value) == (f"the cached core at {entry} could not be built: cannot write the "
                            "checkpoint: No space left on device (nothing was changed); free "
                            f"space in {entry.parent}, or set DELTACHIP_CACHE to another folder")
    assert not entry.exists()


def test_a_cache_without_room_is_refused_before_the_weights_are_built(small_cache,
                                                                       monkeypatch):
    """A core compiled for a narrow target has hundreds of layers: a cache disk without room
    for them is said before they are emitted, in the cache's words."""
    import shutil as sh
    from backends.compile import emit
    built = []
    monkeypatch.setattr(emit, "group_tensors", lambda *a: built.append(a))
    monkeypatch.setattr(sh, "disk_usage", lambda p: sh._ntuple_diskusage(10 << 30, 0, 0))
    entry = engines.compiled_core_path(TINY)
    with pytest.raises(engines.CoreCacheError) as e:
        engines.compiled_core(TINY)
    assert re.fullmatch(
        rf"the cached core at {re.escape(str(entry))} could not be built: the checkpoint "
        rf"\(\d[\d,]* bytes of weights\) needs 0\.06 GiB, {re.escape(str(entry.parent))} has "
        rf"0\.00 GiB free \(nothing was written\); free space in "
        rf"{re.escape(str(entry.parent))}, or set DELTACHIP_CACHE to another folder",
        str(e.value)), str(e.value)
    assert built == [] and not entry.exists()


def test_an_entry_an_engine_refuses_is_worded_for_the_cache(tmp_path, monkeypatch):
    """An entry that passed its digest check but that the engine refuses: the reason, worded
    for the cache (never "recompile it with deltachip compile"); a fast-engine refusal,
    which rebuilding would not mend, is passed on as it is."""
    from backends.chipdir.checkpoint import RECOMPILE, ChipDirError
    from backends.engines.fast.model import FastRefused
    from cpu import isa
    from cpu.emulator import Machine
    from cpu.rv32.loader import image_of
    entry = tmp_path / "rv32-x"
    monkeypatch.setattr(engines, "compiled_core", lambda *a, **k: entry)
    machine = Machine()
    machine.load_words([isa.encode("ecall", 0, 0, 0, 0)])
    refused = ChipDirError(f"{entry}/config.json: corrupt (not a JSON object): {RECOMPILE}")

    def load(self, path, dtype):
        raise refused
    monkeypatch.setattr(engines.HFCore, "_load", load)
    with pytest.raises(engines.CoreCacheError) as e:
        engines.HFCore(image_of(machine, TINY), TINY)
    assert (e.value.exit_code, str(e.value)) == (2, (
        f"the cached core at {entry} cannot be loaded ({entry}/config.json: corrupt (not a "
        f"JSON object)); remove it (rm -r {entry}) and run again to rebuild it"))
    refused = FastRefused(f"{entry}: the fast engine cannot run this checkpoint: ...")
    with pytest.raises(FastRefused):
        engines.HFCore(image_of(machine, TINY), TINY)


def test_a_core_with_a_text_vocabulary_has_entries_of_its_own(tmp_path, monkeypatch):
    """A core compiled for a base's vocabulary (its text ids and table images) is its own
    entry, one per vocabulary, and none of them is stale for the others or for the core
    without one; the compile bakes the tables in."""
    from cpu.rv32.build import FULL, core_source, with_text_ids
    from cpu.rv32.loader import text_tables
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))
    sizes = with_text_ids(TINY, 1500)
    assert (sizes.text_ids, sizes.name) == (2048, "c512-r128-m128-t2048")
    assert with_text_ids(FULL, 248_320).name == "full-t262144"
    assert with_text_ids(FULL, 2).text_ids == 4          # 2 is the core without a vocabulary
    assert "const TEXT_IDS = 2048;" in core_source(sizes)
    a, b = text_tables([b"ab", b"c"]), text_tables([b"ab", b"d"])
    assert a["tlen"] == [2, 1] and a["tb0"] == [0x6261, 0x63]
    paths = [engines.compiled_core_path(sizes, "compact", "bf16", t) for t in (a, b, None)]
    assert len(set(paths)) == 3 and paths[0].name.endswith(
        f"-v{engines.tables_digest(a)}")
    baked = {}

    def fake_compile(circuit, out, target, dtype, progress=None, byte_cells=None,
                     approve=None, roms=None):
        baked[out.name] = roms
        out.mkdir(parents=True, exist_ok=True)
        (out / "chip.json").write_text("{}")
        manifest.write(out, ["chip.json"])
    monkeypatch.setattr(backends.compile.pipeline, "compile_to_dir", fake_compile)
    for t in (a, b):
        assert engines.compiled_core(sizes, "compact", "bf16", tables=t) == \
            paths[(a, b).index(t)]
    assert all(p.is_dir() for p in paths[:2])            # neither removed the other
    assert baked[paths[0].name] is a and baked[paths[1].name] is b


def test_two_first_builds_at_once_compile_the_entry_once(small_cache, capsys):
    """While one process builds an entry (it holds the cache folder's lock), another that
    wants the same entry says it waits, then finds the entry built and compiles nothing."""
    import threading
    entry = engines.compiled_core_path(TINY)
    entry.parent.mkdir(parents=True, exist_ok=True)
    said: list[str] = []
    got: list[Path] = []
    with cachedir.entry_lock(entry):                  # "another process" is building it
        t = threading.Thread(target=lambda: got.append(engines.compiled_core(TINY)))
        t.start()
        t.join(timeout=3)
        assert t.is_alive() and small_cache == []     # the second one waits, builds nothing
        said.append(capsys.readouterr().err)
        engines._build(entry, TINY, "compact", "bf16", None)     # the holder builds it
    t.join(timeout=60)
    assert got == [entry] and small_cache == [entry]
    assert said == [f"waiting for another deltachip compiling the core into {entry}\n"]
