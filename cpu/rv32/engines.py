"""The core's engines for ``deltachip run``: ``sim`` (the core's HDL in the reference
simulator), ``hf`` (the compiled core in transformers' own Qwen3.5 modules) and ``fast``
(the same compiled core on the fast engine, :mod:`backends.engines.fast`).

Both load a program with :mod:`cpu.rv32.loader`, run the core one token per step, read the
token stream with :class:`cpu.rv32.protocol.TraceReader`, and return a
:class:`cpu.emulator.RunResult` like the ``ref`` engine: ``run(max_steps, trace)`` stops
after exit, fault, or ``max_steps`` retired instructions, and can be called again to go on.
``stats()`` gives the extra ``--stats`` fields (tokens, tokens per instruction, ...).

``sim`` with ``trace=True`` builds :class:`cpu.emulator.Retire` records from the core's own
signals (the pc the core fetched, its rd, result and data access) and checks every register
write the core makes later (the value travels in the next token(s)) against the record:
a disagreement is listed in ``wb_mismatches``.

The compiled core (``hf``, ``fast``) is cached per (core source hash, sizes, target, dtype)
under ``$DELTACHIP_CACHE/cores`` (default ``~/.cache/deltachip/cores``): only the first run
compiles. Every use checks the entry against the digests it was written with
(:mod:`backends.chipdir.manifest`; a stamp spares hashing files that have not changed) and rebuilds
a damaged one; a problem the cache cannot mend is a :class:`CoreCacheError` that names the
entry ("the cached core at PATH") and what to do (docs/cpu.md, "The core cache"). A fast run
reads the entry's chip.json from its run record beside it (:data:`RUN_CHIP`), and the core's
HDL is elaborated only for ``sim`` or to name a token in an error: a second run starts in
well under two seconds (docs/backend.md, "A second run").

Every engine feeds its tokens to :class:`cpu.rv32.protocol.TraceReader`, so a core that
stops retiring instructions stops the run with :class:`cpu.rv32.protocol.CoreStalled`
(exit 2) naming the position, the token and, for a compiled core, its directory.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from cpu.emulator import ElfError, Retire, RunResult
from cpu.rv32.build import FULL, CoreSizes, core_hash, load_core
from common.cachedir import entry_lock
from common.errors import UserError
from common.outputs import os_reason, temp_name_prefix
from cpu.rv32.loader import CoreImage, load_program
from cpu.rv32.protocol import (FAULT, FIX, HALF, IN, JUMP, TEXT, WANT, InputFeed, TraceReader,
                               executes, feed_chunk)
from hdl.ir import Token

if TYPE_CHECKING:
    from backends.compile.emit import Emission
    from hdl.ir import Circuit

_WIDTH = {0: 1, 1: 2, 2: 4, 4: 1, 5: 2}


class CoreEngine:
    """The engine-independent run loop; subclasses give ``_step(token) -> next token``."""
    name = "core"
    target = "sim"

    def __init__(self, image: CoreImage, sizes: CoreSizes):
        self.image, self.sizes = image, sizes
        self.machine = image.machine
        self.reader = TraceReader(word_at=self.machine.read_word,
                                  show=self._show,
                                  source=f"the core ({self.name} engine)",
                                  advice="the core does not follow its token protocol "
                                         "(docs/cpu.md): a bug in cpu/rv32")
        self.cur: Token = image.start
        self.reader.feed(self.cur)
        #: the input stream, answered where the core asks for a byte (Want -> In)
        self.input = InputFeed(self.machine.rx, text=image.text)

    @functools.cached_property
    def circuit(self) -> Circuit:
        """The core's elaborated HDL (:func:`cpu.rv32.build.load_core`): elaborated when first
        asked for (the simulator runs it; the compiled engines run their checkpoint, and
        name a token with it only in an error)."""
        return load_core(self.sizes)

    def _show(self, tok: Token) -> str:
        """``tok`` in words, its kind and fields named (for the reader's errors)."""
        from hdl.sim.tokens import format_token
        return format_token(self.circuit, tok)

    @property
    def pc(self) -> int:
        """The byte pc of the next instruction (for the step-budget message)."""
        pc = self.reader.pc_of(self.cur)
        return pc if pc is not None else (self.reader.last_pc or 0) + 4

    def _step(self, tok: Token) -> Token:
        raise NotImplementedError

    def _advance(self, trace: list[Retire] | None) -> None:
        nxt = self.input.answer(self._step(self.cur))
        self.reader.feed(nxt)
        self.cur = nxt

    def run(self, max_steps: int, trace: bool = False) -> RunResult:
        r = self.reader
        out0, n0 = len(r.output), r.instructions
        records: list[Retire] | None = [] if trace else None
        while not r.done:
            if executes(self.cur) and r.instructions - n0 >= max_steps:
                break
            self._advance(records)
        return RunResult(r.exit_code, bytes(r.output[out0:]), r.instructions - n0, r.fault,
                         records, timed_out=not r.done)

    def counters(self) -> dict[str, int]:
        """What the progress line shows (read from another thread while ``run`` goes on)."""
        return {"instructions": self.reader.instructions, "tokens": self.reader.tokens}

    def stats(self) -> dict[str, Any]:
        r = self.reader
        return {"tokens": r.tokens, "target": self.target,
                "tokens_per_instruction": round(r.tokens / r.instructions, 4) if r.instructions else None}


class SimCore(CoreEngine):
    """The core's HDL in :class:`hdl.sim.Simulator` (the C backend when a compiler works)."""
    name = "sim"

    def __init__(self, image: CoreImage, sizes: CoreSizes = FULL, backend: str = "auto"):
        super().__init__(image, sizes)
        from hdl.sim import Simulator
        self.sim = Simulator(self.circuit, image.images, backend=backend)
        names = self.circuit.names
        self._ids = {n: names[n] for n in ("rd", "result", "npc", "d.is_jump", "d.is_load",
                                           "d.is_store", "d.op", "lsu.addr", "ld.raw", "rs2v",
                                           "lsu.uart", "dres", "after_cload", "cld.y",
                                           "cld.raw", "in_b")}
        self.wb_mismatches: list[str] = []
        self._pending: Retire | None = None       # the record whose register write is due

    def _advance(self, trace: list[Retire] | None) -> None:
        if trace is None:
            super()._advance(None)
            return
        tok = self.cur
        res = self.sim.step(tok, trace=True)
        # entry 0 takes the results meant for x0 (core.hdl): not a register write
        written = sorted({addr for mem, addr, _ in res.writes if mem in ("rhi", "rlo") and addr})
        if written:
            value = self.registers()[written[0]]
            p = self._pending
            if len(written) > 1 or p is None or p.rd != written[0] or p.rd_value != value:
                self.wb_mismatches.append(f"token {self.reader.tokens}: x{written} <= "
                                          f"0x{value:08x}, expected by {p}")
            self._pending = None
        if tok.kind == FIX and self._pending is not None:
            # a division's result is known at its Fix token: complete its record
            self._pending = self._pending._replace(rd_value=res.values[self._ids["dres"]])
            trace[-1] = self._pending
        if tok.kind == HALF and res.values[self._ids["after_cload"]]:
            # a load from code ROM reads its word at the step after it: complete its record
            rec = trace[-1]
            rec = rec._replace(mem_data=res.values[self._ids["cld.raw"]],
                               rd_value=res.values[self._ids["cld.y"]] if rec.rd else None)
            trace[-1] = rec
            if self._pending is not None:
                self._pending = rec
        if tok.kind in (IN, TEXT) and trace:
            # a byte load from the UART's input gets its byte at the In or Text after it
            # (a Text's: its length or byte j, from the table ROMs)
            rec, b = trace[-1], res.values[self._ids["in_b"]]
            signed = (rec.insn >> 12) & 7 == 0 and b & 0x80           # lb of a byte >= 0x80
            rec = rec._replace(mem_data=b, rd_value=((b - 256 if signed else b) & 0xFFFF_FFFF)
                               if rec.rd else None)
            trace[-1] = rec
            if self._pending is not None:
                self._pending = rec
        if executes(tok):
            if self._pending is not None:
                self.wb_mismatches.append(f"token {self.reader.tokens}: no write for {self._pending}")
                self._pending = None
            rec = self._record(tok, res.values, res.next)
            if rec is not None:
                trace.append(rec)
                self._pending = rec if rec.rd is not None else None
        nxt = self.input.answer(res.next)
        self.reader.feed(nxt)
        self.cur = nxt

    def registers(self) -> list[int]:
        """The register file now (the core keeps bits 31..13 and 12..0 in two memories;
        entry 0 holds what was written to x0, which reads 0)."""
        regs = [(h << 13) | lo for h, lo in zip(self.sim.memory("rhi"), self.sim.memory("rlo"))]
        return [0] + regs[1:32]

    def _record(self, tok: Token, values: tuple[int, ...], nxt: Token) -> Retire | None:
        """The Retire record of the instruction executed at ``tok`` (None when it faulted
        or the stream ended)."""
        if nxt.kind == FAULT:                      # not retired
            return None
        v = {n: values[i] for n, i in self._ids.items()}
        pc = self.reader.pc_of(tok)
        insn = self.machine.read_word(pc)
        rd = v["rd"] or None
        value = ((v["npc"] << 2) & 0xFFFF_FFFF if v["d.is_jump"] else v["result"]) if rd else None
        addr = data = width = None
        is_store = bool(v["d.is_store"])
        if v["d.is_load"] or is_store:
            width = _WIDTH[v["d.op"] & 7]
            addr = v["lsu.addr"]
            data = (v["rs2v"] & ((1 << (8 * width)) - 1)) if is_store else v["ld.raw"]
        npc = nxt.fields[0] << 2 if nxt.kind == JUMP else pc + 4
        return Retire(pc, insn, rd, value, addr, data, width, is_store, npc)

    def _step(self, tok: Token) -> Token:
        return self.sim.step(tok).next


#: The core's large ROMs store a byte per state cell in every dtype: the core runs one token
#: per call (decode), which reads byte cells exactly; with two-hot queries (qwen3.5-4b) an
#: fp32 checkpoint of them refuses chunked prefill (docs/backend.md, "Byte cells"), which
#: the core never uses, and is 11 layers instead of bit cells' 34.
BYTE_CELLS = True


def cache_root() -> Path:
    """The core cache's folder, ``$DELTACHIP_CACHE/cores``, created and known writable. On
    every access the leftovers of a process that died there are swept
    (:func:`common.outputs.sweep_folder`): a build's temporary directory, or a damaged entry
    moved aside for rebuilding (up to the entry's 6 GB) whose rebuild was interrupted."""
    from common.cachedir import cache_dir      # a DELTACHIP_CACHE it cannot use: exit 2
    from common.outputs import sweep_folder
    root = cache_dir("cores")
    sweep_folder(root)
    return root


#: a core cache entry's record of its chip.json without the sections running does not read
#: (:func:`backends.engines.base.run_chip`), kept beside its weights and removed with them
RUN_CHIP = "run-chip.json"

#: table ROM images baked into a core (its text vocabulary: cpu/rv32/loader.text_tables)
Tables = dict[str, list[int]]


def compiled_core_path(sizes: CoreSizes = FULL, target: str = "compact",
                       dtype: str = "bf16", tables: Tables | None = None) -> Path:
    """Where the core cache keeps the compiled core for (sizes, target, dtype, tables)."""
    return cache_root() / (f"rv32-{core_hash(sizes)}-"
                           f"{_entry_suffix(sizes, target, dtype, tables)}")


def tables_digest(tables: Tables) -> str:
    """A digest of table ROM images (names and words), for the cache entry's name."""
    h = hashlib.sha256()
    for name in sorted(tables):
        h.update(name.encode() + b"\0" + np.asarray(tables[name], dtype=np.uint64).tobytes())
    return h.hexdigest()[:12]


def _entry_suffix(sizes: CoreSizes, target: str, dtype: str,
                  tables: Tables | None = None) -> str:
    """The part of a cache entry's name after ``rv32-HASH-``: sizes, target, dtype, and a
    digest of the text vocabulary's table images when there are some. A target
    read from a config file is named by its file's stem and a digest of the shapes it gives
    (every field of :class:`backends.chipdir.target.Target` but its name), so two configs that
    share a file name, or one named like a built-in target, never share an entry."""
    from backends.chipdir.target import COMPACT, QWEN35_4B, get_target
    t = get_target(target)
    if t is COMPACT or t is QWEN35_4B:          # a built-in name (get_target reads no file)
        tname = t.name
    else:
        fields = {k: v for k, v in dataclasses.asdict(t).items() if k != "name"}
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
        tname = f"{Path(target).stem}-{digest}"
    text = f"-v{tables_digest(tables)}" if tables else ""
    return f"{sizes.name}-{tname}-{dtype}{text}"


def stale_cores(sizes: CoreSizes = FULL, target: str = "compact",
                dtype: str = "bf16", tables: Tables | None = None) -> list[Path]:
    """Cache entries for the same (sizes, target, dtype, tables) compiled from another core
    source (an older cpu/rv32 or backend): nothing uses them once the current one exists."""
    want = compiled_core_path(sizes, target, dtype, tables)
    suffix = _entry_suffix(sizes, target, dtype, tables)
    if not want.parent.is_dir():
        return []
    return sorted(p for p in want.parent.iterdir() if p.is_dir() and p != want
                  and p.name.startswith("rv32-") and p.name.split("-", 2)[2:] == [suffix])


class CoreCacheError(UserError):
    """A core cache entry that cannot be used or mended: the message names it ("the cached
    core at PATH") and says what to do."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def entry_problem(entry: Path) -> str | None:
    """What is wrong with the existing cache entry ``entry``, in words, or None when it is
    whole: a directory whose every file matches its manifest
    (:func:`backends.chipdir.manifest.problem`, which stamps it once it has been hashed, so the next
    use hashes only files that changed since)."""
    from backends.chipdir import manifest
    if entry.is_symlink() or not entry.is_dir():
        return "it is not a directory"
    return manifest.problem(entry, write_stamp=True)


def compiled_core(sizes: CoreSizes = FULL, target: str = "compact", dtype: str = "bf16",
                  progress: Callable[[str], None] | None = None,
                  approve: Callable[[Emission], None] | None = None,
                  tables: Tables | None = None) -> Path:
    """The compiled core's checkpoint directory (:func:`compiled_core_path`), checked: it is
    compiled on first use (a line on stderr says so), and an entry that fails
    :func:`entry_problem` is rebuilt (a line on stderr says what was wrong). Once one is
    compiled, the stale entries (:func:`stale_cores`) are removed, each named on stderr.
    ``approve``: called with the core's plan before its weights are built, when it is
    compiled (see :func:`backends.compile.pipeline.compile_to_dir`). ``tables``: images baked into
    the core's table ROMs (a merged base's text vocabulary), an entry of their own.
    CoreCacheError when a damaged entry cannot be moved out of the way or the new one
    cannot be written."""
    out = compiled_core_path(sizes, target, dtype, tables)
    if os.path.lexists(out) and entry_problem(out) is None:
        return out
    with entry_lock(out, lambda: _say(f"waiting for another deltachip compiling the core "
                                      f"into {out}")):
        if os.path.lexists(out):        # again: another process may have built it meanwhile
            why = entry_problem(out)
            if why is None:
                return out
            _say(f"the cached core at {out} is damaged ({why}); rebuilding it")
            _discard(out, why)
        else:
            _say(f"compiling the core into {target} layers ({dtype}); first run only, cached "
                 f"in {out.parent}")
        _build(out, sizes, target, dtype, progress, approve, tables)
        remove_stale_cores(sizes, target, dtype, tables)
    return out


def _discard(entry: Path, why: str) -> None:
    """Move the damaged ``entry`` out of the way (renamed to a temporary beside it, which
    the next write beside it sweeps should this process die) and delete it; CoreCacheError
    when it cannot be moved."""
    aside = None
    try:
        aside = Path(tempfile.mkdtemp(prefix=temp_name_prefix(entry) + "damaged-",
                                      dir=entry.parent))
        os.rename(entry, aside / entry.name)
    except OSError as e:
        if not isinstance(e, FileNotFoundError) or os.path.lexists(entry):
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
            raise CoreCacheError(f"the cached core at {entry} is damaged ({why}) and cannot "
                                 f"be moved out of the way ({os_reason(e)}); remove it "
                                 f"(rm -r {entry}) and run again") from None
        # else another run moved it first
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _build(out: Path, sizes: CoreSizes, target: str, dtype: str,
           progress: Callable[[str], None] | None,
           approve: Callable[[Emission], None] | None = None,
           tables: Tables | None = None) -> None:
    """Compile the core into the absent entry ``out``: compile_to_dir builds it in a fresh
    temporary directory beside it, manifest last, and renames it into place; then it is
    stamped (its files were just hashed for the manifest). CoreCacheError when it cannot
    be written."""
    from backends.chipdir import manifest
    from backends.chipdir.checkpoint import OutputDirError
    from backends.compile.pipeline import compile_to_dir
    try:
        baked = {"roms": tables} if tables else {}      # a text vocabulary's table ROMs
        compile_to_dir(load_core(sizes), out, target=target, dtype=dtype, progress=progress,
                       byte_cells=BYTE_CELLS, approve=approve, **baked)
    except OutputDirError as e:
        raise CoreCacheError(f"the cached core at {out} could not be built: {e.reason}; "
                             f"free space in {out.parent}, or set DELTACHIP_CACHE to "
                             "another folder") from None
    manifest.stamp(out)


def refusal(entry: Path, error: UserError) -> CoreCacheError:
    """The error for a cache entry that passed its digest check but that an engine refused
    (``error``, a ChipDirError meant for a user's own directory): the same reason, worded
    for the cache."""
    from backends.chipdir.checkpoint import RECOMPILE
    detail = str(error).removesuffix(f": {RECOMPILE}")
    return CoreCacheError(f"the cached core at {entry} cannot be loaded ({detail}); remove "
                          f"it (rm -r {entry}) and run again to rebuild it")


def remove_stale_cores(sizes: CoreSizes = FULL, target: str = "compact",
                       dtype: str = "bf16", tables: Tables | None = None) -> None:
    """Delete the stale entries (:func:`stale_cores`), each named on stderr with its size;
    called once the current entry exists."""
    for old in stale_cores(sizes, target, dtype, tables):
        size = sum(f.stat().st_size for f in old.rglob("*") if f.is_file())
        shutil.rmtree(old, ignore_errors=True)
        print(f"removed the stale compiled core {old} ({size / 1e9:.1f} GB; compiled "
              "from another core source)", file=sys.stderr, flush=True)


class HFCore(CoreEngine):
    """The compiled core in transformers (:class:`backends.engines.hf.HFEngine`), one decode
    call per token, the program's images preloaded into the recurrent state. The core is
    the cache's (:func:`compiled_core`: checked, rebuilt when damaged, a refusal worded for
    the cache), or ``checkpoint``, a directory the user compiled (checked against its
    manifest like any checkpoint, refused with its path, never rebuilt)."""
    name = "hf"
    #: the class of this engine's core inside a merged checkpoint (set below)
    merged: type[HFCore]

    def __init__(self, image: CoreImage, sizes: CoreSizes = FULL, target: str = "compact",
                 dtype: str = "bf16", checkpoint: Path | None = None):
        from backends.chipdir.checkpoint import ChipDirError
        super().__init__(image, sizes)
        self.target = target
        path = Path(checkpoint) if checkpoint else compiled_core(sizes, target, dtype)
        #: the core cache's entry (deltachip's own folder, where records may be kept)
        self.entry = None if checkpoint else path
        try:
            self.hf = self._load(path, dtype)
        except ChipDirError as e:
            if checkpoint or not e.damage:
                raise
            raise refusal(path, e) from None
        if checkpoint:
            self.reader.source = f"the checkpoint {path}"
            self.reader.advice = "its weights are damaged or are not this core's"
        else:
            self.reader.source = f"the cached core at {path}"
            self.reader.advice = f"remove it (rm -r {path}) and run again to rebuild it"
        self.cache = self.hf.new_cache(1)
        layers = self.hf.chip["layers"]
        self.layers = len(layers)
        self.nonzero_layers = sum(layer["nonzero_weights"] for layer in layers)
        #: everything outside the decoder layers: the embedding and lm_head rows (+ the norm)
        self.nonzero_vocab = self.hf.chip["nonzero_weights"] - self.nonzero_layers

    def _load(self, path: Path, dtype: str) -> Any:
        from backends.engines.hf import HFEngine
        return HFEngine(path, dtype, roms=self.image.images)

    def _step(self, tok: Token) -> Token:
        nxt = self.hf.decode_step([self.hf.token_id(tok)], self.cache)
        return self.hf.token_of(int(nxt[0]))

    def stats(self) -> dict[str, Any]:
        s = super().stats()
        s.update({"layers": self.layers, "nonzero_weights": self.nonzero_layers,
                  "nonzero_vocab_weights": self.nonzero_vocab, "dtype": self.hf.dtype_name})
        return s


class MergedCore(HFCore):
    """The core inside a merged checkpoint (``deltachip merge --firmware``): every token
    through the whole merged model (:func:`backends.engines.merged.open_merged`: routed to its
    chip part, or through the stock layout's widened plain model), the run's program
    preloaded."""
    name = "hf"

    def _load(self, path: Path, dtype: str) -> Any:
        from backends.engines.merged import open_merged
        return open_merged(path, dtype, roms=self.image.images)


class FastCore(HFCore):
    """The compiled core on the fast engine (:class:`backends.engines.fast.engine.FastEngine`): the
    same checkpoint as ``hf``, run sparsely in C, bit-identical. Tokens are made in chunks
    by the kernel (no more tokens per chunk than instructions left in the budget, so a run
    stops where the token-by-token loop would) and read back one by one."""
    name = "fast"
    #: tokens the kernel makes per call
    CHUNK = 4096

    def _load(self, path: Path, dtype: str) -> Any:
        from backends.engines.fast.engine import FastEngine
        record = path / RUN_CHIP if self.entry is not None else None
        return FastEngine(path, dtype, roms=self.image.images, threads=1, chip_record=record)

    def run(self, max_steps: int, trace: bool = False) -> RunResult:
        r = self.reader
        out0, n0 = len(r.output), r.instructions
        self.cur = fast_advance(self.hf, self.cache, 0, r, self.cur, max_steps, self.CHUNK,
                                self.input)
        return RunResult(r.exit_code, bytes(r.output[out0:]), r.instructions - n0, r.fault,
                         [] if trace else None, timed_out=not r.done)


class MergedFastCore(FastCore):
    """The core inside a merged checkpoint on the fast engine: the merged files' chip part
    (routed: its layers and its stored token tables; stock: cut out of the widened model's
    tensors) run by the fast kernel, bit-identical to :class:`MergedCore`."""

    def _load(self, path: Path, dtype: str) -> Any:
        from backends.engines.fast.engine import FastEngine
        return FastEngine(path, dtype, roms=self.image.images, threads=1)


#: each engine's core class for the core inside a merged checkpoint (``run --model``)
HFCore.merged = MergedCore
FastCore.merged = MergedFastCore


def fast_advance(eng: Any, cache: Any, row: int, reader: TraceReader, cur: Token,
                 max_steps: int, chunk: int = FastCore.CHUNK,
                 feed: InputFeed | None = None) -> Token:
    """Run stream ``row`` of a fast engine's ``cache`` on from token ``cur`` until it exits,
    faults or retires ``max_steps`` more instructions, feeding ``reader`` every token; the
    kernel makes the tokens ``chunk`` at a time (never more than instructions left in the
    budget, so a run stops where a token-by-token loop would) and stops at a Want, which
    ``feed`` answers (In(next input byte)) before the kernel goes on. Returns the last
    token."""
    n0 = reader.instructions
    feed = feed or InputFeed()
    stop = eng.stop_bitmap([k for k, kind in enumerate(eng.circuit.kinds)
                            if kind.halt or k == WANT])
    offsets = np.asarray(eng.circuit.kind_offsets())
    while not reader.done:
        left = max_steps - (reader.instructions - n0)
        if left <= 0 and executes(cur):
            break
        ids = eng.run(cache, row, eng.token_id(cur), max(1, min(chunk, left)), stop)
        if not len(ids):
            break
        feed_chunk(reader, ids, offsets, eng.token_of, feed)
        cur = reader.last
    return cur


class CoreBatch:
    """Many streams of the compiled core (one program with many inputs, or many programs)
    on one engine, one cache row each: ``fast`` runs the rows free on ``threads`` threads
    (default: the CPU count; each kernel call releases the GIL), ``hf`` steps every row
    still running in one batched decode call per token. ``run(max_steps)`` gives one
    :class:`RunResult` per stream, in order; ``counters()`` what the progress line shows."""

    def __init__(self, images: list[CoreImage], engine: str = "fast", target: str = "compact",
                 dtype: str = "bf16", threads: int | None = None, model: Path | None = None,
                 eng: Any = None):
        """``eng``: the engine already loaded (:func:`batch_engine`), to share it."""
        self.name, self.target = engine, target
        self.eng = eng if eng is not None else batch_engine(engine, target, dtype, model)
        self.threads = max(1, threads or os.cpu_count() or 1)
        self.cache = self.eng.new_cache(len(images), roms=[im.images for im in images])
        self.readers = [TraceReader(word_at=im.machine.read_word) for im in images]
        self.feeds = [InputFeed(im.machine.rx, text=im.text) for im in images]
        self.cur = [im.start for im in images]
        for r, tok in zip(self.readers, self.cur):
            r.feed(tok)

    def counters(self) -> dict[str, int]:
        rs = self.readers
        return {"streams": len(rs), "done": sum(r.done for r in rs),
                "instructions": sum(r.instructions for r in rs), "tokens": sum(r.tokens for r in rs)}

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        return {"tokens": c["tokens"], "target": self.target, "threads": self.threads,
                "tokens_per_instruction": (round(c["tokens"] / c["instructions"], 4)
                                           if c["instructions"] else None)}

    def run(self, max_steps: int) -> list[RunResult]:
        return list(self.results(max_steps))

    def results(self, max_steps: int) -> Iterator[RunResult]:
        """One :class:`RunResult` per stream, in order, each given as soon as its stream and
        every stream before it are done."""
        n0 = [r.instructions for r in self.readers]
        out0 = [len(r.output) for r in self.readers]

        def result(b: int) -> RunResult:
            r = self.readers[b]
            return RunResult(r.exit_code, bytes(r.output[out0[b]:]), r.instructions - n0[b],
                             r.fault, None, timed_out=not r.done)
        if self.eng.runs_rows_apart:
            def one(b: int) -> None:
                self.cur[b] = fast_advance(self.eng, self.cache, b, self.readers[b], self.cur[b],
                                           max_steps, feed=self.feeds[b])
            with ThreadPoolExecutor(min(self.threads, len(self.readers))) as pool:
                for b, _ in enumerate(pool.map(one, range(len(self.readers)))):
                    yield result(b)
        else:
            for b in self._run_batched(max_steps, n0):
                yield result(b)

    def _run_batched(self, max_steps: int, n0: list[int]) -> Iterator[int]:
        """hf: one decode call per token for all rows; a row that is done (or out of budget)
        is fed its last token again and its answers are ignored. Yields each row, in order,
        once it and the rows before it are done."""
        eng, rs = self.eng, self.readers
        shown = 0

        def live(b: int) -> bool:
            return not rs[b].done and not (executes(self.cur[b])
                                           and rs[b].instructions - n0[b] >= max_steps)
        while True:
            going = [live(b) for b in range(len(rs))]
            while shown < len(rs) and not going[shown]:
                yield shown
                shown += 1
            if not any(going):
                break
            ids = eng.decode_step([eng.token_id(t) for t in self.cur], self.cache).tolist()
            for b, tid in enumerate(ids):
                if going[b]:
                    self.cur[b] = self.feeds[b].answer(eng.token_of(int(tid)))
                    rs[b].feed(self.cur[b])


def batch_engine(engine: str, target: str, dtype: str, model: Path | None = None) -> Any:
    """The engine a :class:`CoreBatch` runs its streams on: ``engine`` (hf or fast,
    :func:`backends.engines.registry.open_engine`) on the cached core for ``target``, or on merged
    checkpoint ``model``'s chip; its streams one thread each (a batch runs them side by
    side)."""
    from backends.engines.registry import open_engine
    if model is None:
        from backends.chipdir.target import get_target
        get_target(target)
        model = compiled_core(FULL, target, dtype)
    return open_engine(engine, model, dtype, threads=1)


#: the most streams of a batch of inputs held at once (each holds its program's memory
#: images, megabytes of them, and an engine state): a batch of any number of inputs runs in
#: groups of this many, so its memory does not grow with the number of inputs
STREAM_GROUP = 32


class InputStreams:
    """One program once per input, on one engine (hf or fast), in groups of at most
    ``group`` streams (:data:`STREAM_GROUP`; a group of :class:`CoreBatch`), the engine
    loaded once. ``inputs`` is a callable giving the inputs afresh (an iterator), so they
    are never all held as images. Every input is checked first (``ElfError("K: why")``, K
    its 1-based line), before any stream runs. :meth:`results` gives one RunResult per
    input, in order, each as soon as it and every input before it are done."""

    def __init__(self, path: Path, inputs: Callable[[], Iterator[bytes]], count: int,
                 engine: str = "fast", target: str = "compact", dtype: str | None = None,
                 threads: int | None = None, model: Path | None = None,
                 group: int | None = None):
        from cpu.elf import read_elf
        from cpu.emulator import check_input
        self.sizes = FULL
        if model is not None:
            from backends.engines.merged import core_manifest
            manifest = core_manifest(Path(model))
            self.sizes, target = core_sizes(manifest), "merged"
            dtype = dtype or manifest.get("dtype")
        elf = read_elf(path)
        for k, text in enumerate(inputs(), 1):
            try:
                check_input(elf, text)
            except ElfError as e:
                raise ElfError(f"{k}: {e}") from None
        self.path, self.inputs, self.count = path, inputs, count
        self.name, self.target, self.dtype = engine, target, dtype or "bf16"
        self.threads, self.group = threads, max(1, group or STREAM_GROUP)
        self.eng = batch_engine(engine, target, self.dtype, model)
        self._done = {"done": 0, "instructions": 0, "tokens": 0}
        self._batch: CoreBatch | None = None
        self._threads = max(1, threads or os.cpu_count() or 1)

    def counters(self) -> dict[str, int]:
        now = self._batch.counters() if self._batch is not None else {}
        return {"streams": self.count,
                **{k: v + now.get(k, 0) for k, v in self._done.items()}}

    def stats(self) -> dict[str, Any]:
        c = self.counters()
        return {"tokens": c["tokens"], "target": self.target, "threads": self._threads,
                "stream_group": self.group,
                "tokens_per_instruction": (round(c["tokens"] / c["instructions"], 4)
                                           if c["instructions"] else None)}

    def results(self, max_steps: int) -> Iterator[RunResult]:
        lines = self.inputs()
        while True:
            texts = list(itertools.islice(lines, self.group))
            if not texts:
                return
            images = [load_program(self.path, t, self.sizes) for t in texts]
            self._batch = CoreBatch(images, self.name, self.target, self.dtype, self.threads,
                                    eng=self.eng)
            del images
            yield from self._batch.results(max_steps)
            c = self._batch.counters()
            for k in self._done:
                self._done[k] += c[k]
            self._batch = None


def sim_engine(path: Path, input_text: bytes | None) -> SimCore:
    """``deltachip run --engine sim``: the full core in the reference simulator."""
    return SimCore(load_program(path, input_text))


def hf_engine(path: Path, input_text: bytes | None, target: str = "compact",
              dtype: str | None = None, engine: type[HFCore] = HFCore,
              model: Path | None = None) -> HFCore:
    """``deltachip run --engine hf [--target T] [--dtype D]``: the full core, compiled (and
    cached) for ``target``/``dtype``, in transformers (or on ``engine``). ``--model DIR``: the
    core inside the merged checkpoint DIR (either layout) instead (:class:`MergedCore`; the core's
    sizes and dtype are the merge's)."""
    if model is not None:
        from backends.engines.merged import core_manifest
        manifest = core_manifest(Path(model))
        sizes = core_sizes(manifest)
        return engine.merged(load_program(path, input_text, sizes), sizes, target="merged",
                    dtype=dtype or manifest.get("dtype", "bf16"), checkpoint=Path(model))
    dtype = dtype or "bf16"
    from backends.chipdir.target import get_target
    get_target(target)                  # a bad --target is refused before any work
    image = load_program(path, input_text)
    return engine(image, target=target, dtype=dtype)


def core_batch(path: Path, inputs: list[bytes], engine: str = "fast", target: str = "compact",
               dtype: str | None = None, threads: int | None = None,
               model: Path | None = None) -> CoreBatch:
    """The program once per input, all streams on one ``engine`` (hf or fast; ``model``: hf
    on a merged checkpoint). An input that does not fit is refused as
    ``ElfError("K: why")``, K its 1-based line."""
    sizes = FULL
    if model is not None:
        from backends.engines.merged import read_manifest
        manifest = read_manifest(Path(model))
        sizes, target = core_sizes(manifest), "merged"
        dtype = dtype or manifest.get("dtype")
    images = []
    for k, text in enumerate(inputs, 1):
        try:
            images.append(load_program(path, text, sizes))
        except ElfError as e:
            raise ElfError(f"{k}: {e}") from None
    return CoreBatch(images, engine, target, dtype or "bf16", threads, model)


def hf_batch(path: Path, inputs: Callable[[], Iterator[bytes]], count: int,
             **options: Any) -> InputStreams:
    """``deltachip run --engine hf --inputs FILE``: one batched decode call per token, for
    each group of streams (:class:`InputStreams`)."""
    return InputStreams(path, inputs, count, "hf", **options)


def fast_batch(path: Path, inputs: Callable[[], Iterator[bytes]], count: int,
               **options: Any) -> InputStreams:
    """``deltachip run --engine fast --inputs FILE``: the streams of each group
    free-running on threads (:class:`InputStreams`)."""
    return InputStreams(path, inputs, count, "fast", **options)


def fast_engine(path: Path, input_text: bytes | None, target: str = "compact",
                dtype: str | None = None, model: Path | None = None) -> FastCore:
    """``deltachip run --engine fast``: the same compiled core as ``hf``, on the fast
    engine (``--model DIR``: the core inside a merged checkpoint)."""
    return hf_engine(path, input_text, target, dtype, FastCore, model)


def core_sizes(manifest: dict[str, Any]) -> Any:
    """The core sizes a merged checkpoint's firmware was loaded for (the full core when the
    manifest names none)."""
    sz = (manifest.get("firmware") or {}).get("core_sizes")
    return CoreSizes(**sz) if isinstance(sz, dict) else FULL
