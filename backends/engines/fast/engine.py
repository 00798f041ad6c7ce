"""Engine "fast": a compiled chip's own weights, run sparsely by the project's C kernel,
bit-identical to transformers (engine "hf").

Takes: a compiled directory (what ``deltachip compile`` writes, or a core-cache entry): its
config, chip.json and safetensors — the weights, not the IR; or a merged checkpoint
(``deltachip merge``, either layout), whose chip part it runs from the merged files as they are stored. Gives: :class:`FastEngine`, the
engine interface of :class:`backends.engines.base.ChipEngine`: caches of independent streams
(:class:`FastCache`, ROM images preloaded), ``decode_step``, ``prefill`` (the positions fed
one by one: the kernel has one path, which gives what transformers' decode and, for chips
whose proof covers prefill, its chunked prefill give), ``sublayer_taps`` and memory
read-back. Loading verifies every structural fact the kernel relies on
(:mod:`backends.engines.fast.model`); a checkpoint that breaks one is refused with the reason, and
a value that leaves the kernel's exact domain stops its stream with
:class:`backends.engines.fast.native.FastError`: never a silently different run. A compiled
directory's model is that load's once: later loads map its stored sparse form
(:mod:`backends.engines.fast.stored`; ``sparse_form=False`` loads from the checkpoint regardless).

Streams of one cache run on ``threads`` threads (default: the CPU count), each C call
releasing the GIL. Where the C kernel cannot be built, the engine runs the numpy kernel
(:mod:`backends.engines.fast.pykernel`: the same results, much slower) and says so once on stderr
(:func:`backends.engines.fast.native.make_kernel`; ``DELTACHIP_FAST_KERNEL=python`` picks it).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from backends.engines.base import ChipEngine
from backends.engines.fast import model as fmodel, stored
from backends.engines.fast.native import FastError, make_kernel

if TYPE_CHECKING:       # a run needs no torch: the interface's tensors import it when made
    import torch

__all__ = ["FastEngine", "FastCache", "FastError"]


def is_merged(path: str | Path) -> bool:
    """:func:`backends.engines.merged.is_merged` (a merge manifest in ``path``), without
    importing that module, which imports transformers: a compiled chip's load needs none."""
    from backends.chipdir.merged import MANIFEST
    return os.path.lexists(Path(path) / MANIFEST)


class FastCache:
    """The state of ``len(states)`` independent streams (one kernel state per batch row;
    ``native`` the kernel: :class:`backends.engines.fast.native.Native`, or the numpy kernel where C
    cannot be built)."""

    def __init__(self, native: Any, states: list[Any]):
        self.native = native
        self.states = states

    def __len__(self) -> int:
        return len(self.states)


class FastEngine(ChipEngine):
    """A compiled chip on the fast kernel (see the module docstring)."""
    name = "fast"
    runs_rows_apart = True

    def __init__(self, path: str | Path, dtype: str | None = None,
                 roms: dict[str, list[int]] | None = None, threads: int | None = None,
                 progress: Callable[[str], None] | None = None, sparse_form: bool = True,
                 chip_record: Path | None = None):
        """``chip_record``: see :class:`backends.engines.base.ChipEngine` (a compiled directory's
        chip.json read from a record there, without the sections running does not read)."""
        if is_merged(path):             # the chip of a merged checkpoint
            from backends.engines.merged import take_merged
            take_merged(self, Path(path), dtype, roms)
            self.model = fmodel.load(self.merged, self.dtype_name, progress)
        else:
            super().__init__(path, dtype, roms, chip_record)
            self.model = (stored.load(self.path, self.dtype_name, self.chip, progress)
                          if sparse_form else fmodel.load(self.path, self.dtype_name, progress))
        self.native = make_kernel(self.model)
        self.threads = max(1, threads or os.cpu_count() or 1)
        self._gdn = {li: ly.gdn for li, ly in enumerate(self.model.layers) if ly.kind == 0}
        self._taps: Sequence[torch.Tensor] | None = None
        self._taps_out: dict[int, torch.Tensor] | None = None
        self._stops: dict[tuple[int, ...], np.ndarray] = {}

    # ---- state ---------------------------------------------------------------------------
    def new_cache(self, batch: int = 1,
                  roms: Sequence[dict[str, list[int]]] | None = None) -> FastCache:
        """``batch`` streams with the engine's ROM images preloaded (row b's own ``roms[b]``
        over the engine's, when given)."""
        states = []
        for rows in self.row_states(batch, roms, arrays=True):     # numpy: no torch
            st = self.native.new_state()
            rec = self.native.recurrent(st, write=True)
            for layer, heads in rows.items():
                for vh, s in heads.items():
                    rec[self._gdn[layer], vh] = s
            states.append(st)
        return FastCache(self.native, states)

    def recurrent_state(self, cache: FastCache, layer: int, row: int) -> torch.Tensor:
        import torch
        return torch.from_numpy(self.native.recurrent(cache.states[row])[self._gdn[layer]].copy())

    # ---- running -------------------------------------------------------------------------
    def _each(self, fn: Callable[[int], Any], n: int) -> list[Any]:
        if self.threads == 1 or n == 1:
            return [fn(b) for b in range(n)]
        with ThreadPoolExecutor(min(self.threads, n)) as pool:
            return list(pool.map(fn, range(n)))

    def _feed(self, cache: FastCache, ids: np.ndarray) -> np.ndarray:
        """Feed ids [B, T] (row b to stream b); the argmax ids [B, T], the taps recorded
        when :meth:`sublayer_taps` is active."""
        B, T = ids.shape
        if B != len(cache):
            raise ValueError(f"{B} rows of ids for a cache of {len(cache)} streams")
        nat = self.native
        taps = (np.zeros((B, T, 2 * len(self.model.layers), self.model.H), dtype=np.float32)
                if self._taps is not None else None)

        def one(b: int) -> np.ndarray:
            return nat.feed(cache.states[b], ids[b], None if taps is None else taps[b])
        out = np.stack(self._each(one, B))
        if taps is not None and self._taps_out is not None:
            import torch
            for s, dims in enumerate(self._taps):
                self._taps_out[s] = torch.from_numpy(
                    taps[:, :, s][:, :, dims.numpy()].astype(np.float64))
        return out

    def decode_step(self, ids: Sequence[int], cache: FastCache) -> torch.Tensor:
        """Feed one token per stream; returns the argmax ids [B]."""
        import torch
        self.check_ids(ids)
        return torch.from_numpy(self._feed(cache, np.asarray(ids, dtype=np.int64)[:, None])[:, 0])

    def prefill(self, ids: torch.Tensor, cache: FastCache | None = None
                ) -> tuple[torch.Tensor, FastCache]:
        """Feed [B, T] ids; returns (argmax ids [B, T], cache)."""
        import torch
        self.check_ids(ids)
        cache = cache if cache is not None else self.new_cache(ids.shape[0])
        return torch.from_numpy(self._feed(cache, np.asarray(ids, dtype=np.int64))), cache

    @contextmanager
    def sublayer_taps(self, dims: Sequence[torch.Tensor]) -> Iterator[dict[int, torch.Tensor]]:
        """As :meth:`backends.engines.hf.HFEngine.sublayer_taps`: while active, every call
        records ``taps[s]`` = dims ``dims[s]`` of the residual after sublayer s."""
        taps: dict[int, torch.Tensor] = {}
        self._taps, self._taps_out = dims, taps
        try:
            yield taps
        finally:
            self._taps, self._taps_out = None, None

    def run(self, cache: FastCache, row: int, first: int, n: int,
            stop: np.ndarray | None = None) -> np.ndarray:
        """Free-running stream ``row`` from token id ``first``: the ids it emits, up to
        ``n``, ending once one whose bit is set in ``stop`` (packed over ids) is emitted
        (that one is not fed)."""
        return self.native.run(cache.states[row], first, n, stop)

    def stop_ids(self) -> int:
        return self.model.vocab

    def stop_bitmap(self, kinds: Sequence[int]) -> np.ndarray:
        """:meth:`ChipEngine.stop_bitmap`, made once per set of kinds."""
        key = tuple(sorted(set(kinds)))
        if key not in self._stops:
            self._stops[key] = super().stop_bitmap(key)
        return self._stops[key]
