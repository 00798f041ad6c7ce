"""Engine "hf": run a compiled chip in transformers' own ``Qwen3_5ForCausalLM``.

Takes: a compiled directory (config.json, chip.json, and model.safetensors or its shards
with model.safetensors.index.json; a missing, corrupt, outdated or mismatched one is a
:class:`backends.chipdir.checkpoint.ChipDirError`). Gives: :class:`HFEngine`, the engine interface
of :class:`backends.engines.base.ChipEngine` on transformers' modules: :meth:`HFEngine.new_cache`
(a ``DynamicCache`` whose every GDN layer's recurrent state is preloaded: ROM images
written straight into it, RAMs zero), one-token :meth:`HFEngine.decode_step`,
whole-sequence :meth:`HFEngine.prefill`, and :meth:`HFEngine.sublayer_taps`, which records
chosen residual dims after every sublayer.

The model is loaded with ``AutoModelForCausalLM.from_pretrained`` and run unmodified.
"""
from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import torch
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.utils import logging as hf_logging

from backends.chipdir.checkpoint import RECOMPILE, ChipDirError, weights_file
from backends.engines.base import ChipEngine
from backends.engines import hf_kernels


class HFEngine(ChipEngine):
    """A compiled chip loaded into transformers (see the module docstring)."""

    name = "hf"

    def __init__(self, path: str | Path, dtype: str | None = None,
                 roms: dict[str, list[int]] | None = None):
        super().__init__(path, dtype, roms)
        self.model = self._load_model()
        self.model.eval()
        self.config = self.model.config

    @property
    def chip_layers(self) -> int:
        """How many of the model's first decoder layers are the chip's (all of them here)."""
        return len(self.config.layer_types)

    def _load_model(self) -> torch.nn.Module:
        """The checkpoint in transformers (:func:`load_checked`)."""
        return load_checked(self.path, self.dtype, RECOMPILE)

    # ---- state ---------------------------------------------------------------------------
    def new_cache(self, batch: int = 1,
                  roms: Sequence[dict[str, list[int]]] | None = None) -> DynamicCache:
        """A cache whose every layer is 'started' (recurrent kernel from the first token)
        with memory images preloaded: the engine's images in every batch row, or row b's
        own ``roms[b]`` (over the engine's) when ``roms`` is given, one dict per row."""
        cfg = self.config
        cache = DynamicCache(config=cfg)
        nv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
        conv_dim = 2 * cfg.linear_num_key_heads * dk + nv * dv
        rows = self.row_states(batch, roms)
        for li, kind in enumerate(cfg.layer_types[:self.chip_layers]):
            if kind != "linear_attention":
                continue
            L = cache.layers[li]
            L.lazy_initialization(
                conv_states=torch.zeros(batch, conv_dim, cfg.linear_conv_kernel_dim, dtype=self.dtype),
                recurrent_states=torch.zeros(batch, nv, dk, dv, dtype=torch.float32),
                conv_kernel_size=cfg.linear_conv_kernel_dim)
            for b, states in enumerate(rows):
                for vh, st in states.get(li, {}).items():
                    L.recurrent_states[0][b, vh] = st
            L.has_previous_state[0] = True
        return cache

    @torch.no_grad()
    def decode_step(self, ids: Sequence[int], cache: DynamicCache) -> torch.Tensor:
        """Feed one token per batch row; returns the argmax ids [B]."""
        self.check_ids(ids)
        x = torch.tensor(list(ids), dtype=torch.long)[:, None]
        out = self.model(input_ids=x, cache=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, cache: DynamicCache | None = None
                ) -> tuple[torch.Tensor, DynamicCache]:
        """Feed [B, T] ids in one call; returns (argmax ids [B, T], cache). Refused
        (ChipDirError) where it could not be exact: see :meth:`byte_cells_inexact`."""
        self.check_ids(ids)
        if self.byte_cells_inexact() and ids.shape[-1] > 1:
            raise ChipDirError(f"{self.path}: this chip stores bytes in memory cells, which "
                               f"fp32 chunked prefill does not read exactly at d_k = "
                               f"{self.tgt['d_k']}: run it in bf16, or decode token by token")
        cache = cache if cache is not None else self.new_cache(ids.shape[0])
        out = self.model(input_ids=ids, cache=cache, use_cache=True)
        return out.logits.argmax(-1), cache

    def sublayer_taps(self, dims: Sequence[torch.Tensor]
                      ) -> AbstractContextManager[dict[int, torch.Tensor]]:
        """While active, each model call records the residual stream after every chip
        sublayer (:func:`sublayer_taps`)."""
        return sublayer_taps(self.model.model.layers, dims)

    def recurrent_state(self, cache: DynamicCache, layer: int, row: int) -> torch.Tensor:
        return cache.layers[layer].recurrent_states[0][row]


@contextmanager
def sublayer_taps(layers: Sequence[torch.nn.Module], dims: Sequence[torch.Tensor]
                  ) -> Iterator[dict[int, torch.Tensor]]:
    """While active, each call of the decoder ``layers`` records the residual stream after
    every sublayer: ``taps[s]`` ([B, T, len(dims[s])] float64) holds dims ``dims[s]`` after
    slot s (2L: layer L's GDN sublayer and its residual add, 2L+1: its MLP's). Forward
    hooks only read; the model runs unchanged."""
    taps: dict[int, torch.Tensor] = {}
    handles = []

    def keep(s: int):
        def hook(x: torch.Tensor) -> None:
            taps[s] = x[..., dims[s]].double()
        return hook
    for L in range(len(dims) // 2):
        g, m = keep(2 * L), keep(2 * L + 1)
        handles.append(layers[L].post_attention_layernorm.register_forward_pre_hook(
            lambda mod, args, g=g: g(args[0])))
        handles.append(layers[L].register_forward_hook(
            lambda mod, args, out, m=m: m(out[0] if isinstance(out, tuple) else out)))
    try:
        yield taps
    finally:
        for h in handles:
            h.remove()


def load_checked(path: Path, dtype: torch.dtype, remedy: str) -> torch.nn.Module:
    """The checkpoint at ``path`` in transformers (``AutoModelForCausalLM``, no remote code),
    its fast GDN convs installed (:mod:`backends.engines.hf_kernels`); ChipDirError, ending with
    ``remedy``, when transformers cannot load it or its tensors do not fit its config.json
    (missing, unexpected or mis-shaped weights)."""
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, info = AutoModelForCausalLM.from_pretrained(
                str(path), dtype=dtype, output_loading_info=True, ignore_mismatched_sizes=True)
    except (OSError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise ChipDirError(f"{path}: transformers cannot load the checkpoint ({first}): "
                           f"{remedy}") from None
    problems = [f"{k[0]} is {list(k[1])}, config.json makes it {list(k[2])}"
                for k in sorted(info.get("mismatched_keys") or ())]
    problems += [f"{k} is missing" for k in sorted(info.get("missing_keys") or ())]
    problems += [f"{k} is not in the model" for k in sorted(info.get("unexpected_keys") or ())]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ChipDirError(f"{weights_file(path)} does not fit config.json: "
                           f"{problems[0]}{more}: {remedy}")
    hf_kernels.install(model)   # bit-identical fp32 GDN convs where bf16 ones are slow
    return model.eval()
