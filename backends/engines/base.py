"""The engine interface every compiled-chip engine implements, and what they share.

Takes: a compiled directory (config.json, chip.json, the weights; each file's digest in
manifest.json is checked, :func:`backends.chipdir.checkpoint.check_digests`). Gives:
:class:`ChipEngine`, the one reader of chip.json for every engine (the circuit rebuilt with
its ROM images, the numerics, the target), with token <-> id conversion, the ROM images as
recurrent-state rows (:meth:`ChipEngine.rom_states`) and :meth:`ChipEngine.read_memories`,
which decodes every memory's words back out of an engine's recurrent state (exactly: each
data cell must be 0 or Vs times an integer of its bits, else the word is None). An engine
subclass gives the rest of the interface that :mod:`backends.verify.check` and the core's runners
use:

- ``new_cache(batch, roms)``: the state of ``batch`` streams, ROM images preloaded;
- ``decode_step(ids, cache)``: one token per stream, the argmax ids [B];
- ``prefill(ids [B, T], cache)``: T positions per stream, (argmax ids [B, T], cache);
- ``sublayer_taps(dims)``: a context in which every call records the residual dims
  ``dims[s]`` after every sublayer s (``taps[s]``: [B, T, len(dims[s])] float64);
- ``recurrent_state(cache, layer, row)``: decoder layer ``layer``'s GDN state of stream
  ``row``, [value heads, d_k, d_v] (float32).

Engines: ``hf`` (:mod:`backends.engines.hf`, transformers' own modules) and ``fast``
(:mod:`backends.engines.fast.engine`, the project's sparse kernel, bit-identical to hf).
"""
from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from common.errors import UserError
from common.kinds import DType
from hdl.ir import Circuit, Token
from backends.chipdir.checkpoint import (RECOMPILE, ChipDirError, check_config, check_digests,
                                         check_weights_file, load_chip_json)
from backends.chipdir.chipfile import circuit_from_json
from backends.chipdir.memory import LIMB_BITS, NumView, ProgView, head_cell, rom_state_np

if TYPE_CHECKING:       # torch is imported where a tensor is made, not to run the fast engine
    import torch
    from transformers import DynamicCache

#: the dtypes a chip's weights and runs come in
DTYPE_NAMES = frozenset(d.value for d in DType)


class TokenIdError(UserError):
    """An id fed to an engine that is not one of its chip's tokens."""


class ChipEngine:
    """What every engine shares (see the module docstring); subclasses give the state."""

    #: the engine's name (``--engine``)
    name = "chip"
    #: whether :meth:`run` free-runs any row of a batch on its own (the fast kernel: rows
    #: side by side on threads); else it takes a cache of one stream, and a batch is best
    #: stepped together with :meth:`decode_step`
    runs_rows_apart = False

    def __init__(self, path: str | Path, dtype: str | None = None,
                 roms: dict[str, list[int]] | None = None, chip_record: Path | None = None):
        """``chip_record``: where to keep chip.json's :func:`run_chip` (a file deltachip owns,
        such as one in a core cache entry), so that a load reads a tenth of a megabyte of
        it rather than all five of the core's; ``self.chip`` then lacks the sections only
        ``deltachip check`` reads (:data:`RUN_OMITS`)."""
        self.path = Path(path)
        chip = run_chip(self.path, chip_record) if chip_record is not None else None
        if chip is not None:            # chip.json checked whole, and against the manifest
            self.chip = chip
            self._take_chip(dtype, roms)
            check_config(path, self.chip)
            check_weights_file(path)
            return
        self.chip = load_chip_json(path)
        self._take_chip(dtype, roms)
        check_config(path, self.chip)
        check_weights_file(path)
        check_digests(path)             # last: the checks above say more about what is wrong

    def _take_chip(self, dtype: str | None, roms: dict[str, list[int]] | None) -> None:
        """The dtype, memory images, circuit, numerics and target of ``self.chip`` (read
        from ``self.path``/chip.json)."""
        self.dtype_name = dtype or self.chip["dtype"]
        if self.dtype_name not in DTYPE_NAMES:
            raise ChipDirError(f"unknown dtype '{self.dtype_name}' (expected bf16 or fp32)")
        try:
            self.roms = {k: list(v) for k, v in self.chip["roms"].items()}
            self.roms.update(roms or {})
            self.circuit: Circuit = circuit_from_json(self.chip["circuit"], self.roms)
            self.circuit.check()
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise ChipDirError(f"{self.path / 'chip.json'}: corrupt (cannot rebuild the circuit: "
                               f"{e.__class__.__name__}: {e}): {RECOMPILE}") from None
        self.num = self.chip["numerics"]
        self.tgt = self.chip["target"]
        self.refuse_table_images(roms)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of :attr:`dtype_name` (torch is imported when first asked)."""
        from backends.chipdir.numbers import DTYPES
        return DTYPES[self.dtype_name]

    def refuse_table_images(self, roms: dict[str, list[int]] | None) -> None:
        """A UserError when ``roms`` gives a ``table`` ROM an image other than the one
        compiled in: its words are rows of the embedding, not state an engine preloads."""
        for name, words in (roms or {}).items():
            m = self.circuit.memories.get(name)
            if m is None or not m.table:
                continue
            have = list(self.chip["roms"].get(name, []))
            if list(words) + [0] * (len(have) - len(words)) != have + [0] * (len(words) - len(have)):
                raise UserError(f"memory '{name}' is a table rom: its words are rows of the "
                                f"embedding, fixed when the chip was compiled; compile it "
                                f"again with --rom {name}=FILE to change them")

    def check_ids(self, ids: Sequence[int] | torch.Tensor) -> None:
        """:class:`TokenIdError` unless every id in ``ids`` is one of the chip's tokens: what
        every engine's ``decode_step`` and ``prefill`` check first, so all refuse a bad id
        alike (transformers would index out of range; a merged model would read a negative
        chip id as one of the base's text ids)."""
        torch = sys.modules.get("torch")         # ids are a tensor only if torch is loaded
        flat = ids.flatten().tolist() if torch is not None and isinstance(ids, torch.Tensor) \
            else ids
        n = self.circuit.vocab_size
        if flat and (min(flat) < 0 or max(flat) >= n):      # cheap: once a token per stream
            bad = next(int(i) for i in flat if not 0 <= i < n)
            raise TokenIdError(f"token id {bad} is outside the chip's vocabulary 0..{n - 1}")

    # ---- the interface each engine gives ------------------------------------------------
    def new_cache(self, batch: int = 1,
                  roms: Sequence[dict[str, list[int]]] | None = None) -> Any:
        raise NotImplementedError

    def decode_step(self, ids: Sequence[int], cache: Any) -> torch.Tensor:
        raise NotImplementedError

    def prefill(self, ids: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    def sublayer_taps(self, dims: Sequence[torch.Tensor]
                      ) -> AbstractContextManager[dict[int, torch.Tensor]]:
        raise NotImplementedError

    def recurrent_state(self, cache: Any, layer: int, row: int) -> torch.Tensor:
        raise NotImplementedError

    def run(self, cache: Any, row: int, first: int, n: int,
            stop: Any | None = None) -> Any:
        """Free-running stream ``row`` of ``cache`` from token id ``first``: the ids it emits
        (a 1-D int64 array), up to ``n``, ending once one whose bit is set in ``stop`` (a
        :meth:`stop_bitmap`) is emitted (that one is not fed). Here one :meth:`decode_step`
        per token, for a cache of one stream; the fast engine runs it in its kernel, any
        row of any cache."""
        import numpy as np
        if row != 0:
            raise ValueError(f"{self.name}: run takes a cache of one stream (row 0), not row "
                             f"{row} of a batch")
        bits = None if stop is None else np.unpackbits(stop, bitorder="little")
        out, tid = [], first
        while len(out) < n:
            tid = int(self.decode_step([tid], cache)[0])
            out.append(tid)
            if bits is not None and tid < len(bits) and bits[tid]:
                break
        return np.asarray(out, dtype=np.int64)

    def stop_ids(self) -> int:
        """How many ids a :meth:`stop_bitmap` covers (the chip's vocabulary)."""
        return self.circuit.vocab_size

    def stop_bitmap(self, kinds: Sequence[int]) -> Any:
        """A packed bitmap (numpy uint8, little bit order) over the vocabulary with the ids
        of token kinds ``kinds`` set: :meth:`run`'s ``stop``."""
        import numpy as np
        c = self.circuit
        bits = np.zeros(self.stop_ids(), dtype=bool)
        offs = c.kind_offsets()
        for k in set(kinds):
            bits[offs[k]:offs[k] + c.kinds[k].ids] = True
        return np.packbits(bits, bitorder="little")

    # ---- tokens (the circuit's own numbering, which the embedding and lm_head follow) -------
    def token_id(self, tok: Token) -> int:
        """The vocabulary id of ``tok`` (:meth:`hdl.ir.Circuit.token_id`)."""
        return self.circuit.token_id(tok)

    def token_of(self, tid: int) -> Token:
        """The token of id ``tid`` (:meth:`hdl.ir.Circuit.token_from_id`; ValueError outside
        the vocabulary)."""
        return self.circuit.token_from_id(tid)

    # ---- state ---------------------------------------------------------------------------
    def rom_states(self, roms: dict[str, list[int]], memo: dict[Any, Any] | None = None,
                   arrays: bool = False) -> dict[int, dict[int, Any]]:
        """layer -> {value head: [d_k, d_v] fp32 rows} for every memory with an image in
        ``roms``, and every paired RAM (its rows hold the ballast from the start): torch
        tensors (:func:`backends.chipdir.memory.rom_state`, the compiler's), or with ``arrays`` the
        same values bit for bit as numpy arrays, made without torch (:func:`rom_state_np`:
        the fast engine's). ``memo`` (a dict kept across calls) computes each distinct
        (memory, image) once: streams of one program with different inputs share all but
        the input's memory."""
        if arrays:
            make = rom_state_np
        else:
            from backends.chipdir.memory import rom_state as make
        prog, num = ProgView(self.chip), NumView(self.num)
        out: dict[int, dict[int, Any]] = {}
        for name, m in self.chip["memories"].items():
            words = roms.get(name, [])
            if any(words) or m.get("pair"):
                key = (name, tuple(words)) if memo is not None else None
                states = memo.get(key) if memo is not None else None
                if states is None:
                    states = make(prog, num, name, words)
                    if memo is not None:
                        memo[key] = states
                for (layer, vh), st in states.items():
                    out.setdefault(layer, {})[vh] = st
        return out

    def row_states(self, batch: int, roms: Sequence[dict[str, list[int]]] | None,
                   arrays: bool = False) -> list[dict[int, dict[int, Any]]]:
        """The preloaded states of ``batch`` rows: the engine's images in every row, or row
        b's own ``roms[b]`` over the engine's (see :meth:`new_cache`); ``arrays``: numpy
        rows (:meth:`rom_states`)."""
        if roms is None:
            return [self.rom_states(self.roms, arrays=arrays)] * batch
        if len(roms) != batch:
            raise ValueError(f"{len(roms)} memory images for batch {batch}")
        memo: dict[Any, Any] = {}
        for r in roms:
            self.refuse_table_images(r)
        return [self.rom_states({**self.roms, **r}, memo, arrays) for r in roms]

    def read_memories(self, cache: Any, row: int = 0) -> dict[str, list[int | None]]:
        """Every memory's words from the recurrent state of batch row ``row`` (read port 0's
        copy); a word whose cells are not exactly Vs times an integer of the cell's bits
        (0 or 1 for bit cells, 0..255 for byte cells) is None."""
        import torch
        prog = ProgView(self.chip)
        t = prog.target
        nbv, vs = self.num["n_bv"], 2.0 ** self.num["vs"]
        res: dict[str, list[int | None]] = {}
        states: dict[int, torch.Tensor] = {}      # a layer's state, read once (banks share)
        for name, p in prog.mems.items():
            P = p.per_row
            nrows = -(-p.depth // P)
            limbs = torch.zeros(-(-p.width // LIMB_BITS), nrows, P, dtype=torch.int64)
            bad = torch.zeros(nrows, P, dtype=torch.bool)
            for rb in range(p.rowblocks):
                lo, hi = rb * p.rows, min(nrows, (rb + 1) * p.rows)
                for sl in range(p.slices):
                    layer, kh = p.bank(0, rb, sl)
                    if layer not in states:
                        states[layer] = self.recurrent_state(cache, layer, row)
                    state = states[layer]
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
        from backends.chipdir.memory import byte_cells_exact
        from backends.chipdir.target import Target
        return (not byte_cells_exact(Target(**self.tgt), self.dtype_name) and
                any(m.get("cell_bits", 1) > 1 for m in self.chip["memories"].values()))


#: the sections of chip.json that running a chip does not read (the lane map and the
#: compiler's trace record: ``deltachip check`` and ``explain`` read them), left out of
#: :func:`run_chip`
RUN_OMITS = ("lanemap", "trace")
#: the kind of :func:`run_chip`'s record (:mod:`backends.engines.fast.records`)
RUN_CHIP_KIND = "run-chip"


def run_chip(path: Path, record: Path) -> dict[str, Any] | None:
    """chip.json of checkpoint ``path`` without :data:`RUN_OMITS`, from the record at
    ``record`` when that was made from the same chip.json, else read (and checked) whole
    and written there. The record's key is chip.json's sha256 as its manifest records it,
    and only once every file matches the manifest (:func:`backends.chipdir.manifest.problem`; a
    stamped file is not hashed again), so a chip.json changed since makes it stale.
    None (nothing written) when ``path`` has no manifest or does not match it: the
    caller's full load then says what is wrong. A record that is damaged or stale is named
    on stderr and made again (:func:`backends.engines.fast.records.cached`)."""
    import json
    from backends.chipdir import manifest
    from backends.chipdir.checkpoint import FORMAT_VERSION
    from backends.engines.fast import records
    if not os.path.lexists(path / manifest.MANIFEST) or manifest.problem(path) is not None:
        return None
    try:
        files = json.loads((path / manifest.MANIFEST).read_text())["files"]
        digest = files["chip.json"][manifest.ALGORITHM]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    key = {"chip.json": digest, "format_version": FORMAT_VERSION, "omits": list(RUN_OMITS)}

    def make() -> dict[str, Any]:
        chip = load_chip_json(path)
        if manifest.digest(path / "chip.json") != digest:      # replaced while it was read
            raise ChipDirError(f"{path / 'chip.json'}: changed while it was read; run again")
        return {k: v for k, v in chip.items() if k not in RUN_OMITS}
    return records.cached(record, RUN_CHIP_KIND, key, "the record of chip.json", make)


