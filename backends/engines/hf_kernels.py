"""Bit-identical fp32 convolutions for the hf engine's Gated DeltaNet layers.

Takes: a loaded transformers model (the hf engine's ``Qwen3_5ForCausalLM``). Gives:
:func:`install`, which makes that model's GDN layers run ``causal_conv1d_update`` (decode)
and ``causal_conv1d_fn`` (prefill) with the depthwise convolution summed in fp32 and rounded
where transformers' own functions round, once a load-time :func:`self_check` has found the
replacement giving the same bits as those originals; :func:`installed`,
:func:`bf16_conv_slow`, :func:`originals`, and :func:`compare` / :func:`check_data` (the
self-check's comparison and data, which the tests reuse).

Why: torch 2.13 runs a bf16 convolution on the CPU through oneDNN only where oneDNN has bf16
(AVX-512-BF16, AMX); elsewhere (AVX2-only CPUs) ``slow_conv2d`` runs once per channel
group, and a GDN decode step's conv of 30,912 channels takes 0.15 s (emulated on the
project machine; about 0.8 s reported on an AVX2-only CPU), 60 times the fp32 sum's time (docs/backend.md, "Check"; ``python benchmarks/hf_conv.py``).
:func:`install` therefore acts only there (or when forced) and only on bf16 models.

Why exact: each output is a sum of K = 4 products p_k = x_k * w_k. Both of torch's bf16
kernels (oneDNN's and the per-group fallback) compute it in fp32 as
(((+0 + p_0) + p_1) + p_2) + p_3 and round once to bf16, and so does :func:`_conv32`, as
long as every nonzero |x| and |w| lies in [2^-56, 2^62) (``EXACT_MIN``, ``EXACT_MAX``):
then each product of two 8-bit significands is exact in fp32 (so a fused multiply-add
gives the same), and every partial sum is a multiple of 2^-126 below 2^126, never denormal
(oneDNN's bf16 kernel flushes those) and never overflowing. Any other input (denormals,
huge values, inf and NaN, whose payload bits differ between kernels), a bias (Qwen3.5's
conv has none), a dtype other than bf16/fp32 or packed sequences (``cu_seqlens``,
``seq_idx``) make that call go to the original. The activation (silu) then runs on the
rounded bf16 tensor, as in the originals; in fp32 the replacement makes the originals' very
conv call. The tap order, the +0 start (a sum of -0 products is +0, not -0), the single
rounding and the range check are what the self-check tests, on data that shows any other
order, a -0, an activation before rounding or a missing range check.

How it is hooked, and why not transformers' kernel mechanism: transformers 5.24 binds these
functions once at import (``use_kernel_func_from_hub_with_fallback`` picks the
``causal_conv1d`` package or the torch code then); ``use_kernelized_func`` only registers
them for ``kernels.kernelize``, which needs the ``kernels`` package and a hub kernel
mapping; and the GDN forward calls the module-level names, not attributes of the layer.
So :func:`install` replaces the two module-level names (in the GDN layer's own modeling
module) with dispatchers that run the replacement only inside the forward of a GDN layer of
a model it was installed on (a forward pre-hook sets a context variable, an always-called
forward hook resets it), and the original everywhere else: other models are untouched.
"""
from __future__ import annotations

import functools
import sys
from contextvars import ContextVar
from types import ModuleType
from typing import Any, Callable

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

#: the names of transformers' conv functions that the GDN forward calls
NAMES = ("causal_conv1d_update", "causal_conv1d_fn")
#: nonzero |x| and |w| in [EXACT_MIN, EXACT_MAX) make the fp32 conv exact (module docstring)
EXACT_MIN, EXACT_MAX = 2.0 ** -56, 2.0 ** 62

_ACTIVE: ContextVar[bool] = ContextVar("deltachip_fp32_conv", default=False)
_HOOKS = "_deltachip_fp32_conv_hooks"      # model attribute: the installed hook handles
_ORIGINAL = "_deltachip_original"          # dispatcher attribute: transformers' function


def bf16_conv_slow() -> bool:
    """True where torch runs bf16 convolutions channel group by channel group (no oneDNN
    bf16: the CPU lacks AVX-512-BF16/AMX, or mkldnn is off): the condition torch 2.13's
    ``ConvParams::use_mkldnn`` tests for bf16 inputs."""
    try:
        return not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
                    and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):     # a torch without the query: assume slow
        return True


def install(model: torch.nn.Module, force: bool = False) -> bool:
    """Make ``model``'s GDN layers use the fp32 convolutions (module docstring) where they
    are needed, i.e. its conv weights are bf16 and :func:`bf16_conv_slow`, or always with
    ``force``. Returns whether they are installed now. Refuses (False, one line on stderr)
    when :func:`self_check` finds a difference from transformers' originals."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"install: expected a torch.nn.Module, got {type(model).__name__}")
    if installed(model):
        return True
    layers = [m for m in model.modules() if _is_gdn(m)]
    if not layers:
        return False
    if not force and not (bf16_conv_slow() and
                          any(m.conv1d.weight.dtype == torch.bfloat16 for m in layers)):
        return False
    modules = {sys.modules[type(m).__module__] for m in layers}
    acts = tuple(sorted({m.activation for m in layers}, key=str))
    for mod in modules:
        problem = self_check(mod.__name__, acts)
        if problem:
            print(f"deltachip: keeping transformers' GDN convolutions ({problem})",
                  file=sys.stderr)
            return False
    for mod in modules:
        for name in NAMES:
            if not hasattr(getattr(mod, name), _ORIGINAL):
                setattr(mod, name, _dispatcher(getattr(mod, name), name))
    handles = []
    for m in layers:
        tokens: list = []
        handles.append(m.register_forward_pre_hook(
            lambda mod, args, tokens=tokens: tokens.append(_ACTIVE.set(True))))
        handles.append(m.register_forward_hook(
            lambda mod, args, out, tokens=tokens: _ACTIVE.reset(tokens.pop()),
            always_call=True))
    setattr(model, _HOOKS, handles)
    return True


def installed(model: torch.nn.Module) -> bool:
    """Whether :func:`install` put the fp32 convolutions on ``model``."""
    return bool(getattr(model, _HOOKS, None))


def originals(mod: ModuleType) -> dict[str, Callable]:
    """transformers' own conv functions of modeling module ``mod`` (also once installed)."""
    return {n: getattr(getattr(mod, n), _ORIGINAL, getattr(mod, n)) for n in NAMES}


# ---- the replacements (each takes transformers' original first, to hand a call over) ------
def conv_update(orig: Callable, hidden_states: torch.Tensor, conv_state: torch.Tensor,
                weight: torch.Tensor, bias: torch.Tensor | None = None,
                activation: str | None = None) -> torch.Tensor:
    """transformers' ``causal_conv1d_update`` with the convolution in fp32: the same state
    update (the last ``state_len`` columns of [state, input] copied into ``conv_state``)."""
    seq_len = hidden_states.shape[-1]
    state_len = conv_state.shape[-1]
    x = torch.cat([conv_state, hidden_states], dim=-1).to(weight.dtype)
    if not _exact(x, weight, bias):
        return orig(hidden_states, conv_state, weight, bias, activation)
    conv_state.copy_(x[:, :, -state_len:])
    out = _conv32(x, weight, 0)[:, :, -seq_len:]
    if activation is not None:
        out = ACT2FN[activation](out)
    return out.to(hidden_states.dtype)


def conv_fn(orig: Callable, hidden_states: torch.Tensor, weight: torch.Tensor,
            bias: torch.Tensor | None = None, activation: str | None = None,
            **kwargs: Any) -> torch.Tensor:
    """transformers' ``causal_conv1d_fn`` (causal, left context K-1 zeros) with the
    convolution in fp32."""
    seq_len = hidden_states.shape[-1]
    x = hidden_states.to(weight.dtype)
    if (kwargs.get("cu_seqlens") is not None or kwargs.get("seq_idx") is not None
            or not _exact(x, weight, bias)):
        return orig(hidden_states, weight, bias, activation=activation, **kwargs)
    out = _conv32(x, weight, weight.shape[-1] - 1)[:, :, :seq_len]
    if activation is not None:
        out = ACT2FN[activation](out)
    return out.to(hidden_states.dtype)


#: what a dispatcher runs inside an installed GDN layer, by name (looked up at each call)
FAST: dict[str, Callable] = {"causal_conv1d_update": conv_update, "causal_conv1d_fn": conv_fn}


def _conv32(x: torch.Tensor, weight: torch.Tensor, padding: int) -> torch.Tensor:
    """What ``F.conv1d(x, weight.unsqueeze(1), None, padding=padding, groups=C)`` gives for
    [B, C, T] ``x`` and [C, K] ``weight``: for bf16, the K products summed in fp32 from +0
    in tap order and rounded once (module docstring; callers check the range first); for
    fp32, that very call, as the originals make it."""
    if weight.dtype == torch.float32:
        return F.conv1d(x, weight.unsqueeze(1), None, padding=padding, groups=x.shape[1])
    xf, wf = F.pad(x.float(), (padding, padding)), weight.float()
    n = xf.shape[-1] - weight.shape[-1] + 1
    acc = xf.new_zeros(xf.shape[0], xf.shape[1], n)          # +0: -0 products sum to +0
    for k in range(weight.shape[-1]):
        acc.addcmul_(xf[:, :, k:k + n], wf[:, k, None])       # exact products: fused or not
    return acc.to(weight.dtype)


#: the bf16 bits of 1, EXACT_MIN and EXACT_MAX (bits & 0x7FFF orders like |value|, with inf
#: and NaN above every finite value)
_ONE, _MIN_BITS, _MAX_BITS = (int(torch.tensor(v, dtype=torch.bfloat16).view(torch.int16))
                              for v in (1.0, EXACT_MIN, EXACT_MAX))


def _exact(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether :func:`_conv32` gives the originals' bits: fp32 weights (the same call), or
    bf16 ``x`` and ``weight`` with every nonzero |value| in [EXACT_MIN, EXACT_MAX), no bias."""
    if bias is not None or weight.dtype not in (torch.bfloat16, torch.float32):
        return False
    if weight.dtype == torch.float32:
        return True
    for t in (x, weight):
        m = t.view(torch.int16) & 0x7FFF
        lo, hi = torch.aminmax(m.masked_fill(m == 0, _ONE))
        if int(lo) < _MIN_BITS or int(hi) >= _MAX_BITS:
            return False
    return True


def _dispatcher(orig: Callable, name: str) -> Callable:
    """``orig``'s stand-in: :data:`FAST` [name] inside an installed GDN layer, else ``orig``."""
    @functools.wraps(orig)
    def run(*args: Any, **kwargs: Any) -> Any:
        return FAST[name](orig, *args, **kwargs) if _ACTIVE.get() else orig(*args, **kwargs)
    setattr(run, _ORIGINAL, orig)
    return run


def _is_gdn(m: torch.nn.Module) -> bool:
    mod = sys.modules.get(type(m).__module__)
    return (type(m).__name__.endswith("GatedDeltaNet") and isinstance(getattr(m, "conv1d", None),
            torch.nn.Conv1d) and all(hasattr(mod, n) for n in NAMES))


# ---- the load-time self-check ------------------------------------------------------------
@functools.cache
def self_check(module_name: str, activations: tuple[str | None, ...] = ("silu",)) -> str | None:
    """None when :data:`FAST` gives the same bits as the originals of modeling module
    ``module_name`` (:func:`compare`) on :func:`check_data` in bf16 and fp32, with each
    activation and, outside the exact range, without one; else what differed first.
    Cached per process."""
    orig = originals(sys.modules[module_name])
    cases = [(dtype, act, False) for dtype in (torch.bfloat16, torch.float32)
             for act in activations] + [(torch.bfloat16, None, True), (torch.float32, None, True)]
    try:
        for dtype, act, outside in cases:
            problem = compare(orig, *check_data(dtype, outside=outside), act)
            if problem:
                return problem
    except Exception as e:      # any failure of either side means: keep the originals
        return f"self-check failed: {e.__class__.__name__}: {e}"
    return None


def compare(orig: dict[str, Callable], x: torch.Tensor, w: torch.Tensor, state: torch.Tensor,
            activation: str | None) -> str | None:
    """None when :data:`FAST` and ``orig`` (:func:`originals`) give the same bits for
    [B, C, T] ``x``, [C, K] ``w`` and [B, C, S] ``state``: decode one step at a time from
    ``state`` (outputs and the carried state after each step) and prefill of all of ``x``;
    else a line saying what differed first."""
    what = f"{x.dtype}, {activation}"
    upd, fn = orig["causal_conv1d_update"], orig["causal_conv1d_fn"]
    mine, theirs = state.clone(), state.clone()
    for step in range(x.shape[-1]):
        xs = x[:, :, step:step + 1]
        got = FAST["causal_conv1d_update"](upd, xs, mine, w, None, activation)
        problem = (_differ(got, upd(xs, theirs, w, None, activation), f"decode step {step} ({what})")
                   or _differ(mine, theirs, f"conv state after decode step {step} ({what})"))
        if problem:
            return problem
    got = FAST["causal_conv1d_fn"](fn, x, w, None, activation)
    return _differ(got, fn(x, w, None, activation), f"prefill ({what})")


def check_data(dtype: torch.dtype, channels: int = 192, batch: int = 2, steps: int = 5,
               kernel: int = 4, outside: bool = False, seed: int = 0
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic ([batch, channels, steps] x (channels-last, as the GDN forward passes
    it), [channels, kernel] w, [batch, channels, kernel] state) in ``dtype``; the state is
    the stream's first ``kernel`` steps. One third of the channels each: random normals;
    sums that round differently in every order but the originals' (a big value +-X*2^12 at
    every other step, its sign flipping each time, small ones between, weights (A, b, A, b')
    with A about 2^12: the window's two big products cancel exactly, and what survives of
    the small ones depends on the order); the compiled chips' kind (small integers and
    zeros of both signs, weights 0 and +-1, so a sum of -0 products shows). ``outside``: a
    tenth of all values replaced by denormals, 2^-70, -2^120, inf and NaN."""
    g = torch.Generator().manual_seed(seed)
    n, third = kernel + steps, -(-channels // 3)
    order, chip = slice(third, 2 * third), slice(2 * third, None)

    def sign(*shape: int) -> torch.Tensor:
        return torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)

    def mant(*shape: int) -> torch.Tensor:                # bf16 significands in [1, 2)
        return 1 + torch.randint(0, 128, shape, generator=g) / 128

    z = torch.randn(batch, channels, n, generator=g)
    w = torch.randn(channels, kernel, generator=g)
    t = torch.arange(n) + torch.randint(0, 2, (channels, 1), generator=g)    # phase
    flip = torch.where(t // 2 % 2 == 0, 1.0, -1.0)
    big = 4096 * mant(batch, channels, 1) * sign(batch, channels, 1) * flip
    z[:, order] = torch.where(t % 2 == 0, big, mant(batch, channels, n) * sign(batch, channels, n))[:, order]
    wo = mant(channels, kernel) * sign(channels, kernel)
    wo[:, 0::2] = 4096 * wo[:, :1]
    w[order] = wo[order]
    z[:, chip] = (torch.randint(0, 3, (batch, channels, n), generator=g) * sign(batch, channels, n))[:, chip]
    w[chip] = (torch.randint(0, 2, (channels, kernel), generator=g) * sign(channels, kernel))[chip]
    if outside:
        odd = torch.tensor([1e-40, 2.0 ** -70, -2.0 ** 120, float("inf"), float("nan")])
        for v in (z, w):
            hit = torch.rand(v.shape, generator=g) < 0.1
            v[hit] = odd[torch.randint(0, len(odd), (int(hit.sum()),), generator=g)]
    z = z.to(dtype)
    x = z[..., kernel:].transpose(1, 2).contiguous().transpose(1, 2)
    return x, w.to(dtype), z[..., :kernel].contiguous()


def _differ(got: torch.Tensor, want: torch.Tensor, what: str) -> str | None:
    """None when ``got`` and ``want`` have the same dtype, shape and bits, else a line."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{what}: {got.dtype} {list(got.shape)} vs {want.dtype} {list(want.shape)}"
    ints = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[got.dtype]
    bad = int((got.contiguous().view(ints) != want.contiguous().view(ints)).sum())
    return f"{what}: {bad} of {got.numel()} values differ from transformers'" if bad else None
