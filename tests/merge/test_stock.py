"""The stock layout (``deltachip merge --layout stock``): one widened Qwen3_5ForCausalLM that
plain transformers loads. Base tensors in their block, text close to the base's (measured and
bounded here; docs/merge.md has the figures), the chip's path exactly the chip alone, a bad
base or chip a clean error with nothing left behind."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from backends.chipdir.stfile import MergeError
from tests.merge.bases import VOCAB
from tests.merge.conftest import ROOT

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
PROMPTS = ["the quick brown fox jumps over the lazy dog",
           "def add(a, b):\n    return a + b\n",
           "<|im_start|>user\nwhat is 12 times 34?<|im_end|>\n<|im_start|>assistant\n",
           "numbers 0 1 2 3 4 5 6 7 8 9 and words: compute, tool, call, answer"]


def _plain(path, dtype):
    from transformers import Qwen3_5ForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    model, info = Qwen3_5ForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                     output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    return model.eval()


def _raw(path):
    """Every tensor of a checkpoint directory as (dtype name, raw numpy array: bytes kept)."""
    from backends.chipdir.stfile import read_header
    from backends.merge.stock import RAW
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        data = f.read_bytes()
        for name, t in read_header(f).tensors.items():
            out[name] = (t.dtype, np.frombuffer(data[t.begin:t.end], RAW[t.dtype]).reshape(
                t.shape))
    return out


def _float(dtype, raw):
    from backends.merge.stock import decode
    return torch.from_numpy(decode(raw, dtype))


@pytest.mark.parametrize("base", ["tied", "sharded"])
def test_loads_without_remote_code_and_keeps_base_tensors(bases, stock, qchips, base):
    """Every base tensor keeps its bytes in its block, except: the hidden norms (1 + w
    times sqrt(Hb/H')), the final norm on the dims the chip's lm_head reads (the chip's
    there) and the base lm_head's columns on those dims (the base's final-norm factor over
    the chip's)."""
    out, rep = stock(base, "counter")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and "auto_map" not in cfg
    assert not list(out.glob("*.py"))
    m = _plain(out, torch.bfloat16)
    st = json.loads((out / "deltachip.json").read_text())["stock"]
    lc, hb = st["chip_layers"][1], st["base_dims"][1]
    assert m.config.hidden_size == rep.hidden == st["hidden"] > hb
    assert m.config.layer_types[:lc] == ["linear_attention"] * lc
    got, want = _raw(out), _raw(bases[base])
    if "lm_head.weight" not in want:
        want["lm_head.weight"] = want["model.embed_tokens.weight"]
    scale = st["base_norm_scale"]
    chip = _raw(qchips["counter"])
    chip_norm = _float(*chip["model.norm.weight"])
    base_norm = _float(*want["model.norm.weight"])
    reads = np.flatnonzero(np.any(chip["lm_head.weight"][1] & 0x7FFF, axis=0))
    assert st["chip_final_norm_dims"] == reads.tolist() and 0 < len(reads) < hb
    rd, other = reads[reads < hb], np.setdiff1d(np.arange(hb), reads)
    for name, (wt, w) in want.items():
        mt = re.match(r"model\.layers\.(\d+)\.(.*)", name)
        new = f"model.layers.{int(mt.group(1)) + lc}.{mt.group(2)}" if mt else name
        gt, g = got[new]
        g = g[tuple(slice(0, s) for s in w.shape)]
        if name == "model.norm.weight":
            assert torch.equal(_float(gt, g)[rd], chip_norm[rd])
            g, w = g[other], w[other]
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            assert torch.allclose(_float(gt, g) + 1, (_float(wt, w) + 1) * scale,
                                  rtol=2 ** -8, atol=2 ** -9), name
        elif name == "lm_head.weight":
            factor = (base_norm[rd] + 1) * scale / (chip_norm[rd] + 1)
            assert torch.allclose(_float(gt, g[:, rd]), _float(wt, w[:, rd]) * factor,
                                  rtol=2 ** -8, atol=0)
            assert gt == wt and g[:, other].tobytes() == w[:, other].tobytes()
        else:                       # the base's bytes in their block
            assert gt == wt and g.tobytes() == w.tobytes(), name


def test_a_vision_language_base_is_merged_as_its_text_model(stock):
    """The vision-language base holding 'tied''s text model merges to the very tensors the
    text base does (its vision tower left out), and plain transformers loads it."""
    out, rep = stock("vl", "counter")
    text, _ = stock("tied", "counter")
    got, want = _raw(out), _raw(text)
    assert sorted(got) == sorted(want)
    for name, (dtype, raw) in want.items():
        assert got[name][0] == dtype and got[name][1].tobytes() == raw.tobytes(), name
    _plain(out, torch.bfloat16)
    st = json.loads((out / "deltachip.json").read_text())
    assert st["stock"]["vision_dropped"] is True and st["base"]["vision_language"] is True
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and "vision_config" not in cfg


def _kl(ref, got):
    """Mean KL(softmax(ref) || softmax(got)) over positions."""
    pr, pg = ref.log_softmax(-1), got.log_softmax(-1)
    return float((pr.exp() * (pr - pg)).sum(-1).mean())


def _fidelity(out, base, dtype):
    """Against the base in ``dtype`` on PROMPTS (prefill): max |Δlogit|, mean KL, whether
    the argmax is the base's wherever the base's top two differ by more than 1/2, the
    highest chip logit; and the base's own bf16-vs-fp32 KL (the noise floor of bf16)."""
    from transformers import AutoTokenizer
    m, b = _plain(out, dtype), _plain(base, dtype)
    b32, b16 = _plain(base, torch.float32), _plain(base, torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(str(out))
    worst, kls, floor, clear_same, chip_top = 0.0, [], [], True, -float("inf")
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p, return_tensors="pt").input_ids
            lm, lb = m(ids).logits.double(), b(ids).logits.double()
            worst = max(worst, float((lm[..., :VOCAB] - lb).abs().max()))
            full = lm.log_softmax(-1)       # the chip's columns count in the merged softmax
            kls.append(_kl(lb, full[..., :VOCAB]))
            floor.append(_kl(b32(ids).logits.double(), b16(ids).logits.double()))
            top = lb.topk(2, -1).values
            clear = (top[..., 0] - top[..., 1]) > 0.5
            clear_same &= bool((lm.argmax(-1) == lb.argmax(-1))[clear].all())
            chip_top = max(chip_top, float(lm[..., VOCAB:].max()))
    return worst, sum(kls) / len(kls), clear_same, chip_top, sum(floor) / len(floor)


@pytest.mark.parametrize("chip,dtype", [("counter", "bf16"), ("counter32", "fp32")])
def test_text_is_close_to_the_base(bases, stock, chip, dtype):
    """Text-only prompts: logits close to the base's (not equal: RMSNorm divides by the
    wider width and the compensation rounds): in bf16 within twice the KL that bf16 itself
    costs the base (its fp32 logits against its bf16 ones), in fp32 far below it; the same
    argmax wherever the base's is clear; a chip id never near the top."""
    out, _ = stock("tied", chip)
    worst, kl, clear_same, chip_top, floor = _fidelity(out, bases["tied"], DTYPES[dtype])
    print(f"\nstock {chip} {dtype}: max |dlogit| {worst:.3g}, mean KL {kl:.3g} (bf16 noise "
          f"floor {floor:.3g}), highest chip logit {chip_top:.3g}")
    assert kl < (2 * floor if dtype == "bf16" else min(floor / 1000, 1e-7))
    assert worst < (1.0 if dtype == "bf16" else 0.01)
    assert clear_same
    assert chip_top < -1000


@pytest.mark.parametrize("chip,dtype", [("counter", "bf16"), ("counter32", "fp32"),
                                        ("stack", "bf16")])
def test_chip_path_is_the_chip_alone(stock, qchips, chip, dtype):
    """Token by token from the start token: the chip's logits are the hf engine's on the chip
    directory (torch.equal), every text logit is far below, and at the end every chip GDN
    state is the engine's while the base's GDN states are still zero (muted)."""
    from backends.engines.hf import HFEngine
    from backends.merge.stock import chip_cache
    out, _ = stock("tied", chip)
    eng = HFEngine(qchips[chip], dtype=dtype)
    m = _plain(out, DTYPES[dtype])
    tok, cm, ce = eng.token_id(eng.circuit.start), chip_cache(m, out), eng.new_cache(1)
    lc = eng.config.num_hidden_layers - 1
    with torch.no_grad():
        for _ in range(40 if chip == "stack" else 14):
            le = eng.model(input_ids=torch.tensor([[tok]]), cache=ce, use_cache=True).logits
            lm = m(input_ids=torch.tensor([[VOCAB + tok]]), cache=cm, use_cache=True).logits
            assert torch.equal(lm[..., VOCAB:], le.to(lm.dtype))
            assert float(lm[..., :VOCAB].max()) < -1000
            tok = int(le[0, -1].argmax())
            assert int(lm[0, -1].argmax()) == VOCAB + tok
    for li in range(lc):
        assert torch.equal(eng.recurrent_state(ce, li, 0), cm.layers[li].recurrent_states[0][0])
    for li, kind in enumerate(m.config.layer_types[lc:], lc):
        if kind == "linear_attention":
            assert not cm.layers[li].recurrent_states[0].any()


def test_a_chip_run_leaves_the_base_gdn_state_alone(bases, stock, qchips):
    """Text, then chip tokens: the mute columns keep every base GDN layer's recurrent state
    as the text left it (a = b = about -2^40: no decay, beta 0)."""
    from transformers import AutoTokenizer
    out, _ = stock("tied", "counter")
    m = _plain(out, torch.bfloat16)
    ids = AutoTokenizer.from_pretrained(str(out))(PROMPTS[2], return_tensors="pt").input_ids
    lc = json.loads((out / "deltachip.json").read_text())["stock"]["chip_layers"][1]
    with torch.no_grad():
        o = m(ids, use_cache=True)
        gdn = [i for i, k in enumerate(m.config.layer_types) if i >= lc and
               k == "linear_attention"]
        before = {i: o.past_key_values.layers[i].recurrent_states[0].clone() for i in gdn}
        assert all(before[i].any() for i in gdn)
        for t in range(6):
            m(input_ids=torch.tensor([[VOCAB + t]]), cache=o.past_key_values, use_cache=True)
    for i in gdn:
        assert torch.equal(o.past_key_values.layers[i].recurrent_states[0], before[i])


def test_generate_runs_the_chip(stock):
    """Plain generate() from the counter's start token counts 0 to 9 and halts."""
    out, _ = stock("untied", "counter")
    m = _plain(out, torch.bfloat16)
    with torch.no_grad():
        g = m.generate(input_ids=torch.tensor([[VOCAB]]), max_new_tokens=12, do_sample=False,
                       pad_token_id=0)
    assert (g[0] - VOCAB).tolist() == list(range(10)) + [256] * 3


def _left_nothing(out):
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_bad_base_or_chip_is_a_clean_error(tmp_path, bases, qchips, chips):
    from backends.merge.stock import merge_stock
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in bases["tied"].iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    before = {p.name: p.read_bytes() for p in bad.iterdir()}
    out = tmp_path / "out"
    with pytest.raises(MergeError, match="not 'qwen3_5_text'"):
        merge_stock(bad, out, qchips["counter"])
    _left_nothing(out)
    assert {p.name: p.read_bytes() for p in bad.iterdir()} == before
    # a chip compiled for other module shapes (the compact target)
    with pytest.raises(MergeError, match=r"intermediate_size .*--target"):
        merge_stock(bases["tied"], out, chips["counter"])
    _left_nothing(out)
    r = subprocess.run([sys.executable, "-m", "deltachip", "merge", str(bad), str(out),
                        "--chip", str(qchips["counter"]), "--layout", "stock"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "qwen3_5_text" in r.stderr
    _left_nothing(out)


def test_ballast_fills_the_wider_stream():
    """The extra ballast values: the fewest, each <= 255, whose squares make the energy the
    chip's pre-norms need at the wider width."""
    from backends.merge.stock import squares
    for total in (65, 2561, 4097, 129, 3):
        s = squares(total)
        assert sum(x * x for x in s) == total + len(s) and max(s) <= 255
        assert not any(squares_n_ok(total, n) for n in range(1, len(s)))
    assert squares(2561) == (48, 16, 2)


def squares_n_ok(total: int, n: int) -> bool:
    import itertools
    top = int((total + n) ** 0.5)
    return any(sum(x * x for x in c) == total + n
               for c in itertools.combinations_with_replacement(range(1, top + 1), n))
