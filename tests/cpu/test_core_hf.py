"""The compiled core (engine ``hf``) against the core in the simulator, per position (the
next token and, every few positions, every memory read back from the recurrent state), and
its outcome against the golden emulator.

The default run uses the TINY core (cpu/rv32/build.py: the same circuit with 2 KiB code,
512 B rodata and a 512 B RAM ring) on the compact target, compiled once into the core cache
(``$DELTACHIP_CACHE/cores``); the program is hand-assembled to touch every unit: ALU, shifts,
Zba, multiply, a multi-token division, loads and stores of every width, the UART, taken and
not-taken branches, jal/jalr, results that need a Half, loads from code ROM, and the exit
ecall.

The full core on the compact target runs the ISA suite and the short firmware programs
teacher-forced (chunked prefill: every position's next token, every memory after every
chunk, every lane): a slow test, since on a CPU without bf16 hardware transformers takes
seconds per position; the default run checks the full core on the fast engine instead
(tests/cpu/test_core_fast.py: fast = hf on a short trace, fast = sim on whole programs).
"""
from __future__ import annotations

import pytest

from backends.verify.check import check_engine
from cpu import isa, memmap
from cpu.emulator import Machine
from tests.cpu.core_check import check_in_prefill
from cpu.rv32.build import FULL, TINY
from cpu.rv32.engines import HFCore, compiled_core
from cpu.rv32.loader import image_of
from firmware import toolchain

RAM = memmap.RAM_BASE
PROGRAM = [
    ("lui", 5, 0, 0, RAM >> 12),          # t0 = RAM base
    ("lui", 6, 0, 0, memmap.UART_TX >> 12),
    ("addi", 7, 0, 0, 1234),
    ("addi", 28, 0, 0, -77),
    ("mul", 29, 7, 28, 0),                # small negative product
    ("mulhu", 30, 7, 7, 0),
    ("lui", 31, 0, 0, 0xABCDE),           # wide
    ("sh3add", 31, 7, 31, 0),
    ("sw", 0, 5, 31, 8),
    ("sb", 0, 5, 28, 13),
    ("lhu", 9, 5, 0, 8),
    ("lb", 18, 5, 0, 13),
    ("lw", 19, 5, 0, 8),
    ("lw", 12, 0, 0, 4),                  # loads from code ROM (two tokens more each)
    ("lh", 13, 0, 0, 14),
    ("lbu", 14, 0, 0, 9),
    ("div", 20, 31, 28, 0),               # multi-token division, negative
    ("remu", 21, 31, 7, 0),
    ("srai", 22, 31, 0, 7),
    ("sltu", 23, 28, 7, 0),
    ("addi", 24, 0, 0, 3),
    ("add", 25, 25, 24, 0),               # loop: 3 times
    ("addi", 24, 24, 0, -1),
    ("bne", 0, 24, 0, -8),
    ("addi", 10, 25, 0, 48),
    ("sb", 0, 6, 10, 0),                  # UART: "6" (48 + 3 + 2 + 1)
    ("jal", 1, 0, 0, 8),
    ("addi", 10, 0, 0, 1),                # skipped
    ("auipc", 11, 0, 0, 0),
    ("jalr", 0, 11, 0, 8),
    ("addi", 10, 0, 0, 2),                # skipped
    ("xor", 10, 19, 20, 0),
    ("add", 10, 10, 12, 0),
    ("xor", 10, 10, 13, 0),
    ("sub", 10, 10, 14, 0),
    ("addi", 17, 0, 0, 93),
    ("ecall", 0, 0, 0, 0),
]


def _machine() -> Machine:
    m = Machine()
    m.load_words([isa.encode(*p) for p in PROGRAM])
    return m


@pytest.fixture(scope="module")
def tiny_checkpoint():
    return compiled_core(TINY, "compact", "bf16")


def test_hf_equals_sim_per_position(tiny_checkpoint):
    from backends.engines.hf import HFEngine
    image = image_of(_machine(), TINY)
    eng = HFEngine(tiny_checkpoint, "bf16", roms=image.images)
    rep = check_engine(eng, steps=100, starts=[image.start], mem_every=16)
    assert rep.ok, "\n".join(map(str, rep.mismatches))
    assert rep.positions > 40 and rep.memory_checks > 3


def test_hf_outcome_equals_ref(tiny_checkpoint):
    want = _machine().run(10_000)
    core = HFCore(image_of(_machine(), TINY), TINY, checkpoint=tiny_checkpoint)
    got = core.run(10_000)
    assert (got.exit_code, got.output, got.instructions, got.fault) == \
        (want.exit_code, want.output, want.instructions, want.fault)
    assert got.output == b"6"
    stats = core.stats()
    assert stats["layers"] > 0 and stats["tokens"] > got.instructions
    assert 0 < stats["nonzero_weights"] < stats["nonzero_vocab_weights"]


ISA_TESTS = toolchain.isa_programs()
#: the shipped programs of at most 1,600 tokens (product 251, sum 592, hello 1,588)
SHORT_FIRMWARE = ["product", "sum", "hello"]


@pytest.fixture(scope="module")
def full_compact():
    from backends.engines.hf import HFEngine
    return HFEngine(compiled_core(FULL, "compact", "bf16"), "bf16")


@pytest.mark.slow
@pytest.mark.parametrize("name", ISA_TESTS)
def test_full_core_runs_the_isa_suite(full_compact, name, tmp_path):
    elf = toolchain.build([toolchain.ISA_TESTS_DIR / f"{name}.S"], tmp_path / f"{name}.elf")
    check_in_prefill(full_compact, lambda: Machine.from_elf(elf))


@pytest.mark.slow
@pytest.mark.parametrize("name", SHORT_FIRMWARE)
def test_full_core_runs_short_firmware(full_compact, name, firmware_elf):
    elf = firmware_elf(name)
    check_in_prefill(full_compact, lambda: Machine.from_elf(elf))


@pytest.mark.slow
def test_cli_hf_engine_runs_calc_on_the_full_core(firmware_elf, capfd, tmp_path):
    """`deltachip run calc.elf --engine hf --target compact --input '2**100'`: the full core
    compiled into compact Qwen3.5 layers (cached after the first run) computes 2**100 in
    transformers, with the same instruction count as the golden emulator. Slow: the first
    run compiles the core (minutes), and calc takes about 4,300 tokens."""
    import json
    from deltachip.cli import main
    elf = str(firmware_elf("calc"))
    stats = tmp_path / "s.json"
    assert main(["run", elf, "--engine", "hf", "--target", "compact", "--input", "2**100",
                 "--stats", str(stats)]) == 0
    assert capfd.readouterr().out == "1267650600228229401496703205376\n"
    s = json.loads(stats.read_text())
    want = Machine.from_elf(elf, b"2**100").run(10**6)
    assert (s["engine"], s["target"], s["instructions"]) == ("hf", "compact", want.instructions)
    assert s["layers"] > 0 and s["tokens"] > s["instructions"]
