"""The ``python`` tool: MicroPython (firmware/micropython) merged as a tool a model calls, alone
or beside calc (``deltachip merge BASE OUT --firmware python --firmware calc``), answered from
the weights inside ``generate()`` (routed) and by the stock driver (``--layout stock``).

The bases are tiny random checkpoints carrying Qwen3.5's real tokenizer and chat template
(tests/merge/qwen35.py); their words are noise, so each assistant call is part of the prompt
(as the template renders it, or as JSON) and the tests check that the ids generated after
``</tool_call>`` are exactly the template's tool turn around MicroPython's output on the
golden emulator (the call's text on its UART). Routed: the core compiled for the base's
vocabulary at compact shapes (it reads a call's text ids); stock: the core for qwen3.5-4b
shapes (a base of Qwen3.5-4B's MLP width). Both from the core cache.

State: the calls of one conversation run in one interpreter (MicroPython parks on the UART
between calls, its heap and globals kept), each program parked on its own.
"""
from __future__ import annotations

import json

import pytest
import torch

from cpu.emulator import Machine
from tests.merge.conftest import load

OPEN = "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
CLOSE = "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="session")
def mp_elf():
    from firmware.micropython import build as mp_build
    return mp_build.elf_path()


@pytest.fixture(scope="module")
def routed(merged_tools):
    """``deltachip merge BASE OUT --firmware calc --firmware python`` (routed, compact core
    for the base's vocabulary): calc is program 0, python program 1 (tests/merge/conftest.py,
    shared with the calc tests)."""
    return merged_tools


@pytest.fixture(scope="module")
def model(routed):
    return load(routed, torch.bfloat16)


@pytest.fixture(scope="module")
def tok(routed):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(routed), trust_remote_code=False)


def xml_call(code: str, name: str = "python", key: str = "code") -> str:
    return (f"<tool_call>\n<function={name}>\n<parameter={key}>\n" + code +
            "\n</parameter>\n</function>\n</tool_call>")


def json_call(code: str, name: str = "python", key: str = "code") -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {key: code}}) + \
        "\n</tool_call>"


def ref(elf, *codes: str, name: str = "python", key: str = "code") -> list[str]:
    """The program's answer to each call in turn (one interpreter), on the golden emulator:
    the calls' texts on the UART, each ended by a 0 byte."""
    outs, cur = [], b""
    # where one call's answer ends is not marked in the output: call k's answer is what the
    # run of calls 0..k prints past the run of calls 0..k-1
    for k in range(len(codes)):
        m = Machine.from_elf(elf)
        m.rx = b"".join(json.dumps({"name": name, "arguments": {key: c}}).encode() + b"\0"
                        for c in codes[:k + 1])
        r = m.run(50_000_000)
        assert r.exit_code == 0 and r.fault is None, r
        outs.append(r.output[len(cur):].decode().removesuffix("\n"))
        cur = r.output
    return outs


PYTHON_TOOL = {"type": "function", "function": {"name": "python", "parameters": {
    "type": "object", "properties": {"code": {"type": "string"}}}}}


def prompt_ids(tok, calls: str) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": "Run it."}],
                                   tools=[PYTHON_TOOL], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=False)
    return tok(text + calls, add_special_tokens=False).input_ids


def generate(model, ids: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                         pad_token_id=248_044, cache=model.new_cache())
    return out[0, len(ids):].tolist()


def answer(tok, ids: list[int]) -> str:
    text = tok.decode(ids)
    assert text.startswith(OPEN) and CLOSE in text, text
    return text[len(OPEN):text.index(CLOSE)]


PROGRAM = "print([n * n + 1 for n in range(5)], 2**100)"


@pytest.mark.parametrize("form", [pytest.param(xml_call, marks=pytest.mark.slow), json_call])
def test_generate_answers_a_python_call(model, tok, mp_elf, form):
    """Greedy generate(), XML and JSON forms: the tool turn holds exactly what MicroPython
    prints for the code on the golden emulator, computed by the merged weights."""
    want = ref(mp_elf, PROGRAM)[0]
    assert want == "[1, 2, 5, 10, 17] 1267650600228229401496703205376"
    got = generate(model, prompt_ids(tok, form(PROGRAM)), 80)
    assert answer(tok, got) == want


@pytest.mark.slow
def test_a_traceback_is_the_answer(model, tok, mp_elf):
    code = "def g(x):\n    return 1 / x\n\ng(0)"
    want = ref(mp_elf, code)[0]
    assert want.startswith("Traceback (most recent call last):") and \
        want.endswith("ZeroDivisionError: divide by zero")
    assert answer(tok, generate(model, prompt_ids(tok, xml_call(code)), 100)) == want


def test_calls_share_one_interpreter_and_route_by_name(model, tok, mp_elf, calc_elf):
    """One conversation (one cache), five calls with text between them: python binds names
    that its later calls read (one interpreter, parked between calls); calc's calls go to
    calc (program 0, parked on its own); an empty call ends nothing of python's state."""
    cache = model.new_cache()

    def run(text: str) -> str:
        ids = tok(text, add_special_tokens=False).input_ids
        got = []
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), cache=cache).logits
            while cache.calls[0].pending:
                got.append(int(logits[0, -1].argmax()))
                logits = model(input_ids=torch.tensor([[got[-1]]]), cache=cache).logits
        return answer(tok, got)
    first = tok.decode(prompt_ids(tok, ""))
    a1 = run(first + json_call("x = 6 * 7\nprint('set')"))
    a2 = run("now " + xml_call("2**10", name="calc", key="expression"))
    a3 = run("and " + xml_call("print(x * 3, [x] * 2)"))
    a4 = run("again " + json_call("1/3 + 1/6", name="calc", key="expression"))
    a5 = run("last " + json_call("x += 1\nprint(x)"))
    assert [a1, a3, a5] == ref(mp_elf, "x = 6 * 7\nprint('set')", "print(x * 3, [x] * 2)",
                               "x += 1\nprint(x)")
    assert [a1, a3, a5] == ["set", "126 [42, 42]", "43"]
    assert [a2, a4] == ["1024", "1/2"]
    log = cache.calls[0].log
    assert [r["tool"] for r in log] == ["python", "calc", "python", "calc", "python"]
    assert [r["resumed"] for r in log] == [False, False, True, True, True]


@pytest.mark.slow
def test_a_fresh_conversation_starts_a_fresh_interpreter(model, tok):
    got = generate(model, prompt_ids(tok, xml_call("print(x)")), 100)
    assert answer(tok, got).endswith("NameError: name 'x' isn't defined")


@pytest.mark.slow
@pytest.mark.parametrize("call,want", [
    ('{"name": "ruby", "arguments": {"code": "1"}}',
     'error: unknown tool "ruby" (this computer has calc)'),
    ('{"name": "python", "arguments": {"source": "1"}}', "error: the call gives no code"),
    ("<function=python>\n<parameter=src>\n1\n</parameter>\n</function>",
     'error: unknown parameter "src" for python (it takes "code")'),
    ('{"name": "python", "arguments": ', "error: the call is not JSON: a value was expected"),
])
def test_malformed_calls_get_an_error_answer(model, tok, call, want):
    got = generate(model, prompt_ids(tok, "<tool_call>\n" + call + "\n</tool_call>"), 60)
    assert answer(tok, got) == want


def test_manifest_and_config_name_both_programs(routed, mp_elf):
    import hashlib
    m = json.loads((routed / "deltachip.json").read_text())
    assert m["firmware"]["tool"]["function"]["name"] == "calc"
    (py,) = m["programs"]
    assert py["name"] == "micropython" and py["sha256"] == \
        hashlib.sha256(mp_elf.read_bytes()).hexdigest()
    assert py["tool"]["function"]["name"] == "python" and set(py["roms"]) >= {"code"}
    cfg = json.loads((routed / "config.json").read_text())
    assert cfg["chip_programs"] == 2 and cfg["chip_bridge"]["tools"] == ["calc", "python"]


@pytest.mark.slow
def test_chat_offers_both_tools(routed, capfd):
    """`deltachip chat` offers the merged programs' tools to the template and answers a
    python call (the call forced by the reply's start: the base's words are noise)."""
    from deltachip.cli import main
    from deltachip.chat import Chat
    chat = Chat(routed)
    names = [t["function"]["name"] for t in chat.tools]
    assert names == ["calc", "python"]          # in --firmware order
    text = chat.prompt_text("hi")
    assert '"name": "python"' in text and '"name": "calc"' in text
    assert main(["chat", str(routed), "--prompt", "What is 2**100?", "--max-new-tokens",
                 "60", "--assistant-start", xml_call("print(2**100)"), "--show-trace"]) == 0
    out, err = capfd.readouterr()
    assert OPEN + "1267650600228229401496703205376" + CLOSE in out
    assert "[tool call 1:" in err


def test_one_tool_twice_is_refused(qwen_bases, tmp_path, capfd):
    from deltachip.cli import main
    assert main(["merge", str(qwen_bases["tied"]), str(tmp_path / "o"), "--firmware",
                 "python", "--firmware", "micropython"]) == 2
    assert "--firmware micropython: answers the tool 'python', as --firmware python does: " \
        "give each tool once" in capfd.readouterr().err
    assert not (tmp_path / "o").exists()


def test_call_tool_names_the_tool():
    from backends.merge.shipped.modeling_deltachip import call_program, call_tool
    assert call_tool(json.dumps({"arguments": {"name": "x", "code": 'a"b'},
                                 "name": "python"})) == "python"
    assert call_tool(' {"name" : "calc", "arguments": {}}') == "calc"
    assert call_tool("<function=calc>\n<parameter=expression>\n1\n</parameter>") == "calc"
    assert call_tool("print(1)") is None and call_tool('{"a": ["name", "b"]}') is None
    assert call_program(["python", "calc"], '{"name": "calc"}') == 1
    assert call_program(["python", "calc"], '{"name": "ruby"}') == 0


# ---- the stock layout -------------------------------------------------------------------

@pytest.fixture(scope="module")
def stock(tmp_path_factory, mp_elf, calc_elf):
    """A tiny base of Qwen3.5-4B's MLP width, calc and python merged in the stock layout
    (calc program 0, python program 1): the core from the core cache (qwen3.5-4b)."""
    from tests.merge.qwen35 import make_qwen_base
    from deltachip.cli import main
    d = tmp_path_factory.mktemp("python-stock")
    base = make_qwen_base(d / "base", tied=True, seed=5, intermediate=9216)
    out = d / "merged"
    assert main(["merge", str(base), str(out), "--firmware", str(calc_elf), "--firmware",
                 "python", "--layout", "stock"]) == 0
    return out


class _Sink:
    def write(self, s: str) -> None:
        pass

    def flush(self) -> None:
        pass


@pytest.mark.slow
def test_the_stock_driver_answers_python_calls(stock, mp_elf):
    """Plain transformers writes the text (each call forced by the reply's start), the
    driver runs python's calls on program 1 (one interpreter across the chat's calls) and
    calc's on program 0; the answers are MicroPython's and calc's on the golden emulator."""
    from deltachip.chat import Chat
    chat = Chat(stock)
    assert chat.driver is not None and [t["function"]["name"] for t in chat.tools] == \
        ["calc", "python"]
    codes = ["import math\nr = [int(math.sqrt(n)) for n in (10, 99, 144)]\nprint(r)",
             "print(sum(r), len(r))"]
    want = ref(mp_elf, *codes)
    got = []
    for k, code in enumerate(codes):
        form = xml_call if k % 2 == 0 else json_call
        reply = chat.reply("run", max_new_tokens=80, start=form(code), out=_Sink())
        assert reply.startswith(OPEN), reply
        got.append(reply[len(OPEN):reply.index(CLOSE)])
        assert chat.calls[-1]["tool"] == "python" and chat.calls[-1]["engine"] == "fast"
    assert got == want == ["[3, 9, 12]", "24 3"]
    reply = chat.reply("calc", max_new_tokens=40, start=json_call(
        "2**64", name="calc", key="expression"), out=_Sink())
    assert reply.startswith(OPEN + "18446744073709551616" + CLOSE), reply
    assert chat.calls[-1]["tool"] == "calc"
