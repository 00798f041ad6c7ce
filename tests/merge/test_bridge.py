"""Tool calls answered from inside a routed merged checkpoint (the bridge): plain
``generate()`` on a tiny random base carrying Qwen3.5's real tokenizer and chat template
merged with the full core (compact target), python and calc (``merged_tools``: one merge a
test run, shared with test_bridge_qwen.py and test_python_tool.py); the calls here are
calc's.

The base's words are noise, so the tests feed the tool call's tokens (or put them at the end
of the prompt) and check the answer's bytes exactly: calc's output for the call, inside
``<tool_response>…</tool_response>``, against the golden emulator reading the same call from
its UART input. The chip runs on the fast engine (deltachip is installed here). The merge
takes about 45 s (the core's 4 GB of token tables are read and checked); each call 1-4 s.
"""
from __future__ import annotations

import json
import random

import pytest
import torch

from cpu.emulator import Machine
from tests.merge.conftest import load

PROMPT = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def merged_calc(merged_tools):
    return merged_tools


@pytest.fixture(scope="module")
def model(merged_calc):
    return load(merged_calc, torch.bfloat16)


@pytest.fixture(scope="module")
def tok(merged_calc):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(merged_calc), trust_remote_code=True)


def call_text(expression: str) -> str:
    return json.dumps({"name": "calc", "arguments": {"expression": expression}})


def ref_answer(calc_elf, text: str) -> str:
    """What calc prints for a call, on the golden emulator (the call on its UART input)."""
    m = Machine.from_elf(calc_elf)
    m.rx = text.encode()
    r = m.run(50_000_000)
    out = r.output.decode()
    return out[:-1] if out.endswith("\n") else out


#: the tool turn as Qwen3.5's chat template renders a tool result (without thinking)
TURN_OPEN = "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
TURN_CLOSE = "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def answer_of(tok, ids: list[int]) -> str:
    """The result in a tool turn: ids that decode to the turn, the result inside."""
    text = tok.decode(ids)
    assert text.startswith(TURN_OPEN) and TURN_CLOSE in text, text
    return text[len(TURN_OPEN):text.index(TURN_CLOSE)]


def generate_call(model, tok, call: str, **kw):
    ids = tok(PROMPT + "<tool_call>\n" + call + "\n</tool_call>", return_tensors="pt").input_ids
    cache = model.new_cache()
    out = model.generate(ids, max_new_tokens=kw.pop("max_new_tokens", 120), cache=cache,
                         pad_token_id=0, **kw)
    return out[0, ids.shape[1]:].tolist(), cache


def test_generate_answers_a_call(model, tok, calc_elf):
    """Greedy generate(): the call, the chip's run and its answer inside generation."""
    new, cache = generate_call(model, tok, call_text("2**100"), do_sample=False)
    assert answer_of(tok, new) == "1267650600228229401496703205376"
    rec = cache.calls[0].log[0]
    assert rec["engine"] == "fast" and not rec["fault"] and not rec["resumed"]
    assert rec["instructions"] > 3000 and rec["tokens"] > rec["instructions"]
    # calc answered and is parked on the UART, waiting for the row's next call
    assert not rec["ended"] and cache.calls[0].parked is not None
    # the base's cache holds the text positions only: no trace position reached it
    assert cache.base.get_seq_length() == len(cache.kinds) and not any(cache.kinds)


@pytest.mark.slow       # test_bridge_qwen.py samples a batch of four in the default run
def test_sampled_generation_keeps_the_answer_exact(model, tok, calc_elf):
    torch.manual_seed(0)
    new, _ = generate_call(model, tok, call_text("(1/3 - 1) // 2 + 2**-3"), do_sample=True,
                           temperature=1.5, top_k=50)
    assert answer_of(tok, new) == ref_answer(calc_elf, "\n" + call_text(
        "(1/3 - 1) // 2 + 2**-3") + "\n")


def test_streaming_shows_the_answer(model, tok):
    from transformers import TextIteratorStreamer
    from threading import Thread
    ids = tok(PROMPT + "<tool_call>\n" + call_text("6*7") + "\n</tool_call>",
              return_tensors="pt").input_ids
    streamer = TextIteratorStreamer(tok, skip_prompt=True)
    th = Thread(target=model.generate, kwargs=dict(input_ids=ids, max_new_tokens=30,
                                                   do_sample=False, streamer=streamer,
                                                   pad_token_id=0))
    th.start()
    text = "".join(streamer)
    th.join()
    assert text.startswith(TURN_OPEN + "42" + TURN_CLOSE)


def bridge_module(model):
    """The merged checkpoint's modeling module (loaded by transformers as remote code)."""
    import sys
    return sys.modules[type(model).__module__]


def check_random_calls(model, calc_elf, count: int) -> None:
    """``count`` calls (random expressions: fractions, 80+ digit results, errors; and four
    fixed big ones), each through the merged model's bridge as the call's text bytes, one
    after another on one row (so calc answers each, parks, and is resumed by the next),
    against calc on the golden emulator reading the same bytes, each call alone and all of
    them as one stream of calls."""
    from tests.firmware.calc_oracle import generate as expressions
    exprs = [e for _, e in expressions(20261203, count - 4)]
    exprs += ["2**300 + 1", "(2**300 - 1) / 3**20", "1/0", "gcd(2**64, 6**30)"]
    random.Random(count).shuffle(exprs)
    row = bridge_module(model).ToolCalls()
    long_result, outputs, texts = 0, [], []
    for k, e in enumerate(exprs):
        text = "\n" + call_text(e) + "\n"
        got, rec = model._run_call(text.encode(), row)
        want = ref_answer(calc_elf, text)
        assert got.decode().rstrip("\n") == want, e
        assert rec["resumed"] == (k > 0) and row.parked is not None and not rec["fault"], e
        long_result += len(want) >= 80
        outputs.append(got)
        texts.append(text.encode())
    assert long_result >= 2
    m = Machine.from_elf(calc_elf)
    m.rx = b"\0".join(texts)
    assert m.run(100_000_000).output == b"".join(outputs)


def test_calc_through_the_model_equals_ref(model, calc_elf):
    """12 calls, 4 of them the fixed big ones (the slow test runs 100)."""
    check_random_calls(model, calc_elf, 12)


@pytest.mark.slow
def test_calc_through_the_model_equals_ref_on_100_random_expressions(model, calc_elf):
    check_random_calls(model, calc_elf, 100)


def test_later_calls_resume_the_parked_program(model, tok, calc_elf):
    """Three calls on one row, text between them: the first runs calc from its start and
    leaves it parked on the UART; the second resumes it (no start-up: fewer tokens than
    the same call from the start) and equals ref; an empty call runs a fresh calc, which
    says there is no expression."""
    cache = model.new_cache()

    def answer(ids: list[int]) -> str:
        logits = model(input_ids=torch.tensor([ids]), cache=cache).logits
        got = []
        while cache.calls[0].pending:
            got.append(int(logits[0, -1].argmax()))
            assert got[-1] == cache.calls[0].pending[0]
            logits = model(input_ids=torch.tensor([[got[-1]]]), cache=cache).logits
        return answer_of(tok, got)
    with torch.no_grad():
        a1 = answer(tok(PROMPT + "<tool_call>\n" + call_text("2**64") + "\n</tool_call>").input_ids)
        a2 = answer(tok("then <tool_call>\n" + call_text("2**64") + "\n</tool_call>").input_ids)
        a3 = answer(tok("and <tool_call></tool_call>").input_ids)
    log = cache.calls[0].log
    assert a1 == a2 == str(2 ** 64)
    assert a3 == "error: no expression given (example input: 2**100)"
    assert [r["resumed"] for r in log] == [False, True, False]
    assert log[1]["tokens"] < log[0]["tokens"]
    assert cache.base.get_seq_length() == len(cache.kinds) and not any(cache.kinds)


def test_beam_search_answers_the_call(model, tok):
    """Beam search reorders the rows: each row's call state goes with its row, and a parked
    program stays with one row only (the others run their next call from the start)."""
    new, cache = generate_call(model, tok, call_text("6*7"), num_beams=2, do_sample=False,
                               max_new_tokens=20)
    # beam search's own bookkeeping ends a beam at the tool turn's closing <|im_end|> (a
    # known limit, docs/merge.md): the answer is there, the new assistant turn is not
    assert tok.decode(new).startswith(TURN_OPEN + "42\n</tool_response><|im_end|>")
    mod = bridge_module(model)
    a, b = mod.ToolCalls(), mod.ToolCalls()
    a.parked, b.parked, a.log = object(), object(), [{"tokens": 1}]
    cache.calls = [a, b]
    cache._select_calls(torch.tensor([0, 0, 1]))
    assert cache.calls[0] is a and cache.calls[2] is b
    assert cache.calls[1].parked is None and cache.calls[1].log == a.log


@pytest.mark.parametrize("call,want", [
    ('{"name": "ruby", "arguments": {"code": "1"}}',        # to the first program, calc
     'error: unknown tool "ruby" (this computer has calc)'),
    # each a whole generation (the default run keeps one; test_calc_call.py reads the same
    # malformed calls without the model)
    pytest.param('{"name": "calc", "arguments": ',
                 "error: the call is not JSON: a value was expected", marks=pytest.mark.slow),
    pytest.param('{"name": "calc", "arguments": {"expression": "1+"}}',
                 "error: syntax error at column 3: expected a number, '(' or gcd, found end of "
                 "line", marks=pytest.mark.slow),
])
def test_malformed_calls_get_an_error_answer(model, tok, call, want):
    new, _ = generate_call(model, tok, call, do_sample=False)
    assert answer_of(tok, new) == want


@pytest.mark.slow
def test_a_call_of_over_256_tokens(model, tok):
    expr = "+".join(["7"] * 200)
    call = call_text(expr)
    assert len(tok(call).input_ids) >= 256
    new, cache = generate_call(model, tok, call, do_sample=False)
    assert answer_of(tok, new) == str(7 * 200)
    assert cache.calls[0].log[0]["call_tokens"] >= 256


def test_a_runaway_call_is_stopped_by_the_step_budget(model, tok):
    saved = model.config.chip_bridge["max_tokens"]
    model.config.chip_bridge["max_tokens"] = 1000
    try:
        new, cache = generate_call(model, tok, call_text("2**100"), do_sample=False)
    finally:
        model.config.chip_bridge["max_tokens"] = saved
    assert answer_of(tok, new).endswith("error: no answer within 1,000 steps")
    assert not cache.calls[0].log[0]["ended"]


def test_text_without_calls_is_the_bases(qwen_bases, model, tok):
    base = load(qwen_bases["tied"], torch.bfloat16, remote=False)
    ids = tok(PROMPT + "the quick brown fox <tool_response> x", return_tensors="pt").input_ids
    with torch.no_grad():
        lm, lb = model(input_ids=ids).logits, base(input_ids=ids).logits
    assert torch.equal(lm[..., :lb.shape[-1]], lb)


@pytest.mark.slow       # test_bridge_qwen.py decodes a batch of four in the default run
def test_batch_of_four_with_calls_at_different_positions(model, tok):
    """Four rows decoded together, each fed its own script of tokens; rows 0-2 close a call
    at different steps (row 3 has none). A row's answer is given token by token while the
    others go on with their scripts, and equals the answer that row gets alone."""
    calls = [call_text("2**70"), call_text("1/0"), call_text("10//3"), None]
    scripts = []
    for k, c in enumerate(calls):
        lead = tok(" x" * (3 * k)).input_ids
        body = tok("<tool_call>\n" + c + "\n</tool_call>").input_ids if c else []
        scripts.append(lead + body)
    start = tok(PROMPT, return_tensors="pt").input_ids.repeat(4, 1)
    cache = model.new_cache()
    with torch.no_grad():
        logits = model(input_ids=start, cache=cache).logits
        got: list[list[int]] = [[] for _ in range(4)]
        pos = [0] * 4
        for _ in range(max(len(s) for s in scripts) + 40):
            step = []
            for b in range(4):
                forced = cache.calls[b].pending if cache.calls else []
                if forced:
                    nxt = int(logits[b, -1].argmax())
                    assert nxt == forced[0]
                    got[b].append(nxt)
                elif pos[b] < len(scripts[b]):
                    nxt = scripts[b][pos[b]]
                    pos[b] += 1
                else:
                    nxt = tok(" x").input_ids[0]
                step.append(nxt)
            logits = model(input_ids=torch.tensor(step)[:, None], cache=cache).logits
    assert answer_of(tok, got[0]) == str(2 ** 70)
    assert answer_of(tok, got[1]) == "error: division by zero"
    assert answer_of(tok, got[2]) == "3"
    assert got[3] == [] and cache.calls[3].log == []


@pytest.mark.slow       # test_bridge_qwen.py runs `deltachip chat` with Qwen's template
def test_deltachip_chat_end_to_end(merged_calc, capfd):
    """`deltachip chat`: the reply streamed on stdout with the computer's answer in it
    (the tiny model's words are noise, so the reply begins with the call), the trace line
    of the call on stderr; a merge without the bridge is refused."""
    from deltachip.cli import main
    call = "<tool_call>\n" + call_text("2**100") + "\n</tool_call>"
    assert main(["chat", str(merged_calc), "--prompt", "What is 2**100?", "--max-new-tokens",
                 "60", "--assistant-start", call, "--show-trace"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith(call + TURN_OPEN + "1267650600228229401496703205376" + TURN_CLOSE)
    assert "[tool call 1: " in err and "instructions" in err and "on fast" in err
    assert main(["chat", str(merged_calc.parent), "--prompt", "x"]) == 2


def test_the_call_reaches_the_core_as_text_tokens(merged_calc, model, tok, calc_elf):
    """The merged core reads the call's text ids themselves (Text tokens, their bytes from
    its table ROMs, compiled from the base's tokenizer): the checkpoint holds no byte table,
    and calc prints what the golden emulator prints reading those ids' bytes from UART_TNEXT
    and UART_TXT."""
    from backends.merge.bridge import vocab_bytes
    cfg = model.config.chip_bridge
    assert "text" in cfg and "text_bytes" not in cfg
    assert not any(k.startswith("chip.bridge.") for k in model.state_dict())
    vocab = vocab_bytes(json.loads((merged_calc / "tokenizer.json").read_text()),
                        model.config.chip_token_offset)
    for expression in ("6*7", "2**70 / 3", "gcd(2**40, 6**20)"):
        ids = tok(call_text(expression), add_special_tokens=False).input_ids
        assert len(ids) > 3
        out, rec = model._run_call(ids, bridge_module(model).ToolCalls())
        m = Machine.from_elf(calc_elf)
        m.text = [vocab[i] for i in ids]
        want = m.run(50_000_000)
        assert out == want.output and rec["tokens"] > 0


@pytest.mark.slow       # about 1 s a token in transformers
def test_the_fallback_on_the_chip_modules_is_the_fast_engine(bases, tmp_path):
    """Where deltachip's fast engine is not there, a call runs on the merged model's own
    chip modules, a token at a time: the same tokens, instructions and output as the fast
    engine's run of the same call (the TINY core with a program that echoes its UART input,
    about 1 s a token in transformers)."""
    from pathlib import Path
    from backends.merge.routed import merge_routed
    from cpu.rv32.build import TINY
    from cpu.rv32.merged import core_for, load_firmware
    from firmware import toolchain
    src = Path(__file__).resolve().parents[1] / "cpu" / "programs" / "rx_echo.c"
    elf = toolchain.build([src], tmp_path / "rx_echo.elf")
    fw = load_firmware(str(elf), TINY)
    out = tmp_path / "out"
    merge_routed(bases["tied"], out, core_for(fw, "compact", "bf16"), firmware=fw)
    model = load(out, torch.bfloat16)
    fast_out, fast = model._run_call(b"ab", bridge_module(model).ToolCalls())
    mod = bridge_module(model)
    model._runner = mod.ModuleChip(model.chip)  # as without deltachip
    here_out, here = model._run_call(b"ab", mod.ToolCalls())
    assert fast["engine"] == "fast" and here["engine"] == "transformers"
    assert fast_out == here_out == b"Ab"
    # rx_echo reads on past the call: the run parks at that read, on both
    assert (fast["tokens"], fast["instructions"], fast["ended"]) == \
        (here["tokens"], here["instructions"], here["ended"]) and not here["ended"]


def _linked_copy(src, dst):
    """``dst``: every file of ``src`` as a symbolic link (damage one by replacing it)."""
    for p in src.rglob("*"):
        q = dst / p.relative_to(src)
        if p.is_dir():
            q.mkdir(parents=True, exist_ok=True)
        else:
            q.parent.mkdir(parents=True, exist_ok=True)
            q.symlink_to(p)
    return dst


@pytest.mark.parametrize("damage,says", [
    ("modeling", "modeling_deltachip.py is not the file the merge wrote (its sha256 differs)"),
    ("shard", "bytes, the merge wrote"),
    ("tokenizer", "tokenizer.json is not a regular file"),
    ("missing", "config.json: no such file or directory"),
])
def test_chat_names_a_damaged_merged_model(merged_calc, tmp_path, capfd, damage, says):
    """Every file the merge wrote is checked against the manifest's record before
    transformers reads any: a damaged one is named (exit 2), never a traceback."""
    import os
    from deltachip.cli import main
    d = _linked_copy(merged_calc, tmp_path / "m")
    if damage == "modeling":
        f = d / "modeling_deltachip.py"
        text = f.read_text()
        f.unlink()
        f.write_text(text.replace("import copy", "import cop(", 1))   # same size
    elif damage == "shard":
        f = min(d.glob("model-*.safetensors"), key=lambda p: p.stat().st_size)
        data = f.read_bytes()
        f.unlink()
        f.write_bytes(data[:-100])
    elif damage == "tokenizer":
        (d / "tokenizer.json").unlink()
        os.mkfifo(d / "tokenizer.json")
    else:
        (d / "config.json").unlink()
    assert main(["chat", str(d), "--prompt", "x", "--max-new-tokens", "2"]) == 2
    err = capfd.readouterr().err
    assert says in err and "Traceback" not in err and "merge it again" in err


@pytest.mark.slow
def test_chat_call_budget_and_inputs(merged_calc, capfd, monkeypatch):
    """--call-budget answers a call that needs more with an error; prompts on standard
    input are read with a bound and must be UTF-8; a prompt has a stated limit."""
    import io
    import sys
    from deltachip.cli import main
    call = "<tool_call>\n" + call_text("2**100") + "\n</tool_call>"
    assert main(["chat", str(merged_calc), "--prompt", "x", "--max-new-tokens", "60",
                 "--assistant-start", call, "--call-budget", "1000", "--show-trace"]) == 0
    out, err = capfd.readouterr()
    assert "error: no answer within 1,000 steps" in out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9\n")))
    assert main(["chat", str(merged_calc), "--max-new-tokens", "1"]) == 2
    assert "standard input: not UTF-8 text (byte 3)" in capfd.readouterr().err
    assert main(["chat", str(merged_calc), "--prompt", "x" * 70_000]) == 2
    assert "--prompt has 70,000 characters; chat takes at most 65,536" in \
        capfd.readouterr().err
