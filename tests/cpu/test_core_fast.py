"""The compiled core on the fast engine: against transformers (hf) bit for bit on short
traces, against the simulator and the golden emulator on whole programs.

Default run: the full core on compact shapes (bf16, from the core cache): fast = hf on the
first positions of product (every residual dim after every sublayer, the next token, every
memory); fast = sim teacher-forced over the ISA suite and the shipped firmware below the
long ones (every position's next token, every memory after every 2,048 positions, every
designed lane on the short ones); ``deltachip run --engine fast`` on calc equals ``ref``.
The fast engine here is loaded as ``deltachip run`` loads it, from the entry's stored sparse
form (backends/engines/fast/stored.py), which equals the model made from the checkpoint array for
array.
Slow: the long programs (sieve and the rest); fast = hf on product's first 64 positions at
qwen3.5-4b shapes (bf16 and fp32) and on compact fp32; at qwen3.5-4b shapes (bf16 and fp32)
fast = sim on the ISA suite and the short firmware.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.verify.check import compare_engines, load_engine
from tests.cpu.core_check import check_in_prefill
from cpu.emulator import Machine
from cpu.rv32.build import FULL
from cpu.rv32.engines import compiled_core
from cpu.rv32.loader import load_program
from firmware import toolchain

ISA_TESTS = toolchain.isa_programs()
#: shipped programs of at most ~25,000 tokens (fast, lanes on the short ones)
FIRMWARE = ["product", "sum", "hello", "fibonacci"]


@pytest.fixture(scope="module")
def checkpoint():
    return compiled_core(FULL, "compact", "bf16")


@pytest.fixture(scope="module")
def fast(checkpoint):
    return load_engine("fast", checkpoint)


def test_fast_equals_hf_on_the_full_core(checkpoint, firmware_elf):
    """The first 16 positions of product through both engines, fed the same tokens."""
    image = load_program(firmware_elf("product"), None)
    fast = load_engine("fast", checkpoint, roms=image.images)
    hf = load_engine("hf", checkpoint, roms=image.images)
    rep = compare_engines(fast, hf, steps=16, starts=[image.start], mem_every=4)
    assert rep.ok, "\n".join(rep.problems())
    assert rep.positions == 17 and rep.memory_checks >= 4
    assert rep.lane_checks == 17 * 22 * fast.model.H


def test_the_stored_sparse_form_equals_the_checkpoints(checkpoint):
    """The core's fast model mapped from its stored sparse form (made beside the entry's
    weights on its first load) equals the one made from the checkpoint, array for array."""
    from backends.engines.fast import model as fmodel, stored
    from backends.engines.fast.engine import FastEngine
    FastEngine(checkpoint)                  # stores the form, if no load has yet
    assert (checkpoint / stored.BESIDE / stored.WEIGHTS).is_file()
    mapped = FastEngine(checkpoint).model
    assert not mapped.embed[2].flags.writeable and not mapped.layers[0].gate.val.flags.writeable
    assert stored.first_difference(mapped, fmodel.load(checkpoint, "bf16")) is None


@pytest.mark.parametrize("name", ISA_TESTS)
def test_fast_runs_the_isa_suite(fast, name, tmp_path):
    elf = toolchain.build([toolchain.ISA_TESTS_DIR / f"{name}.S"], tmp_path / f"{name}.elf")
    check_in_prefill(fast, lambda: Machine.from_elf(elf))


@pytest.mark.parametrize("name", FIRMWARE)
def test_fast_runs_firmware(fast, name, firmware_elf):
    elf = firmware_elf(name)
    check_in_prefill(fast, lambda: Machine.from_elf(elf), lanes_below=3000)


def test_the_memo_changes_nothing(fast, firmware_elf):
    """The C kernel remembers what the conv takes from each small connected part of
    in_proj_qkv (backends/engines/fast/kernel.c, memo_get). product through the kernel as it runs,
    through one whose memos empty themselves at every record (``memo_records=1``), and (its
    first positions) through the numpy kernel, which has no memo: the same next token,
    residual after every sublayer, recurrent state, position and failure at every position.
    The memo is used (it finds records) and the small one holds at most one."""
    from backends.engines.fast.native import Native
    from backends.engines.fast.pykernel import PyKernel
    from tests.backends.engines.test_fast_pykernel import lockstep
    image = load_program(firmware_elf("product"), None)
    nat, small = Native(fast.model), Native(fast.model, memo_records=1)
    S0 = nat.recurrent(fast.new_cache(1, [image.images]).states[0]).copy()

    def preload(S):
        S[...] = S0
    first = fast.token_id(image.start)
    n, err, _ = lockstep(fast.model, [nat, small], first, 250, edit=preload)
    assert err is None, err
    assert n == 250
    held, found, made = nat.memo_stats()
    assert found > made > 0 and held == made
    held, found, made = small.memo_stats()
    assert held <= 1 and made > found
    n, err, _ = lockstep(fast.model, [nat, PyKernel(fast.model)], first, 12, edit=preload)
    assert (n, err) == (12, None)


RX_ECHO = Path(__file__).resolve().parent / "programs" / "rx_echo.c"


@pytest.mark.parametrize("text", [b"", b"banana", "h\u00e9llo".encode() + b"\x80a"])
def test_fast_reads_the_uart_input(fast, text, tmp_path):
    """Byte loads from the UART's input on the fast engine: teacher-forced against the
    simulator, each Want the core emits answered with In(next byte) (and sim = ref)."""
    elf = toolchain.build([RX_ECHO], tmp_path / "rx_echo.elf")
    check_in_prefill(fast, lambda: Machine.from_elf(elf, text))


# transformers a token at a time; test_hf_batch_equals_fast_batch is the default run's rung
@pytest.mark.slow
def test_hf_reads_the_uart_input(checkpoint, tmp_path):
    """The same in transformers (the rung below the fast engine)."""
    elf = toolchain.build([RX_ECHO], tmp_path / "rx_echo.elf")
    check_in_prefill(load_engine("hf", checkpoint), lambda: Machine.from_elf(elf, b"ab\xc3\xa9"))


CALLS = ['{"name": "calc", "arguments": {"expression": "2**100"}}',
         '{"name": "calc", "arguments": {"expression": "' + "+".join(["12345"] * 162) + '"}}',
         '{"name": "python", "arguments": {"code": "1"}}', "(1/3 - 1) // 2"]


@pytest.mark.parametrize("text", CALLS)
def test_fast_calc_answers_a_call_from_the_uart(firmware_elf, text):
    """calc with an empty input buffer reads a tool call from the UART's input, byte by
    byte through Want/In, on the core: the outcome is ref's (the emulator reading the same
    stream), for a call of 1,000 bytes too."""
    from cpu.rv32.engines import FastCore
    elf = firmware_elf("calc")
    image = load_program(elf, None)
    image.machine.rx = text.encode()
    eng = FastCore(image, target="compact", dtype="bf16")
    got = eng.run(10**7)
    m = Machine.from_elf(elf)
    m.rx = text.encode()
    want = m.run(10**7)
    assert (got.exit_code, got.output, got.instructions, got.fault) == \
        (want.exit_code, want.output, want.instructions, want.fault)
    assert eng.input.pos == min(len(text), 1023) and want.output


def test_cli_fast_engine_runs_calc(firmware_elf, capfd, tmp_path):
    """`deltachip run calc.elf --engine fast --input '2**100'`: the compiled core computes
    2**100 with the golden emulator's instruction count."""
    from deltachip.cli import main
    elf = str(firmware_elf("calc"))
    stats = tmp_path / "s.json"
    assert main(["run", elf, "--engine", "fast", "--input", "2**100",
                 "--stats", str(stats)]) == 0
    assert capfd.readouterr().out == "1267650600228229401496703205376\n"
    s = json.loads(stats.read_text())
    want = Machine.from_elf(elf, b"2**100").run(10**6)
    assert (s["engine"], s["target"], s["instructions"]) == ("fast", "compact", want.instructions)
    assert s["tokens"] > s["instructions"]


def test_fast_run_stops_at_the_budget_and_goes_on(firmware_elf):
    """A budget smaller than the program: the run stops after exactly that many
    instructions, and a second call goes on to the same outcome as ref."""
    from cpu.rv32.engines import fast_engine
    elf = firmware_elf("sum")
    core = fast_engine(elf, None)
    first = core.run(100)
    assert first.timed_out and first.instructions == 100
    rest = core.run(10**6)
    want = Machine.from_elf(elf).run(10**6)
    assert (rest.exit_code, first.output + rest.output, first.instructions + rest.instructions) \
        == (want.exit_code, want.output, want.instructions)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(toolchain.shipped_programs()) - set(FIRMWARE)))
def test_fast_runs_long_firmware(fast, name, firmware_elf):
    elf = firmware_elf(name)
    check_in_prefill(fast, lambda: Machine.from_elf(elf), lanes_below=0)


@pytest.fixture(scope="module", params=["bf16", "fp32"])
def checkpoint_4b(request):
    return compiled_core(FULL, "qwen3.5-4b", request.param)


@pytest.mark.slow
@pytest.mark.parametrize("target, dtype", [("qwen3.5-4b", "bf16"), ("qwen3.5-4b", "fp32"),
                                           ("compact", "fp32")])
def test_fast_equals_hf_on_compiled_cores(target, dtype, firmware_elf):
    """The first 64 positions of product through both engines, at qwen3.5-4b shapes and
    in fp32 (the default run covers compact bf16)."""
    path = compiled_core(FULL, target, dtype)
    image = load_program(firmware_elf("product"), None)
    fast = load_engine("fast", path, roms=image.images)
    hf = load_engine("hf", path, roms=image.images)
    rep = compare_engines(fast, hf, steps=64, starts=[image.start], mem_every=8)
    assert rep.ok, "\n".join(rep.problems())
    assert rep.positions == 65 and rep.memory_checks >= 8


@pytest.mark.slow
@pytest.mark.parametrize("name", ISA_TESTS + FIRMWARE)
def test_fast_runs_programs_at_qwen35_4b_shapes(checkpoint_4b, name, firmware_elf, tmp_path):
    fast = load_engine("fast", checkpoint_4b)
    if name in FIRMWARE:
        elf = firmware_elf(name)
    else:
        elf = toolchain.build([toolchain.ISA_TESTS_DIR / f"{name}.S"], tmp_path / f"{name}.elf")
    check_in_prefill(fast, lambda: Machine.from_elf(elf), lanes_below=3000)


def test_cli_fast_inputs_runs_a_batch(firmware_elf, capfd, tmp_path):
    """`deltachip run calc.elf --engine fast --inputs FILE`: every line's result and
    instruction count as ``ref`` gives them, in order, the streams run on two threads."""
    from deltachip.cli import main
    elf = str(firmware_elf("calc"))
    exprs = ["2**20", "-7 // 2", "1/0", "(1/3 + 1/6) * 4"]
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(exprs) + "\n")
    stats = tmp_path / "s.json"
    want = [Machine.from_elf(elf, e.encode()).run(10**6) for e in exprs]
    status = main(["run", elf, "--engine", "fast", "--inputs", str(inputs), "--threads", "2",
                   "--stats", str(stats)])
    assert status == next(w.exit_code & 0xFF for w in want if w.exit_code)
    assert capfd.readouterr().out == "".join(w.output.decode() for w in want)
    s = json.loads(stats.read_text())
    assert [r["instructions"] for r in s["runs"]] == [w.instructions for w in want]
    assert [r["exit_code"] for r in s["runs"]] == [w.exit_code for w in want]
    assert (s["engine"], s["threads"]) == ("fast", 2) and s["tokens"] > s["instructions"]


def test_hf_batch_equals_fast_batch(build_elf, elf_file):
    """Two inputs as one batch through transformers (one decode call per token for both
    rows) and on the fast engine: the same outputs, instructions and tokens as ``ref``."""
    from cpu.rv32.engines import core_batch
    from tests.cpu.test_run_cli import echo_program
    elf = echo_program(build_elf, elf_file, exit_code=7)
    inputs = [b"ab", b"xyz!"]
    want = [Machine.from_elf(elf, t).run(1000) for t in inputs]
    got = {}
    for name in ("fast", "hf"):
        batch = core_batch(elf, inputs, name)
        res = batch.run(1000)
        got[name] = ([(r.exit_code, r.output, r.instructions) for r in res],
                     [r.tokens for r in batch.readers])
    assert got["fast"] == got["hf"]
    assert got["fast"][0] == [(w.exit_code, w.output, w.instructions) for w in want]


def test_core_ab_script_compares_two_cores(checkpoint, capsys):
    """benchmarks/core_ab.py runs two compiled cores alternately on one program and prints
    each median and B/A (here one core against itself); an unknown program is refused."""
    import benchmarks.core_ab as mod
    args = [str(checkpoint), str(checkpoint), "--tokens", "300", "--repeats", "2"]
    assert mod.main(args + ["--program", "sum"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"A {checkpoint}: median ") and out[1].startswith("B ")
    assert out[2].startswith("sum, 300 tokens, 2 repeats alternated: B/A ")
    with pytest.raises(SystemExit, match="core_ab: no shipped program nope"):
        mod.main(args + ["--program", "nope"])
