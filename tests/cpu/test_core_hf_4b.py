"""The full core compiled at qwen3.5-4b shapes (16 key heads x 128, 32 value heads x 128,
MLP 9216, on the chip's own residual) in transformers, against the core in the simulator
per position, in bf16 and fp32: every position's next token, every live residual lane after
every sublayer, every memory every 256 positions and at each program's end. The simulator's
run of each program is checked against the golden emulator here too (outcome and
instruction count; per retired instruction in test_core_sim.py), so the chain is
ref = sim = hf.

The ISA suite runs as one batch, each row its own program (its own ROM images); calc runs
several inputs as another, the shorter firmware programs a third (the longer ones take
12,000 to 217,000 tokens: hours to days of decoding on a CPU, where every token runs the
1 G weights of the lm_head). Every shipped program, the long ones too, runs teacher-forced
in bf16: the simulator's token stream through the model in chunked prefill, which a CPU
runs about 30 times faster per position than decode. Slow: the first run of each dtype
compiles the core into the core cache (about a minute), then tens of minutes per test
(``pytest -m slow tests/cpu/test_core_hf_4b.py``).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.verify.check import check_engine
from tests.cpu.core_check import check_in_prefill
from cpu.emulator import Machine
from cpu.rv32.build import FULL
from cpu.rv32.engines import SimCore, compiled_core
from cpu.rv32.loader import image_of
from firmware import toolchain

#: the ISA programs, in both dtypes: one batch, as long as its longest row (rv32m_div, 2,118
#: tokens: about 40 min in bf16 and an hour in fp32, whose steps read the 11 GB checkpoint,
#: on a 2-core machine)
ISA = toolchain.isa_programs()
#: calc's inputs per dtype: a batch takes as long as its longest row (2**100: 4,162 tokens;
#: every input costs at least calc's 1,100 tokens of start-up), so fp32 runs short ones
CALC_INPUTS = {"bf16": ["2**100", "123456789*987654321-5", "1/0"],
               "fp32": ["6*7", "1/0", "((("]}
TARGET = "qwen3.5-4b"

#: the shipped programs per dtype, shortest first (product 251 tokens ... crc32 3,548)
FIRMWARE = {"bf16": ["product", "sum", "hello", "crc32"], "fp32": ["product", "sum", "hello"]}

#: every shipped program (and calc) runs teacher-forced in bf16 (`test_every_program_in_prefill`);
#: lanes are compared on those under this many tokens (the lane taps double a position's time)
LANES_BELOW = 10_000

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["bf16", "fp32"])
def engine(request):
    from backends.engines.hf import HFEngine
    return HFEngine(compiled_core(FULL, TARGET, request.param), request.param)


def _check_batch(eng, machines: list) -> None:
    """Each machine's program on its own batch row: sim = ref on the outcome, hf = sim at
    every position until each row's halt token."""
    images, tokens = [], []
    for make in machines:
        want = make().run(10**6)
        sim = SimCore(image_of(make(), FULL))
        got = sim.run(10**6)
        assert (got.exit_code, got.output, got.instructions, str(got.fault)) == \
            (want.exit_code, want.output, want.instructions, str(want.fault))
        images.append(image_of(make(), FULL))
        tokens.append(sim.reader.tokens)
    rep = check_engine(eng, steps=max(tokens), batch=len(images),
                       starts=[im.start for im in images], roms=[im.images for im in images],
                       mem_every=256)
    assert rep.ok, "\n".join(map(str, rep.mismatches))
    assert rep.positions == sum(tokens)          # every row ran to its halt token


def test_isa_suite(engine, tmp_path: Path):
    elfs = [toolchain.build([toolchain.ISA_TESTS_DIR / f"{n}.S"], tmp_path / f"{n}.elf")
            for n in ISA]
    _check_batch(engine, [lambda e=e: Machine.from_elf(e) for e in elfs])


def test_calc(engine, tmp_path: Path):
    elf = toolchain.build(toolchain.shipped_programs()["calc"], tmp_path / "calc.elf")
    _check_batch(engine, [lambda t=t: Machine.from_elf(elf, t.encode())
                          for t in CALC_INPUTS[engine.dtype_name]])


def test_firmware(engine, tmp_path: Path):
    progs = toolchain.shipped_programs()
    elfs = [toolchain.build(progs[n], tmp_path / f"{n}.elf") for n in FIRMWARE[engine.dtype_name]]
    _check_batch(engine, [lambda e=e: Machine.from_elf(e) for e in elfs])


@pytest.fixture(scope="module")
def bf16_engine():
    from backends.engines.hf import HFEngine
    return HFEngine(compiled_core(FULL, TARGET, "bf16"), "bf16")


@pytest.mark.parametrize("name", sorted(toolchain.shipped_programs()))
def test_every_program_in_prefill(bf16_engine, name: str, tmp_path: Path):
    """Every shipped program, the long ones too (sieve: 216,806 tokens), teacher-forced:
    the simulator's token stream is fed through the bf16 model in chunks of 2,048 positions
    (chunked prefill, the cache carried over), and at every position the model's argmax must
    be the simulator's next token; every memory is compared after every chunk. By induction
    over the positions, greedy decoding then emits the same stream (decode itself is checked
    on the shorter programs above: prefill and decode run different GDN kernels, both proven
    exact for this chip). Lanes too on programs under LANES_BELOW tokens. About 9 ms per
    position without lanes on a 2-core machine: 331,229 positions, about an hour alone."""
    elf = toolchain.build(toolchain.shipped_programs()[name], tmp_path / f"{name}.elf")
    text = b"2**100" if name == "calc" else None
    check_in_prefill(bf16_engine, lambda: Machine.from_elf(elf, text), LANES_BELOW)
