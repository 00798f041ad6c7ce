"""The public Python API (deltachip/api.py), called as a user calls it: ``import deltachip``.

The README's example runs as written; each call gives the same answers as the command line
and the library below it; bad input is a UserError with a clear text."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import deltachip
from common.errors import UserError
from firmware import toolchain

ROOT = Path(deltachip.__file__).resolve().parents[1]
COUNTER = str(ROOT / "examples/counter/counter.hdl")
GCD = str(ROOT / "examples/gcd/gcd.hdl")
STACK = str(ROOT / "examples/stack_machine/stack_machine.hdl")


@pytest.fixture(scope="module")
def counter_chip() -> deltachip.Chip:
    return deltachip.compile(deltachip.load(COUNTER))


@pytest.fixture(scope="module")
def hello_elf(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fw") / "hello.elf"
    return toolchain.build(toolchain.shipped_programs()["hello"], out)


def test_readme_example_runs_as_written(tmp_path, hello_elf):
    """README.md's Python block, in a folder that sees the repository's examples/, prints
    what its comments say."""
    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[1]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "hello.elf").write_bytes(hello_elf.read_bytes())
    r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                       text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "['Count value=0', 'Count value=1', 'Count value=2', 'Count value=3']",
        "2 64 33",
        "True",
        "examples/counter/counter.hdl:15 became 1 MLP neuron in layer 0, 1 lane, 0 GDN key heads:",
        "  add at 15:56, part of 'next.Count.value': 1 neuron (layer 0 row 0); 1 lane (dim 10)",
        "  (1 more IR node on this line cost nothing: constants, slices, wiring)",
        "0 Hello from deltachip!"]
    assert "Loading weights" not in r.stderr


# ---- circuits ------------------------------------------------------------------------------

def test_load_and_simulate_gcd():
    gcd = deltachip.load(GCD)
    assert (gcd.name, gcd.kinds, gcd.memories) == ("Gcd", ["Step", "Result"], {})
    assert str(gcd.start) == "Step a=252 b=105"
    run = gcd.simulate(start="Step a=48 b=18")
    assert [str(t) for t in run] == ["Step a=48 b=18", "Step a=18 b=12", "Step a=12 b=6",
                                     "Step a=6 b=0", "Result value=6"]
    last = run[-1]
    assert (last.kind, last.fields, last.id) == ("Result", {"value": 6}, (1 << 16) + 6)
    assert gcd.simulate(steps=2, start=run[1]) == run[1:4]


def test_simulate_takes_rom_images_as_files_or_words():
    sm = deltachip.load(STACK)
    assert sm.memories["prog"] == "rom u16[256]"
    default = sm.simulate(steps=50)
    hex_file = ROOT / "examples/stack_machine/program.hex"
    assert sm.simulate(steps=50, roms={"prog": str(hex_file)}) == default
    halt_at_once = sm.simulate(steps=50, roms={"prog": [0]})       # HALT
    assert [str(t) for t in halt_at_once] == ["Run pc=0 sp=0", "Halt"]


def test_load_source():
    c = deltachip.load_source("circuit T { token A(x: u4); start A(x: 1);\n"
                              "  match tok { A => { next = A(x: tok.A.x + 2); } } }")
    assert [t.fields["x"] for t in c.simulate(steps=3)] == [1, 3, 5, 7]


# ---- compiled chips ------------------------------------------------------------------------

def test_chip_figures_match_the_saved_checkpoint(counter_chip, tmp_path):
    chip = counter_chip
    assert (chip.target, chip.dtype, chip.layers, chip.hidden, chip.neurons, chip.key_heads) \
        == ("compact", "bf16", 2, 64, 33, 0)
    unsaved_nonzero = chip.nonzero_weights
    path = chip.save(tmp_path / "counter")
    assert path == tmp_path / "counter" and chip.path == path
    import json
    saved = json.loads((path / "chip.json").read_text())
    assert saved["nonzero_weights"] == unsaved_nonzero == chip.nonzero_weights
    assert [lay["neurons"] for lay in saved["layers"]] == [4, 29]
    assert saved["shapes"]["hidden"] == chip.hidden and saved["lanes"]["count"] == chip.lanes
    weights = load_file(path / "model.safetensors")
    state = chip.state_dict()
    assert weights.keys() == state.keys()
    assert all(torch.equal(weights[k], state[k]) for k in weights)


def test_check_a_saved_directory_and_an_unsaved_chip(counter_chip, tmp_path):
    report = deltachip.check(deltachip.compile(COUNTER, dtype="fp32"), steps=12)
    assert report.ok and report.positions == 11
    path = deltachip.compile(GCD).save(tmp_path / "gcd")
    report = deltachip.check(path, steps=10, start="Step a=48 b=18", batch=2, prefill=True)
    assert report.ok and report.positions == 10


def test_explain_both_ways(counter_chip):
    assert counter_chip.explain(layer=1).splitlines()[0] == (
        "layer 1 of 2 (circuit Counter, target compact): 29 MLP neurons, 0 GDN key heads")
    first = counter_chip.explain(source="counter.hdl:14").splitlines()[0]
    assert first.endswith("counter.hdl:14 became 1 MLP neuron in layer 0, 1 lane, "
                          "0 GDN key heads:")


# ---- firmware ------------------------------------------------------------------------------

def test_run_elf(hello_elf, tmp_path):
    run = deltachip.run_elf(hello_elf)
    assert (run.engine, run.exit_code, run.fault, run.timed_out) == ("ref", 0, None, False)
    assert run.text.startswith("Hello from deltachip!\n") and run.instructions > 100
    short = deltachip.run_elf(hello_elf, max_steps=10)
    assert (short.exit_code, short.timed_out, short.instructions) == (None, True, 10)
    calc = toolchain.build(toolchain.shipped_programs()["calc"], tmp_path / "calc.elf")
    assert deltachip.run_elf(calc, input_text="2**100").text.strip() == str(2 ** 100)
    assert "ref" in deltachip.engines()


# ---- errors --------------------------------------------------------------------------------

def error(call) -> str:
    with pytest.raises(UserError) as e:
        call()
    return str(e.value)


def test_errors_are_user_errors_with_clear_text(counter_chip, tmp_path, hello_elf):
    assert error(lambda: deltachip.load(tmp_path / "none.hdl")) == (
        f"{tmp_path / 'none.hdl'}: error: cannot read source file: No such file or directory")
    stdlib = ROOT / "stdlib/muldiv.hdl"
    assert error(lambda: deltachip.load(stdlib)) == f"{stdlib}: error: {stdlib} declares no circuit"
    counter = deltachip.load(COUNTER)
    assert error(lambda: counter.simulate(start="Count value=300")) == (
        "field value = 300 is out of range for u8 (0..255)")
    assert error(lambda: counter.simulate(roms={"ram": [1]})) == (
        "circuit 'Counter' has no memory 'ram' (its memories: none)")
    assert error(lambda: deltachip.compile(counter, dtype="fp16")) == (
        "unknown dtype 'fp16' (expected bf16 or fp32)")
    assert error(lambda: deltachip.compile(counter, target="tiny")).startswith(
        "unknown target 'tiny': expected compact, qwen3.5-4b")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert "refusing to replace it" in error(lambda: counter_chip.save(tmp_path / "mine"))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert error(lambda: counter_chip.explain()) == (
        "explain: give exactly one of layer=L or source='FILE.hdl:LINE'")
    assert error(lambda: deltachip.check(tmp_path / "nothing")) == (
        f"{tmp_path / 'nothing'}: no such directory")
    assert error(lambda: deltachip.run_elf(hello_elf, engine="qemu")).startswith(
        "unknown engine 'qemu' (engines: ")
    assert error(lambda: deltachip.run_elf(tmp_path / "none.elf")).startswith(
        f"{tmp_path / 'none.elf'}: ")


# ---- argument checks (issue 28, class 9) ---------------------------------------------------

def type_error(call) -> str:
    with pytest.raises(TypeError) as e:
        call()
    assert e.traceback[-1].path.name == "api.py", "raised from deep inside, not by the check"
    return str(e.value)


def test_wrong_types_are_type_errors_naming_the_parameter(counter_chip):
    """26 of 90 probe calls used to end in an AttributeError, an AssertionError or a
    TypeError from inside lark, pathlib or the backend."""
    counter = deltachip.load(COUNTER)
    assert type_error(lambda: deltachip.load_source(None)) == (
        "load_source() argument 'text' must be str, not NoneType")
    assert type_error(lambda: deltachip.load_source(123)) == (
        "load_source() argument 'text' must be str, not int")
    assert type_error(lambda: deltachip.compile(counter, target={"hidden_size": 64})) == (
        "compile() argument 'target' must be str or os.PathLike, not dict")
    cases = {
        "load() argument 'path' must be str or os.PathLike, not int": lambda: deltachip.load(1),
        "load() argument 'top' must be str or None, not int": lambda: deltachip.load(COUNTER, 1),
        "load_source() argument 'filename' must be str or os.PathLike, not NoneType":
            lambda: deltachip.load_source("", filename=None),
        "compile() argument 'circuit' must be a Circuit, str or os.PathLike, not list":
            lambda: deltachip.compile([]),
        "compile() argument 'dtype' must be str or DType, not int":
            lambda: deltachip.compile(counter, dtype=16),
        "compile() argument 'roms' must be a mapping of memory names to images or None, not "
        "list": lambda: deltachip.compile(counter, roms=[]),
        "compile() argument 'progress' must be callable or None, not str":
            lambda: deltachip.compile(counter, progress="x"),
        "check() argument 'chip' must be a Chip, str or os.PathLike, not NoneType":
            lambda: deltachip.check(None),
        "check() argument 'steps' must be int, not float": lambda: deltachip.check("x", 1.5),
        "check() argument 'batch' must be int, not bool":
            lambda: deltachip.check("x", batch=True),
        "check() argument 'prefill' must be bool, not int":
            lambda: deltachip.check("x", prefill=1),
        "check() argument 'start' must be str or Token or None, not int":
            lambda: deltachip.check("x", start=3),
        "run_elf() argument 'path' must be str or os.PathLike, not bytes":
            lambda: deltachip.run_elf(b"x.elf"),
        "run_elf() argument 'input_text' must be str or bytes or None, not int":
            lambda: deltachip.run_elf("x.elf", input_text=7),
        "run_elf() argument 'max_steps' must be int, not str":
            lambda: deltachip.run_elf(COUNTER, max_steps="9"),
        "token() argument 'text' must be str, not int": lambda: counter.token(1),
        "simulate() argument 'steps' must be int, not NoneType":
            lambda: counter.simulate(steps=None),
        "simulate() argument 'start' must be str or Token or None, not int":
            lambda: counter.simulate(start=1),
        "simulate() argument 'engine' must be str, not NoneType":
            lambda: counter.simulate(engine=None),
        "save() argument 'path' must be str or os.PathLike, not int":
            lambda: counter_chip.save(1),
        "explain() argument 'layer' must be int or None, not str":
            lambda: counter_chip.explain(layer="1"),
        "explain() argument 'source' must be str or None, not int":
            lambda: counter_chip.explain(source=15),
        "Circuit() argument 'circuit' must be an hdl.ir.Circuit (use load() or load_source()), "
        "not str": lambda: deltachip.Circuit("counter.hdl"),
    }
    for want, call in cases.items():
        assert type_error(call) == want


def test_values_out_of_range_are_user_errors(counter_chip, tmp_path):
    sm = deltachip.load(STACK)
    assert error(lambda: sm.simulate(roms={"prog": [1 << 16]})) == (
        "roms['prog']: word 0 (65536) is not an integer from 0 to 65535 (u16)")
    assert error(lambda: sm.simulate(roms={"prog": [0, -1]})) == (
        "roms['prog']: word 1 (-1) is not an integer from 0 to 65535 (u16)")
    assert error(lambda: sm.simulate(roms={"prog": [0] * 257})) == (
        "roms['prog']: 257 words, but 'prog' holds only 256 (u16[256])")
    assert error(lambda: deltachip.check(tmp_path, batch=10 ** 30)) == (
        "batch must be <= 65,536, got 1,000,000,000,000,000,000,000,000,000,000")
    assert error(lambda: deltachip.check(tmp_path, steps=-1)) == "steps must be >= 0, got -1"
    assert error(lambda: sm.simulate(steps=10 ** 12)) == (   # the list would not fit
        "steps must be <= 10,000,000, got 1,000,000,000,000")
    assert error(lambda: counter_chip.save("")) == "save(): path must not be empty"
    assert error(lambda: counter_chip.explain(source="counter.hdl:²")) == (
        "--source expects FILE.hdl:LINE (a line number from 1), got 'counter.hdl:²'")


def test_checking_an_unsaved_chip_leaves_it_unsaved():
    """The temporary copy check() saves an unsaved chip to is gone afterwards; the chip did
    not keep its path (a second check used to find "no such directory")."""
    chip = deltachip.compile(COUNTER)
    assert deltachip.check(chip, steps=4).ok and chip.path is None
    assert deltachip.check(chip, steps=4).ok
