"""Runners of tool calls on a merged checkpoint's chip, on deltachip's engines.

A runner gives :func:`backends.merge.shipped.modeling_deltachip.run_call` the chip's ids: ``new()``
(a run's state) and ``advance(state, first, n, stop)`` (the chip's ids after feeding
``first``: at most ``n``, ending at one in ``stop``). The shipped modeling file has its own
(:class:`~backends.merge.shipped.modeling_deltachip.ModuleChip`, transformers' modules, a token at
a time); where deltachip is installed, :func:`routed_runner` (the entry point
``deltachip.call_runner``) gives it the fast engine instead, and the stock driver takes
:func:`stock_runner`.

Takes: a merged checkpoint directory (its chip's tensors and ``deltachip/roms``). Gives:
:class:`FastChip`, :class:`EngineChip`.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError


class FastChip:
    """Runs of the merged checkpoint's chip part on the fast engine, with the merged
    program's memory images (``deltachip/roms``)."""
    name = "fast"

    def __init__(self, path: str | Path):
        from backends.engines.fast.engine import FastEngine
        self.eng = FastEngine(str(path), roms=self.roms(path), threads=1)
        self.programs = program_roms(path)
        self._stop: tuple | None = None

    @staticmethod
    def roms(path: str | Path) -> dict:
        """The merged program's memory images (``deltachip/roms/*.hex``, as the manifest
        names them): memory name -> words."""
        from backends.engines.merged import read_manifest
        d = Path(path)
        manifest = read_manifest(d)
        return _hex_roms(d, manifest["chip"].get("roms"))

    def new(self, program: int = 0) -> Any:
        """The state of a new run (a fast-engine stream at its start, with ``program``'s
        memory images)."""
        if program:
            return self.eng.new_cache(1, roms=[self.programs[program - 1]])
        return self.eng.new_cache(1)

    def advance(self, state: Any, first: int, n: int, stop: set[int]) -> list[int]:
        key = tuple(sorted(stop))
        if self._stop is None or self._stop[0] != key:
            bits = np.zeros(self.eng.model.vocab, dtype=bool)
            bits[list(stop)] = True
            self._stop = (key, np.packbits(bits, bitorder="little"))
        return self.eng.run(state, 0, first, n, self._stop[1]).tolist()


def _hex_roms(d: Path, files: Any) -> dict:
    """memory name -> words of the ``deltachip/roms`` hex files ``files`` names."""
    if not isinstance(files, dict):
        return {}
    return {mem: [int(w, 16) for w in (d / rel).read_text().split()]
            for mem, rel in files.items()}


def program_roms(path: str | Path) -> list[dict]:
    """The memory images of a merged checkpoint's further programs (a merge with several
    ``--firmware``: its manifest's ``programs``, in order), each memory name -> words."""
    from backends.engines.merged import read_manifest
    d = Path(path)
    progs = read_manifest(d).get("programs")
    return [_hex_roms(d, p.get("roms")) for p in progs if isinstance(p, dict)] \
        if isinstance(progs, list) else []


class EngineChip:
    """A runner on any chip engine, a token at a time (its ``decode_step``); ``programs``:
    the further programs' memory images (:func:`program_roms`)."""

    def __init__(self, eng: Any, name: str = "transformers", programs: list | None = None):
        self.eng, self.name = eng, name
        self.programs = programs or []

    def new(self, program: int = 0) -> Any:
        if program:
            return self.eng.new_cache(1, roms=[self.programs[program - 1]])
        return self.eng.new_cache(1)

    def advance(self, state: Any, first: int, n: int, stop: set[int]) -> list[int]:
        out, tok = [], first
        for _ in range(n):
            tok = int(self.eng.decode_step([tok], state)[0])
            out.append(tok)
            if tok in stop:
                break
        return out


def _fast(path: str | Path) -> FastChip | None:
    """The fast engine on the merged files, or None where it refuses them (said once on
    stderr, with its reason)."""
    try:
        return FastChip(path)
    except UserError as e:
        print(f"deltachip: tool calls run on transformers' modules (slow): {e}",
              file=sys.stderr)
        return None


def routed_runner(model: Any) -> FastChip | None:
    """The entry point ``deltachip.call_runner``: the fast engine for a routed model loaded
    from its directory (None: the model runs calls on its own modules)."""
    return _fast(model.config._name_or_path)


def stock_runner(d: str | Path, model: Any) -> FastChip | EngineChip:
    """The stock driver's runner: the fast engine on the merged files, else plain
    transformers on the loaded widened model."""
    fast = _fast(d)
    if fast is not None:
        return fast
    from backends.engines.merged import StockEngine
    return EngineChip(StockEngine(d, model=model, roms=FastChip.roms(d)),
                      programs=program_roms(d))
