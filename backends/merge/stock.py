"""The stock merge: base and chip in one homogeneous, widened Qwen3.5 checkpoint.

Takes: a base directory (:mod:`backends.merge.base`), a chip compiled for the base's module
shapes (``deltachip compile --target BASE_DIR/config.json``), an output path. Gives: OUT_DIR
holding a plain ``Qwen3_5ForCausalLM`` checkpoint (no remote code) of hidden width
``H' = max(Hb, Hc) + len(extra) + pad + 1``. Base and chip **share** the residual's dims:
a position is either text or chip, and each side's layers are muted on the other's
positions, so they never see each other's values:

- residual dims ``[0, Hb)``: the base block. Every base tensor keeps its values (its bytes,
  when the dtypes agree) with its hidden rows/columns there, except the hidden norms and the
  lm_head's columns on the dims the chip's lm_head reads (below);
- dims ``[0, Hc)``: the chip's residual, its ballast first, every chip weight at its own
  offset (the same dims as the base block, as far as both reach);
- ``extra`` ballast dims after ``max(Hb, Hc)``: ``s_i * 2**m`` on chip tokens (0 on text
  tokens), ``Σ s_i² = H' - Hc``, so the chip's pre-norms see the mean square they were
  compiled for (``n_b·B² / Hc = 4**m``) at the wider width and stay exact; the first is the
  **mute dim**; ``pad`` zero dims make that sum solvable;
- the text lane (the last dim): ``2**-20`` on text tokens (too small to move any mean square).

**Chip positions** carry nothing but the chip's residual and the extra ballast: the chip's
layers compute what they compute alone. Every base layer then adds exactly 0: **mute**
columns on the mute dim drive its GDN ``z`` (the output gate), its MLP ``gate_proj`` and its
attention's output gate (the gate half of ``q_proj``) to ``-2**40``, so silu/sigmoid give
exactly 0, and its GDN ``a``/``b`` too (no decay, beta 0: a base GDN state passes a chip run
unchanged). The final norm holds the chip's weights on the dims the chip's lm_head reads
(and on its dims past the base's), so the chip's lm_head rows read exactly what they read
alone; the base's lm_head rows read the mute dim with a large
negative weight, so a text id never wins on a chip position.

**Text positions** carry the base's residual and the text lane. The chip's pre-norms lift the
text lane to about ``2**80 / rms`` and the chip's GDN ``z``/``a``/``b`` and MLP ``gate_proj``
read it with weight -1: every chip layer adds exactly 0 and keeps its GDN state. RMSNorm then
divides by ``H'`` instead of ``Hb`` (its output grows by ``sqrt(H'/Hb)``), compensated by
multiplying every base hidden norm's ``1 + w`` over the base block by ``sqrt(Hb/H')``; on
the base dims the chip's lm_head reads, the final norm's base factor moves into the base
lm_head's columns instead (rounded once, to the tensor's dtype: text is close to, not equal to, the base's;
docs/merge.md measures it). The final norm lifts the text lane to about ``2**80 / rms`` and
the chip's lm_head rows read it with weight -1, so a chip id never wins on a text position.

Layers: the chip's (its closing zero attention layer dropped: it adds exactly 0), then the
base's.

Files: the weights in shards (the chip's layers first, then one shard per base shard; an
``mtp.*`` head is not carried: its width is the base's; nor is a vision-language base's
vision tower) with an index, ``config.json`` (the base's with the new width, layers,
``layer_types`` and vocabulary, untied), the tokenizer with the chip's tokens
(:mod:`backends.merge.routed`), ``deltachip.json`` (layout ``stock``,
the dims above), ``deltachip/chip.json``, ``deltachip/roms/*.hex`` and
``deltachip/rom_states.safetensors`` (each memory image as the initial GDN state of its chip
layer, fp32 bits as int32; :func:`chip_cache` loads it); with ``firmware`` (the core and a
program: the program's images are the memory images), the manifest's ``firmware`` and
``bridge`` entries and ``deltachip/bridge.safetensors`` (the tool-call bridge's byte
tables, :mod:`backends.merge.bridge`, for the driver :mod:`backends.merge.stock_calls`).
The chip in it runs as an engine: :class:`backends.engines.merged.StockEngine` (hf) and the
fast engine (:mod:`backends.chipdir.stock`). Built tensor by tensor, in chunks of at most
16 MiB, in a temporary directory renamed into place; BASE_DIR and the chip are only read.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from backends.chipdir.checkpoint import INDEX
from backends.merge.base import Base
from backends.chipdir.stock import COLS, LAYER, NORMS, ROWS, SAME_FIELDS
from backends.merge.routed import (DTYPE_NAMES, Firmware, MergeReport, make_bridge, MergeChip,
                                   program_files, programs_of,
                                   merge_manifest, check_disk, read_inputs, shard_name,
                                   write_chip_files)
from backends.chipdir.stfile import (CHUNK, DTYPE_BYTES, MergeError, OutTensor, TensorEntry,
                                     header_bytes, write_file)
from common.outputs import building_dir

#: the text lane: its value on text tokens; the 1 + w of the final norm and of the chip's
#: pre-norms on it (it comes out about 2**80 / rms); the weight the chip's gates and lm_head
#: rows read it with
TEXT_LANE = 2.0 ** -20
TEXT_NORM = 2.0 ** 100
TEXT_WEIGHT = -1.0
#: how far down the mute columns drive a base layer's gates (and GDN a, b) on a chip token
MUTE = 2.0 ** 40
#: how far down the base's lm_head rows go on a chip token
TEXT_FLOOR = 2.0 ** 24
#: the most zero dims added so the extra ballast's squares can fill the wider stream
MAX_PAD = 8
ROM_STATES = "deltachip/rom_states.safetensors"
#: the tool-call bridge's byte tables (backends/merge/bridge.py), for the driver
BRIDGE_TABLES = "deltachip/bridge.safetensors"
#: the tensors that take a mute column: every row of these (base layers: on the mute dim;
#: chip layers: on the text lane), and the gate half of a base attention's q_proj
MUTED = ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight",
         "linear_attn.in_proj_z.weight", "mlp.gate_proj.weight")
GATED_Q = "self_attn.q_proj.weight"
RAW = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32}
#: most bytes of chip layers in one shard
CHIP_SHARD = 2 << 30


@dataclass(frozen=True)
class Layout:
    """Where everything sits in the merged residual (see the module docstring)."""
    hb: int                     # base width: dims [0, hb)
    hc: int                     # chip width: dims [0, hc), its ballast first
    extra: tuple[int, ...]      # extra ballast dim over + i holds extra[i] * 2**m
    m: int                      # the chip's pre-norms multiply by 2**-m
    pad: int = 0                # zero dims after the extra ballast
    scale: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", math.sqrt(self.hb / self.hidden))

    @property
    def over(self) -> int:
        """The dims base and chip residuals take together: [0, max(hb, hc))."""
        return max(self.hb, self.hc)

    @property
    def hidden(self) -> int:
        return self.over + len(self.extra) + self.pad + 1

    @property
    def mute_dim(self) -> int:
        return self.over

    @property
    def text_dim(self) -> int:
        return self.hidden - 1

    def record(self) -> dict[str, Any]:
        e0 = self.over
        return {"hidden": self.hidden, "base_dims": [0, self.hb], "chip_dims": [0, self.hc],
                "shared_dims": [0, min(self.hb, self.hc)], "mute_dim": self.mute_dim,
                "extra_ballast": {"dims": [e0, e0 + len(self.extra)],
                                  "values": [s * 2 ** self.m for s in self.extra]},
                "pad_dims": [e0 + len(self.extra), self.text_dim],
                "text_lane": {"dim": self.text_dim, "value": TEXT_LANE, "norms": TEXT_NORM,
                              "chip_weight": TEXT_WEIGHT},
                "base_norm_scale": self.scale, "mute": -MUTE, "text_floor": -TEXT_FLOOR}


def squares(total: int, most: int = 8) -> tuple[int, ...]:
    """The extra ballast for a stream widened by ``total`` dims plus the n new ones: the
    smallest n <= ``most`` and integers 255 >= s_1 >= ... >= s_n >= 1 with
    Σ s_i² = total + n; MergeError when there are none."""
    def find(rest: int, n: int, top: int) -> list[int] | None:
        if n == 0:
            return [] if rest == 0 else None
        s = min(top, math.isqrt(rest - (n - 1)))
        while s >= 1 and s * s * n >= rest:
            tail = find(rest - s * s, n - 1, s)
            if tail is not None:
                return [s, *tail]
            s -= 1
        return None
    for n in range(1, most + 1):
        if (found := find(total + n, n, 255)) is not None:
            return tuple(found)
    raise MergeError(f"no {most} ballast values of at most 8 significant bits fill a block of "
                     f"{total} dims (the base is too wide for the stock layout)")


def plan_layout(base: Base, chip: MergeChip) -> Layout:
    num = chip.chip["numerics"]
    hb, hc, n_b = int(base.config["hidden_size"]), int(num["hidden"]), int(num["n_b"])
    if n_b * 4 ** int(num["b_res"]) != 4 ** int(num["m"]) * hc:
        raise MergeError(f"chip {chip.path}: its ballast (n_b {n_b}, 2^{num['b_res']}) does "
                         f"not make its pre-norms exactly 2^-{num['m']} at width {hc}; "
                         "recompile it")
    # the base's dims past the chip's, n extra dims, the pad and the text lane widen the
    # chip's stream; its energy must grow by 4^m per dim: Σ s_i² = (that width) with the
    # ballast s_i * 2^m. Some widths take no such s_i (Σ s_i² - n is a sum of 3, 8, 15, ...):
    # the fewest zero dims more that make one
    for pad in range(MAX_PAD + 1):
        try:
            extra = squares(max(hb, hc) - hc + pad + 1)
        except MergeError:
            continue
        return Layout(hb, hc, extra, int(num["m"]), pad)
    raise MergeError(f"no {MAX_PAD} zero dims let ballast values of at most 8 significant "
                     f"bits fill the stock stream of base {hb} and chip {hc} dims")


# ---- tensors: blocks of source tensors placed in a zero output -----------------------------
@dataclass(frozen=True)
class Block:
    """Source tensor ``src`` (viewed as 2-D: rows x the rest) placed at (row, col)."""
    src: TensorEntry
    path: Path
    row: int = 0
    col: int = 0
    #: each column's factor (float64; rounded once to the output's dtype), or None: copied
    scale: np.ndarray | None = None


@dataclass
class Plan:
    """One output tensor: zeros, source blocks, then constants (r0, r1, col, value), or
    ``data`` (raw values, for small computed tensors)."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    blocks: list[Block] = field(default_factory=list)
    consts: list[tuple[int, int, int, float]] = field(default_factory=list)
    data: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


def _2d(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 1:
        return 1, shape[0]
    return shape[0], math.prod(shape[1:])


def decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Raw values of ``dtype`` as float64."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.view(np.float16 if dtype == "F16" else np.float32).astype(np.float64)


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to ``dtype`` (to nearest, ties to even), as raw values."""
    if dtype == "BF16":
        import torch
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(torch.bfloat16)
        return t.view(torch.int16).numpy().view(np.uint16)
    return values.astype(np.float16 if dtype == "F16" else np.float32).view(RAW[dtype])


def convert(raw: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Raw values of ``src`` as raw values of ``dst`` (the same values: never narrower)."""
    if src == dst:
        return raw
    if dst != "F32":
        raise MergeError(f"internal: {src} tensors cannot be written as {dst}")
    if src == "BF16":
        return raw.astype(np.uint32) << 16
    return raw.view(np.float16).astype(np.float32).view(np.uint32)


def common_dtype(*dtypes: str) -> str:
    return dtypes[0] if len(set(dtypes)) == 1 else "F32"


def read_rows(b: Block, r0: int, r1: int) -> np.ndarray:
    """Rows ``r0:r1`` of block ``b``'s source, raw, 2-D."""
    rows, cols = _2d(b.src.shape)
    width = DTYPE_BYTES[b.src.dtype]
    n = (r1 - r0) * cols * width
    with open(b.path, "rb") as f:
        f.seek(b.src.begin + r0 * cols * width)
        buf = f.read(n)
    if len(buf) != n:
        raise MergeError(f"{b.path}: ended early while reading {b.src.name} (was it changed "
                         "during the merge?)")
    return np.frombuffer(buf, dtype=RAW[b.src.dtype]).reshape(r1 - r0, cols)


def chunks(p: Plan, zeros: list[int]) -> Iterator[bytes]:
    """The bytes of ``p``, at most about CHUNK at a time; adds the bytes of its zero
    elements to ``zeros[0]``."""
    width = DTYPE_BYTES[p.dtype]
    if p.data is not None:
        zeros[0] += int(p.data.size - np.count_nonzero(p.data)) * width
        yield p.data.tobytes()
        return
    rows, cols = _2d(p.shape)
    step = max(1, CHUNK // (cols * DTYPE_BYTES[p.dtype]))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        out = np.zeros((r1 - r0, cols), dtype=RAW[p.dtype])
        for b in p.blocks:
            br, bc = _2d(b.src.shape)
            lo, hi = max(r0, b.row), min(r1, b.row + br)
            if lo < hi:
                raw = read_rows(b, lo - b.row, hi - b.row)
                out[lo - r0:hi - r0, b.col:b.col + bc] = (
                    convert(raw, b.src.dtype, p.dtype) if b.scale is None else
                    encode(decode(raw, b.src.dtype) * b.scale, p.dtype))
        for c0, c1, col, value in p.consts:
            lo, hi = max(r0, c0), min(r1, c1)
            if lo < hi:
                out[lo - r0:hi - r0, col] = encode(np.array([value]), p.dtype)[0]
        zeros[0] += int(out.size - np.count_nonzero(out)) * width
        yield out.tobytes()


def write_plans(dst: Path, plans: list[Plan], zeros: list[int]) -> None:
    """A new safetensors file ``dst`` holding ``plans`` in order."""
    import struct
    raw = header_bytes(plans, {"format": "pt"})   # type: ignore[arg-type]
    with open(dst, "xb") as fo:
        fo.write(struct.pack("<Q", len(raw)))
        fo.write(raw)
        for p in plans:
            n = 0
            for buf in chunks(p, zeros):
                fo.write(buf)
                n += len(buf)
            assert n == p.nbytes, (p.name, n, p.nbytes)


def plans_size(plans: list[Plan]) -> int:
    return 8 + len(header_bytes(plans, {"format": "pt"})) + sum(  # type: ignore[arg-type]
        p.nbytes for p in plans)


# ---- what goes where --------------------------------------------------------------------
class _Planner:
    def __init__(self, base: Base, chip: MergeChip, lay: Layout):
        self.base, self.chip, self.lay = base, chip, lay
        self.bt = {n: (h.path, t) for n, (h, t) in base.tensors().items()}
        self.ct = {n: (h.path, t) for h in chip.files for n, t in h.tensors.items()}
        self.lc = int(chip.config["num_hidden_layers"]) - 1     # the zero attention layer off
        self.cdtype = "F32" if chip.chip["dtype"] == "fp32" else "BF16"
        self._readout: np.ndarray | None = None

    def norm_values(self, w: np.ndarray, dtype: str) -> np.ndarray:
        """A base hidden norm's weights ``w`` widened: 1 + w scaled by sqrt(Hb/H') on the
        base block, w = 0 elsewhere, rounded to ``dtype`` (raw values)."""
        out = np.zeros(self.lay.hidden)
        out[:self.lay.hb] = (1.0 + w) * self.lay.scale - 1.0
        return encode(out, dtype)

    def widened(self, name: str, path: Path, t: TensorEntry, chip: bool,
                out_name: str) -> Plan:
        """A layer tensor of the base or the chip in the merged width, with its mute
        columns: a base layer's gates read the mute dim, a chip layer's the text lane."""
        lay, H = self.lay, self.lay.hidden
        if name.endswith(COLS):
            p = Plan(out_name, t.dtype, (t.shape[0], H), [Block(t, path)])
            if chip:        # on a text token the chip's pre-norms lift the text lane
                if name.endswith(MUTED):
                    p.consts.append((0, t.shape[0], lay.text_dim, TEXT_WEIGHT))
                return p
            mute = -MUTE / lay.extra[0]     # the mute dim comes out of a norm as extra[0]
            if name.endswith(MUTED):
                p.consts.append((0, t.shape[0], lay.mute_dim, mute))
            elif name.endswith(GATED_Q):    # per head: head_dim query rows, head_dim gate rows
                d = int(self.base.config["head_dim"])
                p.consts += [(r + d, r + 2 * d, lay.mute_dim, mute)
                             for r in range(0, t.shape[0], 2 * d)]
            return p
        if name.endswith(ROWS):
            return Plan(out_name, t.dtype, (H, t.shape[1]), [Block(t, path)])
        if name.endswith(NORMS):
            if not chip:    # in the chip's dtype when wider: fp32 keeps the scale finer
                dt = common_dtype(t.dtype, self.cdtype)
                w = decode(read_rows(Block(t, path), 0, 1)[0], t.dtype)
                return Plan(out_name, dt, (H,), data=self.norm_values(w, dt))
            p = Plan(out_name, t.dtype, (H,), [Block(t, path)])
            p.consts.append((0, 1, lay.text_dim, TEXT_NORM - 1.0))
            return p
        return Plan(out_name, t.dtype, t.shape, [Block(t, path)])

    def chip_layers(self) -> list[list[Plan]]:
        """The chip's layers 0..lc-1, grouped into shards of about CHIP_SHARD bytes."""
        shards: list[list[Plan]] = [[]]
        size = 0
        for i in range(self.lc):
            layer = [self.widened(n, p, t, True, n) for n, (p, t) in self.ct.items()
                     if n.startswith(f"model.layers.{i}.")]
            nbytes = sum(p.nbytes for p in layer)
            if shards[-1] and size + nbytes > CHIP_SHARD:
                shards.append([])
                size = 0
            shards[-1] += sorted(layer, key=lambda p: p.name)
            size += nbytes
        return shards

    def base_shards(self) -> list[list[Plan]]:
        """One shard per base weight file: its layers renumbered and widened, the embedding,
        the lm_head (after the embedding when the base is tied) and the final norm merged
        with the chip's."""
        out = []
        for h in self.base.files:
            plans = []
            for stored, t in sorted(h.tensors.items(), key=lambda kv: kv[1].begin):
                n = self.base.text_name(stored)
                if n is None or (n == "lm_head.weight" and self.base.tied):
                    continue
                if n == "model.embed_tokens.weight":
                    plans.append(self.embedding(h.path, t))
                    if self.base.tied:
                        plans.append(self.lm_head(h.path, t))
                elif n == "lm_head.weight":
                    plans.append(self.lm_head(h.path, t))
                elif n == "model.norm.weight":
                    plans.append(self.final_norm(h.path, t))
                else:
                    mt = LAYER.match(n)
                    assert mt, n
                    new = f"model.layers.{int(mt.group(1)) + self.lc}.{mt.group(2)}"
                    plans.append(self.widened(n, h.path, t, False, new))
            out.append(plans)
        return out

    def _chip(self, name: str) -> tuple[Path, TensorEntry]:
        return self.ct[name]

    def embedding(self, path: Path, t: TensorEntry) -> Plan:
        cp, ct = self._chip("model.embed_tokens.weight")
        lay, vb = self.lay, t.shape[0]
        p = Plan("model.embed_tokens.weight", common_dtype(t.dtype, ct.dtype),
                 (vb + ct.shape[0], lay.hidden), [Block(t, path), Block(ct, cp, vb, 0)])
        p.consts.append((0, vb, lay.text_dim, TEXT_LANE))
        for i, s in enumerate(lay.extra):
            p.consts.append((vb, vb + ct.shape[0], lay.over + i, float(s * 2 ** lay.m)))
        return p

    def readout(self) -> np.ndarray:
        """The merged dims where the final norm must be the chip's (bool over the merged
        width): the chip's dims its lm_head reads, and its dims past the base's."""
        if self._readout is None:
            cp, ct = self._chip("lm_head.weight")
            rows, cols = _2d(ct.shape)
            mask = 0x7FFF if ct.dtype in ("BF16", "F16") else 0x7FFFFFFF
            read = np.zeros(cols, dtype=bool)
            step = max(1, CHUNK // (cols * DTYPE_BYTES[ct.dtype]))
            for r0 in range(0, rows, step):
                read |= np.any(read_rows(Block(ct, cp), r0, min(rows, r0 + step)) & mask,
                               axis=0)
            out = np.zeros(self.lay.hidden, dtype=bool)
            out[:cols] = read
            out[self.lay.hb:self.lay.hc] = True
            self._readout = out
        return self._readout

    def final_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """1 + w of the final norm over the merged width, as the merge writes it (the chip's
        on :meth:`readout`, else the base's times sqrt(Hb/H'), unrounded), and the factor
        the base's lm_head columns take so that text sees the base's factor everywhere."""
        lay = self.lay
        bp, bt = self.bt["model.norm.weight"]
        cp, ct = self._chip("model.norm.weight")
        fb, fc = np.ones(lay.hidden), np.ones(lay.hidden)
        fb[:lay.hb] = (1.0 + decode(read_rows(Block(bt, bp), 0, 1)[0], bt.dtype)) * lay.scale
        fc[:lay.hc] = 1.0 + decode(read_rows(Block(ct, cp), 0, 1)[0], ct.dtype)
        chip = self.readout()
        if not np.all(fc[chip]):
            raise MergeError(f"chip {self.chip.path}: its final norm zeroes a dim its lm_head "
                             "reads: recompile it")
        f = np.where(chip, fc, fb)
        return f, (fb / f)[:lay.hb]

    def lm_head(self, path: Path, t: TensorEntry) -> Plan:
        """The base's rows with their columns on the chip's readout dims times the base's
        final-norm factor over the chip's (the final norm holds the chip's there), and the
        mute dim's floor; the chip's rows with the text lane's."""
        cp, ct = self._chip("lm_head.weight")
        lay, vb = self.lay, t.shape[0]
        _, scale = self.final_factors()
        p = Plan("lm_head.weight", common_dtype(t.dtype, ct.dtype),
                 (vb + ct.shape[0], lay.hidden),
                 [Block(t, path, scale=scale), Block(ct, cp, vb, 0)])
        p.consts.append((0, vb, lay.mute_dim, -TEXT_FLOOR / lay.extra[0]))
        p.consts.append((vb, vb + ct.shape[0], lay.text_dim, TEXT_WEIGHT))
        return p

    def final_norm(self, path: Path, t: TensorEntry) -> Plan:
        """The chip's on its readout dims, the base's (compensated) elsewhere, the text
        lane's lift."""
        cp, ct = self._chip("model.norm.weight")
        dtype = common_dtype(t.dtype, ct.dtype)
        f, _ = self.final_factors()
        f[self.lay.text_dim] = TEXT_NORM
        return Plan("model.norm.weight", dtype, (self.lay.hidden,), data=encode(f - 1.0, dtype))


def check_chip_fits(base: Base, chip: MergeChip) -> None:
    """MergeError unless the chip's layers have the base's module shapes and end with the
    zero attention layer the compiler adds."""
    cfg, bcfg = chip.config, base.config
    for key in SAME_FIELDS:
        want = bcfg.get(key, chip.config.get(key))
        if cfg.get(key) != want:
            raise MergeError(
                f"chip {chip.path}: compiled with {key} {json.dumps(cfg.get(key))}, the base "
                f"has {json.dumps(want)}: the stock layout runs chip and base layers in one "
                f"model with one set of module shapes; compile the chip for the base with "
                f"`deltachip compile FILE.hdl --target {base.path / 'config.json'} -o DIR`")
    kinds = cfg.get("layer_types") or []
    if not kinds or kinds[-1] != "full_attention" or "full_attention" in kinds[:-1]:
        raise MergeError(f"chip {chip.path}: its layers are {json.dumps(kinds)}; a deltachip "
                         "chip is GDN layers closed by one zero attention layer: recompile it")
    last = len(kinds) - 1
    for tail in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
        name = f"model.layers.{last}.{tail}"
        hit = next(((h.path, h.tensors[name]) for h in chip.files if name in h.tensors), None)
        if hit is None or np.count_nonzero(read_rows(Block(hit[1], hit[0]), 0,
                                                     _2d(hit[1].shape)[0])):
            raise MergeError(f"chip {chip.path}: {name} is not zero (the closing attention "
                             "layer must add nothing): recompile it")


@dataclass
class StockReport(MergeReport):
    hidden: int = 0
    zero_bytes: int = 0
    layout: dict[str, Any] = field(default_factory=dict)


def merge_stock(base_dir: str | Path, out_dir: str | Path, chip_dir: str | Path,
                dtype: str | None = None,
                progress: Callable[[str], None] | None = None,
                firmware: Firmware | list[Firmware] | None = None,
                digests: bool = True) -> StockReport:
    """Write the stock merge of ``chip_dir`` into ``base_dir``'s model at ``out_dir`` (see
    the module docstring). ``dtype`` (bf16 or fp32, default the chip's) must be the chip's.
    ``firmware`` (:class:`cpu.rv32.merged.Firmware`, the chip being the core): a RISC-V
    program whose memory images replace the chip's, recorded in the manifest; or a list of
    them (each answers its own tool: :func:`backends.merge.routed.program_files`; the
    driver starts a call on its program's images). ``digests`` False merges a chip without
    its manifest.json (unchecked)."""
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    base_dir, out, chip_dir = Path(base_dir), Path(out_dir), Path(chip_dir)
    fws = programs_of(firmware)
    firmware = fws[0] if fws else None
    inp = read_inputs(base_dir, out, chip_dir, dtype, fws, say, fits=check_chip_fits,
                      digests=digests)
    base, chip, names, offset, texts = inp.base, inp.chip, inp.names, inp.offset, inp.texts
    dtype = chip.chip["dtype"]
    lay = plan_layout(base, chip)
    pl = _Planner(base, chip, lay)
    chip_shards = pl.chip_layers()
    shards = [s for s in chip_shards + pl.base_shards() if s]
    nv, dk, dv = chip.rom_shape
    roms = [OutTensor(f"layer_{layer}", "I32", (nv, dk, dv), len(b), data=b)
            for layer, b in chip.rom_states.items()]
    sizes = [plans_size(s) for s in shards]
    extra = sum(len(b) for b in texts.values()) + sum(t.nbytes for t in roms)
    check_disk(out, sum(sizes) + extra)
    n = len(shards)
    files = [shard_name(i, n) for i in range(n)]
    zeros = [0]
    with building_dir(out, MergeError, f"OUT_DIR {out}: cannot write the merged checkpoint"
                      ) as tmp:
        weight_map: dict[str, str] = {}
        for i, plans in enumerate(shards):
            say(f"writing shard {i + 1} of {n}")
            write_plans(tmp / files[i], plans, zeros)
            weight_map.update(dict.fromkeys((p.name for p in plans), files[i]))
        index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
        (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        (tmp / "config.json").write_text(json.dumps(
            _config(base, pl.lc, lay, offset + len(names), dtype), indent=2) + "\n")
        for fname, data in texts.items():
            (tmp / fname).write_bytes(data)
        rom_files = write_chip_files(tmp, chip)
        if roms:
            write_file(tmp / ROM_STATES, roms, {"format": "pt"})
        manifest = merge_manifest(base, chip, offset, names, dtype, rom_files)
        manifest["layout"] = "stock"
        manifest["stock"] = {**lay.record(), "chip_layers": [0, pl.lc],
                             "base_layers": [pl.lc, pl.lc + int(base.config["num_hidden_layers"])],
                             "rom_states": ROM_STATES if roms else None,
                             "rom_layers": sorted(chip.rom_states),
                             "mtp_dropped": any(t.startswith("mtp.") for h in base.files
                                                for t in h.tensors),
                             "vision_dropped": base.multimodal,
                             "chip_final_norm_dims": np.flatnonzero(pl.readout()).tolist()}
        if firmware is not None:
            program_files(tmp, chip, fws, manifest)
            bridge = make_bridge(base, chip, fws)
            if isinstance(bridge, str):
                manifest["bridge"] = {"tool_calls": False, "why": bridge}
            else:
                write_file(tmp / BRIDGE_TABLES, bridge.tensors, {"format": "pt"})
                manifest["bridge"] = {"tool_calls": True, "config": bridge.config,
                                      "tables": BRIDGE_TABLES}
        from backends.chipdir.merged import file_record
        manifest["files"] = file_record(tmp)
        (tmp / "deltachip.json").write_text(json.dumps(manifest, indent=2) + "\n")
    chip_bytes = sum(p.nbytes for s in chip_shards for p in s)
    return StockReport(out, base.nbytes, sum(sizes) + extra, chip_bytes,
                       time.perf_counter() - t0, files, len(names), offset, lay.hidden,
                       zeros[0], lay.record())


def _config(base: Base, lc: int, lay: Layout, vocab: int, dtype: str) -> dict[str, Any]:
    cfg = dict(base.config)
    kinds = base.config.get("layer_types")
    if kinds is None:
        from backends.merge.base import text_config
        kinds = list(text_config(base.config).layer_types)
    cfg.update(hidden_size=lay.hidden, num_hidden_layers=lc + len(kinds),
               layer_types=["linear_attention"] * lc + list(kinds), vocab_size=vocab,
               tie_word_embeddings=False, dtype=DTYPE_NAMES[dtype])
    return cfg


def chip_cache(model, out_dir: str | Path, batch: int = 1):
    """A transformers ``DynamicCache`` for ``model`` (the stock merge at ``out_dir``) whose
    chip layers are started, as the hf engine starts a chip: recurrent kernel from the first
    token, each memory image loaded into its layer's GDN state (every batch row). The base's
    layers are left fresh. Pass it to the first call of a chip stream."""
    import torch
    from safetensors.torch import load_file
    from transformers import DynamicCache
    out = Path(out_dir)
    from backends.engines.merged import read_manifest
    st = read_manifest(out)["stock"]
    cfg = model.config
    cache = DynamicCache(config=cfg)
    nv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    conv_dim = 2 * cfg.linear_num_key_heads * dk + nv * dv
    states = load_file(str(out / ROM_STATES)) if st["rom_states"] else {}
    for li in range(*st["chip_layers"]):
        L = cache.layers[li]
        L.lazy_initialization(
            conv_states=torch.zeros(batch, conv_dim, cfg.linear_conv_kernel_dim,
                                    dtype=model.dtype),
            recurrent_states=torch.zeros(batch, nv, dk, dv, dtype=torch.float32),
            conv_kernel_size=cfg.linear_conv_kernel_dim)
        if f"layer_{li}" in states:
            L.recurrent_states[0][:] = states[f"layer_{li}"].view(torch.float32)
        L.has_previous_state[0] = True
    return cache
