"""The one place where an engine's name becomes an engine.

Takes: an engine name (:data:`ENGINES`: ``hf``, transformers' own modules; ``fast``, the
project's sparse engine) and a chip directory of any kind :func:`directory_kind` tells
apart — a compiled checkpoint (``deltachip compile``, a core cache entry) or a merged model
(``deltachip merge``, routed or stock layout). Gives: :func:`open_engine`, a
:class:`backends.engines.base.ChipEngine` on that directory's chip: the same interface whatever
the name and the kind (caches of streams, ``decode_step``, ``prefill``, ``sublayer_taps``,
memory read-back), so callers (``deltachip check``, ``deltachip run``'s batches, the tests'
conformance suite) never branch on which engine or which layout they hold.

An unknown name is a :class:`UnknownEngine` (a UserError naming the names there are); a
directory that is neither kind is refused by the engine that reads it, with its path.
"""
from __future__ import annotations

from pathlib import Path
from backends.engines.base import ChipEngine
from common.errors import UserError

#: the engines a chip directory runs on, and what each is
ENGINES = {"hf": "transformers' own modules (the reference the fast engine must equal)",
           "fast": "the sparse engine: the same weights, bit-identical to hf, fast"}

#: what a chip directory can be (:func:`directory_kind`)
KINDS = ("compiled", "routed", "stock")


class UnknownEngine(UserError):
    """An engine name that is not one of :data:`ENGINES`."""


def directory_kind(path: str | Path) -> str:
    """``compiled`` (a chip directory of ``deltachip compile`` or a core cache entry),
    ``routed`` or ``stock`` (a model ``deltachip merge`` wrote in that layout; its manifest
    read with a bound, refused by name when damaged)."""
    from backends.engines.fast.engine import is_merged
    if not is_merged(path):
        return "compiled"
    from backends.engines.merged import read_manifest
    return "stock" if read_manifest(Path(path), "")["layout"] == "stock" else "routed"


def _hf(path: Path, kind: str, dtype: str | None, roms: dict[str, list[int]] | None,
        threads: int | None) -> ChipEngine:
    """transformers' modules: their threads are torch's own setting, not the engine's."""
    if kind == "compiled":
        from backends.engines.hf import HFEngine
        return HFEngine(path, dtype, roms)
    from backends.engines.merged import MergedEngine, StockEngine
    return (StockEngine if kind == "stock" else MergedEngine)(path, dtype, roms)


def _fast(path: Path, kind: str, dtype: str | None, roms: dict[str, list[int]] | None,
          threads: int | None) -> ChipEngine:
    from backends.engines.fast.engine import FastEngine      # reads every kind itself
    return FastEngine(path, dtype, roms, threads=threads)


_OPENERS = {"hf": _hf, "fast": _fast}


def open_engine(name: str, path: str | Path, dtype: str | None = None,
                roms: dict[str, list[int]] | None = None,
                threads: int | None = None) -> ChipEngine:
    """Engine ``name`` (:data:`ENGINES`) on the chip of directory ``path`` (any of
    :data:`KINDS`); ``dtype`` overrides the stored one where the engine allows it,
    ``roms`` are memory images over the chip's own, ``threads`` the threads its streams
    run on (the fast engine; None: its default)."""
    if name not in _OPENERS:
        raise UnknownEngine(f"unknown engine '{name}' (engines: {', '.join(ENGINES)})")
    path = Path(path)
    return _OPENERS[name](path, directory_kind(path), dtype, roms, threads)
