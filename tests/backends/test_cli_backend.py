"""`deltachip compile` / `deltachip check` end to end: the shipped examples, the examples of
their --help texts as written, and every kind of bad input (exact messages, exit 2, nothing
of the user's modified)."""
from __future__ import annotations

import importlib.util
import hashlib
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from deltachip.cli import main
from deltachip.commands import check as check_cmd, compile as compile_cmd

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
COUNTER = EXAMPLES / "counter" / "counter.hdl"
STACK = EXAMPLES / "stack_machine" / "stack_machine.hdl"
RECOMPILE = "recompile it with `deltachip compile`"
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def counter_dir(tmp_path_factory) -> Path:
    """A compiled counter checkpoint (fp32), built once; tests copy it before damaging it."""
    out = tmp_path_factory.mktemp("ck") / "counter"
    assert main(["compile", str(COUNTER), "-o", str(out), "--dtype", "fp32"]) == 0
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def _err(capsys) -> str:
    return capsys.readouterr().err.strip()


def test_compile_then_check(tmp_path, capsys):
    out = tmp_path / "counter"
    out.mkdir()                             # an empty directory may be the output
    assert main(["compile", str(COUNTER), "-o", str(out), "--dtype", "fp32"]) == 0
    assert {p.name for p in out.iterdir()} == {"config.json", "model.safetensors", "chip.json",
                                               "manifest.json"}
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in out.iterdir())   # not 0600
    files = json.loads((out / "manifest.json").read_text())["files"]
    assert files == {name: {"size": (out / name).stat().st_size,
                            "sha256": hashlib.sha256((out / name).read_bytes()).hexdigest()}
                     for name in ("config.json", "model.safetensors", "chip.json")}
    printed = capsys.readouterr().out
    assert "nonzero weights" in printed
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["architectures"] == ["Qwen3_5ForCausalLM"]
    assert main(["check", str(out), "--steps", "20"]) == 0
    assert "OK: 11 positions (decode, fp32, batch 1)" in capsys.readouterr().out
    assert main(["check", str(out), "--steps", "20", "--dtype", "bf16", "--prefill",
                 "--batch", "2", "--start", "Count value=4"]) == 0
    assert "OK:" in capsys.readouterr().out
    # recompiling over a previous checkpoint replaces it, leaving nothing beside it
    assert main(["compile", str(COUNTER), "-o", str(out)]) == 0
    assert json.loads((out / "chip.json").read_text())["dtype"] == "bf16"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter"]


# ---- -o: never destroy what is not a previous checkpoint ------------------------------------
def test_output_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("precious\n")
    assert main(["compile", str(COUNTER), "-o", str(f)]) == 2
    assert _err(capsys) == (f"-o {f}: exists and is not a directory (compile writes a directory: "
                            "config.json, model.safetensors, chip.json); choose another path")
    assert f.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_output_dir_that_is_not_a_checkpoint_is_refused(tmp_path, capsys, counter_dir):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "data.csv").write_text("1,2\n")
    assert main(["compile", str(COUNTER), "-o", str(d)]) == 2
    assert _err(capsys) == (f"-o {d}: directory is not empty and is not a deltachip checkpoint "
                            "(it holds 'data.csv'); refusing to replace it: choose a new or "
                            "empty directory")
    assert (d / "data.csv").read_text() == "1,2\n"
    # a checkpoint with a file of the user's in it is not replaced either
    ck = _copy(counter_dir, tmp_path)
    (ck / "README").write_text("my notes\n")
    assert main(["compile", str(COUNTER), "-o", str(ck)]) == 2
    assert "(it holds 'README'); refusing to replace it" in _err(capsys)
    assert (ck / "README").exists() and (ck / "chip.json").exists()
    # a directory with a chip.json that is not ours
    d2 = tmp_path / "other"
    d2.mkdir()
    (d2 / "chip.json").write_text('{"vendor": "someone else"}')
    assert main(["compile", str(COUNTER), "-o", str(d2)]) == 2
    assert "(it holds 'chip.json'); refusing to replace it" in _err(capsys)


def test_output_that_is_a_symlink_is_refused(tmp_path, capsys, counter_dir):
    link = tmp_path / "link"
    link.symlink_to(counter_dir, target_is_directory=True)
    assert main(["compile", str(COUNTER), "-o", str(link)]) == 2
    assert _err(capsys) == f"-o {link}: is a symbolic link; give the directory itself"
    assert link.is_symlink()


def test_output_under_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["compile", str(COUNTER), "-o", str(f / "out")]) == 2
    assert _err(capsys) == f"-o {f / 'out'}: cannot write in {f}: Not a directory"


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch, counter_dir):
    import backends.chipdir.checkpoint as ckpt
    from backends.compile.pipeline import compile_to_dir
    from hdl.frontend import load_circuit
    ck = _copy(counter_dir, tmp_path)
    before = {p.name: p.read_bytes() for p in ck.iterdir()}

    def broken_save(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("safetensors.torch.save_file", broken_save)
    with pytest.raises(ckpt.OutputDirError) as e:
        compile_to_dir(load_circuit(str(COUNTER)), ck, dtype="bf16")
    assert str(e.value) == (f"-o {ck}: cannot write the checkpoint: No space left on device "
                            "(nothing was changed)")
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]     # no temp dirs left
    assert ckpt.prepare_output(ck) == ck


def test_a_disk_without_room_is_refused_before_any_weight_is_built(tmp_path, monkeypatch,
                                                                    capsys):
    """The checkpoint's size is known once it is planned: a disk without room for it is
    refused then, not after minutes of emitting weights (a chip of hundreds of layers)."""
    import shutil as sh
    from backends.compile import emit
    built = []
    monkeypatch.setattr(emit, "group_tensors", lambda *a: built.append(a))
    monkeypatch.setattr(sh, "disk_usage", lambda p: sh._ntuple_diskusage(10 << 30, 0, 5 << 20))
    out = tmp_path / "out"
    assert main(["compile", str(COUNTER), "-o", str(out)]) == 2
    err = _err(capsys).splitlines()[-1]
    assert re.fullmatch(rf"-o {out}: the checkpoint \(\d[\d,]* bytes of weights\) needs "
                        rf"0\.06 GiB, {tmp_path} has 0\.00 GiB free \(nothing was written\)",
                        err), err
    assert built == [] and sorted(p.name for p in tmp_path.iterdir()) == []


# ---- --plot and --rom --------------------------------------------------------------------
def test_plot_path_is_checked_before_compiling(tmp_path, capsys):
    out, png = tmp_path / "out", tmp_path / "no" / "such" / "dir" / "x.png"
    assert main(["compile", str(COUNTER), "-o", str(out), "--plot", str(png)]) == 2
    assert _err(capsys) == f"--plot: cannot write {png}: No such file or directory"
    assert not out.exists()
    assert main(["compile", str(COUNTER), "-o", str(out), "--plot", str(tmp_path / "x.gif")]) == 2
    assert _err(capsys) == (f"--plot {tmp_path / 'x.gif'}: unknown image type '.gif' "
                            "(use .png, .svg, .pdf)")
    assert not out.exists()


def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    out = tmp_path / "out"
    assert main(["compile", str(COUNTER), "-o", str(out), "--plot", str(tmp_path / "p.png")]) == 2
    assert _err(capsys) == ("--plot needs matplotlib, which is not installed: "
                            "pip install 'deltachip[plot]'")
    assert not out.exists()


def test_rom_given_twice_or_unknown(tmp_path, capsys):
    hexf = STACK.parent / "program.hex"
    out = tmp_path / "out"
    assert main(["compile", str(STACK), "-o", str(out), "--rom", f"prog={hexf}",
                 "--rom", f"prog={hexf}"]) == 2
    assert _err(capsys) == f"--rom prog={hexf}: memory 'prog' is given twice"
    assert main(["compile", str(STACK), "-o", str(out), "--rom", f"nope={hexf}"]) == 2
    from hdl.frontend import load_circuit
    mems = ", ".join(load_circuit(str(STACK)).memories)
    assert _err(capsys) == (f"--rom nope={hexf}: circuit 'StackMachine' has no memory 'nope' "
                            f"(its memories: {mems})")
    assert not out.exists()


def test_compile_bad_target(tmp_path, capsys):
    assert main(["compile", str(COUNTER), "-o", str(tmp_path / "x"), "--target", "huge"]) == 2
    assert "unknown target 'huge': expected compact, qwen3.5-4b or the path of a Qwen3.5 " \
           "config.json" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ---- check on a directory that is not a (current, whole) checkpoint ---------------------------
def _old_format(d: Path) -> None:
    chip = json.loads((d / "chip.json").read_text())
    chip["format"] = "deltachip-chip/1"
    del chip["format_version"]
    (d / "chip.json").write_text(json.dumps(chip))


def _edit_json(name: str, edit):
    def damage(d: Path) -> None:
        obj = json.loads((d / name).read_text())
        edit(obj)
        (d / name).write_text(json.dumps(obj))
    return damage


def _drop_tensor(d: Path) -> None:
    """A tensor removed (in a directory without manifest.json, as deltachip wrote before it
    recorded digests: with one, the digest check refuses it before any loading)."""
    (d / "manifest.json").unlink()
    sd = load_file(d / "model.safetensors")
    del sd["model.norm.weight"]
    save_file(sd, d / "model.safetensors")


def _reshape_tensor(d: Path) -> None:
    """A tensor of the wrong shape (without manifest.json, as :func:`_drop_tensor`)."""
    (d / "manifest.json").unlink()
    sd = load_file(d / "model.safetensors")
    sd["model.embed_tokens.weight"] = torch.zeros(3, 3)
    save_file(sd, d / "model.safetensors")


BAD_DIRS = {
    "no chip.json": (lambda d: (d / "chip.json").unlink(),
                     "{d}: not a compiled chip directory (no chip.json)"),
    "corrupt chip.json": (lambda d: (d / "chip.json").write_text('{"format": '),
                          "{d}/chip.json: corrupt (not valid JSON: Expecting value: line 1 "
                          "column 12 (char 11)): " + RECOMPILE),
    "older format": (_old_format, "{d}/chip.json: chip format version 1, but this deltachip "
                                  "reads version 2: " + RECOMPILE),
    "not a chip file": (lambda d: (d / "chip.json").write_text("[1, 2]"),
                        "{d}/chip.json: not a deltachip chip file (the JSON is not an object)"),
    "chip.json without roms": (_edit_json("chip.json", lambda c: c.pop("roms")),
                               "{d}/chip.json: corrupt (field 'roms' is missing (it must be an object)): " + RECOMPILE),
    "broken circuit": (_edit_json("chip.json", lambda c: c["circuit"]["nodes"].pop(0)),
                       "{d}/chip.json: corrupt (cannot rebuild the circuit: ValueError: "),
    "no weights": (lambda d: (d / "model.safetensors").unlink(),
                   "{d}: model.safetensors is missing: " + RECOMPILE),
    "truncated weights": (lambda d: (d / "model.safetensors").write_bytes(
                              (d / "model.safetensors").read_bytes()[:-100]),
                          "{d}/model.safetensors: corrupt or truncated (Error while "
                          "deserializing header: incomplete metadata, file not fully covered): "
                          + RECOMPILE),
    "missing tensor": (_drop_tensor, "{d}/model.safetensors does not fit config.json: "
                                     "model.norm.weight is missing: " + RECOMPILE),
    "reshaped tensor": (_reshape_tensor, "{d}/model.safetensors does not fit config.json: "
                        "model.embed_tokens.weight is [3, 3], config.json makes it [257, 64]: "
                        + RECOMPILE),
    "no config": (lambda d: (d / "config.json").unlink(),
                  "{d}: not a compiled chip directory (no config.json)"),
    "config mismatch": (_edit_json("config.json", lambda c: c.update(hidden_size=128)),
                        "{d}/config.json does not match chip.json: hidden_size is 128, "
                        "chip.json says 64: " + RECOMPILE),
}


@pytest.mark.parametrize("case", sorted(BAD_DIRS))
def test_check_bad_directory(case, counter_dir, tmp_path, capsys):
    damage, want = BAD_DIRS[case]
    d = _copy(counter_dir, tmp_path)
    damage(d)
    assert main(["check", str(d), "--steps", "3"]) == 2
    err = _err(capsys)
    assert "Traceback" not in err
    if want.endswith(": "):
        assert err.startswith(want.format(d=d)), err
    else:
        assert err == want.format(d=d)


def test_check_missing_or_not_a_directory(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope")]) == 2
    assert _err(capsys) == f"{tmp_path / 'nope'}: no such directory"
    (tmp_path / "f").write_text("x")
    assert main(["check", str(tmp_path / "f")]) == 2
    assert _err(capsys) == f"{tmp_path / 'f'}: not a directory (expected one written by " \
                           "`deltachip compile`)"
    assert main(["check", str(tmp_path)]) == 2
    assert _err(capsys) == f"{tmp_path}: not a compiled chip directory (no chip.json)"


# ---- the --help examples run as written ------------------------------------------------------
def _help_examples() -> list[str]:
    lines = [ln.strip() for ep in (compile_cmd.EPILOG, check_cmd.EPILOG)
             for ln in ep.splitlines() if ln.strip().startswith("deltachip ")]
    assert len(lines) >= 6
    return lines


def _run_examples(lines: list[str], cwd: Path, monkeypatch, capsys) -> None:
    (cwd / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    monkeypatch.chdir(cwd)
    for line in lines:
        argv = shlex.split(line)[1:]
        if "--plot" in argv and not HAS_MPL:
            continue
        rc = main(argv)
        out = capsys.readouterr()
        assert rc == 0, (line, out.err[-2000:])
        if argv[0] == "check":
            assert out.out.splitlines()[-1].startswith("OK: "), (line, out.out[-2000:])


def test_help_examples_run_as_written(tmp_path, monkeypatch, capsys):
    lines = [ln for ln in _help_examples() if "qwen3.5-4b" not in ln]
    _run_examples(lines, tmp_path, monkeypatch, capsys)
    if HAS_MPL:
        assert (tmp_path / "build" / "gcd.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_help_examples_on_full_size_shapes(tmp_path, monkeypatch, capsys):
    _run_examples([ln for ln in _help_examples() if "qwen3.5-4b" in ln], tmp_path,
                  monkeypatch, capsys)
