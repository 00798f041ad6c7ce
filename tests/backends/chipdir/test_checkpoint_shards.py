"""The sharded checkpoint layout: one safetensors shard per tensor group (the embedding, each
decoder layer, the head) plus model.safetensors.index.json, written one group at a time.

Checked here: a sharded chip loads in transformers and is exact against the simulator; its
tensors and chip.json are those of the single-file layout; each shard holds one group; every
kind of damaged index or shard is refused with its exact message; an interrupted write leaves
no directory (or the previous one intact); each group is freed before the next is built; and
(slow) the qwen3.5-4b gcd compile stays under 2 GiB peak RSS."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from tests.backends import circuits  # noqa: E402

from backends.chipdir import checkpoint as ckpt  # noqa: E402
from backends.verify.check import check_dir  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from deltachip.cli import main  # noqa: E402

hf_logging.disable_progress_bar()

ROOT = Path(__file__).resolve().parents[3]
INDEX = "model.safetensors.index.json"
MANIFEST = "manifest.json"
RECOMPILE = "recompile it with `deltachip compile`"


def _compile(out: Path, limit: int = 0, dtype: str = "bf16") -> Path:
    """The RAM circuit compiled into ``out``; ``limit`` 0 forces the sharded layout."""
    compile_to_dir(circuits.ram_circuit(), out, dtype=dtype, single_file_limit=limit)
    return out


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    return _compile(tmp_path_factory.mktemp("sh") / "ram")


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    return _compile(tmp_path_factory.mktemp("one") / "ram", limit=1 << 30)


def _shards(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ckpt.SHARD_RE.fullmatch(p.name))


def _index(d: Path) -> dict:
    return json.loads((d / INDEX).read_text())


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


# ---- the layout -------------------------------------------------------------------------
def test_layout_one_group_per_shard(sharded):
    chip = json.loads((sharded / "chip.json").read_text())
    L = chip["shapes"]["layers"]
    n = L + 2                                       # embedding, L chip layers, head
    names = _shards(sharded)
    assert names == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert {p.name for p in sharded.iterdir()} == {"config.json", "chip.json", INDEX, *names,
                                                   MANIFEST}
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in sharded.iterdir())   # not 0600
    idx = _index(sharded)
    held = {}
    size = 0
    for name in names:
        with safe_open(str(sharded / name), "pt") as f:
            held[name] = set(f.keys())
            size += sum(f.get_tensor(k).nbytes for k in f.keys())
    assert idx["metadata"]["total_size"] == size
    assert idx["weight_map"] == {k: name for name, ks in held.items() for k in ks}
    assert held[names[0]] == {"model.embed_tokens.weight"}
    for i in range(L):
        assert held[names[1 + i]] and all(k.startswith(f"model.layers.{i}.")
                                          for k in held[names[1 + i]])
    head = held[names[-1]]
    assert {"lm_head.weight", "model.norm.weight"} <= head
    assert all(k.startswith(f"model.layers.{L}.") for k in head - {"lm_head.weight",
                                                                    "model.norm.weight"})


def test_small_chip_stays_one_file(single):
    assert {p.name for p in single.iterdir()} == {"config.json", "chip.json", "model.safetensors",
                                                  MANIFEST}


def test_sharded_equals_single_file(sharded, single):
    one = load_file(str(single / "model.safetensors"))
    many = {}
    for name in _shards(sharded):
        many.update(load_file(str(sharded / name)))
    assert sorted(one) == sorted(many)
    for k in one:
        assert one[k].dtype == many[k].dtype and torch.equal(one[k], many[k]), k
    assert (sharded / "chip.json").read_text() == (single / "chip.json").read_text()
    assert (sharded / "config.json").read_text() == (single / "config.json").read_text()


def test_sharded_loads_in_transformers_and_is_exact(sharded):
    model = AutoModelForCausalLM.from_pretrained(str(sharded), dtype=torch.bfloat16)
    assert model.config.num_hidden_layers == json.loads(
        (sharded / "chip.json").read_text())["shapes"]["layers"] + 1
    rep = check_dir(sharded, steps=30)
    assert rep.ok, rep.mismatches
    assert rep.positions == 31 and rep.memory_checks == 31
    rep = check_dir(sharded, steps=30, prefill=True, batch=2)
    assert rep.ok, rep.mismatches


def test_recompile_replaces_a_sharded_checkpoint(sharded, tmp_path, capsys):
    d = _copy(sharded, tmp_path)
    _compile(d, limit=1 << 30)                       # sharded -> single file, nothing left
    assert {p.name for p in d.iterdir()} == {"config.json", "chip.json", "model.safetensors",
                                             MANIFEST}
    _compile(d)                                      # and back
    assert _shards(d) == _shards(sharded)
    (d / "notes.txt").write_text("mine\n")           # a user's file: never replaced
    counter = ROOT / "examples" / "counter" / "counter.hdl"
    assert main(["compile", str(counter), "-o", str(d)]) == 2
    assert "(it holds 'notes.txt'); refusing to replace it" in capsys.readouterr().err
    assert (d / INDEX).exists()


# ---- damaged directories: exact messages, exit 2 ----------------------------------------
def _second(d: Path) -> Path:
    return d / _shards(d)[1]


def _index_names_missing_file(d: Path) -> None:
    idx = _index(d)
    idx["weight_map"]["model.norm.weight"] = "model-00099-of-00099.safetensors"
    (d / INDEX).write_text(json.dumps(idx))


def _index_moves_tensor(d: Path) -> None:
    idx = _index(d)
    idx["weight_map"]["model.norm.weight"] = _shards(d)[0]
    (d / INDEX).write_text(json.dumps(idx))


def _drop_from_shard_and_index(d: Path) -> None:
    """A tensor removed from its shard and the index alike (in a directory without a
    manifest, as deltachip wrote before it wrote one: with one, the digests refuse it)."""
    (d / MANIFEST).unlink()
    last = d / _shards(d)[-1]
    sd = load_file(str(last))
    del sd["model.norm.weight"]
    save_file(sd, str(last), metadata={"format": "pt"})
    idx = _index(d)
    del idx["weight_map"]["model.norm.weight"]
    (d / INDEX).write_text(json.dumps(idx))


def _edit_index(obj) -> callable:
    return lambda d: (d / INDEX).write_text(json.dumps(obj))


def _edit_metadata(value) -> callable:
    """The index's 'metadata' replaced by ``value`` (None: removed)."""
    def edit(d: Path) -> None:
        idx = _index(d)
        del idx["metadata"]
        if value is not None:
            idx["metadata"] = value
        (d / INDEX).write_text(json.dumps(idx))
    return edit


def _overwrite_data(f: Path) -> None:
    """Eight bytes of a file's end (a shard's tensor data; its header intact) overwritten."""
    with open(f, "r+b") as fh:
        fh.seek(-8, 2)
        fh.write(b"\xff" * 8)


SECOND = "model-00002-of-{n:05d}.safetensors"
BAD = {
    # issue 1: data bytes overwritten, the header intact: the digest in manifest.json
    "shard data overwritten": (lambda d: _overwrite_data(_second(d)),
                               "{d}: " + SECOND + " does not match its sha256 digest in "
                               + MANIFEST + ": " + RECOMPILE),
    "chip.json changed, still valid": (
        lambda d: (d / "chip.json").write_text((d / "chip.json").read_text() + " "),
        "{d}: chip.json has {chip_size:,} bytes, not the {chip_size_was:,} " + MANIFEST
        + " records: " + RECOMPILE),
    "manifest not JSON": (lambda d: (d / MANIFEST).write_text("["),
                          "{d}: " + MANIFEST + " is corrupt (Expecting value: line 1 column 2 "
                          "(char 1)): " + RECOMPILE),
    "missing shard": (lambda d: _second(d).unlink(),
                      "{d}: shard " + SECOND + " is missing (" + INDEX + " names it): "
                      + RECOMPILE),
    "truncated shard": (lambda d: _second(d).write_bytes(_second(d).read_bytes()[:-100]),
                        "{d}/" + SECOND + ": corrupt or truncated (Error while deserializing "
                        "header: incomplete metadata, file not fully covered): " + RECOMPILE),
    "garbage shard": (lambda d: _second(d).write_bytes(b"\x00" * 7),
                      "{d}/" + SECOND + ": corrupt or truncated (Error while deserializing "
                      "header: header too small): " + RECOMPILE),
    "index names a missing file": (_index_names_missing_file,
                                   "{d}: shard model-00099-of-00099.safetensors is missing ("
                                   + INDEX + " names it): " + RECOMPILE),
    "index puts a tensor in the wrong shard": (
        _index_moves_tensor, "{d}/model-00001-of-{n:05d}.safetensors: has no tensor "
        "model.norm.weight (" + INDEX + " puts it there): " + RECOMPILE),
    "index not JSON": (lambda d: (d / INDEX).write_text("{"),
                       "{d}/" + INDEX + ": corrupt (not valid JSON: Expecting property name "
                       "enclosed in double quotes: line 1 column 2 (char 1)): " + RECOMPILE),
    "index without weight_map": (_edit_index({"metadata": {}}),
                                 "{d}/" + INDEX + ": corrupt (no weight_map of tensor names to "
                                 "shard files): " + RECOMPILE),
    "index naming a path": (_edit_index({"weight_map": {"lm_head.weight": "../x.safetensors"}}),
                            "{d}/" + INDEX + ": corrupt (no weight_map of tensor names to "
                            "shard files): " + RECOMPILE),
    "no index": (lambda d: (d / INDEX).unlink(),
                 "{d}: " + INDEX + " is missing (the shards are there): " + RECOMPILE),
    # issue 28, class 5: transformers' own KeyError / TypeError tracebacks
    "index without metadata": (_edit_metadata(None),
                               "{d}/" + INDEX + ": corrupt (field 'metadata' must be an object, "
                               "got missing): " + RECOMPILE),
    "index metadata an array": (_edit_metadata([]),
                                "{d}/" + INDEX + ": corrupt (field 'metadata' must be an object, "
                                "got an array): " + RECOMPILE),
    "tensor in no shard": (_drop_from_shard_and_index,
                           "{d}/" + INDEX + " does not fit config.json: model.norm.weight is "
                           "missing: " + RECOMPILE),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_damaged_sharded_checkpoint(case, sharded, tmp_path, capsys):
    damage, want = BAD[case]
    d = _copy(sharded, tmp_path)
    n = len(_shards(d))
    chip_size_was = (d / "chip.json").stat().st_size
    damage(d)
    assert main(["check", str(d), "--steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == want.format(d=d, n=n, chip_size_was=chip_size_was, chip_size=chip_size_was + 1)


@pytest.mark.parametrize("engine", ["hf", "fast"])
def test_every_engine_checks_the_digests(engine, sharded, tmp_path, capsys):
    """A user's own checkpoint whose data changed is refused, naming it, by both engines
    (deltachip never rebuilds what the user compiled)."""
    d = _copy(sharded, tmp_path)
    _overwrite_data(_second(d))
    assert main(["check", str(d), "--engine", engine, "--steps", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{d}: {SECOND.format(n=len(_shards(d)))} does not match its sha256 digest in "
        f"{MANIFEST}: {RECOMPILE}")


def test_unreadable_shard_says_why(sharded, tmp_path, capsys, monkeypatch):
    """Issue 28, class 5: a shard the user may not read was reported "corrupt or truncated
    (No such file or directory)"; the OS's reason is given. (Tests may run as root, whom a
    chmod does not stop: opening the shard is made to fail as it would for another user.)"""
    import builtins
    d = _copy(sharded, tmp_path)
    n = len(_shards(d))
    shard = _second(d)
    real_open = builtins.open

    def deny(file, *args, **kwargs):
        if str(file) == str(shard):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", deny)
    assert main(["check", str(d), "--steps", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{d}/" + SECOND.format(n=n) + ": cannot read: Permission denied")


# ---- writing: all or nothing, one group in memory at a time ------------------------------
class _Interrupt(BaseException):
    """Stands for Ctrl-C (a BaseException, as KeyboardInterrupt is)."""


def _fail_on_second_save(monkeypatch) -> list[str]:
    import safetensors.torch as st
    real, saved = st.save_file, []

    def save(tensors, filename, metadata=None):
        if saved:
            raise _Interrupt()
        real(tensors, filename, metadata=metadata)
        saved.append(Path(filename).name)
    monkeypatch.setattr(st, "save_file", save)
    return saved


def test_interrupted_write_leaves_no_directory(tmp_path, monkeypatch):
    saved = _fail_on_second_save(monkeypatch)
    out = tmp_path / "ram"
    with pytest.raises(_Interrupt):
        _compile(out)
    assert saved and saved[0].startswith("model-00001-of-")     # it was mid-write
    assert list(tmp_path.iterdir()) == []                       # no DIR, no temp dir


def test_interrupted_write_keeps_the_previous_checkpoint(sharded, tmp_path, monkeypatch):
    d = _copy(sharded, tmp_path)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    _fail_on_second_save(monkeypatch)
    with pytest.raises(_Interrupt):
        _compile(d)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]


def test_each_group_is_freed_before_the_next_is_built(tmp_path, monkeypatch):
    """Bounded memory: when group i+1 is built, no tensor of groups 0..i is alive, and
    shard i was written before then."""
    import backends.compile.emit as emit
    import safetensors.torch as st
    real_build, real_save = emit.group_tensors, st.save_file
    events: list[str] = []
    alive: list[weakref.ref] = []

    def build(em, group):
        leaked = [r for r in alive if r() is not None]
        assert not leaked, f"{len(leaked)} tensors of earlier groups alive when {group} is built"
        events.append(f"build {group}")
        return real_build(em, group)

    def save(tensors, filename, metadata=None):
        alive.extend(weakref.ref(t) for t in tensors.values())
        events.append("save " + Path(filename).name[:11])
        real_save(tensors, filename, metadata=metadata)
    monkeypatch.setattr(emit, "group_tensors", build)
    monkeypatch.setattr(st, "save_file", save)
    _compile(tmp_path / "ram")
    n = len(events) // 2
    assert events[0::2] == ["build embed"] + [f"build layers.{i}" for i in range(n - 2)] + \
        ["build head"]
    assert events[1::2] == [f"save model-{i:05d}" for i in range(1, n + 1)]


# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork+exec, so a child of a big pytest
# process would report the parent's size.
PEAK = """import re, sys
from deltachip.cli import main
status = main(sys.argv[1:])
hwm = re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())
print("peak", int(hwm.group(1)) * 1024)
sys.exit(status)"""


@pytest.mark.slow
def test_qwen4b_gcd_compiles_in_bounded_memory(tmp_path, capsys):
    """24 chip layers on qwen3.5-4b shapes (~6 GB of bf16 weights): peak RSS < 2 GiB (it was
    8.7 GB when the whole state dict was built first), then exact."""
    out = tmp_path / "gcd4b"
    try:
        run = subprocess.run([sys.executable, "-c", PEAK, "compile",
                              str(ROOT / "examples" / "gcd" / "gcd.hdl"), "--top", "Gcd",
                              "-o", str(out), "--target", "qwen3.5-4b"],
                             check=True, capture_output=True, text=True, cwd=ROOT)
        peak = int(run.stdout.split("peak ")[-1])
        assert peak < 2 << 30, f"peak RSS {peak / 2**30:.2f} GiB"
        assert len(_shards(out)) == 26
        assert _index(out)["metadata"]["total_size"] > 5 << 30
        capsys.readouterr()
        assert main(["check", str(out), "--steps", "20", "--start", "Step a=144 b=233"]) == 0
        assert "OK: 14 positions (decode, bf16, batch 1)" in capsys.readouterr().out
    finally:
        shutil.rmtree(out, ignore_errors=True)
