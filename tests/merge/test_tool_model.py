"""Smoke test of benchmarks/tool_model.py, the small Qwen3.5 base that calls calc by itself:
its conversations in Qwen3.5's format (the real tokenizer and the project's template), the
exact results, the held-out questions, the restricted softmax and a training step on a
tiny config. The trained model and its accuracy table: the benchmark itself (docs/merge.md,
"A base that calls the computer by itself")."""
from __future__ import annotations

import ast
import json
import math
import operator
import random
from fractions import Fraction

import pytest
import torch

from benchmarks import tool_model as tm

#: a tiny config of the benchmark's model, trained for a step or two
TINY = dict(tm.default_params(7), hidden=32, intermediate=32, heads=1, warmup_steps=1,
            warmup_batch=2, steps=2, tools_batch=2, plain_batch=1)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tm.tokenizer(tmp_path_factory.mktemp("qwen35-tok"))


def fraction_value(expr: str) -> Fraction:
    """``expr`` evaluated apart from tool_model.evaluate: Python's parser, every number a
    Fraction, ``/`` exact, ``//`` and ``%`` floored, gcd on integers."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}

    def ev(n):
        if isinstance(n, ast.Constant):
            return Fraction(n.value)
        if isinstance(n, ast.BinOp):
            return Fraction(ops[type(n.op)](ev(n.left), ev(n.right)))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        assert isinstance(n, ast.Call) and n.func.id == "gcd", ast.dump(n)
        a, b = (ev(x) for x in n.args)
        assert a.denominator == b.denominator == 1
        return Fraction(math.gcd(a.numerator, b.numerator))
    return ev(ast.parse(expr, mode="eval").body)


def calc_form(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def test_results_are_fractions(tok):
    known = {"2**100": "1267650600228229401496703205376", "1/3 + 1/6": "1/2",
             "(1/3 + 1/6) * 7": "7/2", "123456789*987654321": "121932631112635269",
             "7 // 2": "3", "10 % 4": "2", "2 - 5": "-3", "gcd(12, 18)": "6",
             "2/4 - 3/4": "-1/4", "(5/6 - 7/8) * 12": "-1/2"}
    for expr, want in known.items():
        assert tm.evaluate(expr) == want, expr
    rng = random.Random(99)
    for _ in range(500):
        q = tm.question(rng)
        assert q["result"] == calc_form(fraction_value(q["expression"])), q
        assert q["expression"] in q["text"]
        assert len(q["result"].lstrip("-").split("/")[0]) <= 41, q
    with pytest.raises(ValueError):
        tm.evaluate("__import__('os')")


def test_a_conversation_renders_qwen35s_format(tok):
    from deltachip.chat import CALC_TOOL
    q = {"expression": "2**100", "text": "What is 2**100?",
         "result": "1267650600228229401496703205376"}
    r = q["result"]
    ids, mask = tm.conversation(tok, q, tools=True)
    text = tok.decode(ids)
    call = ("<tool_call>\n<function=calc>\n<parameter=expression>\n2**100\n</parameter>\n"
            "</function>\n</tool_call>")
    prompt = tok.apply_chat_template([{"role": "user", "content": q["text"]}],
                                     tools=[CALC_TOOL], tokenize=False,
                                     add_generation_prompt=True, enable_thinking=False)
    assert prompt.startswith("<|im_start|>system\n# Tools\n") and '"name": "calc"' in prompt
    assert prompt.endswith("<|im_start|>user\nWhat is 2**100?<|im_end|>\n<|im_start|>assistant\n"
                           "<think>\n\n</think>\n\n")
    tool_turn = (f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{r}\n</tool_response>"
                 f"<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert text == prompt + call + tool_turn + f"The answer is {r}.<|im_end|>"
    # the prompt's ids are the prompt tokenized alone, as a chat tokenizes it
    assert ids[:len(tok(prompt).input_ids)] == tok(prompt).input_ids
    # the call and what follows it are the template's rendering of the tool turn
    full = tok.apply_chat_template([{"role": "user", "content": q["text"]},
                                    tm.call_message("2**100"),
                                    {"role": "tool", "content": r}],
                                   tools=[CALC_TOOL], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=False)
    assert full.endswith("<|im_start|>assistant\n" + call + tool_turn)
    # the loss is on what the assistant writes: the call, <|im_end|>, the sentence, <|im_end|>
    trained = [i for i, m in zip(ids, mask) if m]
    assert tok.decode(trained) == call + "<|im_end|>" + f"The answer is {r}.<|im_end|>"
    assert mask[-1] == 1 and ids[-1] == tm.EOS
    assert trained.count(tok.convert_tokens_to_ids("<tool_call>")) == 1
    # no tools: no system turn, the sentence answers directly
    ids, mask = tm.conversation(tok, q, tools=False)
    assert tok.decode(ids) == ("<|im_start|>user\nWhat is 2**100?<|im_end|>\n<|im_start|>"
                               f"assistant\n<think>\n\n</think>\n\nThe answer is {r}.<|im_end|>")
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == f"The answer is {r}.<|im_end|>"
    # thinking mode: the model closes the empty block itself
    ids, mask = tm.conversation(tok, q, tools=True, thinking=(True, True))
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == (
        "\n</think>\n\n" + call + "<|im_end|>" + f"\n</think>\n\nThe answer is {r}.<|im_end|>")
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>" in tok.decode(ids)


def test_held_out_questions_are_not_training_ones(tmp_path):
    p = dict(tm.default_params(3), warmup_steps=20, steps=200)
    (tmp_path / "tool_model.json").write_text(json.dumps({"params": p}))
    warm, train = tm.training_questions(p)
    seen = {q["expression"] for q in warm + train}
    qs, skipped = tm.held_out(tmp_path, 4, 300)
    assert len(qs) == 300 and not {q["expression"] for q in qs} & seen
    assert skipped > 0      # small ones (gcd, fractions, powers) do repeat
    assert [q["expression"] for q in qs] == [q["expression"] for q in tm.questions(4, 300, seen)]
    with pytest.raises(SystemExit):
        tm.held_out(tmp_path, 3, 10)


def test_a_training_step_and_the_saved_checkpoint(tok, tmp_path):
    from transformers import Qwen3_5ForCausalLM
    model, used, _ = tm.train(tok, TINY, log=open("/dev/null", "w"))
    assert len(used) < 400 and tm.EOS in used
    out = tm.save(model, used, TINY, tmp_path / "m")
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["vocab_size"], cfg["eos_token_id"], cfg["pad_token_id"]) == (
        tm.VOCAB_SIZE, tm.EOS, tm.PAD)
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    full = Qwen3_5ForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    head = full.lm_head.weight
    assert head.shape[0] == tm.VOCAB_SIZE
    assert set(torch.nonzero(head.abs().sum(1)).flatten().tolist()) <= set(used)
    # the restricted softmax (one more logit for the zero rows) is the full vocabulary's
    q = tm.question(random.Random(5))
    ids, mask = tm.conversation(tok, q, tools=False)
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = full(x).logits[0, :-1]
        want = torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="none")
        want = want[torch.tensor(mask[1:], dtype=torch.bool)].sum()
        compact = model.to(torch.bfloat16).float()      # the saved weights' values
        remap = torch.zeros(tm.VOCAB_SIZE, dtype=torch.long)
        remap[torch.tensor(used)] = torch.arange(len(used))
        m = torch.tensor([mask[1:] + [0]], dtype=torch.bool)
        got, n = tm.masked_loss(compact, remap[x], m, math.log(tm.VOCAB_SIZE - len(used)))
    assert n == sum(mask[1:]) and abs(got.item() - want.item()) < 1e-3 * want.item()
    # greedy decoding on the saved checkpoint runs, with and without the tool offered
    g = tm.Greedy(full)
    for tools in (False, True):
        r = tm.run_question(g, tok, q, tools, limit=4)
        assert set(r) >= {"reply", "call", "answer"}
    assert 2 <= g.tokens <= 8
