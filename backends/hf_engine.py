"""Engine "hf": run a compiled chip in transformers' own ``Qwen3_5ForCausalLM``.

Takes: a compiled directory (config.json, chip.json, and model.safetensors or its shards
with model.safetensors.index.json; a missing, corrupt, outdated or mismatched one is a
:class:`backends.checkpoint.ChipDirError`). Gives:
:class:`HFEngine` with token <-> id conversion, :meth:`HFEngine.new_cache` (every GDN layer's
recurrent state preloaded: ROM images written straight into it, RAMs zero), one-token
:meth:`HFEngine.decode_step`, whole-sequence :meth:`HFEngine.prefill`, and
:meth:`HFEngine.read_memories`, which decodes every memory's words back out of the recurrent
state (exactly: each data cell must be 0 or Vs, else the word is reported as None), and
:meth:`HFEngine.sublayer_taps`, which records chosen residual dims after every sublayer.

The model is loaded with ``AutoModelForCausalLM.from_pretrained`` and run unmodified.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.utils import logging as hf_logging

from hdl.ir import Circuit, Token
from backends.checkpoint import (RECOMPILE, ChipDirError, check_config, check_weights_file,
                                 load_chip_json, weights_file)
from backends.chipfile import circuit_from_json
from backends.numbers import DTYPES
from backends.program import MemPlan, head_cell


#: bits per int64 limb when words are read back from the recurrent state (a word of any
#: width is its limbs; 48 leaves room for a shifted 8-bit cell)
LIMB_BITS = 48


class HFEngine:
    """A compiled chip loaded into transformers (see the module docstring)."""

    def __init__(self, path: str | Path, dtype: str | None = None,
                 roms: dict[str, list[int]] | None = None):
        self.path = Path(path)
        self.chip = load_chip_json(path)
        self.dtype_name = dtype or self.chip["dtype"]
        if self.dtype_name not in DTYPES:
            raise ChipDirError(f"unknown dtype '{self.dtype_name}' (expected bf16 or fp32)")
        self.dtype = DTYPES[self.dtype_name]
        try:
            self.roms = {k: list(v) for k, v in self.chip["roms"].items()}
            self.roms.update(roms or {})
            self.circuit: Circuit = circuit_from_json(self.chip["circuit"], self.roms)
            self.circuit.check()
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise ChipDirError(f"{self.path / 'chip.json'}: corrupt (cannot rebuild the circuit: "
                               f"{e.__class__.__name__}: {e}): {RECOMPILE}") from None
        check_config(path, self.chip)
        check_weights_file(path)
        self.model = self._load_model()
        self.model.eval()
        self.config = self.model.config
        self.num = self.chip["numerics"]
        self.tgt = self.chip["target"]

    def _load_model(self) -> torch.nn.Module:
        """The checkpoint in transformers; ChipDirError when its tensors do not fit the config
        (missing, unexpected or mis-shaped weights)."""
        hf_logging.set_verbosity_error()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, info = AutoModelForCausalLM.from_pretrained(
                    str(self.path), dtype=self.dtype, output_loading_info=True,
                    ignore_mismatched_sizes=True)
        except (OSError, ValueError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
            raise ChipDirError(f"{self.path}: transformers cannot load the checkpoint ({first}): "
                               f"{RECOMPILE}") from None
        problems = [f"{k[0]} is {list(k[1])}, config.json makes it {list(k[2])}"
                    for k in sorted(info.get("mismatched_keys") or ())]
        problems += [f"{k} is missing" for k in sorted(info.get("missing_keys") or ())]
        problems += [f"{k} is not in the model" for k in sorted(info.get("unexpected_keys") or ())]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ChipDirError(f"{weights_file(self.path)} does not fit config.json: "
                               f"{problems[0]}{more}: {RECOMPILE}")
        return model

    # ---- tokens (the circuit's own numbering, which the embedding and lm_head follow) -------
    def token_id(self, tok: Token) -> int:
        """The vocabulary id of ``tok`` (:meth:`hdl.ir.Circuit.token_id`)."""
        return self.circuit.token_id(tok)

    def token_of(self, tid: int) -> Token:
        """The token of id ``tid`` (:meth:`hdl.ir.Circuit.token_from_id`; ValueError outside
        the vocabulary)."""
        return self.circuit.token_from_id(tid)

    # ---- state ---------------------------------------------------------------------------
    def _rom_states(self, roms: dict[str, list[int]]) -> dict[int, dict[int, torch.Tensor]]:
        """layer -> {value head: [d_k, d_v] fp32 rows} for every memory with an image in
        ``roms``, and every paired RAM (its rows hold the ballast from the start)."""
        from backends.emit import rom_state
        prog = _ProgView(self.chip)
        out: dict[int, dict[int, torch.Tensor]] = {}
        for name, m in self.chip["memories"].items():
            words = roms.get(name, [])
            if any(words) or m.get("pair"):
                for (layer, vh), st in rom_state(prog, _NumView(self.num), name, words).items():
                    out.setdefault(layer, {})[vh] = st
        return out

    def new_cache(self, batch: int = 1,
                  roms: Sequence[dict[str, list[int]]] | None = None) -> DynamicCache:
        """A cache whose every layer is 'started' (recurrent kernel from the first token)
        with memory images preloaded: the engine's images in every batch row, or row b's
        own ``roms[b]`` (over the engine's) when ``roms`` is given, one dict per row."""
        if roms is not None and len(roms) != batch:
            raise ValueError(f"{len(roms)} memory images for batch {batch}")
        cfg = self.config
        cache = DynamicCache(config=cfg)
        nv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
        conv_dim = 2 * cfg.linear_num_key_heads * dk + nv * dv
        rows = ([self._rom_states(self.roms)] * batch if roms is None else
                [self._rom_states({**self.roms, **r}) for r in roms])
        for li, kind in enumerate(cfg.layer_types):
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
        x = torch.tensor(list(ids), dtype=torch.long)[:, None]
        out = self.model(input_ids=x, cache=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, cache: DynamicCache | None = None
                ) -> tuple[torch.Tensor, DynamicCache]:
        """Feed [B, T] ids in one call; returns (argmax ids [B, T], cache). Refused
        (ChipDirError) where it could not be exact: see :meth:`byte_cells_inexact`."""
        if self.byte_cells_inexact() and ids.shape[-1] > 1:
            raise ChipDirError(f"{self.path}: this chip stores bytes in memory cells, which "
                               f"fp32 chunked prefill does not read exactly at d_k = "
                               f"{self.tgt['d_k']}: run it in bf16, or decode token by token")
        cache = cache if cache is not None else self.new_cache(ids.shape[0])
        out = self.model(input_ids=ids, cache=cache, use_cache=True)
        return out.logits.argmax(-1), cache

    @contextmanager
    def sublayer_taps(self, dims: Sequence[torch.Tensor]) -> Iterator[dict[int, torch.Tensor]]:
        """While active, each model call records the residual stream after every chip
        sublayer: ``taps[s]`` ([B, T, len(dims[s])] float64) holds dims ``dims[s]`` after
        slot s (2L: layer L's GDN sublayer and its residual add, 2L+1: its MLP's). Forward
        hooks only read; the model runs unchanged."""
        taps: dict[int, torch.Tensor] = {}
        handles = []

        def keep(s: int):
            def hook(x: torch.Tensor) -> None:
                taps[s] = x[..., dims[s]].double()
            return hook
        layers = self.model.model.layers
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

    def read_memories(self, cache: DynamicCache, row: int = 0) -> dict[str, list[int | None]]:
        """Every memory's words from the recurrent state of batch row ``row`` (read port 0's
        copy); a word whose cells are not exactly Vs times an integer of the cell's bits
        (0 or 1 for bit cells, 0..255 for byte cells) is None."""
        prog = _ProgView(self.chip)
        t = prog.target
        nbv, vs = self.num["n_bv"], 2.0 ** self.num["vs"]
        res: dict[str, list[int | None]] = {}
        for name, p in prog.mems.items():
            P = p.per_row
            nrows = -(-p.depth // P)
            limbs = torch.zeros(-(-p.width // LIMB_BITS), nrows, P, dtype=torch.int64)
            bad = torch.zeros(nrows, P, dtype=torch.bool)
            for rb in range(p.rowblocks):
                lo, hi = rb * p.rows, min(nrows, (rb + 1) * p.rows)
                for sl in range(p.slices):
                    layer, kh = p.bank(0, rb, sl)
                    state = cache.layers[layer].recurrent_states[0][row]
                    for v in range(t.v_per_k):
                        cells = state[kh * t.v_per_k + v, :, nbv:].double() / vs
                        for j in range(t.d_v - nbv):
                            col = head_cell(p, t, sl, v, j)
                            if col is None:
                                break
                            wi, r0, _, b0, nb = col
                            c = cells[r0:r0 + hi - lo, j]
                            ci = c.round()
                            bad[lo:hi, wi] |= (c != ci) | (ci < 0) | (ci >= (1 << nb))
                            cv = ci.clamp(0, (1 << nb) - 1).long()
                            k, sh = divmod(b0, LIMB_BITS)
                            limbs[k, lo:hi, wi] |= (cv << sh) & ((1 << LIMB_BITS) - 1)
                            if sh + nb > LIMB_BITS:         # the cell crosses into the next limb
                                limbs[k + 1, lo:hi, wi] |= cv >> (LIMB_BITS - sh)
            flat = [lb.view(-1)[:p.depth].tolist() for lb in limbs]
            words = flat[0] if len(flat) == 1 else \
                [sum(x << (LIMB_BITS * k) for k, x in enumerate(ws)) for ws in zip(*flat)]
            badw = bad.view(-1)[:p.depth].tolist()
            res[name] = [None if b else int(w) for w, b in zip(words, badw)]
        return res

    def byte_cells_inexact(self) -> bool:
        """True when this engine's fp32 chunked prefill cannot be exact: byte-cell memories
        with two-hot queries (d_k not a power of 4) in fp32 (docs/backend.md, "Memories")."""
        from backends.schedule import byte_cells_exact
        from backends.target import Target
        return (not byte_cells_exact(Target(**self.tgt), self.dtype_name) and
                any(m.get("cell_bits", 1) > 1 for m in self.chip["memories"].values()))


class _ProgView:
    """The parts of a Program that :func:`backends.emit.rom_state` reads, from chip.json."""

    def __init__(self, chip: dict[str, Any]):
        from backends.target import Target
        t = dict(chip["target"])
        self.target = Target(**t)
        self.mems = {n: _MemView(m) for n, m in chip["memories"].items()}


class _MemView:
    def __init__(self, m: dict[str, Any]):
        self.width, self.depth, self.rows = m["width"], m["depth"], m["rows_per_bank"]
        self.rowblocks, self.slices, self.pack = m["rowblocks"], m["slices"], m["pack"]
        self.cell = m.get("cell_bits", 1)
        self.pair = m.get("pair", False)
        self.vsel = m.get("vsel", 0)
        self.banks = [tuple(b) for b in m["banks"]]
        self.ports = max(1, m["read_ports"])

    def bank(self, port: int, rowblock: int, sl: int) -> tuple[int, int]:
        return self.banks[(port * self.rowblocks + rowblock) * self.slices + sl]

    per_row = MemPlan.per_row


class _NumView:
    def __init__(self, d: dict[str, Any]):
        self.__dict__.update(d)
