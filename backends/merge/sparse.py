"""The chip's layer weights stored as their nonzeros, for the routed merge.

A compiled chip's decoder layers are almost all zeros: the RISC-V core's 2-D layer weights
at qwen3.5-4b shapes take 1.58 GB in bf16 and hold 650,492 nonzeros. Each such weight
(``model.layers.L.….weight``, 2-D, of a bias-free ``nn.Linear`` in transformers' Qwen3.5
modules) is stored as the flat positions of its nonzeros (int32) and their values (float32
bits, so loading in any dtype never rounds them), when that is smaller; the shipped
modeling file's :class:`~backends.merge.shipped.modeling_deltachip.SparseLinear` scatters them back
(:func:`~backends.merge.shipped.modeling_deltachip.sparse_weight`), exactly.

Takes: the chip's weight-file headers, the names to leave out (the token tables, stored
their own way) and a dtype name. Gives: :class:`SparseLayers` (the tensors that replace the
dense ones, the config entry, the bytes before and after), after checking, weight by weight,
that the modeling file's own expansion gives every bit of the chip's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from backends.chipdir.weights import nonzero_flat
from backends.merge.shipped.modeling_deltachip import sparse_weight
from backends.chipdir.stfile import Header, OutTensor, Rows

#: the weights that may be stored sparse: every 2-D weight of a decoder layer
NAME = re.compile(r"model\.layers\.\d+\..*\.weight")
#: stored words and their torch views
_WORDS = {"BF16": (np.uint16, torch.bfloat16, torch.int16),
          "F32": (np.uint32, torch.float32, torch.int32)}
_SIGNED = {"BF16": np.int16, "F32": np.int32}
#: the largest weight stored sparse (flat positions are int32)
MAX_ELEMENTS = (1 << 31) - 1


@dataclass
class SparseLayers:
    """``tensors`` (``chip.<module>.nz_index`` / ``.nz_value``), ``config`` (config.json's
    ``chip_sparse``: weight name -> [out, in, nonzeros]), the names they replace, and the
    bytes of the sparse and the dense forms."""
    tensors: list[OutTensor] = field(default_factory=list)
    config: dict[str, list[int]] = field(default_factory=dict)
    nbytes: int = 0
    dense_nbytes: int = 0

    @property
    def names(self) -> set[str]:
        return set(self.config)


def sparse_layers(files: list[Header], skip: set[str]) -> SparseLayers:
    """The chip's 2-D layer weights (not in ``skip``) that take fewer bytes as nonzeros and
    that the modeling file's scatter gives back bit for bit (any other stays dense)."""
    out = SparseLayers()
    for h in files:
        for t in sorted(h.tensors.values(), key=lambda t: t.begin):
            if t.name in skip or not NAME.fullmatch(t.name) or len(t.shape) != 2 \
                    or t.dtype not in _WORDS or t.shape[0] * t.shape[1] > MAX_ELEMENTS:
                continue
            np_word, tdt, tint = _WORDS[t.dtype]
            words = Rows(h.path, t, np_word)[:]
            where = nonzero_flat(words, t.dtype)
            if 8 * len(where) >= t.nbytes:
                continue
            vals = words.reshape(-1)[where]
            bits = (vals.astype(np.uint32) << 16) if t.dtype == "BF16" else vals
            index = where.astype(np.int32)
            value = np.ascontiguousarray(bits).view(np.int32)
            got = sparse_weight(torch.from_numpy(index), torch.from_numpy(value), t.shape, tdt)
            if not torch.equal(got.view(tint), torch.from_numpy(words.view(_SIGNED[t.dtype]))):
                continue                    # (never seen: the scatter is exact) kept dense
            module = "chip." + t.name[:-len(".weight")]
            out.tensors += [OutTensor(f"{module}.nz_index", "I32", index.shape, index.nbytes,
                                      data=index.tobytes()),
                            OutTensor(f"{module}.nz_value", "I32", value.shape, value.nbytes,
                                      data=value.tobytes())]
            out.config[t.name] = [t.shape[0], t.shape[1], len(where)]
            out.nbytes += index.nbytes + value.nbytes
            out.dense_nbytes += t.nbytes
    return out

