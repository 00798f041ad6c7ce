"""The core (cpu/rv32, engine ``sim``) against the golden emulator (``ref``), per retired
instruction: the ISA suite, every firmware program, calc on several inputs, and
hypothesis-generated random programs that end in every fault cause."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st


from tests.cpu.core_check import compare  # noqa: E402
from cpu import isa, memmap  # noqa: E402
from cpu.emulator import FaultCause, Machine  # noqa: E402
from cpu.rv32.build import FULL, SMALL, load_core, with_text_ids  # noqa: E402
from firmware import toolchain  # noqa: E402

ISA_TESTS = toolchain.isa_programs()
PROGRAMS = sorted(n for n in toolchain.shipped_programs() if n != "calc")
CALC_INPUTS = ["2**100", "1+2*3", "(7-10)*-4/3", "123456789*987654321-5", "2**64 % 1000007",
               "1/0", "((("]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("core-fw")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            if name.startswith("isa:"):
                sources = [toolchain.ISA_TESTS_DIR / f"{name[4:]}.S"]
            else:
                sources = toolchain.shipped_programs()[name]
            cache[name] = toolchain.build(sources, out / f"{name.replace(':', '_')}.elf")
        return cache[name]
    return get


def _check(make, sizes=None, text=None) -> None:
    diffs, eng = compare(make, sizes or FULL, text=text)
    assert not diffs, "\n".join(diffs)
    return eng


@pytest.mark.parametrize("name", ISA_TESTS)
def test_isa_suite(built, name):
    elf = built(f"isa:{name}")
    eng = _check(lambda: Machine.from_elf(elf))
    assert eng.reader.exit_code == 0


@pytest.mark.parametrize("name", PROGRAMS)
def test_firmware_program(built, name):
    elf = built(name)
    _check(lambda: Machine.from_elf(elf))


@pytest.mark.parametrize("text", CALC_INPUTS)
def test_calc(built, text):
    elf = built("calc")
    _check(lambda: Machine.from_elf(elf, text.encode()))


#: inputs for tests/cpu/programs/rx_echo.c: empty, ASCII, bytes >= 0x80 (lb's sign)
RX_INPUTS = [b"", b"banana", "h\u00e9llo w\u00f6rld".encode(), b"a\x80\xffz" * 3]
RX_ECHO = Path(__file__).resolve().parent / "programs" / "rx_echo.c"


@pytest.mark.parametrize("text", RX_INPUTS)
def test_input_from_the_uart(tmp_path, text):
    """Byte loads from the UART's input: the core asks (Want), the run answers with the
    next byte (In), and the program sees what ref's emulator reads."""
    elf = toolchain.build([RX_ECHO], tmp_path / "rx_echo.elf")
    eng = _check(lambda: Machine.from_elf(elf, text))
    assert eng.input.pos == len(text)               # every byte was read, then 0s
    assert (b"A" in eng.reader.output) == (b"a" in text)


#: a vocabulary for tests/cpu/programs/text_echo.c: ASCII, UTF-8 (bytes >= 0x80), one byte,
#: exactly the window's 32 bytes and past it (40: the program refuses it)
TEXT_VOCAB = [b"{", b'"name"', b" calc", "\u00e9t\u00e9".encode(), b"\xff", b"x" * 32, b"=" * 40,
              b"}\n"]
TEXT_STREAMS = [[], [0, 1, 2, 7], [3, 4, 5, 2, 6, 0, 0]]
TEXT_ECHO = Path(__file__).resolve().parent / "programs" / "text_echo.c"


@pytest.mark.parametrize("ids", TEXT_STREAMS)
def test_text_input_from_the_uart(tmp_path, ids):
    """The text registers: a load from UART_TNEXT asks Want(1) and is answered with
    Text(next id), one from UART_TXT + j asks Want(2) and is answered with Text(the same id);
    the core takes the length and byte j from its table ROMs, and the program sees what
    ref's emulator reads from the ids' bytes."""
    elf = toolchain.build([TEXT_ECHO], tmp_path / "text_echo.elf")
    sizes = with_text_ids(FULL, len(TEXT_VOCAB))
    eng = _check(lambda: Machine.from_elf(elf), sizes, text=(TEXT_VOCAB, ids))
    want = b"".join(b"!40" if len(TEXT_VOCAB[i]) > 32 else b"[" + TEXT_VOCAB[i] + b"]"
                    for i in ids)
    assert bytes(eng.reader.output) == want
    assert eng.reader.exit_code == len(ids) + 1000 * any(b >= 0x80 for i in ids
                                                         for b in TEXT_VOCAB[i][:32])


@pytest.mark.parametrize("pieces", [
    ['{"name": "calc", "arguments": {"expression": "', "2**", "70", ' / 3"}}'],
    ['{"name": "calc", "arguments": {"expression": "', "1", "+" * 40, '2"}}'],
])
def test_calc_reads_a_call_as_text_tokens(built, pieces):
    """calc serving calls from the UART reads a call's text tokens (UART_TNEXT, UART_TXT),
    as a merged model's core does; a token longer than the 32 bytes the core holds is
    refused with an error, on the core as on ref."""
    elf = built("calc")
    vocab = [p.encode() for p in pieces]
    eng = _check(lambda: Machine.from_elf(elf), with_text_ids(FULL, len(vocab)),
                 text=(vocab, list(range(len(vocab)))))
    long = any(len(p) > 32 for p in vocab)
    assert (b"text token longer than 32 bytes" in eng.reader.output) == long
    assert long or eng.reader.output == b"393530540239137101141.3333333333333333333333333333" \
        b"3333333333333333333333333333333333333333333333333333333333333333333333\n"


@pytest.mark.parametrize("name", ["sum", "fibonacci", "hello"])
def test_small_core_runs_programs(built, name):
    """The small core of the compiled-model tests (RAM a 2 KiB ring) agrees with ref too."""
    elf = built(name)
    _check(lambda: Machine.from_elf(elf), SMALL)


def test_budget_stops_like_ref(built):
    """--max-steps: the same count, the same output so far, and the run continues."""
    elf = built("hello")
    from cpu.rv32.engines import SimCore
    from cpu.rv32.loader import load_program
    ref, eng = Machine.from_elf(elf), SimCore(load_program(elf))
    out_ref, out_sim = b"", b""
    for _ in range(40):
        a, b = ref.run(37), eng.run(37)
        assert (a.instructions, a.timed_out, a.exit_code) == (b.instructions, b.timed_out, b.exit_code)
        out_ref += a.output
        out_sim += b.output
        assert out_ref == out_sim
        if not a.timed_out:
            break
        assert ref.pc == eng.pc
    assert eng.reader.exit_code == 0 or a.timed_out


# ---------------------------------------------------------------- random programs

REGS = list(range(1, 32))
R_OPS = ["add", "sub", "sll", "slt", "sltu", "xor", "srl", "sra", "or", "and", "mul", "mulh",
         "mulhsu", "mulhu", "div", "divu", "rem", "remu", "sh1add", "sh2add", "sh3add"]
I_OPS = ["addi", "slti", "sltiu", "xori", "ori", "andi"]
SHIFTS = ["slli", "srli", "srai"]
LOADS = ["lb", "lh", "lw", "lbu", "lhu"]
STORES = ["sb", "sh", "sw"]
BRANCHES = ["beq", "bne", "blt", "bge", "bltu", "bgeu"]
EDGE = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x1FFF, 0x2000, 0xFFFFE000, 0xFFFFDFFF,
        0xFFFF, 0x10000, 100, 0x12345678]
ADDRESSES = [memmap.RAM_BASE, memmap.RAM_BASE + 0x100, memmap.STACK_TOP - 8, memmap.RODATA_BASE,
             0x40, memmap.UART_TX, memmap.RAM_END, memmap.RODATA_END, 0x20000000,
             0xFFFFFFFF, memmap.CODE_END - 4]

word = st.one_of(st.sampled_from(EDGE), st.integers(0, 0xFFFFFFFF))
reg = st.sampled_from(REGS)


def li(rd: int, value: int) -> list[str | tuple]:
    """lui + addi that set rd to ``value``."""
    value &= 0xFFFFFFFF
    lo = value & 0xFFF
    lo = lo - 0x1000 if lo & 0x800 else lo
    hi = ((value - lo) & 0xFFFFFFFF) >> 12
    return [("lui", rd, 0, 0, hi), ("addi", rd, rd, 0, lo)]


@st.composite
def chunk(draw) -> list[tuple]:
    """A few instructions of one kind (position-independent: branches and jal skip forward)."""
    kind = draw(st.sampled_from(["r", "i", "shift", "upper", "mem", "branch", "jal", "jalr",
                                 "fence", "li"]))
    rd, rs1, rs2 = draw(reg), draw(reg), draw(reg)
    if kind == "r":
        return [(draw(st.sampled_from(R_OPS)), rd, rs1, rs2, 0)]
    if kind == "i":
        return [(draw(st.sampled_from(I_OPS)), rd, rs1, 0, draw(st.integers(-2048, 2047)))]
    if kind == "shift":
        return [(draw(st.sampled_from(SHIFTS)), rd, rs1, 0, draw(st.integers(0, 31)))]
    if kind == "upper":
        return [(draw(st.sampled_from(["lui", "auipc"])), rd, 0, 0,
                 draw(st.integers(0, 0xFFFFF)))]
    if kind == "li":
        return li(rd, draw(word))
    if kind == "mem":
        base = draw(st.sampled_from([5, 6, 7, 28]))
        addr = draw(st.sampled_from(ADDRESSES)) + draw(st.integers(-8, 8))
        imm = draw(st.integers(-2048, 2047)) if draw(st.booleans()) else draw(st.integers(-3, 3))
        op = draw(st.sampled_from(LOADS + STORES))
        rd2 = rd if rd != base else 1
        return li(base, addr - imm) + [(op, rd2 if op in LOADS else 0, base, rs2, imm)]
    if kind == "branch":
        skip = draw(st.integers(1, 3))
        return [(draw(st.sampled_from(BRANCHES)), 0, rs1, rs2, 4 * (skip + 1))] + \
            [("addi", rd, rd, 0, 1)] * skip
    if kind == "jal":
        skip = draw(st.integers(0, 2))
        return [("jal", rd, 0, 0, 4 * (skip + 1))] + [("xori", rd, rd, 0, 5)] * skip
    if kind == "jalr":        # jump 2 words ahead through a register set by auipc
        t = 29
        return [("auipc", t, 0, 0, 0), ("jalr", rd, t, 0, 12), ("addi", rd, rd, 0, 7)]
    return [("fence", 0, 0, 0, 0)]


def _encode(program: list[tuple]) -> list[int]:
    return [isa.encode(n, rd, rs1, rs2, imm) for n, rd, rs1, rs2, imm in program]


# the endings: every fault cause, and a clean exit
ENDINGS = {
    "exit": li(17, 93) + li(10, 0xFFFFFF85) + [("ecall", 0, 0, 0, 0)],
    FaultCause.ILLEGAL_INSTRUCTION: [0xFFFFFFFF],
    FaultCause.UNSUPPORTED_INSTRUCTION: [0x0000100F],            # fence.i
    FaultCause.EBREAK: [("ebreak", 0, 0, 0, 0)],
    FaultCause.BAD_ECALL: li(17, 64) + [("ecall", 0, 0, 0, 0)],
    FaultCause.MISALIGNED_LOAD: li(5, memmap.RAM_BASE + 2) + [("lw", 6, 5, 0, 0)],
    FaultCause.MISALIGNED_STORE: li(5, memmap.RAM_BASE + 1) + [("sh", 0, 5, 6, 0)],
    FaultCause.LOAD_ACCESS: li(5, 0xFFFFFFFF) + [("lbu", 6, 5, 0, 1)],
    FaultCause.STORE_ACCESS: li(5, memmap.UART_TX) + [("sw", 0, 5, 6, 0)],
    FaultCause.STORE_TO_ROM: li(5, memmap.RODATA_BASE) + [("sb", 0, 5, 6, 8)],
    FaultCause.BAD_JUMP: li(5, memmap.CODE_END) + [("jalr", 1, 5, 0, 0)],
    FaultCause.MISALIGNED_JUMP: li(5, 0x102) + [("jalr", 1, 5, 0, 0)],
    FaultCause.FETCH_OUTSIDE_CODE: [],                         # placed at the end of code ROM
}


def _machine(body: list[tuple], ending, regs: list[int]) -> Machine:
    words = _encode(body)
    end = ENDINGS[ending]
    end_words = [w if isinstance(w, int) else isa.encode(*w) for w in end]
    m = Machine()
    for r, v in zip(REGS, regs):
        if r != memmap.REG_SP:
            m.regs[r] = v
    if ending is FaultCause.FETCH_OUTSIDE_CODE:
        # body at the top of code ROM, falling off its end
        start = memmap.CODE_END - 4 * len(words)
        m.load_words([isa.encode("jal", 0, 0, 0, start)])
        m.load_words(words, start)
    else:
        m.load_words(words + end_words)
    m.write(memmap.RODATA_BASE, bytes(range(256)))
    m.write(memmap.RAM_BASE, bytes(range(255, -1, -1)))
    return m


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=st.lists(chunk(), min_size=1, max_size=25).map(lambda cs: [i for c in cs for i in c]),
       ending=st.sampled_from(list(ENDINGS)),
       regs=st.lists(word, min_size=31, max_size=31))
def test_random_programs(body, ending, regs):
    load_core()      # elaborated once (cached)
    diffs, _ = compare(lambda: _machine(body, ending, regs), max_steps=5000)
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("ending", list(ENDINGS), ids=str)
def test_every_ending(ending):
    """Each fault cause (and the exit) once, after a short fixed body; the fault text, pc and
    instruction count are the emulator's."""
    body = li(9, 0x12345678) + [("add", 10, 9, 9, 0), ("sh1add", 11, 10, 9, 0)]
    diffs, eng = compare(lambda: _machine(body, ending, [3] * 31))
    assert not diffs, "\n".join(diffs)
    if ending == "exit":
        assert eng.reader.exit_code == -123
    else:
        assert eng.reader.fault is not None and eng.reader.fault.cause is ending


@pytest.mark.parametrize("shift", range(8))
def test_straight_line_uses_every_token_path(shift):
    """A long run without jumps, so every kind of instruction ends an 8-word block (wide
    result: Half + Lo + Jump, small: Lo + Jump; no result: Jump; UART store: Out(go=0) +
    Jump; division at the block's end), each placed at every position of a block by
    ``shift`` leading nops."""
    body = [("addi", 0, 0, 0, 0)] * shift + li(6, memmap.UART_TX) + li(7, 0x7FFF1234)
    for _ in range(3):
        body += [("lui", 9, 0, 0, 0xFEDCB), ("addi", 9, 9, 0, 5), ("xor", 10, 9, 7, 0),
                 ("sb", 0, 6, 9, 0), ("div", 11, 10, 9, 0), ("divu", 12, 7, 9, 0),
                 ("rem", 13, 10, 7, 0), ("sw", 0, 2, 10, -4), ("mulh", 14, 7, 7, 0),
                 ("remu", 15, 7, 6, 0), ("addi", 7, 7, 0, 1)]
    diffs, eng = compare(lambda: _machine(body, "exit", [5] * 31))
    assert not diffs, "\n".join(diffs)
    assert eng.reader.exit_code == -123


@pytest.mark.parametrize("shift", range(8))
def test_stores_land_late_and_reads_see_them(shift):
    """A store lands at the next step that is not a Half (core.hdl, "RAM"): a load, a byte
    store or a halfword store of the same word right after it sees the landed word, whether
    the store's merged word came back small, wide (Half + Step) or at a block's end; every
    store and load at every position of a block (``shift`` leading nops)."""
    body = [("addi", 0, 0, 0, 0)] * shift + li(8, memmap.RAM_BASE + 0x100) + li(9, 0x7FFF1234)
    for off in (0, 4):
        body += [("sw", 0, 8, 9, off), ("lw", 10, 8, 0, off),          # word, read back at once
                 ("sb", 0, 8, 9, off + 1), ("lw", 11, 8, 0, off),      # wide merge, read back
                 ("sb", 0, 8, 0, off + 2), ("sb", 0, 8, 0, off + 3),   # two merges in a row
                 ("sh", 0, 8, 9, off + 2), ("lhu", 12, 8, 0, off + 2),
                 ("sw", 0, 8, 0, off), ("sb", 0, 8, 9, off),           # small merge: 0x34
                 ("lbu", 13, 8, 0, off), ("lw", 14, 8, 0, off)]
    diffs, eng = compare(lambda: _machine(body, "exit", [0] * 31))
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("shift", range(8))
def test_loads_from_code_rom(shift):
    """A load from code ROM finishes at the next step, which reads `rawcode` at the index
    its Half carries (core.hdl): every width and sign, right after a store (which lands at
    the load's step) and before loads of the stored word, small and wide values, at every
    position of a block (``shift`` leading nops)."""
    body = [("addi", 0, 0, 0, 0)] * shift + li(8, memmap.RAM_BASE + 0x40) + li(9, 0x87654321)
    for off in (0, 4, 8):
        body += [("sw", 0, 8, 9, off), ("lw", 10, 0, 0, off), ("lh", 11, 0, 0, off + 2),
                 ("lbu", 12, 0, 0, off + 3), ("lb", 13, 0, 0, off + 1), ("lhu", 14, 0, 0, 6),
                 ("lw", 15, 8, 0, off), ("sb", 0, 8, 10, off + 1), ("lw", 16, 8, 0, off),
                 ("add", 17, 10, 16, 0)]
    diffs, eng = compare(lambda: _machine(body, "exit", [0] * 31))
    assert not diffs, "\n".join(diffs)
    assert eng.reader.exit_code == -123


def test_a_result_ending_a_block_takes_a_next_once_per_jump_then_a_lo():
    """A result at word 7 of the last Jump's block that a Step could carry (13 bits signed,
    or rd's upper 19 bits kept) is written back by a Next, which runs word 0 of the next
    block; at the end of that block (a Next ran since the Jump) by a Lo, then Jump. A wide
    one takes a Half first. ref agrees on every retired instruction."""
    nop = ("addi", 0, 0, 0, 0)
    body = li(9, 0x7FFF1234) + [nop] * 5 + [("addi", 10, 0, 0, -5)]    # word 7: small
    body += [nop] * 7 + [("addi", 9, 9, 0, 1)]                        # word 15: keeps
    body += [nop] * 7 + [("lui", 11, 0, 0, 0xABCDE)]                  # word 23: wide
    body += [nop] * 7 + [("lui", 12, 0, 0, 0x12345)]                  # word 31: wide
    make = lambda: _machine(body, "exit", [0] * 31)
    diffs, eng = compare(make)
    assert not diffs, "\n".join(diffs)
    from cpu.rv32.engines import SimCore
    from cpu.rv32.loader import image_of
    from cpu.rv32.protocol import HALF, JUMP, LO, NEXT, STEP
    core = SimCore(image_of(make()))
    stream = [core.cur]
    while len(stream) < 45:
        stream.append(core._step(stream[-1]))
    ends = [(stream[i - 1].kind, t.kind, stream[i + 1].kind)
            for i, t in enumerate(stream) if t.kind in (LO, NEXT)]
    assert ends[:4] == [(STEP, NEXT, STEP), (STEP, LO, JUMP), (HALF, NEXT, STEP), (HALF, LO, JUMP)]
    keeps = [t.fields[0] if t.kind == NEXT else t.fields[0] >> 13
             for t in stream if t.kind in (LO, NEXT)]
    assert keeps[:2] == [0, 1]


def test_cli_sim_engine(built, tmp_path, capfd):
    """`deltachip run calc.elf --engine sim --input '2**100' --stats S`: the power, exit 0,
    and the token figures in the stats; --target with a non-compiled engine is refused."""
    import json
    from deltachip.cli import main
    elf = str(built("calc"))
    stats = tmp_path / "s.json"
    assert main(["run", elf, "--engine", "sim", "--input", "2**100", "--stats", str(stats)]) == 0
    assert capfd.readouterr().out == "1267650600228229401496703205376\n"
    s = json.loads(stats.read_text())
    want = Machine.from_elf(elf, b"2**100").run(10**6)
    assert s["engine"] == "sim" and s["target"] == "sim" and s["instructions"] == want.instructions
    assert s["tokens"] > s["instructions"] and s["tokens_per_instruction"] == \
        round(s["tokens"] / s["instructions"], 4)
    assert main(["run", elf, "--engine", "sim", "--target", "compact"]) == 2
    assert "--target applies to the compiled engines (hf, fast), not --engine sim" in capfd.readouterr().err
