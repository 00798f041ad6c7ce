"""Messages that used to mislead (issue 9, class 7) and `run` reading standard input (class
10); golden texts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def calc_elf(tmp_path_factory) -> Path:
    from firmware import toolchain
    out = tmp_path_factory.mktemp("fw") / "calc.elf"
    return toolchain.build(toolchain.shipped_programs()["calc"], out)


def _cli(argv: list[str], stdin_text: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "deltachip", *argv], capture_output=True,
                          text=True, env=env, cwd=ROOT, input=stdin_text,
                          stdin=subprocess.DEVNULL if stdin_text is None else None)


@pytest.mark.parametrize("argv, opt", [
    (["run", "x.elf", "--input", "-7//2"], "--input"),
    (["sim", "x.hdl", "--start", "-A"], "--start"),
    (["compile", "x.hdl", "-o", "-dir"], "-o/--output"),
])
def test_option_value_with_leading_dash_says_how(argv, opt, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    long = opt.split("/")[-1]
    assert last.endswith(f"error: argument {opt}: expected one argument (a value that starts "
                         f"with '-' must be attached with '=': {long}=VALUE)")


def test_input_with_equals_and_leading_dash(calc_elf, capfd):
    assert main(["run", str(calc_elf), "--input=-7//2"]) == 0
    assert capfd.readouterr().out == "-4\n"


def test_run_reads_stdin_when_no_input_and_not_a_terminal(calc_elf):
    r = _cli(["run", str(calc_elf)], "2**100\n-7 % 3\n")
    assert (r.returncode, r.stdout, r.stderr) == (0, "1267650600228229401496703205376\n2\n", "")
    r = _cli(["run", str(calc_elf), "--input", "1+1"], "2**100\n")      # --input wins
    assert (r.returncode, r.stdout) == (0, "2\n")
    r = _cli(["run", str(calc_elf)])                                    # empty stdin
    assert (r.returncode, r.stdout) == (1, "error: no expression given (example input: 2**100)\n")


def test_program_without_input_buffer_ignores_stdin(tmp_path):
    from firmware import toolchain
    src = tmp_path / "quiet.S"
    src.write_text(".globl _start\n_start:\n li a0, 5\n li a7, 93\n ecall\n")
    elf = toolchain.build([src], tmp_path / "quiet.elf", runtime=False)
    r = _cli(["run", str(elf)], "ignored text\n")
    assert (r.returncode, r.stdout, r.stderr) == (5, "", "")


def test_firmware_build_of_a_directory(tmp_path, capsys):
    assert main(["firmware", "build", str(tmp_path), "-o", str(tmp_path / "x.elf")]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path}: is a directory; give its source files (.c, .S, .s) or a shipped "
        "program's name (`deltachip firmware list`)\n")
    assert main(["firmware", "build", str(tmp_path / "nope.c"), "-o",
                 str(tmp_path / "x.elf")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope.c'}: no such file\n"


def test_firmware_build_of_a_device_or_fifo_says_what_it_is(tmp_path, capsys):
    """Issue 28, class 7: `firmware build /dev/zero` said "no such file"."""
    out = str(tmp_path / "x.elf")
    assert main(["firmware", "build", "/dev/zero", "-o", out]) == 2
    assert capsys.readouterr().err == "error: /dev/zero: is a character device, not a source file\n"
    fifo = tmp_path / "pipe.c"
    os.mkfifo(fifo)
    assert main(["firmware", "build", str(fifo), "-o", out]) == 2
    assert capsys.readouterr().err == f"error: {fifo}: is a named pipe (FIFO), not a source file\n"


def test_config_files_past_their_size_limit(tmp_path, capsys, monkeypatch):
    """Issue 28, class 3: a target config and a checkpoint's JSON files are read with a bound
    (backends.chipdir.target.MAX_CONFIG_BYTES, backends.chipdir.checkpoint.JSON_LIMITS)."""
    import backends.chipdir.checkpoint
    from backends.chipdir.target import MAX_CONFIG_BYTES
    cfg = tmp_path / "config.json"
    cfg.write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    counter = str(ROOT / "examples" / "counter" / "counter.hdl")
    assert main(["check-rules", counter, "--target", str(cfg)]) == 2
    assert capsys.readouterr().err == (
        f"target {cfg}: the config is larger than 1,048,576 bytes, the limit for a Qwen3.5 "
        "config.json (one is a few KB)\n")
    chip_dir = tmp_path / "chip"
    chip_dir.mkdir()
    (chip_dir / "chip.json").write_bytes(b" " * 101)
    limits = backends.chipdir.checkpoint.JSON_LIMITS
    monkeypatch.setitem(limits, "chip.json", (100, limits["chip.json"][1]))
    assert main(["explain", str(chip_dir), "--layer", "0"]) == 2
    assert capsys.readouterr().err == (
        f"{chip_dir / 'chip.json'}: larger than 100 bytes, the limit for a chip.json (the "
        "RISC-V core's, with its circuit, trace and ROM images, is 5 MB): recompile it with "
        "`deltachip compile`\n")


def _ret5_elf(path: Path) -> Path:
    """A program that exits with 5 (no runtime, no input buffer)."""
    import struct
    from tests.cpu.conftest import make_elf
    code = struct.pack("<3I", 0x00500513, 0x05D00893, 0x00000073)   # a0 = 5; a7 = 93; ecall
    path.write_bytes(make_elf([(0, code, len(code), 5)]))
    return path


@pytest.fixture
def no_core_compile(monkeypatch):
    """Fails the test instead of compiling the 6 GB core, should the cache check let a run
    through."""
    import cpu.rv32.engines as engines

    def refuse(*args, **kwargs):
        raise AssertionError("the core would have been compiled")
    monkeypatch.setattr(engines, "HFCore", refuse)


def test_cache_variable_naming_a_file_is_bad_input(tmp_path, monkeypatch, capsys,
                                                   no_core_compile):
    """Issue 28, class 5: DELTACHIP_CACHE set to a file was an exit-1 OSError that did not
    name the variable."""
    cache = tmp_path / "cache"
    cache.write_text("")
    monkeypatch.setenv("DELTACHIP_CACHE", str(cache))
    elf = _ret5_elf(tmp_path / "ret5.elf")
    assert main(["run", str(elf), "--engine", "hf"]) == 2
    assert capsys.readouterr().err == (
        f"DELTACHIP_CACHE={cache}: cannot keep deltachip's caches there: it is a file, not a "
        "folder; set DELTACHIP_CACHE to a folder deltachip may write in, or unset it\n")
    r = subprocess.run([sys.executable, "-m", "deltachip", "sim", "examples/counter/counter.hdl",
                        "--engine", "c"], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), DELTACHIP_CACHE=str(cache)))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith(f"DELTACHIP_CACHE={cache}: cannot keep deltachip's caches there")


def test_cache_variable_naming_a_read_only_folder_is_bad_input(tmp_path, monkeypatch, capsys,
                                                               no_core_compile):
    """A folder deltachip may not write in (made so by failing the write probe: tests may run
    as root, whom a read-only mode does not stop)."""
    import common.cachedir

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(common.cachedir.tempfile, "mkdtemp", denied)
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path))
    elf = _ret5_elf(tmp_path / "ret5.elf")
    assert main(["run", str(elf), "--engine", "hf"]) == 2
    assert capsys.readouterr().err == (
        f"DELTACHIP_CACHE={tmp_path}: cannot keep deltachip's caches there: {tmp_path}/cores: "
        "Permission denied; set DELTACHIP_CACHE to a folder deltachip may write in, or unset "
        "it\n")


def test_explain_source_line_in_other_digits(tmp_path, capsys):
    """Issue 28, class 9: '²' passed str.isdigit() and int() raised a ValueError traceback."""
    assert main(["explain", str(tmp_path), "--source", "counter.hdl:²"]) == 2
    assert capsys.readouterr().err == ("--source expects FILE.hdl:LINE (a line number from 1), "
                                       "got 'counter.hdl:²'\n")
