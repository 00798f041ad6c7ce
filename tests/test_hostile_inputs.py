"""Hostile input on the front end and the output writers (issue 43): no traceback for a
symbolic link loop, a closed standard output or an argument that is not UTF-8 (class 4);
nothing a user writes into an output directory while it is built is deleted (class 2);
temporary names short enough for any legal output name, an output directory named `.`
refused before any work (class 7). Golden texts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common import outputs
from common.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"


def _cli(argv: list, cwd: Path = ROOT, shell_tail: str = "") -> subprocess.CompletedProcess:
    """``python -m deltachip ARGV`` (str or bytes arguments); ``shell_tail`` (``>&-``) runs
    it through sh with that redirection."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "deltachip", *argv]
    if shell_tail:
        cmd = ["sh", "-c", 'exec "$@" ' + shell_tail, "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def _err(r: subprocess.CompletedProcess) -> str:
    return r.stderr.decode("utf-8", "backslashreplace")


# ---- class 4: tracebacks ----------------------------------------------------------------

def test_a_symlink_loop_as_the_source_file(tmp_path):
    (tmp_path / "loop.hdl").symlink_to("loop.hdl")
    for command in ("sim", "check-rules"):
        r = _cli([command, "loop.hdl"], cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in _err(r)
        assert _err(r).strip() == ("loop.hdl: error: cannot read source file: Too many levels "
                                   "of symbolic links")


def test_a_symlink_loop_as_an_import(tmp_path):
    (tmp_path / "loop.hdl").symlink_to("loop.hdl")
    (tmp_path / "top.hdl").write_text('import "loop.hdl";\n' + COUNTER.read_text())
    r = _cli(["sim", "top.hdl"], cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in _err(r)
    assert "cannot find 'loop.hdl' to import" in _err(r)


def test_closed_standard_output():
    r = _cli(["sim", str(COUNTER), "--steps", "2"], shell_tail=">&-")
    assert r.returncode == 2
    assert _err(r) == ("deltachip: error: standard output is closed (started with >&-); give "
                       "the command an output, such as >/dev/null\n")


@pytest.mark.parametrize("argv, message", [
    ([b"sim", b"\xff\xfe.hdl"], "argument 2 ('\\xff\\xfe.hdl') is not valid UTF-8"),
    ([b"sim", str(COUNTER).encode(), b"--steps", b"1\xff"],
     "the value of --steps ('1\\xff') is not valid UTF-8"),
    ([b"compile", str(COUNTER).encode(), b"--output=out\xc3"],
     "the value of --output ('out\\xc3') is not valid UTF-8"),
    ([b"run", b"x.elf", b"--input", b"2*\xe9"],
     "the value of --input ('2*\\xe9') is not valid UTF-8"),
])
def test_arguments_that_are_not_utf8(argv, message):
    r = _cli(argv)
    assert r.returncode == 2 and r.stdout == b""
    assert _err(r) == (f"deltachip: error: {message}; deltachip takes names and text in UTF-8 "
                       f"(rename the file, or fix the text's encoding)\n")


# ---- class 7: temporary names, OUT_DIR "." --------------------------------------------

def test_a_long_legal_output_name_gets_short_temporaries(tmp_path):
    name = "n" * 250 + ".json"          # 255 bytes: legal
    with outputs.replace_on_success(tmp_path / name) as tmp:
        assert len(tmp.name.encode()) < 128
        tmp.write_text("{}")
    assert (tmp_path / name).read_text() == "{}"
    out = tmp_path / ("d" * 255)
    with outputs.building_dir(out, lambda p, why: UserError(why), "cannot") as tmp:
        (tmp / "f").write_text("x")
    assert (out / "f").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, out.name])


def test_a_long_name_s_stale_temporary_is_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    name = "é" * 120                    # 240 bytes
    short = outputs.short_name(name)
    assert len(short.encode()) <= 61 and short == outputs.short_name(name)
    stale = tmp_path / f".{short}.{outputs.TEMP_TAG}-{dead.stdout.strip()}-abc"
    stale.mkdir()
    assert outputs.sweep_stale(tmp_path / name) == [stale]


def test_compile_into_the_current_directory_is_refused_at_once(tmp_path):
    r = _cli(["compile", str(COUNTER), "-o", "."], cwd=tmp_path)
    assert r.returncode == 2
    assert _err(r) == (f"-o .: names the current directory or a parent, which cannot be "
                       f"replaced in place; give it by its name (../{tmp_path.name}) or "
                       f"choose another path\n")
    assert list(tmp_path.iterdir()) == []


# ---- class 2: a user's file written during the build ----------------------------------

def _error(path: Path, why: str) -> UserError:
    return UserError(f"OUT {path}: {why}")


def test_a_file_written_into_a_previous_output_while_building_is_kept(tmp_path):
    out = tmp_path / "out"
    with outputs.building_dir(out, _error, "cannot") as tmp:
        (tmp / "weights").write_text("old")
    with pytest.raises(UserError) as e:
        with outputs.building_dir(out, _error, "cannot") as tmp:
            (tmp / "weights").write_text("new")
            (out / "notes.txt").write_text("mine")      # the user, meanwhile
    assert str(e.value) == (f"OUT {out}: 'notes.txt' appeared in it while the new output was "
                            f"being built; nothing was replaced or deleted (the new output "
                            f"was discarded): move what is yours elsewhere and run the "
                            f"command again")
    assert (out / "notes.txt").read_text() == "mine" and (out / "weights").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_directory_made_by_the_user_while_building_is_kept(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UserError, match="'mine' appeared in it"):
        with outputs.building_dir(out, _error, "cannot") as tmp:
            (tmp / "weights").write_text("new")
            (out / "mine").mkdir(parents=True)
            (out / "mine" / "a.txt").write_text("keep")
    assert (out / "mine" / "a.txt").read_text() == "keep"
    assert not (out / "weights").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_file_changed_in_the_previous_output_while_building_is_kept(tmp_path):
    out = tmp_path / "out"
    with outputs.building_dir(out, _error, "cannot") as tmp:
        (tmp / "config.json").write_text("{}")
    with pytest.raises(UserError, match="'config.json' changed in it"):
        with outputs.building_dir(out, _error, "cannot") as tmp:
            (tmp / "config.json").write_text("[]")
            (out / "config.json").write_text('{"edited": 1}')
    assert (out / "config.json").read_text() == '{"edited": 1}'


def test_an_empty_output_directory_is_still_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with outputs.building_dir(out, _error, "cannot") as tmp:
        (tmp / "f").write_text("x")
    assert (out / "f").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ---- class 6: leftovers of an interrupted core rebuild ---------------------------------

def test_a_damaged_entry_moved_aside_is_swept_on_the_next_cache_access(tmp_path, monkeypatch):
    """A damaged entry moved aside for rebuilding (``.ENTRY.deltachip-PID-damaged-…``) whose
    process died before deleting it is swept by the next access to the cache, whether or
    not that entry is used again; a running process's leftovers and other files stay."""
    from cpu.rv32 import engines
    from cpu.rv32.build import TINY
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))
    root = engines.cache_root()
    entry = engines.compiled_core_path(TINY, "compact", "bf16")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    aside = root / f".{outputs.short_name(entry.name)}.{outputs.TEMP_TAG}-{dead}-damaged-x1"
    (aside / entry.name).mkdir(parents=True)
    (aside / entry.name / "model.safetensors").write_bytes(b"\0" * 4096)
    build = root / f".rv32-other.{outputs.TEMP_TAG}-{dead}-abc"      # a killed build's
    build.mkdir()
    live = root / f".{entry.name}.{outputs.TEMP_TAG}-{os.getpid()}-damaged-x2"
    live.mkdir()
    keep = root / "rv32-0123-full-compact-bf16"
    keep.mkdir()
    assert engines.cache_root() == root
    assert sorted(p.name for p in root.iterdir()) == sorted([live.name, keep.name])
    aside.mkdir()
    engines.compiled_core_path(TINY, "qwen3.5-4b", "fp32")     # any access sweeps
    assert not aside.exists() and live.is_dir()
