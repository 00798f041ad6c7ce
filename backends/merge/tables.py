"""The chip's token tables in structured form, for the routed merge.

A chip's embedding and lm_head have one row per chip id, and a large circuit has many ids
(the RISC-V core: 659,472, so two tables of 2 GB each at hidden 1,536 in bf16, most of a
merged checkpoint). Both have a structure the compiler gives them:

- every embedding row is the ballast (the same on every row) plus, on a few hundred
  columns, values from a palette of two (0 and 1): stored as that constant row, the column
  list, the palette and one bit per id and column (:class:`PackedEmbedding`);
- the lm_head rows of a token kind are its base row plus the delta of every set bit of the
  payload (the structure the fast engine decodes the argmax from): stored as ``1 + bits``
  rows per kind (:class:`KindHead`), expanded in float64 and cast once, at the first call.

Takes: the chip's weight-file headers and its chip.json. Gives: :class:`Tables` (the
tensors that replace ``model.embed_tokens.weight`` and ``lm_head.weight``, and their sizes)
after checking, row by row, that the modeling file's own expansion
(:func:`~backends.merge.shipped.modeling_deltachip.embedding_rows`,
:func:`~backends.merge.shipped.modeling_deltachip.head_rows`) gives every bit of the chip's tables;
or the reason it does not, for the merge to store the tables as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from backends.chipdir.chipschema import kind_ids
from backends.chipdir.merged import PLAIN_TABLES, TABLE_TENSORS
from backends.merge.shipped.modeling_deltachip import HEAD_CHUNK, embedding_rows, head_rows
from backends.chipdir.stfile import Header, OutTensor, Rows

EMBED, HEAD = PLAIN_TABLES
#: the stored word of each float dtype, and its torch dtype
WORDS = {"BF16": (np.uint16, torch.bfloat16, torch.int16),
         "F16": (np.uint16, torch.float16, torch.int16),
         "F32": (np.uint32, torch.float32, torch.int32)}
#: rows read at a time
CHUNK = 1 << 15
#: most palette values of a packed embedding (a code is a byte)
MAX_PALETTE = 256


@dataclass
class Tables:
    """The structured tables: ``tensors`` (named as the modeling file's buffers, under
    ``chip.``), ``shape`` (config.json's ``chip_tables_shape``), the bytes they take and
    the bytes the plain tables take."""
    tensors: list[OutTensor]
    shape: dict[str, int]
    nbytes: int
    plain_nbytes: int


def _words(h: Header, name: str) -> tuple[Rows, str]:
    t = h.tensors[name]
    return Rows(h.path, t, WORDS[t.dtype][0]), t.dtype


def _float32(words: np.ndarray, dtype: str) -> np.ndarray:
    """The stored words as float32 values (exact: every bf16, f16 and f32 value is one)."""
    if dtype == "BF16":
        return (words.astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return words.view(np.float16).astype(np.float32)
    return words.view(np.float32)


def _bits_tensor(name: str, a: np.ndarray) -> OutTensor:
    """float32 values stored as int32 bits (what the modeling file's buffers hold)."""
    a = np.ascontiguousarray(a, dtype=np.float32).view(np.int32)
    return OutTensor(name, "I32", a.shape, a.nbytes, data=a.tobytes())


def _int_tensor(name: str, a: np.ndarray, dtype: str) -> OutTensor:
    a = np.ascontiguousarray(a)
    return OutTensor(name, dtype, a.shape, a.nbytes, data=a.tobytes())


def structure(files: list[Header], chip: dict[str, Any]) -> Tables | str:
    """The chip's tables in structured form, checked bit for bit; or why they cannot be."""
    where = {n: h for h in files for n in h.tensors}
    if EMBED not in where or HEAD not in where:
        return "the chip has no embedding or lm_head tensor"
    emb, edt = _words(where[EMBED], EMBED)
    head, hdt = _words(where[HEAD], HEAD)
    if edt != hdt:
        return "the embedding and lm_head have different dtypes"
    packed = _embedding(emb, edt)
    if isinstance(packed, str):
        return packed
    kinds = _head(head, hdt, chip)
    if isinstance(kinds, str):
        return kinds
    tensors = packed + kinds
    shape = {"embed_cols": packed[1].shape[0], "embed_palette": packed[2].shape[0],
             "head_kinds": kinds[0].shape[0], "head_rows": kinds[1].shape[0]}
    return Tables(tensors, shape, sum(t.nbytes for t in tensors),
                  emb.nbytes + head.nbytes)


def _embedding(E: Rows, dtype: str) -> list[OutTensor] | str:
    V, H = E.shape
    row0 = np.array(E[0])
    same = np.ones(H, dtype=bool)
    for r in range(0, V, CHUNK):
        same &= (E[r:r + CHUNK] == row0).all(0)
    cols = np.flatnonzero(~same)
    seen: set[int] = set()
    for r in range(0, V, CHUNK):
        seen.update(np.unique(E[r:r + CHUNK][:, cols]).tolist())
        if len(seen) > MAX_PALETTE:
            return f"the embedding has more than {MAX_PALETTE} values on its varying columns"
    palette = np.array(sorted(seen), dtype=E.dtype)
    one_bit = len(palette) <= 2
    codes = []
    for r in range(0, V, CHUNK):
        idx = np.searchsorted(palette, E[r:r + CHUNK][:, cols]).astype(np.uint8)
        codes.append(np.packbits(idx, axis=1, bitorder="little") if one_bit else idx)
    code = np.concatenate(codes) if codes else np.zeros((0, 0), np.uint8)
    out = [_bits_tensor(_name("model.embed_tokens.const"), _float32(row0, dtype)),
           _int_tensor(_name("model.embed_tokens.cols"), cols.astype(np.int64), "I64"),
           _bits_tensor(_name("model.embed_tokens.palette"), _float32(palette, dtype)),
           _int_tensor(_name("model.embed_tokens.codes"), code, "U8")]
    # the modeling file's own expansion must give every row, bit for bit
    tconst, tcols, tpal, tcode = (torch.from_numpy(np.frombuffer(t.data, dtype=_NP[t.dtype])
                                                   .reshape(t.shape).copy()) for t in out)
    _, tdt, tint = WORDS[dtype]
    for r in range(0, V, CHUNK):
        ids = torch.arange(r, min(V, r + CHUNK))
        got = embedding_rows(ids, tconst, tcols, tpal, tcode, tdt).view(tint)
        want = torch.from_numpy(np.array(E[r:r + CHUNK]).view(_SIGNED[dtype]))
        if not torch.equal(got, want):
            return f"embedding row {r + _first_bad(got, want)} is not rebuilt exactly"
    return out


_NP = {"I32": np.int32, "I64": np.int64, "U8": np.uint8}


def _name(tensor: str) -> str:
    """The stored name of structured table ``tensor`` (one of :data:`TABLE_TENSORS`)."""
    assert tensor in TABLE_TENSORS, tensor
    return "chip." + tensor
_SIGNED = {"BF16": np.int16, "F16": np.int16, "F32": np.int32}


def _first_bad(got: torch.Tensor, want: torch.Tensor) -> int:
    return int((got != want).any(1).nonzero()[0, 0])


def _head(W: Rows, dtype: str, chip: dict[str, Any]) -> list[OutTensor] | str:
    V, H = W.shape
    kinds = sorted((k["offset"], k["payload_bits"], kind_ids(k))
                   for k in chip["tokens"]["kinds"])
    at = 0
    for off, nb, n in kinds:
        if off != at:
            return f"the token kinds leave ids {at}..{off - 1} uncovered"
        at = off + n
    if at != V:
        return f"the token kinds cover {at} ids, the lm_head has {V} rows"
    rows, table = [], []
    for off, nb, _ in kinds:
        base = _float32(np.array(W[off]), dtype).astype(np.float64)
        table.append((off, nb, len(rows)))
        rows.append(base)
        for j in range(nb):
            d = _float32(np.array(W[off + (1 << j)]), dtype).astype(np.float64) - base
            if np.any(d.astype(np.float32).astype(np.float64) != d):
                return f"lm_head row {off + (1 << j)}: its bit's delta is not exact in float32"
            rows.append(d)
    basis = np.stack(rows).astype(np.float32)
    tk = np.array(table, dtype=np.int64)
    out = [_int_tensor(_name("lm_head.kinds"), tk, "I64"),
           _bits_tensor(_name("lm_head.basis"), basis)]
    tkinds, tbasis = torch.from_numpy(tk), torch.from_numpy(basis.view(np.int32).copy())
    _, tdt, tint = WORDS[dtype]
    for off, nb, n in kinds:
        for lo in range(off, off + n, HEAD_CHUNK):
            hi = min(off + n, lo + HEAD_CHUNK)
            got = head_rows(tkinds, tbasis, tdt, lo, hi).view(tint)
            want = torch.from_numpy(np.array(W[lo:hi]).view(_SIGNED[dtype]))
            if not torch.equal(got, want):
                return (f"lm_head row {lo + _first_bad(got, want)} is not its kind's base row "
                        "plus the deltas of its payload bits")
    return out
