"""Read a checkpoint's tensors straight from its safetensors files, without transformers.

Takes: a checkpoint directory (``model.safetensors``, or shards named by
``model.safetensors.index.json``). Gives: :class:`Tensors`, which maps tensor names to
read-only ``numpy`` arrays (bf16 widened exactly to float32; F32 as it is) memory-mapped from
the files, and :func:`sparse_rows` / :func:`sparse_cols`, the nonzeros of a 2-D weight as
CSR or CSC arrays. Every offset and size is checked against the file before it is mapped:
a truncated or corrupt file is a :class:`backends.chipdir.checkpoint.ChipDirError`, never a crash.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from backends.chipdir.checkpoint import INDEX, JSON_LIMITS, SINGLE, ChipDirError
from common.inputs import InputTooLarge, read_bounded

#: safetensors dtypes this reader maps, with the numpy word each is read as (a float's
#: bits for BF16; the structured token tables of a merged checkpoint hold integers)
_WORDS = {"BF16": np.uint16, "F32": np.float32, "I32": np.int32, "I64": np.int64,
          "U8": np.uint8, "I8": np.int8}


@dataclass(frozen=True)
class _Entry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int          # absolute byte offset in the file
    nbytes: int


class Tensors:
    """The tensors of one checkpoint directory, by name (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._entries: dict[str, _Entry] = {}
        #: the ``__metadata__`` of the files (strings to strings), merged
        self.metadata: dict[str, str] = {}
        index = self.path / INDEX
        if (self.path / SINGLE).is_file():
            files = [self.path / SINGLE]
        elif index.is_file():
            try:
                wm = json.loads(read_bounded(index, *JSON_LIMITS[INDEX]))["weight_map"]
                files = sorted({self.path / str(f) for f in wm.values()})
            except InputTooLarge as e:
                raise ChipDirError(str(e)) from None
            except (OSError, ValueError, KeyError, TypeError, AttributeError,
                    RecursionError) as e:
                raise ChipDirError(f"{index}: unreadable weight map ({e})") from None
        else:
            raise ChipDirError(f"{self.path}: no {SINGLE} and no {INDEX}")
        for f in files:
            self._read_header(f)

    def _read_header(self, f: Path) -> None:
        """The tensors of safetensors file ``f``, checked by safetensors' own rules
        (:func:`backends.chipdir.stfile.read_header`) before any is mapped."""
        from backends.chipdir.stfile import read_header
        if not f.is_file() and f.exists():
            from common.outputs import special_kind
            raise ChipDirError(f"{f}: is {special_kind(f, follow_symlinks=True)}, not a "
                               "regular file")
        h = read_header(f, ChipDirError)
        self.metadata.update(h.metadata)
        for name, t in h.tensors.items():
            if t.dtype not in _WORDS:
                raise ChipDirError(f"{f}: {name} is {t.dtype}; the fast engine reads "
                                   f"{', '.join(_WORDS)}")
            self._entries[name] = _Entry(f, t.dtype, t.shape, t.begin, t.nbytes)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> Iterator[str]:
        return iter(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name).shape

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise ChipDirError(f"{self.path}: the checkpoint has no tensor {name}") from None

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        """The tensor's stored words (uint16 for BF16, float32 for F32, the integer itself
        for I32, I64, U8 and I8), memory-mapped, in its shape; with its safetensors dtype."""
        e = self._entry(name)
        kind = _WORDS[e.dtype]
        if e.nbytes == 0:
            return np.zeros(e.shape, dtype=kind), e.dtype
        m = np.memmap(e.file, dtype=kind, mode="r", offset=e.start, shape=e.shape)
        return m, e.dtype

    def get(self, name: str) -> np.ndarray:
        """The tensor as float32 (bf16 widened exactly); a float tensor only."""
        words, dtype = self.raw(name)
        if dtype not in ("BF16", "F32"):
            raise ChipDirError(f"{self.path}: {name} is {dtype}, not a float tensor")
        return widen(np.asarray(words)) if dtype == "BF16" else np.array(words, dtype=np.float32)


class Prefixed:
    """The tensors of ``t`` whose names start with ``prefix``, by their names without it:
    the chip inside a merged checkpoint (``chip.``) read as a checkpoint of its own.
    ``sparse`` (config.json's ``chip_sparse``: name -> [out, in, nonzeros]) names the
    weights stored as their nonzeros (``MODULE.nz_index``, ``MODULE.nz_value``:
    backends/merge/sparse.py), read back dense in ``dtype`` ("BF16" or "F32")."""

    def __init__(self, t: Tensors, prefix: str, sparse: dict[str, list[int]] | None = None,
                 dtype: str = "BF16"):
        self.t, self.prefix, self.path = t, prefix, t.path
        self.sparse, self.dtype = dict(sparse or {}), dtype

    def __contains__(self, name: str) -> bool:
        return name in self.sparse or self.prefix + name in self.t

    def names(self) -> Iterator[str]:
        n = len(self.prefix)
        stored = (k[n:] for k in self.t.names() if k.startswith(self.prefix))
        return iter([k for k in stored if not k.endswith((".nz_index", ".nz_value"))]
                    + list(self.sparse))

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.sparse:
            return tuple(self.sparse[name][:2])
        return self.t.shape(self.prefix + name)

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        if name in self.sparse:
            return self._dense(name), self.dtype
        return self.t.raw(self.prefix + name)

    def _dense(self, name: str) -> np.ndarray:
        """The stored words of a weight kept as its nonzeros: ascending flat positions in
        range, one value each, every value a number of the dtype (else ChipDirError)."""
        mod = self.prefix + name[:-len(".weight")]
        rows, cols, nnz = self.sparse[name]
        (index, ki), (value, kv) = self.t.raw(mod + ".nz_index"), self.t.raw(mod + ".nz_value")
        index, bits = np.asarray(index), np.asarray(value).view(np.uint32)
        ok = (ki == kv == "I32" and index.shape == bits.shape == (nnz,)
              and (nnz == 0 or (index[0] >= 0 and index[-1] < rows * cols
                                and np.all(np.diff(index) > 0))))
        if ok and self.dtype == "BF16":
            ok = not np.any(bits & 0xFFFF)
        if not ok:
            raise ChipDirError(f"{self.path}: {mod}.nz_index/.nz_value do not hold the "
                               f"nonzeros of a {rows}x{cols} {self.dtype} weight: merge it again")
        words = np.zeros(rows * cols, dtype=_WORDS[self.dtype])
        words[index] = (bits >> 16).astype(np.uint16) if self.dtype == "BF16" else bits.view(np.float32)
        return words.reshape(rows, cols)

    def get(self, name: str) -> np.ndarray:
        return self.t.get(self.prefix + name)


def widen(words: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> the same numbers as float32."""
    return (words.astype(np.uint32) << 16).view(np.float32)


def _nonzero_mask(words: np.ndarray, dtype: str) -> np.ndarray:
    """True where a stored word is a nonzero number (+0 and -0 are both zero)."""
    if dtype == "BF16":
        return (words & 0x7FFF) != 0
    return words != 0


_SIGNLESS = {"BF16": (np.uint16, 0x7FFF_7FFF_7FFF_7FFF), "F32": (np.uint32, 0x7FFF_FFFF_7FFF_FFFF)}


def nonzero_flat(words: np.ndarray, dtype: str) -> np.ndarray:
    """The flat indices (ascending) of the nonzero numbers in a C-contiguous block. Tested 8
    bytes at a time first (the sign bits masked off), so the scan of a mostly-zero table
    costs a fraction of a word-by-word test."""
    kind, mask = _SIGNLESS[dtype]
    flat = np.ascontiguousarray(words).view(kind).reshape(-1)
    per = 8 // flat.itemsize
    if len(flat) % per:
        return np.flatnonzero(_nonzero_mask(flat if dtype == "BF16" else flat.view(np.float32),
                                            dtype))
    hit = np.flatnonzero(flat.view(np.uint64) & np.uint64(mask))
    sub = flat.reshape(-1, per)[hit] & np.array(mask & ((1 << (8 * flat.itemsize)) - 1), kind)
    return ((hit[:, None] * per + np.arange(per))[sub != 0]).astype(np.int64)


def sparse_rows(t: Tensors, name: str, chunk: int = 1 << 14
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 2-D weight [rows, cols] as CSR: (row_ptr int64 [rows+1], col int32, val float32),
    read ``chunk`` rows at a time so a multi-GB table never sits in memory whole."""
    words, dtype = t.raw(name)
    if words.ndim != 2:
        raise ChipDirError(f"{t.path}: {name} has shape {list(words.shape)}, expected 2-D")
    rows = words.shape[0]
    counts = np.zeros(rows, dtype=np.int64)
    cols, vals = [], []
    for r0 in range(0, rows, chunk):
        blk = np.asarray(words[r0:r0 + chunk])
        rr, cc = np.divmod(nonzero_flat(blk, dtype), blk.shape[1])
        counts[r0:r0 + len(blk)] = np.bincount(rr, minlength=len(blk))
        cols.append(cc.astype(np.int32))
        w = blk[rr, cc]
        vals.append(widen(w) if dtype == "BF16" else w.astype(np.float32))
    ptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return (ptr, np.concatenate(cols) if cols else np.zeros(0, np.int32),
            np.concatenate(vals) if vals else np.zeros(0, np.float32))


def sparse_cols(t: Tensors, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 2-D weight [out, in] as CSC over its inputs: (col_ptr int64 [in+1], row int32,
    val float32); within a column, rows ascend."""
    ptr, col, val = sparse_rows(t, name)
    n_in = t.shape(name)[1]
    row = np.repeat(np.arange(len(ptr) - 1, dtype=np.int32), np.diff(ptr))
    order = np.lexsort((row, col))
    cptr = np.zeros(n_in + 1, dtype=np.int64)
    np.cumsum(np.bincount(col, minlength=n_in), out=cptr[1:])
    return cptr, row[order], val[order]
