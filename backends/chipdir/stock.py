"""The chip inside a stock merged checkpoint: where it sits, and its tensors.

Takes: a directory written by ``deltachip merge --layout stock`` (:mod:`backends.merge.stock`
describes its residual and layers). Gives:

- :func:`stock_dims`: where the chip sits in it (:class:`StockDims`), read from the manifest
  and checked against the widened model's config.json and the chip's chip.json (the copy
  the merge keeps in ``DIR/deltachip``): a checkpoint that disagrees is a ChipDirError,
  never a silently different run;
- :class:`StockChip`: the chip's tensors cut out of the merged files (its layers' rows and
  columns at the chip's dims, its ids' embedding and lm_head rows, its final norm's dims),
  under the chip's own names: what the fast engine reads (``deltachip run --engine fast
  --model DIR``), so it runs the very bytes plain transformers runs.

It also holds what the writer (:mod:`backends.merge.stock`) and this reader share: which
tensors have hidden dims as columns or rows, and the config fields the widened model keeps
equal to the chip's. The hf engine on a stock merge (plain transformers on the whole widened
model) is :class:`backends.engines.merged.StockEngine`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from backends.chipdir.checkpoint import ChipDirError

#: what to do about a stock checkpoint this module refuses
REMERGE = "merge it again (`deltachip merge BASE_DIR OUT_DIR --layout stock ...`)"
#: the chip fields that must equal the base's: the merged model has one set of module shapes
SAME_FIELDS = ("intermediate_size", "linear_num_key_heads", "linear_key_head_dim",
               "linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim",
               "hidden_act", "rms_norm_eps")
#: tensors whose columns are the hidden dims (they read the residual) / whose rows are
COLS = ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_a.weight", "in_proj_b.weight",
        "q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
        "up_proj.weight")
ROWS = ("out_proj.weight", "o_proj.weight", "down_proj.weight")
NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")
#: a decoder layer's tensor: its layer and the rest of its name
LAYER = re.compile(r"^model\.layers\.(\d+)\.(.*)$")
EMBED, HEAD, NORM = "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"
#: the largest config.json read
_MAX_CONFIG = 1 << 20


@dataclass(frozen=True)
class StockDims:
    """Where the chip sits in a stock merge: dims ``[start, start + hc)`` of a residual of
    ``hidden``; decoder layers ``[0, layers)``; ids ``[offset, offset + vocab)``."""
    start: int
    hc: int
    hidden: int
    layers: int
    offset: int
    vocab: int

    @property
    def dims(self) -> slice:
        return slice(self.start, self.start + self.hc)


def stock_dims(d: Path, manifest: dict[str, Any], chip: dict[str, Any]) -> StockDims:
    """The chip's place in the stock merge at ``d`` (see the module docstring)."""
    from common.inputs import BadJSON, InputTooLarge, loads_json, read_bounded
    f = d / "config.json"
    try:
        cfg = loads_json(read_bounded(f, _MAX_CONFIG, "a Qwen3.5 config.json"))
        st, tokens = manifest["stock"], manifest["tokens"]
        (c0, h1), (l0, lc) = st["chip_dims"], st["chip_layers"]
        hidden, offset, vocab = st["hidden"], tokens["offset"], tokens["count"]
    except (OSError, InputTooLarge, BadJSON, UnicodeDecodeError, json.JSONDecodeError):
        raise ChipDirError(f"{f}: unreadable or not JSON: {REMERGE}") from None
    except (KeyError, TypeError, ValueError):
        raise ChipDirError(f"{d / 'deltachip.json'}: its stock section or token range is "
                           f"missing or malformed: {REMERGE}") from None
    if not all(type(x) is int and x >= 0 for x in (c0, h1, l0, lc, hidden, offset, vocab)):
        raise ChipDirError(f"{d / 'deltachip.json'}: its stock dims are not counts: {REMERGE}")
    ccfg = chip["config"]
    kinds = cfg.get("layer_types") if isinstance(cfg, dict) else None
    want = {"hidden_size": hidden, "vocab_size": offset + vocab}
    want.update({k: ccfg.get(k) for k in SAME_FIELDS})
    problems = [f"config.json's {k} is {cfg.get(k)!r}, not {v!r}" for k, v in want.items()
                if not isinstance(cfg, dict) or cfg.get(k) != v]
    if h1 - c0 != ccfg["hidden_size"] or h1 >= hidden:
        problems.append(f"the chip's dims [{c0}, {h1}) do not hold its residual of "
                        f"{ccfg['hidden_size']} in a residual of {hidden}")
    if l0 != 0 or lc != ccfg["num_hidden_layers"] - 1:
        problems.append(f"the chip's layers [{l0}, {lc}) are not its first "
                        f"{ccfg['num_hidden_layers'] - 1} GDN layers")
    elif not isinstance(kinds, list) or kinds[:lc] != ccfg["layer_types"][:lc]:
        problems.append("config.json's layer_types do not start with the chip's layers")
    if vocab != ccfg["vocab_size"]:
        problems.append(f"the token range holds {vocab} ids, the chip {ccfg['vocab_size']}")
    if problems:
        raise ChipDirError(f"{d}: the stock merge does not match deltachip/chip.json "
                           f"({problems[0]}): {REMERGE}")
    return StockDims(c0, h1 - c0, hidden, lc, offset, vocab)


class StockChip:
    """The chip's tensors in a stock merge, under the chip's own names (see the module
    docstring): the interface of :class:`backends.chipdir.weights.Tensors` (``names``,
    ``shape``, ``raw``, ``get``) over ``t``, the merged checkpoint's files."""

    def __init__(self, t: Any, dims: StockDims):
        self.t, self.d, self.path = t, dims, t.path

    def _where(self, name: str) -> tuple[slice, ...] | None:
        """How ``name``'s tensor is cut from the merged tensor of that name (None: not one
        of the chip's)."""
        d = self.d
        m = LAYER.match(name)
        if m:
            if int(m.group(1)) >= d.layers:
                return None
            if name.endswith(COLS):
                return (slice(None), d.dims)
            if name.endswith(ROWS):
                return (d.dims, slice(None))
            return (d.dims,) if name.endswith(NORMS) else ()
        if name in (EMBED, HEAD):
            return (slice(d.offset, d.offset + d.vocab), d.dims)
        return (d.dims,) if name == NORM else None

    def __contains__(self, name: str) -> bool:
        return self._where(name) is not None and name in self.t

    def names(self) -> Iterator[str]:
        return iter([n for n in self.t.names() if self._where(n) is not None])

    def _cut(self, name: str) -> tuple[slice, ...]:
        cut = self._where(name)
        if cut is None:
            raise ChipDirError(f"{self.path}: {name} is not one of the chip's tensors")
        full = self.t.shape(name)
        fits = len(full) >= len(cut) and all(
            f == self.d.hidden if s == self.d.dims else s.stop is None or f == s.stop
            for s, f in zip(cut, full))
        if not fits:
            raise ChipDirError(f"{self.path}: {name} has shape {list(full)}, which does not "
                               f"hold the chip's part of it: {REMERGE}")
        return cut

    def shape(self, name: str) -> tuple[int, ...]:
        cut, full = self._cut(name), self.t.shape(name)
        return tuple(len(range(*s.indices(n))) for s, n in zip(cut, full)) + full[len(cut):]

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        words, kind = self.t.raw(name)
        return words[self._cut(name)], kind

    def get(self, name: str) -> np.ndarray:
        from backends.chipdir.weights import widen
        words, kind = self.raw(name)
        if kind not in ("BF16", "F32"):
            raise ChipDirError(f"{self.path}: {name} is {kind}, not a float tensor")
        return widen(np.asarray(words)) if kind == "BF16" else np.array(words, np.float32)
