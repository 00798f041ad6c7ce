"""The chip inside a stock merge as an engine: ``hf`` (plain transformers on the widened
model, :class:`backends.engines.merged.StockEngine`) checked step by step against the
hf engine on the chip alone, and ``fast`` (the chip's tensors cut out of the merged files)
checked step by step against that; a stock merge that disagrees with its chip is refused.
The RISC-V core with a program in the stock layout, against ``ref``: the slow test at the
end."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from backends.chipdir.checkpoint import ChipDirError

STEPS = 40


def _run(eng, steps: int, roms=None) -> tuple[list[int], dict]:
    """``steps`` greedy decode steps from the start token; the ids and the memories."""
    cache = eng.new_cache(1, None if roms is None else [roms])
    tok, ids = eng.token_id(eng.circuit.start), []
    for _ in range(steps):
        tok = int(eng.decode_step([tok], cache)[0])
        ids.append(tok)
    return ids, eng.read_memories(cache)


@pytest.mark.parametrize("chip,dtype", [("stack", "bf16"), ("counter32", "fp32")])
def test_stock_engine_steps_as_the_chip_alone(stock, qchips, chip, dtype):
    """open_merged on a stock merge runs plain transformers on the widened model; token by
    token it gives what the hf engine gives on the chip's own directory, and the memories
    read back from its chip layers are the same."""
    from backends.engines.hf import HFEngine
    from backends.engines.merged import open_merged
    from backends.engines.merged import StockEngine
    out, _ = stock("tied", chip)
    eng = open_merged(out)
    assert isinstance(eng, StockEngine) and eng.dtype_name == dtype
    assert eng.model.__class__.__name__ == "Qwen3_5ForCausalLM"
    want = _run(HFEngine(qchips[chip]), STEPS)
    assert _run(eng, STEPS) == want
    assert len(set(want[0])) > 5


def test_stock_engine_takes_the_runs_own_rom(stock, qchips):
    """Memory images given to the engine replace the merge's (as a program's images do for
    the core): the stack machine runs another program the same on both."""
    from backends.engines.hf import HFEngine
    from backends.engines.merged import open_merged
    out, _ = stock("tied", "stack")
    alone = HFEngine(qchips["stack"])
    rom = list(alone.roms.values())[0]
    other = {name: list(reversed(words)) for name, words in alone.roms.items()}
    assert other != alone.roms and any(rom)
    assert _run(open_merged(out, roms=other), STEPS) == _run(HFEngine(qchips["stack"],
                                                                      roms=other), STEPS)


@pytest.mark.parametrize("chip", ["stack", "counter32"])
def test_fast_on_a_stock_merge_equals_hf_on_it(stock, chip):
    """The fast engine reads the chip's tensors cut from the merged files and steps as plain
    transformers does on the whole widened model; memories and states agree at the end."""
    from backends.engines.fast.engine import FastEngine
    from backends.engines.merged import open_merged
    out, _ = stock("untied", chip)
    hf, fast = open_merged(out), FastEngine(out, threads=1)
    ch, cf = hf.new_cache(1), fast.new_cache(1)
    tok = hf.token_id(hf.circuit.start)
    for _ in range(STEPS):
        a, b = int(hf.decode_step([tok], ch)[0]), int(fast.decode_step([tok], cf)[0])
        assert a == b
        tok = a
    assert hf.read_memories(ch) == fast.read_memories(cf)
    for li in range(hf.dims.layers):
        if hf.config.layer_types[li] == "linear_attention":
            assert torch.equal(hf.recurrent_state(ch, li, 0), fast.recurrent_state(cf, li, 0))


def _copy(out, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(out, d)
    return d


@pytest.mark.parametrize("edit,says", [
    (lambda d: _set(d / "config.json", ("hidden_size",), 999),
     "config.json's hidden_size is 999"),
    (lambda d: _set(d / "deltachip.json", ("stock", "chip_dims"), [64, 70]),
     "do not hold its residual"),
    (lambda d: _set(d / "deltachip.json", ("stock", "chip_layers"), [0, 1]),
     "are not its first"),
    (lambda d: _set(d / "deltachip.json", ("stock",), None),
     "its stock section or token range is missing or malformed"),
    (lambda d: _set(d / "config.json", ("intermediate_size",), 64),
     "config.json's intermediate_size is 64"),
    (lambda d: _set(d / "deltachip.json", ("layout",), "wide"),
     "layout 'wide'; expected one of routed, stock"),
])
def test_a_stock_merge_that_disagrees_with_its_chip_is_refused(stock, tmp_path, edit, says):
    from backends.engines.fast.engine import FastEngine
    from backends.engines.merged import open_merged
    d = _copy(stock("tied", "counter")[0], tmp_path)
    edit(d)
    for make in (open_merged, lambda p: FastEngine(p, threads=1)):
        with pytest.raises(ChipDirError, match="merge it again") as e:
            make(d)
        assert says in str(e.value)


def _set(f, keys, value) -> None:
    j = json.loads(f.read_text())
    node = j
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    f.write_text(json.dumps(j))


# ---- the RISC-V core in the stock layout ------------------------------------------------------

@pytest.fixture(scope="module")
def core_stock(tmp_path_factory):
    """A tiny base with Qwen3.5-4B's GDN heads and MLP width (hidden 64) and Qwen3.5's real
    tokenizer and chat template, and the core with calc merged into it in the stock layout
    (``deltachip merge --layout stock --firmware``): the core from the core cache
    (qwen3.5-4b, bf16)."""
    from tests.merge.qwen35 import make_qwen_base
    from firmware import toolchain
    d = tmp_path_factory.mktemp("core-stock")
    base = make_qwen_base(d / "base", tied=True, seed=5, intermediate=9216)
    elf = toolchain.build(toolchain.shipped_programs()["calc"], d / "calc.elf")
    out = d / "merged"
    from deltachip.cli import main
    assert main(["merge", str(base), str(out), "--firmware", str(elf), "--layout",
                 "stock"]) == 0
    return out, elf


@pytest.mark.slow
def test_the_core_in_the_stock_layout_runs_firmware_as_ref(core_stock, capfd):
    """``deltachip run PROG --engine fast|hf --model STOCK_DIR`` prints what ref prints; hf
    (plain transformers on the widened model) and fast agree token by token on the first
    300 tokens."""
    from backends.engines.fast.engine import FastEngine
    from backends.engines.merged import open_merged
    from cpu.rv32.loader import load_program
    from cpu.rv32.build import FULL
    from deltachip.cli import main
    out, elf = core_stock
    manifest = json.loads((out / "deltachip.json").read_text())
    assert manifest["layout"] == "stock" and manifest["firmware"]["name"] == "calc"
    assert main(["run", str(elf), "--engine", "ref", "--input", "2**70 / 3"]) == 0
    want = capfd.readouterr().out
    assert "1180591620717411303424/3" in want
    assert main(["run", str(elf), "--engine", "fast", "--model", str(out), "--input",
                 "2**70 / 3"]) == 0
    assert capfd.readouterr().out == want
    roms = load_program(elf, b"7*6", FULL).images
    hf, fast = open_merged(out, roms=roms), FastEngine(out, roms=roms, threads=1)
    ch, cf = hf.new_cache(1), fast.new_cache(1)
    tok = hf.token_id(hf.circuit.start)
    for _ in range(300):
        a, b = int(hf.decode_step([tok], ch)[0]), int(fast.decode_step([tok], cf)[0])
        assert a == b
        tok = a
    assert hf.read_memories(ch) == fast.read_memories(cf)


def _call(expression: str, xml: bool = False) -> str:
    if xml:
        return ("<tool_call>\n<function=calc>\n<parameter=expression>\n" + expression +
                "\n</parameter>\n</function>\n</tool_call>")
    return "<tool_call>\n" + json.dumps({"name": "calc", "arguments": {
        "expression": expression}}) + "\n</tool_call>"


#: the tool turn of Qwen3.5's template in non-thinking mode, around the result
OPEN = "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
CLOSE = "\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.mark.slow
def test_the_stock_driver_answers_tool_calls(core_stock, capfd):
    """``deltachip chat STOCK_DIR``: plain transformers writes the text (the call forced by
    the reply's start, the words of a random base being noise), the driver runs each call
    (XML and JSON) on the chip (fast, on the tensors cut from the merged files) and the
    answer is the template's tool turn around exactly what calc prints on the golden
    emulator; a second call resumes the parked program; a malformed call gets an error
    answer."""
    from cpu.emulator import Machine
    from deltachip.chat import Chat
    out, elf = core_stock
    chat = Chat(out)
    assert chat.driver is not None and chat.model.__class__.__name__ == "Qwen3_5ForCausalLM"
    for k, expr in enumerate(["2**100", "(1/3 + 1/6) * 7", "gcd(2**40, 6**20)", "1/0"]):
        m = Machine.from_elf(elf)
        m.rx = json.dumps({"name": "calc", "arguments": {"expression": expr}}).encode()
        ref = m.run(50_000_000).output.decode().rstrip("\n")
        reply = chat.reply("compute", max_new_tokens=len(ref) + 40,
                           start=_call(expr, xml=k % 2 == 0), out=_Sink())
        assert reply.startswith(OPEN + ref + CLOSE), reply
        rec = chat.calls[-1]
        assert rec["engine"] == "fast" and rec["output"].rstrip("\n") == ref
        assert rec["resumed"] == (k > 0)
    reply = chat.reply("x", max_new_tokens=60, start="<tool_call>\n{not json\n</tool_call>",
                       out=_Sink())
    assert reply.startswith(OPEN + "error"), reply
    from deltachip.cli import main
    assert main(["chat", str(out), "--prompt", "hi", "--max-new-tokens", "60",
                 "--assistant-start", _call("2**64", xml=True), "--show-trace"]) == 0
    o = capfd.readouterr()
    assert OPEN + "18446744073709551616" + CLOSE in o.out
    assert "[tool call 1:" in o.err and "on fast" in o.err


class _Sink:
    def write(self, s: str) -> None:
        pass

    def flush(self) -> None:
        pass
