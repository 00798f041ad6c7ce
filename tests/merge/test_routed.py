"""The routed merge keeps its two promises: text gives the base's logits bit for bit, and
the chip inside the merged model gives what it gives alone."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors import safe_open

from backends.merge.base import read_base
from tests.merge.bases import VOCAB
from tests.merge.conftest import load

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
PROMPTS = ["the quick brown fox", "def add(a, b):\n    return a + b\nnumbers 0 1 2",
           "<|im_start|>user\nwhat is 12 times 34?<|im_end|>\n<|im_start|>assistant\n",
           "<tool_call>compute<tool_call> lazy dog"]


def _tokenizer(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path), trust_remote_code=True)


def _batch(path):
    """The 4 prompts, left-padded: ids [4, T] and the attention mask."""
    tok = _tokenizer(path)
    tok.padding_side = "left"
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    return enc.input_ids, enc.attention_mask


def _same_text_logits(merged, base, vocab=VOCAB):
    """The merged model's logits are the base's on the base's ids, -inf on the chip's."""
    assert merged.shape[:-1] == base.shape[:-1] and base.shape[-1] == vocab
    assert merged.dtype == base.dtype
    assert torch.equal(merged[..., :vocab], base)
    assert bool((merged[..., vocab:] == float("-inf")).all())


@pytest.mark.parametrize("base", ["tied", "untied", "sharded", "vl"])
def test_every_base_tensor_is_byte_identical(bases, chips, merged, base):
    out = merged(base, "counter")
    b = read_base(bases[base])
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    for h in b.files:
        shard = out / index[next(iter(h.tensors))]
        assert hashlib.sha256(shard.read_bytes()).digest() == \
            hashlib.sha256(h.path.read_bytes()).digest()     # whole shard, header included
        with safe_open(str(h.path), "pt") as fb, safe_open(str(shard), "pt") as fo:
            for name in fb.keys():
                assert index[name] == shard.name
                assert torch.equal(fb.get_tensor(name).view(torch.uint8).flatten(),
                                   fo.get_tensor(name).view(torch.uint8).flatten())
    # the chip's tensors under chip.: byte for byte, or (its token tables structured, its
    # mostly-zero layer weights as nonzeros) expanded by the modeling file to the same bits
    from backends.merge.shipped.modeling_deltachip import sparse_weight
    sparse = json.loads((out / "config.json").read_text())["chip_sparse"]
    src = chips["counter"] / "model.safetensors"
    with safe_open(str(src), "pt") as fc:
        for name in fc.keys():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                assert "chip." + name not in index
                continue
            want = fc.get_tensor(name)
            if name in sparse:
                assert "chip." + name not in index and sparse[name][:2] == list(want.shape)
                mod = "chip." + name[:-len(".weight")]
                with safe_open(str(out / index[mod + ".nz_index"]), "pt") as fo:
                    got = sparse_weight(fo.get_tensor(mod + ".nz_index"),
                                        fo.get_tensor(mod + ".nz_value"), want.shape, want.dtype)
                assert sparse[name][2] == int((want != 0).sum())
                assert torch.equal(got.view(torch.int16), want.view(torch.int16))
                continue
            with safe_open(str(out / index["chip." + name]), "pt") as fo:
                assert torch.equal(fc.get_tensor(name), fo.get_tensor("chip." + name))
    assert len(sparse) > 10


@pytest.mark.parametrize("chip,dtype", [("counter", "bf16"), ("counter32", "fp32"),
                                        ("stack", "bf16")])
def test_structured_tables_are_the_chips(merged, chips, chip, dtype):
    """The chip's embedding and lm_head, stored structured, expand to the chip's own tables
    bit for bit; the manifest says how they are stored."""
    eng = _chip_alone(chips[chip], dtype)
    out = merged("tied", chip)
    m = load(out, DTYPES[dtype])
    assert m.config.chip_tables == "structured"
    emb, head = eng.model.model.embed_tokens.weight, eng.model.lm_head.weight
    ids = torch.arange(emb.shape[0])
    with torch.no_grad():
        assert torch.equal(m.chip.model.embed_tokens(ids[None])[0], emb)
        assert torch.equal(m.chip.lm_head.expanded(head.dtype), head)
    tables = json.loads((out / "deltachip.json").read_text())["chip"]["tables"]
    assert tables["form"] == "structured" and tables["bytes"] < tables["plain_bytes"]


def test_plain_tables_are_the_chips_bytes(bases, chips, tmp_path):
    """--tables plain: every chip tensor byte for byte under chip., and the chip runs."""
    from backends.merge.routed import merge_routed
    out = tmp_path / "plain"
    merge_routed(bases["tied"], out, chips["counter"], tables="plain")
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    with safe_open(str(chips["counter"] / "model.safetensors"), "pt") as fc:
        for name in fc.keys():
            with safe_open(str(out / index["chip." + name]), "pt") as fo:
                assert torch.equal(fc.get_tensor(name), fo.get_tensor("chip." + name))
    m = load(out, torch.bfloat16)
    assert m.config.chip_tables == "plain"
    with torch.no_grad():
        g = m.generate(input_ids=torch.tensor([[VOCAB]]), max_new_tokens=12, do_sample=False,
                       pad_token_id=0)
    assert (g[0] - VOCAB).tolist() == list(range(10)) + [256] * 3


#: the text checkpoint whose model each base's text model is (the vision-language base
#: holds 'tied''s, tensor for tensor)
TEXT_MODEL = {"tied": "tied", "untied": "untied", "vl": "tied"}


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("base", ["tied", "untied", "vl"])
def test_text_logits_are_the_bases_prefill_decode_batch(bases, merged, base, dtype):
    """Batch 1 and batch 4 (left-padded), prefill then 6 decode steps through the cache;
    a vision-language base gives its text model's logits."""
    out = merged(base, "counter")
    m, b = load(out, DTYPES[dtype]), load(bases[TEXT_MODEL[base]], DTYPES[dtype], remote=False)
    ids, mask = _batch(out)
    with torch.no_grad():
        for rows in (slice(0, 1), slice(0, 4)):
            x, am = ids[rows], mask[rows]
            if rows.stop == 1:                      # batch 1: no padding
                x, am = x[:, am[0].bool()], am[:, am[0].bool()]
            cm, cb = m.new_cache(), None
            om = m(input_ids=x, attention_mask=am, cache=cm, use_cache=True)
            ob = b(input_ids=x, attention_mask=am, use_cache=True)
            _same_text_logits(om.logits, ob.logits)
            cm, cb = om.cache, ob.cache
            for _ in range(6):
                nxt = ob.logits[:, -1].argmax(-1, keepdim=True)
                am = torch.cat([am, torch.ones_like(nxt)], dim=1)
                om = m(input_ids=nxt, attention_mask=am, cache=cm, use_cache=True)
                ob = b(input_ids=nxt, attention_mask=am, cache=cb, use_cache=True)
                _same_text_logits(om.logits, ob.logits)
                cm, cb = om.cache, ob.cache
            assert cm.get_seq_length() == am.shape[1] and cm.chip is None


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_text_generate_is_the_bases(bases, merged, dtype):
    """generate(), greedy, batch 4 left-padded: same tokens, same logits at every step."""
    out = merged("untied", "counter")
    m, b = load(out, DTYPES[dtype]), load(bases["untied"], DTYPES[dtype], remote=False)
    ids, mask = _batch(out)
    kw = dict(max_new_tokens=8, do_sample=False, return_dict_in_generate=True,
              output_logits=True, pad_token_id=0)
    with torch.no_grad():
        gm = m.generate(input_ids=ids, attention_mask=mask, **kw)
        gb = b.generate(input_ids=ids, attention_mask=mask, **kw)
    assert torch.equal(gm.sequences, gb.sequences)
    assert len(gm.logits) == len(gb.logits) == 8
    for lm, lb in zip(gm.logits, gb.logits):
        _same_text_logits(lm, lb)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_vision_language_base_gives_its_own_text_logits(bases, merged, dtype):
    """Qwen's Qwen3.5 releases are vision-language checkpoints: merged, text-only input
    gives the logits of transformers' ``Qwen3_5ForConditionalGeneration`` on the base,
    prefill and greedy generation; its vision tower rides along unread; the manifest says
    what the base was."""
    from transformers import Qwen3_5ForConditionalGeneration
    out = merged("vl", "counter")
    m = load(out, DTYPES[dtype])
    vl = Qwen3_5ForConditionalGeneration.from_pretrained(str(bases["vl"]), dtype=DTYPES[dtype])
    ids = _tokenizer(out)(PROMPTS[2], return_tensors="pt").input_ids
    kw = dict(max_new_tokens=6, do_sample=False, return_dict_in_generate=True,
              output_logits=True, pad_token_id=0)
    with torch.no_grad():
        _same_text_logits(m(input_ids=ids).logits, vl.eval()(input_ids=ids).logits)
        gm, gb = m.generate(input_ids=ids, **kw), vl.generate(input_ids=ids, **kw)
    assert torch.equal(gm.sequences, gb.sequences)
    for lm, lb in zip(gm.logits, gb.logits):
        _same_text_logits(lm, lb)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(n.startswith("model.visual.") for n in index)
    assert any(n.startswith("model.language_model.layers.") for n in index)
    base = json.loads((out / "deltachip.json").read_text())["base"]
    assert base["vision_language"] is True and base["hidden_size"] == 64
    assert json.loads((out / "config.json").read_text())["base_config"]["model_type"] == \
        "qwen3_5_text"


def test_tokenizer_keeps_text_and_adds_chip_tokens(bases, chips, merged):
    out = merged("tied", "counter")
    tm, tb = _tokenizer(out), _tokenizer(bases["tied"])
    for text in PROMPTS + ["<tool_response>42</tool_response><|endoftext|>"]:
        assert tm(text).input_ids == tb(text).input_ids
    chat = [{"role": "user", "content": "what is 12 times 34?"}]
    assert tm.apply_chat_template(chat, add_generation_prompt=True) == \
        tb.apply_chat_template(chat, add_generation_prompt=True)
    names = ["<|chip:Count:0|>", "<|chip:Count:9|>", "<|chip:Done|>"]
    assert tm.convert_tokens_to_ids(names) == [VOCAB + 0, VOCAB + 9, VOCAB + 256]
    assert tm.decode([VOCAB + 256, VOCAB + 3]) == "<|chip:Done|><|chip:Count:3|>"
    # a chip token's name typed in a text is text: only the model or code makes chip ids
    typed = "x" + "".join(names) + " <|chip:Count:7|>x"
    assert tm(typed).input_ids == tb(typed).input_ids
    assert max(tm(typed).input_ids) < VOCAB
    # the chip's names are vocabulary entries, not added tokens (a large chip's would make
    # the tokenizer slow to load)
    tj = json.loads((out / "tokenizer.json").read_text())
    assert tj["added_tokens"] == json.loads((bases["tied"] / "tokenizer.json").read_text())[
        "added_tokens"]
    assert (out / "tokenizer_config.json").read_bytes() == \
        (bases["tied"] / "tokenizer_config.json").read_bytes()
    manifest = json.loads((out / "deltachip.json").read_text())
    assert manifest["layout"] == "routed" and manifest["chip"]["name"] == "Counter"
    assert manifest["tokens"] == {**manifest["tokens"], "offset": VOCAB, "count": 257}
    assert (out / "deltachip" / "chip.json").read_bytes() == \
        (chips["counter"] / "chip.json").read_bytes()


def _chip_alone(path, dtype):
    from backends.engines.hf import HFEngine
    return HFEngine(path, dtype=dtype)


@pytest.mark.parametrize("chip,dtype", [("counter", "bf16"), ("counter32", "fp32"),
                                        ("stack", "bf16")])
def test_chip_decode_is_the_chip_alone(merged, chips, chip, dtype):
    """Token by token from the circuit's start token: the merged model's argmax (and its
    chip logits) are the chip engine's, on a tied base."""
    eng = _chip_alone(chips[chip], dtype)
    m = load(merged("tied", chip), DTYPES[dtype])
    off = m.config.chip_token_offset
    tok = eng.token_id(eng.circuit.start)
    ce, cm = eng.new_cache(1), m.new_cache()
    steps = 40 if chip == "stack" else 14
    with torch.no_grad():
        for _ in range(steps):
            le = eng.model(input_ids=torch.tensor([[tok]]), cache=ce, use_cache=True).logits
            lm = m(input_ids=torch.tensor([[off + tok]]), cache=cm, use_cache=True).logits
            assert torch.equal(lm[..., off:], le.to(lm.dtype))
            assert bool((lm[..., :off] == float("-inf")).all())
            nxt = int(le[0, -1].argmax())
            assert int(lm[0, -1].argmax()) == off + nxt
            tok = nxt
    assert cm.base.get_seq_length() == 0         # the base never saw a chip position
    for layer in range(eng.config.num_hidden_layers):
        if eng.config.layer_types[layer] == "linear_attention":
            assert torch.equal(eng.recurrent_state(ce, layer, 0),
                               cm.chip.layers[layer].recurrent_states[0][0])


@pytest.mark.parametrize("chip,tables", [("counter", "structured"), ("counter32", "structured"),
                                         ("stack", "structured"), ("counter", "plain")])
def test_fast_engine_on_the_merged_chip_is_the_merged_model(bases, chips, merged, chip, tables,
                                                             tmp_path):
    """The fast engine on a merged checkpoint (its chip part, the tables as stored) gives
    the merged model's chip tokens, step by step, and the same memory contents."""
    from backends.engines.fast.engine import FastEngine
    from backends.engines.merged import MergedEngine
    if tables == "plain":
        from backends.merge.routed import merge_routed
        out = tmp_path / "plain"
        merge_routed(bases["tied"], out, chips[chip], tables="plain")
    else:
        out = merged("tied", chip)
    hf, fast = MergedEngine(out), FastEngine(out, threads=1)
    ch, cf = hf.new_cache(1), fast.new_cache(1)
    tok = hf.token_id(hf.circuit.start)
    for step in range(40 if chip == "stack" else 14):
        a, b = hf.decode_step([tok], ch), fast.decode_step([tok], cf)
        assert a.tolist() == b.tolist(), step
        tok = int(a[0])
    assert hf.read_memories(ch) == fast.read_memories(cf)


@pytest.mark.parametrize("name,change,why", [
    ("chip.lm_head.kinds", lambda t: t + torch.tensor([0, 1, 0]),
     "lm_head.kinds does not hold the circuit's token kind at id 0"),
    ("chip.model.embed_tokens.palette", lambda t: t + 1,
     "the structured embedding is inconsistent"),
    ("chip.model.layers.0.mlp.gate_proj.nz_index", lambda t: t + (1 << 30),
     "mlp.gate_proj.nz_index/.nz_value do not hold the nonzeros of a")])
def test_fast_engine_refuses_damaged_structured_tables(merged, tmp_path, name, change, why):
    """A structured table that does not match the circuit, or holds values that are not
    numbers of the chip's dtype, or a sparse weight's positions out of range, is refused
    by name, never run."""
    import shutil
    from safetensors.torch import load_file, save_file
    from backends.engines.fast.engine import FastEngine
    from backends.chipdir.checkpoint import ChipDirError
    out = tmp_path / "m"
    shutil.copytree(merged("tied", "counter"), out)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    shard = out / index[name]
    tensors = load_file(str(shard))
    tensors[name] = change(tensors[name])
    save_file(tensors, str(shard))
    with pytest.raises(ChipDirError, match=why):     # (FastRefused is one)
        FastEngine(out, threads=1)


def test_mixed_sequence_routes_each_position(bases, chips, merged):
    """Batch 1: text, a run of chip tokens (prefill), text again. The text positions are
    the base's on the text alone (the chip run skipped); the chip run is the chip's prefill."""
    eng = _chip_alone(chips["stack"], "bf16")
    out = merged("untied", "stack")
    m, b = load(out, torch.bfloat16), load(bases["untied"], torch.bfloat16, remote=False)
    off = m.config.chip_token_offset
    tok = _tokenizer(out)
    t1 = tok("<|im_start|>user\nrun it<|im_end|>\n", return_tensors="pt").input_ids
    t2 = tok("<tool_response>done", return_tensors="pt").input_ids
    stream, cache = [eng.token_id(eng.circuit.start)], eng.new_cache(1)
    with torch.no_grad():
        for _ in range(11):
            stream.append(int(eng.decode_step([stream[-1]], cache)[0]))
        chip_ids = torch.tensor([stream[:-1]])
        want, _ = eng.prefill(chip_ids)
        assert want[0].tolist() == stream[1:]
        x = torch.cat([t1, chip_ids + off, t2], dim=1)
        om = m(input_ids=x, cache=m.new_cache(), use_cache=True)
        ob1 = b(input_ids=t1, use_cache=True)
        ob2 = b(input_ids=t2, cache=ob1.cache, use_cache=True)
    n1, nc = t1.shape[1], chip_ids.shape[1]
    _same_text_logits(om.logits[:, :n1], ob1.logits)
    assert om.logits[0, n1:n1 + nc].argmax(-1).tolist() == [off + t for t in stream[1:]]
    _same_text_logits(om.logits[:, n1 + nc:], ob2.logits)
    assert om.cache.base.get_seq_length() == t1.shape[1] + t2.shape[1]
    assert om.cache.get_seq_length() == x.shape[1]


def test_generate_runs_the_chip(merged, chips):
    """generate() from the start token: the counter's stream, as the chip alone gives it."""
    m = load(merged("untied", "counter"), torch.bfloat16)
    off = m.config.chip_token_offset
    with torch.no_grad():
        g = m.generate(input_ids=torch.tensor([[off]]), max_new_tokens=12, do_sample=False,
                       pad_token_id=0)
    assert (g[0] - off).tolist() == list(range(10)) + [256] * 3


def test_rows_of_different_kinds_are_refused(merged):
    m = load(merged("tied", "counter"), torch.bfloat16)
    off = m.config.chip_token_offset
    with pytest.raises(ValueError, match="rows of a batch must be text or chip"):
        m(input_ids=torch.tensor([[5], [off]]))


def test_a_batch_of_chip_streams_is_the_chip_alone(merged, chips):
    """Batch 4, every row a chip stream from a different token, prefill then decode."""
    eng = _chip_alone(chips["counter"], "bf16")
    m = load(merged("untied", "counter"), torch.bfloat16)
    off = m.config.chip_token_offset
    x = torch.tensor([[0, 1], [3, 4], [7, 8], [256, 256]])
    with torch.no_grad():
        want, ce = eng.prefill(x)
        om = m(input_ids=x + off, cache=m.new_cache(), use_cache=True)
        assert torch.equal(om.logits.argmax(-1) - off, want)
        nxt = want[:, -1]
        for _ in range(4):
            le = eng.model(input_ids=nxt[:, None], cache=ce, use_cache=True).logits
            om = m(input_ids=nxt[:, None] + off, cache=om.cache, use_cache=True)
            assert torch.equal(om.logits[..., off:], le)
            nxt = le[:, -1].argmax(-1)
