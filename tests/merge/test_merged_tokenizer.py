"""A merged checkpoint's tokenizer loads without the model's custom code, and asks nothing.

transformers 5's ``AutoTokenizer.from_pretrained(DIR)`` reads the model's config before the
tokenizer's (tokenization_auto.py: ``AutoConfig.from_pretrained(DIR,
trust_remote_code=trust_remote_code)`` whenever no ``config=``, ``tokenizer_type=`` or
``gguf_file=`` is given). A config.json whose ``auto_map.AutoConfig`` comes with a
``model_type`` transformers does not know makes ``resolve_trust_remote_code`` ask whether to
run the custom code (input() for 15 s). A routed merge's config.json therefore says
``model_type: qwen3_5_text``: AutoConfig resolves it without the question (to a plain Qwen3.5
text config, which the tokenizer only reads for its type). That same plain config must never
become a plain model of the merged weights: its ``hidden_act`` is
:data:`backends.chipdir.merged.STOCK_GUARD`, no activation, so AutoModelForCausalLM without
trust fails at once with that text, which names ``trust_remote_code=True``. These tests pin
it: no question, no custom code run, the base's ids for text and the chip's tokens, for the
routed and the stock layout; a routed model never loads as a plain model without trust.
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


@pytest.mark.parametrize("trust", [None, False])
def test_routed_tokenizer_without_trust(merged, bases, no_question, trust):
    """``AutoTokenizer.from_pretrained(DIR)`` as a user types it (and with trust refused)."""
    out = merged("tied", "counter")
    tok = _tok(out) if trust is None else _tok(out, trust_remote_code=trust)
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


def test_a_routed_model_without_trust_is_refused_not_loaded_plain(merged, no_question):
    """No trust: an error that says to pass trust_remote_code=True, raised before a weight
    is read, never a plain Qwen model of the merged weights; with trust, the routed model."""
    import resource

    from transformers import AutoModelForCausalLM
    from backends.chipdir.merged import STOCK_GUARD
    out = str(merged("tied", "counter"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(KeyError, match="load it with trust_remote_code=True") as e:
        AutoModelForCausalLM.from_pretrained(out)
    assert e.value.args == (STOCK_GUARD,)
    # the plain model of the config's default sizes is never built (it would be gigabytes)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 << 10


def test_a_routed_model_loads_routed_with_trust(merged):
    from tests.merge.conftest import load
    import torch
    m = load(merged("tied", "counter"), torch.float32)
    assert type(m).__name__ == "DeltachipRoutedForCausalLM"
    assert type(m.config).__name__ == "DeltachipRoutedConfig"
