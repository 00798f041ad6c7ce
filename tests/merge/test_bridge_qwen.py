"""Tool calls in Qwen3.5's own conversation format, answered from inside a routed merged
checkpoint: a tiny random base carrying Qwen3.5's real tokenizer and chat template
(tests/merge/qwen35.py) merged with the core (compiled for that vocabulary: 248,320 text ids
and the pieces of its 360 ids longer than 32 bytes) and calc.

The base's words are noise, so the assistant's call is part of the prompt (as the template
renders it, or as JSON); the tests check that the ids generated after ``</tool_call>`` are
exactly the ids of the tool turn that the base's chat template renders for the conversation
with the tool's result (``apply_chat_template(..., add_generation_prompt=True)``), the result
being calc's output on the golden emulator.
"""
from __future__ import annotations

import json

import pytest
import torch

from cpu.emulator import Machine
from deltachip.chat import CALC_TOOL
from tests.merge.conftest import load


@pytest.fixture(scope="module")
def merged(merged_tools):
    return merged_tools


@pytest.fixture(scope="module")
def model(merged):
    return load(merged, torch.bfloat16)


@pytest.fixture(scope="module")
def tok(merged):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(merged))


def xml_call(expr: str) -> str:
    return ("<tool_call>\n<function=calc>\n<parameter=expression>\n" + expr +
            "\n</parameter>\n</function>\n</tool_call>")


def json_call(expr: str) -> str:
    return ("<tool_call>\n" + json.dumps({"name": "calc", "arguments": {"expression": expr}})
            + "\n</tool_call>")


def ref(calc_elf, expr: str) -> str:
    """calc's output for one expression on the golden emulator, its last newline cut."""
    m = Machine.from_elf(calc_elf)
    m.rx = json.dumps({"name": "calc", "arguments": {"expression": expr}}).encode()
    out = m.run(50_000_000).output.decode()
    return out[:-1] if out.endswith("\n") else out


def conversation(exprs: list[str], results: list[str] | None = None) -> list[dict]:
    msgs = [{"role": "user", "content": "Compute " + " and ".join(exprs) + "."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "calc",
                                                  "arguments": {"expression": e}}}
                for e in exprs]}]
    return msgs + [{"role": "tool", "content": r} for r in results or []]


def prompt_ids(tok, exprs, calls: str, thinking=False) -> list[int]:
    text = tok.apply_chat_template(conversation(exprs)[:1], tools=[CALC_TOOL], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=thinking)
    return tok(text + calls, add_special_tokens=False).input_ids


def tool_turn(tok, exprs, results, thinking=False) -> list[int]:
    """The ids the template renders after the assistant's last </tool_call>: the tool turn
    with ``results`` and the generation prompt."""
    text = tok.apply_chat_template(conversation(exprs, results), tools=[CALC_TOOL],
                                   tokenize=False, add_generation_prompt=True,
                                   enable_thinking=thinking)
    ids = tok(text, add_special_tokens=False).input_ids
    close = tok.convert_tokens_to_ids("</tool_call>")
    return ids[len(ids) - ids[::-1].index(close):]


def generate(model, ids: list[list[int]], n: int, **kw) -> list[list[int]]:
    width = max(map(len, ids))
    pad = 248_044
    x = torch.tensor([[pad] * (width - len(r)) + r for r in ids])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids])
    out = model.generate(x, attention_mask=mask, max_new_tokens=n, pad_token_id=pad,
                         cache=model.new_cache(), **kw)
    return [r[width:] for r in out.tolist()]


@pytest.mark.parametrize("form", [xml_call, json_call])
def test_the_answer_is_the_templates_tool_turn(model, tok, calc_elf, form):
    """Greedy, batch 1: after the call the ids are the template's tool turn, <|im_end|>s
    and all (they do not end generate()), then the model's own words."""
    expr = "2**100 - 1/3"
    want = tool_turn(tok, [expr], [ref(calc_elf, expr)])
    got = generate(model, [prompt_ids(tok, [expr], form(expr))], len(want) + 3,
                   do_sample=False)[0]
    assert got[:len(want)] == want and len(got) == len(want) + 3
    assert tok.decode(want).startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                                       "3802951800684688204490109616127/3\n</tool_response>"
                                       "<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                                       "</think>\n\n")


def test_sampled_batch_of_four(model, tok, calc_elf):
    """Sampled, four rows of different lengths (left-padded), XML and JSON calls."""
    exprs = ["6*7", "(1/3 + 1/6) * 7", "1/0", "2**64 // 3"]
    forms = [xml_call, json_call, xml_call, json_call]
    ids = [prompt_ids(tok, [e], f(e)) for e, f in zip(exprs, forms)]
    wants = [tool_turn(tok, [e], [ref(calc_elf, e)]) for e in exprs]
    torch.manual_seed(0)
    got = generate(model, ids, max(map(len, wants)), do_sample=True, temperature=1.3)
    for g, w in zip(got, wants):
        assert g[:len(w)] == w


def test_two_calls_in_one_turn_get_one_tool_turn(model, tok, calc_elf):
    exprs = ["2**70", "gcd(2**40, 6**20)"]
    want = tool_turn(tok, exprs, [ref(calc_elf, e) for e in exprs])
    got = generate(model, [prompt_ids(tok, exprs, xml_call(exprs[0]) + "\n" +
                                      xml_call(exprs[1]))], len(want), do_sample=False)[0]
    assert got == want and tok.decode(want).count("<tool_response>") == 2


def test_a_call_inside_think_is_not_run(model, tok, calc_elf):
    """Thinking mode: a call written while thinking is text; the call after </think> is
    run, and its tool turn is the template's thinking form (the new turn opens <think>)."""
    expr = "12345*6789"
    thought = "Maybe " + xml_call("1/0") + " no.\n</think>\n\n"
    ids = prompt_ids(tok, [expr], thought + xml_call(expr), thinking=True)
    assert tok.decode(ids).count("<think>") == 1
    want = tool_turn(tok, [expr], ["83810205"], thinking=True)
    cache = model.new_cache()
    out = model.generate(torch.tensor([ids]), max_new_tokens=len(want), do_sample=False,
                         pad_token_id=248_044, cache=cache)
    assert out[0, len(ids):].tolist() == want
    assert tok.decode(want).endswith("<|im_start|>assistant\n<think>\n")
    assert [r["output"] for r in cache.calls[0].log] == ["83810205\n"]
    # the call inside think alone: nothing is run, the model goes on
    ids2 = prompt_ids(tok, [expr], "Maybe " + xml_call("1/0"), thinking=True)
    cache2 = model.new_cache()
    model.generate(torch.tensor([ids2]), max_new_tokens=2, do_sample=False,
                   pad_token_id=248_044, cache=cache2)
    assert cache2.calls[0].log == [] and not cache2.calls[0].pending


def test_a_text_token_longer_than_32_bytes_is_read(model, tok, merged, calc_elf):
    """Qwen3.5's vocabulary has 360 ids of more than 32 bytes: a call holding one (a run of
    40 spaces, one id) is read whole, its tail from the pieces past the vocabulary."""
    from backends.merge.bridge import vocab_bytes
    expr = "1 +" + " " * 40 + "2"
    ids = prompt_ids(tok, [expr], xml_call(expr))
    vocab = vocab_bytes(json.loads((merged / "tokenizer.json").read_text()), 248_320)
    assert any(len(vocab[i]) > 32 for i in ids if i < 248_320)
    long = model.config.chip_bridge["long"]
    assert len(long) == 360
    want = tool_turn(tok, [expr], ["3"])
    assert generate(model, [ids], len(want), do_sample=False)[0] == want


def test_deltachip_chat_with_qwens_template(merged, capfd):
    """`deltachip chat` renders the prompt with the base's template (the tool offered,
    non-thinking mode) and streams the tool turn as its text."""
    from deltachip.cli import main
    call = xml_call("2**100")
    assert main(["chat", str(merged), "--prompt", "What is 2**100?", "--max-new-tokens",
                 "60", "--assistant-start", call, "--show-trace"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith(call + "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                          "1267650600228229401496703205376\n</tool_response><|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "[tool call 1: " in err and "on fast" in err
