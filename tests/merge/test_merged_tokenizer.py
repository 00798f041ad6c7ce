"""A merged checkpoint's tokenizer without the model's custom code.

transformers 5's ``AutoTokenizer.from_pretrained(DIR)`` reads the model's config before the
tokenizer's (tokenization_auto.py: ``AutoConfig.from_pretrained(DIR,
trust_remote_code=trust_remote_code)`` whenever no ``config=``, ``tokenizer_type=`` or
``gguf_file=`` is given; ``tokenizer_config.json`` and its ``tokenizer_class`` are read only
after it). A routed merge's config.json has ``auto_map.AutoConfig`` and a ``model_type``
transformers does not know, so with ``trust_remote_code`` left unset
``resolve_trust_remote_code`` asks whether to run the custom code (input() for 15 s on a
terminal; elsewhere the question is printed, input() fails and AutoTokenizer falls back to a
plain PreTrainedConfig). No file the merge writes can avoid the question without a
``model_type`` transformers knows, and that would let ``AutoModelForCausalLM`` without
trust load a plain model of that type (docs/merge.md). So the tokenizer loads without the
code when asked so: ``trust_remote_code=False`` (or ``config=model.config``). These tests
pin it: no question, no custom code run, the base's ids for text and the chip's tokens;
the stock layout asks nothing at all; and a routed model never loads as a plain model
without trust.
"""
from __future__ import annotations

import builtins

import pytest


@pytest.fixture
def no_question(monkeypatch):
    """transformers' question about custom code fails the test; its dynamic module loader
    too (nothing of the merged model's code runs)."""
    import transformers.dynamic_module_utils as dmu
    from transformers.models.auto import configuration_auto

    def asked(*a, **k):
        raise AssertionError(f"asked: {a[0] if a else ''}"[:300])

    def ran(*a, **k):
        raise AssertionError("the model's custom code was loaded")
    monkeypatch.setattr(builtins, "input", asked)
    monkeypatch.setattr(dmu, "get_class_from_dynamic_module", ran)
    monkeypatch.setattr(configuration_auto, "get_class_from_dynamic_module", ran)


def _tok(path, **kw):
    import warnings

    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(str(path), **kw)


TEXTS = ["the quick brown fox", "<|im_start|>user\n2+3?<|im_end|>\n"]


def _same_text_ids(tok, base):
    ref = _tok(base)
    for t in TEXTS:
        assert tok(t).input_ids == ref(t).input_ids


def test_routed_tokenizer_without_trust(merged, bases, no_question):
    out = merged("tied", "counter")
    tok = _tok(out, trust_remote_code=False)
    _same_text_ids(tok, bases["tied"])
    start = tok.convert_tokens_to_ids("<|chip:Count:0|>")
    assert start == 320 and tok.decode([start]) == "<|chip:Count:0|>"


def test_routed_tokenizer_from_the_model_s_config(merged, bases, no_question):
    """``config=`` (the loaded model's, or any config) skips the model's config.json."""
    from transformers import PreTrainedConfig
    out = merged("tied", "counter")
    tok = _tok(out, config=PreTrainedConfig())
    _same_text_ids(tok, bases["tied"])
    assert tok.convert_tokens_to_ids("<|chip:Done|>") > 320


def test_stock_tokenizer_asks_nothing(stock, bases, no_question):
    out, _ = stock("tied", "counter")
    tok = _tok(out)
    _same_text_ids(tok, bases["tied"])
    assert tok.convert_tokens_to_ids("<|chip:Count:0|>") == 320


def test_routed_plain_call_asks_and_a_no_still_gives_the_tokenizer(merged, bases,
                                                                   monkeypatch):
    """transformers' behaviour the docs describe: unset, it asks; answered no, the tokenizer
    loads all the same."""
    asked = []

    def answer(prompt=""):
        asked.append(prompt)
        return "n"
    monkeypatch.setattr(builtins, "input", answer)
    tok = _tok(merged("tied", "counter"))
    assert asked and "custom code" in asked[0]
    _same_text_ids(tok, bases["tied"])


@pytest.mark.parametrize("answer", ["n", EOFError])
def test_a_routed_model_without_trust_is_refused_not_loaded_plain(merged, monkeypatch,
                                                                  answer):
    """No trust (answered no, or no terminal to ask on): an error that says to pass
    trust_remote_code=True, never a plain Qwen model of the merged weights."""
    from transformers import AutoModelForCausalLM

    def reply(prompt=""):
        if answer is EOFError:
            raise EOFError
        return answer
    monkeypatch.setattr(builtins, "input", reply)
    with pytest.raises(ValueError, match="trust_remote_code|custom code|model type"):
        AutoModelForCausalLM.from_pretrained(str(merged("tied", "counter")))
