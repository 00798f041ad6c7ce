"""backends.engines.hf_kernels: the fp32 GDN convolutions give transformers' own bits, the self-check
refuses replacements that do not, and the hf engine runs them with unchanged logits.

The originals are transformers' ``causal_conv1d_update`` / ``causal_conv1d_fn`` on this
machine's torch; one test reruns the bit comparisons in a child process with torch's bf16
convolutions forced onto the per-channel-group fallback (the AVX2-only CPUs' path)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

from tests.backends import circuits  # noqa: E402

from hdl.ir import Token  # noqa: E402
from backends.engines import hf_kernels as hk  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from backends.engines.hf import HFEngine  # noqa: E402

ORIG = hk.originals(qwen)
#: data kinds; every one but "outside" lies in the range where the fp32 conv runs
KINDS = ("random", "wide", "adversarial", "outside")
#: env making torch 2.13 take the bf16 fallback of CPUs without bf16 hardware
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def data(kind: str, dtype: torch.dtype, batch: int, channels: int = 192, steps: int = 16,
         kernel: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """([B, C, T] x, [C, K] w, [B, C, K] state) of ``kind``: normals, normals scaled by
    2^-24..2^24, or :func:`backends.engines.hf_kernels.check_data` (in range, or ``outside`` it)."""
    if kind in ("adversarial", "outside"):
        return hk.check_data(dtype, channels, batch, steps, kernel, kind == "outside", seed)
    g = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        v = torch.randn(*shape, generator=g)
        return v * 2.0 ** torch.randint(-24, 25, shape, generator=g) if kind == "wide" else v
    x = draw(batch, steps, channels).transpose(1, 2)          # channels-last, as the model
    return x.to(dtype), draw(channels, kernel).to(dtype), draw(batch, channels, kernel).to(dtype)


def in_range(x: torch.Tensor, w: torch.Tensor, state: torch.Tensor) -> bool:
    return hk._exact(torch.cat([state, x], dim=-1), w, None)


@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_replacement_gives_the_originals_bits(dtype, kind, batch, activation):
    """Decode (16 steps, the conv state carried and compared after each) and prefill."""
    x, w, state = data(kind, dtype, batch)
    assert in_range(x, w, state) == (kind != "outside" or dtype == torch.float32)
    assert hk.compare(ORIG, x, w, state, activation) is None


def test_prefill_with_cached_left_context():
    """The GDN forward's prefill after a decode: [state, new] through causal_conv1d_fn."""
    x, w, state = data("adversarial", torch.bfloat16, 2, steps=40)
    full = torch.cat([state, x], dim=-1)
    got = hk.conv_fn(ORIG["causal_conv1d_fn"], full, w, None, "silu")[:, :, -40:]
    assert hk._differ(got, ORIG["causal_conv1d_fn"](full, w, None, "silu")[:, :, -40:], "") is None


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU flags")
def test_bits_on_the_avx2_fallback():
    """The same comparisons where the originals run torch's slow bf16 path (the one
    hf_kernels replaces in practice), and that path is detected as slow."""
    code = ("import torch\n"
            "import tests.backends.engines.test_hf_kernels as t\n"
            "from backends.engines import hf_kernels as hk\n"
            "assert hk.bf16_conv_slow(), 'torch still runs bf16 convolutions in oneDNN'\n"
            "assert hk.self_check(t.qwen.__name__) is None, hk.self_check(t.qwen.__name__)\n"
            "for kind in t.KINDS:\n"
            "    for batch in (1, 4):\n"
            "        d = t.data(kind, torch.bfloat16, batch, channels=96, steps=12)\n"
            "        problem = hk.compare(t.ORIG, *d, 'silu') or hk.compare(t.ORIG, *d, None)\n"
            "        assert problem is None, (kind, batch, problem)\n"
            "print('compared')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, **AVX2_ENV}, cwd=Path(__file__).parents[3], timeout=300)
    assert r.returncode == 0 and "compared" in r.stdout, r.stderr[-3000:]


# ---- the self-check refuses what is not bit-identical ---------------------------------------
def _conv_summed(sum_products):
    """A _conv32 stand-in: ``sum_products`` of the K fp32 products [B, C, n] each, rounded."""
    def conv(x: torch.Tensor, w: torch.Tensor, padding: int) -> torch.Tensor:
        xp, wf = F.pad(x.float(), (padding, padding)), w.float()
        n = xp.shape[-1] - w.shape[-1] + 1
        return sum_products([xp[:, :, k:k + n] * wf[:, k, None] for k in range(w.shape[-1])]
                            ).to(w.dtype)
    return conv


def _in_order(p: list[torch.Tensor]) -> torch.Tensor:          # (((+0 + p0) + p1) + p2) + p3
    acc = torch.zeros(())
    for q in p:
        acc = acc + q
    return acc


MUTANTS = {
    "reversed order": ("_conv32", _conv_summed(lambda p: _in_order(p[::-1]))),
    "pairwise order": ("_conv32", _conv_summed(lambda p: (p[0] + p[1]) + (p[2] + p[3]))),
    "-0 kept (sum not from +0)": ("_conv32", _conv_summed(lambda p: ((p[0] + p[1]) + p[2]) + p[3])),
    "no rounding before silu": ("_conv32", lambda x, w, p: F.conv1d(
        x.float(), w.float().unsqueeze(1), None, padding=p, groups=x.shape[1])),
    "no range check": ("_exact", lambda x, w, b: b is None),
}


@pytest.fixture
def fresh_model(chip, monkeypatch):
    """The chip's model as the hf engine loads it, without the replacement."""
    monkeypatch.setattr(hk, "bf16_conv_slow", lambda: False)
    model = HFEngine(chip).model
    assert not hk.installed(model)
    hk.self_check.cache_clear()
    yield model
    hk.self_check.cache_clear()


def test_the_mutants_base_passes_in_bf16(fresh_model):
    """The products summed in the originals' order from +0 pass every bf16 case (the
    self-check's first), so each mutant is refused for its one change; in fp32, where
    products round, only the very conv call passes."""
    assert hk.self_check(qwen.__name__) is None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hk, "_conv32", _conv_summed(_in_order))
        hk.self_check.cache_clear()
        problem = hk.self_check(qwen.__name__)
    assert problem is not None and problem.startswith("decode step 0 (torch.float32")


@pytest.mark.parametrize("mutant", MUTANTS)
def test_self_check_refuses_a_wrong_replacement(fresh_model, monkeypatch, capsys, mutant):
    name, stand_in = MUTANTS[mutant]
    monkeypatch.setattr(hk, name, stand_in)
    assert hk.install(fresh_model, force=True) is False
    assert not hk.installed(fresh_model)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "keeping transformers' GDN convolutions" in err[0], err
    assert "differ from transformers'" in err[0]


def test_self_check_refuses_a_state_update_that_is_lost(fresh_model, monkeypatch, capsys):
    monkeypatch.setitem(hk.FAST, "causal_conv1d_update", lambda orig, h, state, *a:
                        hk.conv_update(orig, h, state.clone(), *a))
    assert hk.install(fresh_model, force=True) is False
    assert "conv state after decode step 0" in capsys.readouterr().err


def test_self_check_refuses_a_replacement_that_raises(fresh_model, monkeypatch, capsys):
    def boom(*a, **k):
        raise RuntimeError("no kernel")
    monkeypatch.setitem(hk.FAST, "causal_conv1d_fn", boom)
    assert hk.install(fresh_model, force=True) is False
    assert "self-check failed: RuntimeError: no kernel" in capsys.readouterr().err


# ---- the hf engine ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chip(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ram") / "chip"
    compile_to_dir(circuits.ram_circuit(), d, dtype="bf16")
    return d


def _engine(chip: Path, slow: bool, dtype: str | None = None) -> HFEngine:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hk, "bf16_conv_slow", lambda: slow)
        return HFEngine(chip, dtype=dtype)


def _run(eng: HFEngine, starts: list[Token], steps: int) -> list[torch.Tensor]:
    """Logits of greedy decode from ``starts`` (one row each), then of prefill of the
    stream in a fresh cache, then the conv states."""
    out, cache = [], eng.new_cache(len(starts))
    ids = torch.tensor([[eng.token_id(t)] for t in starts])
    stream = [ids]
    with torch.no_grad():
        for _ in range(steps):
            logits = eng.model(input_ids=ids, cache=cache, use_cache=True).logits
            out.append(logits)
            ids = logits[:, -1:].argmax(-1)
            stream.append(ids)
        pre = eng.new_cache(len(starts))
        out.append(eng.model(input_ids=torch.cat(stream, 1), cache=pre, use_cache=True).logits)
    return out + [L.conv_states[0] for c in (cache, pre) for L in c.layers
                  if getattr(L, "conv_states", None)]


def test_engine_installs_where_needed_and_keeps_the_logits(chip, monkeypatch):
    """Where bf16 convolutions are slow the engine's model runs the fp32 conv in every GDN
    layer (decode and prefill), with the very logits and conv states of the originals;
    an engine without it in the same process keeps the originals."""
    calls = []
    real = hk._conv32
    monkeypatch.setattr(hk, "_conv32", lambda *a: calls.append(a[2]) or real(*a))
    starts = [Token(0, (a, d)) for a, d in ((3, 7), (0, 255), (15, 128), (9, 1))]
    plain = _engine(chip, slow=False)
    assert not hk.installed(plain.model)
    want = _run(plain, starts, 10)
    assert calls == []
    fast = _engine(chip, slow=True)
    assert hk.installed(fast.model)
    calls.clear()                                   # the self-check's own
    got = _run(fast, starts, 10)
    layers = sum(t == "linear_attention" for t in fast.config.layer_types)
    assert calls.count(0) == 10 * layers and calls.count(3) == layers   # decode, prefill
    assert len(got) == len(want) > 11
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)
    calls.clear()
    assert torch.equal(_run(plain, starts, 2)[0], want[0]) and calls == []


def test_engine_keeps_the_originals_for_fp32(chip):
    assert not hk.installed(_engine(chip, slow=True, dtype="fp32").model)


def test_a_failing_forward_leaves_the_dispatch_off(chip):
    eng = _engine(chip, slow=True)
    gdn = next(m for m in eng.model.modules() if isinstance(m, qwen.Qwen3_5GatedDeltaNet))
    with pytest.raises(RuntimeError):
        gdn(torch.zeros(1, 1, 3))                   # wrong hidden size
    assert hk._ACTIVE.get() is False


def test_bad_input():
    with pytest.raises(TypeError, match="expected a torch.nn.Module, got str"):
        hk.install("model")
    assert hk.install(torch.nn.Linear(2, 2), force=True) is False     # no GDN layers
