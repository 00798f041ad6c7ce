"""The fast engine's reading of a merged checkpoint's structured embedding
(``backends.engines.fast.model._packed_embedding``): the CSR rows it makes are the nonzeros
of the dense rows the modeling file's ``embedding_rows`` gathers, bit for bit, in column
order, for one-bit codes (a palette of at most 2 values) and byte codes alike."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backends.engines.fast import model as fmodel


class _Raw:
    """The structured tensors as ``Tensors.raw`` gives them: name -> (words, dtype)."""

    def __init__(self, arrays: dict[str, tuple[np.ndarray, str]]):
        self.arrays = arrays

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        return self.arrays[name]


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 values with bf16's precision (the low 16 bits cleared)."""
    return (values.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def _tables(rng: np.random.Generator, V: int, H: int, U: int, palette: np.ndarray):
    const = np.zeros(H, dtype=np.float32)
    const[rng.choice(H, H // 3, replace=False)] = _bf16(rng.normal(size=H // 3))
    const[rng.integers(H)] = -0.0
    cols = np.sort(rng.choice(H, U, replace=False)).astype(np.int64)
    idx = rng.integers(len(palette), size=(V, U)).astype(np.uint8)
    codes = np.packbits(idx, axis=1, bitorder="little") if len(palette) <= 2 else idx
    P = fmodel.PACKED
    t = _Raw({P["const"]: (const.view(np.int32), "I32"), P["cols"]: (cols, "I64"),
              P["palette"]: (palette.view(np.int32), "I32"), P["codes"]: (codes, "U8")})
    dense = np.broadcast_to(const, (V, H)).copy()
    dense[:, cols] = palette[idx]
    return t, dense


@pytest.mark.parametrize("palette", [[0.0, 1.0], [-0.0, 2.5], [0.0, 1.0, -3.0, 0.5, -0.0]])
def test_rows_are_the_dense_tables_nonzeros(palette):
    rng = np.random.default_rng(len(palette))
    V, H, U = 70_000, 96, 40                    # more rows than one chunk of the reader
    t, dense = _tables(rng, V, H, U, _bf16(np.array(palette)))
    ptr, col, val = fmodel._packed_embedding(t, Path("merged"), H, "bf16")
    rows, want_col = np.nonzero(dense)
    assert np.array_equal(ptr, np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=V))]))
    assert col.dtype == np.int32 and np.array_equal(col, want_col)
    assert val.dtype == np.float32 and np.array_equal(val.view(np.uint32),
                                                      dense[rows, want_col].view(np.uint32))


def test_a_code_past_the_palette_is_refused():
    rng = np.random.default_rng(0)
    t, _ = _tables(rng, 10, 16, 4, _bf16(np.array([0.0, 1.0, 2.0])))
    codes, _ = t.raw(fmodel.PACKED["codes"])
    codes[3, 1] = 3
    with pytest.raises(fmodel.ChipDirError, match="names a palette value it lacks"):
        fmodel._packed_embedding(t, Path("merged"), 16, "bf16")
