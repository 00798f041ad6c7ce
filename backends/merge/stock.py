"""The stock merge: base and chip in one homogeneous, widened Qwen3.5 checkpoint.

Takes: a base directory (:mod:`backends.merge.base`), a chip compiled for the base's module
shapes (``deltachip compile --target BASE_DIR/config.json``), an output path. Gives: OUT_DIR
holding a plain ``Qwen3_5ForCausalLM`` checkpoint (no remote code) of hidden width
``H' = Hb + Hc + len(extra) + 1``:

- residual dims ``[0, Hb)``: the base block. Every base tensor keeps its values (its bytes,
  when the dtypes agree) with its hidden rows/columns there; the base's layers read and write
  only that block (plus the mute columns below);
- dims ``[Hb, Hb + Hc)``: the chip's residual, its ballast first, every chip weight at its
  own offset;
- ``extra`` ballast dims: ``s_i * 2**m`` on chip tokens, ``Σ s_i² = H' - Hc``, so the chip's
  pre-norms see the mean square they were compiled for (``n_b·B² / Hc = 4**m``) at the wider
  width and stay exact;
- the text lane (the last dim): ``2**-20`` on text tokens (too small to move any mean square);
  the final norm lifts it to about ``2**20 / rms`` and the chip's lm_head rows read it with
  weight -1, so a chip id never wins on a text position.

Layers: the chip's (its closing zero attention layer dropped: it adds exactly 0), then the
base's. Text tokens carry nothing in the chip dims, so the chip's layers add exactly 0 on
them (their projections read only chip dims) and the base layers see the base's residual
with zeros beside it; RMSNorm then divides by ``H'`` instead of ``Hb`` (its output grows by
``sqrt(H'/Hb)``), compensated by multiplying every hidden norm's ``1 + w`` over the base
block by ``sqrt(Hb/H')`` (rounded to
the tensor's dtype: text is close to, not equal to, the base's; docs/merge.md measures it).
Chip tokens carry nothing in the base block and the ballast through to the lm_head: the
chip's layers compute what they compute alone; the base layers read zeros, except their GDN
``in_proj_a``/``in_proj_b`` **mute** columns on the chip's first ballast dim (``a = b =
-2**12`` on chip tokens: no decay, beta 0, so a base GDN state passes a chip run unchanged);
the base's lm_head rows read that ballast dim with a large negative weight, so a text id
never wins on a chip position.

Files: the weights in shards (the chip's layers first, then one shard per base shard; an
``mtp.*`` head is not carried: its width is the base's) with an index, ``config.json`` (the
base's with the new width, layers, ``layer_types`` and vocabulary, untied), the tokenizer
with the chip's tokens (:mod:`backends.merge.routed`), ``deltachip.json`` (layout ``stock``,
the dims above), ``deltachip/chip.json``, ``deltachip/roms/*.hex`` and
``deltachip/rom_states.safetensors`` (each memory image as the initial GDN state of its chip
layer, fp32 bits as int32; :func:`chip_cache` loads it); with ``firmware`` (the core and a
program: the program's images are the memory images), the manifest's ``firmware`` and
``bridge`` entries and ``deltachip/bridge.safetensors`` (the tool-call bridge's byte
tables, :mod:`backends.merge.bridge`, for the driver :mod:`backends.merge.stock_calls`).
The chip in it runs as an engine: :class:`backends.merge.engine.StockEngine` (hf) and the
fast engine (:mod:`backends.merge.stock_chip`). Built tensor by tensor, in chunks of at most
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

from backends.merge.base import INDEX, Base
from backends.merge.stock_chip import COLS, LAYER, NORMS, ROWS, SAME_FIELDS
from backends.merge.routed import (DTYPE_NAMES, Firmware, MergeReport, _bridge, _Chip,
                                   _manifest, check_disk, read_inputs, shard_name,
                                   write_chip_files)
from backends.merge.stfile import (CHUNK, DTYPE_BYTES, MergeError, OutTensor, TensorEntry,
                                   _header_bytes, write_file)
from common.outputs import building_dir

#: the text lane: its value on text tokens, the final norm's 1 + w on it, the chip lm_head
#: rows' weight on it
TEXT_LANE = 2.0 ** -20
TEXT_NORM = 2.0 ** 40
TEXT_WEIGHT = -1.0
#: |a| and |b| the mute columns give every base GDN layer on a chip token
MUTE = 2.0 ** 12
#: how far down the base's lm_head rows go on a chip token
TEXT_FLOOR = 2.0 ** 16
ROM_STATES = "deltachip/rom_states.safetensors"
#: the tool-call bridge's byte tables (backends/merge/bridge.py), for the driver
BRIDGE_TABLES = "deltachip/bridge.safetensors"
MUTED = ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight")
RAW = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32}
#: most bytes of chip layers in one shard
CHIP_SHARD = 2 << 30


@dataclass(frozen=True)
class Layout:
    """Where everything sits in the merged residual (see the module docstring)."""
    hb: int                     # base width: dims [0, hb)
    hc: int                     # chip width: dims [hb, hb + hc), its ballast first
    extra: tuple[int, ...]      # extra ballast dim hb + hc + i holds extra[i] * 2**m
    m: int                      # the chip's pre-norms multiply by 2**-m
    cb: int                     # its normalised ballast is 2**cb
    scale: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", math.sqrt(self.hb / self.hidden))

    @property
    def hidden(self) -> int:
        return self.hb + self.hc + len(self.extra) + 1

    @property
    def text_dim(self) -> int:
        return self.hidden - 1

    def record(self) -> dict[str, Any]:
        e0 = self.hb + self.hc
        return {"hidden": self.hidden, "base_dims": [0, self.hb],
                "chip_dims": [self.hb, e0], "mute_dim": self.hb,
                "extra_ballast": {"dims": [e0, e0 + len(self.extra)],
                                  "values": [s * 2 ** self.m for s in self.extra]},
                "text_lane": {"dim": self.text_dim, "value": TEXT_LANE,
                              "final_norm": TEXT_NORM, "chip_lm_head_weight": TEXT_WEIGHT},
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


def plan_layout(base: Base, chip: _Chip) -> Layout:
    num = chip.chip["numerics"]
    hb, hc, n_b = int(base.config["hidden_size"]), int(num["hidden"]), int(num["n_b"])
    if n_b * 4 ** int(num["b_res"]) != 4 ** int(num["m"]) * hc:
        raise MergeError(f"chip {chip.path}: its ballast (n_b {n_b}, 2^{num['b_res']}) does "
                         f"not make its pre-norms exactly 2^-{num['m']} at width {hc}; "
                         "recompile it")
    # extra dims and the text lane widen the chip's stream by hb + n + 1; its energy must
    # grow by 4^m per dim: Σ s_i² = hb + n + 1 with the ballast s_i * 2^m
    return Layout(hb, hc, squares(hb + 1), int(num["m"]), int(num["cb"]))


# ---- tensors: blocks of source tensors placed in a zero output -----------------------------
@dataclass(frozen=True)
class Block:
    """Source tensor ``src`` (viewed as 2-D: rows x the rest) placed at (row, col)."""
    src: TensorEntry
    path: Path
    row: int = 0
    col: int = 0


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
                out[lo - r0:hi - r0, b.col:b.col + bc] = convert(
                    read_rows(b, lo - b.row, hi - b.row), b.src.dtype, p.dtype)
        for c0, c1, col, value in p.consts:
            lo, hi = max(r0, c0), min(r1, c1)
            if lo < hi:
                out[lo - r0:hi - r0, col] = encode(np.array([value]), p.dtype)[0]
        zeros[0] += int(out.size - np.count_nonzero(out)) * width
        yield out.tobytes()


def write_plans(dst: Path, plans: list[Plan], zeros: list[int]) -> None:
    """A new safetensors file ``dst`` holding ``plans`` in order."""
    import struct
    raw = _header_bytes(plans, {"format": "pt"})   # type: ignore[arg-type]
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
    return 8 + len(_header_bytes(plans, {"format": "pt"})) + sum(  # type: ignore[arg-type]
        p.nbytes for p in plans)


# ---- what goes where --------------------------------------------------------------------
class _Planner:
    def __init__(self, base: Base, chip: _Chip, lay: Layout):
        self.base, self.chip, self.lay = base, chip, lay
        self.bt = {n: (h.path, t) for h in base.files for n, t in h.tensors.items()}
        self.ct = {n: (h.path, t) for h in chip.files for n, t in h.tensors.items()}
        self.lc = int(chip.config["num_hidden_layers"]) - 1     # the zero attention layer off
        self.cdtype = "F32" if chip.chip["dtype"] == "fp32" else "BF16"

    def norm_values(self, w: np.ndarray, dtype: str) -> np.ndarray:
        """A base hidden norm's weights ``w`` widened: 1 + w scaled by sqrt(Hb/H') on the
        base block, w = 0 elsewhere, rounded to ``dtype`` (raw values)."""
        out = np.zeros(self.lay.hidden)
        out[:self.lay.hb] = (1.0 + w) * self.lay.scale - 1.0
        return encode(out, dtype)

    def widened(self, name: str, path: Path, t: TensorEntry, at: int, out_name: str) -> Plan:
        """A layer tensor of the base (``at`` = 0) or the chip (``at`` = Hb) in the merged
        width."""
        H = self.lay.hidden
        if name.endswith(COLS):
            p = Plan(out_name, t.dtype, (t.shape[0], H), [Block(t, path, 0, at)])
            if at == 0 and name.endswith(MUTED):
                p.consts.append((0, t.shape[0], self.lay.hb, -MUTE / 2.0 ** self.lay.cb))
            return p
        if name.endswith(ROWS):
            return Plan(out_name, t.dtype, (H, t.shape[1]), [Block(t, path, at, 0)])
        if name.endswith(NORMS):
            if at == 0:     # in the chip's dtype when wider: fp32 keeps the scale finer
                dt = common_dtype(t.dtype, self.cdtype)
                w = decode(read_rows(Block(t, path), 0, 1)[0], t.dtype)
                return Plan(out_name, dt, (H,), data=self.norm_values(w, dt))
            return Plan(out_name, t.dtype, (H,), [Block(t, path, 0, at)])
        return Plan(out_name, t.dtype, t.shape, [Block(t, path)])

    def chip_layers(self) -> list[list[Plan]]:
        """The chip's layers 0..lc-1, grouped into shards of about CHIP_SHARD bytes."""
        shards: list[list[Plan]] = [[]]
        size = 0
        for i in range(self.lc):
            layer = [self.widened(n, p, t, self.lay.hb, n) for n, (p, t) in self.ct.items()
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
            for n, t in sorted(h.tensors.items(), key=lambda kv: kv[1].begin):
                if n.startswith("mtp.") or (n == "lm_head.weight" and self.base.tied):
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
                    plans.append(self.widened(n, h.path, t, 0, new))
            out.append(plans)
        return out

    def _chip(self, name: str) -> tuple[Path, TensorEntry]:
        return self.ct[name]

    def embedding(self, path: Path, t: TensorEntry) -> Plan:
        cp, ct = self._chip("model.embed_tokens.weight")
        lay, vb = self.lay, t.shape[0]
        p = Plan("model.embed_tokens.weight", common_dtype(t.dtype, ct.dtype),
                 (vb + ct.shape[0], lay.hidden), [Block(t, path), Block(ct, cp, vb, lay.hb)])
        p.consts.append((0, vb, lay.text_dim, TEXT_LANE))
        for i, s in enumerate(lay.extra):
            p.consts.append((vb, vb + ct.shape[0], lay.hb + lay.hc + i, float(s * 2 ** lay.m)))
        return p

    def lm_head(self, path: Path, t: TensorEntry) -> Plan:
        cp, ct = self._chip("lm_head.weight")
        lay, vb = self.lay, t.shape[0]
        npath, nt = self._chip("model.norm.weight")
        f0 = 1.0 + float(decode(read_rows(Block(nt, npath), 0, 1)[0][:1], nt.dtype)[0])
        p = Plan("lm_head.weight", common_dtype(t.dtype, ct.dtype),
                 (vb + ct.shape[0], lay.hidden), [Block(t, path), Block(ct, cp, vb, lay.hb)])
        p.consts.append((0, vb, lay.hb, -TEXT_FLOOR / (2.0 ** lay.cb * f0)))
        p.consts.append((vb, vb + ct.shape[0], lay.text_dim, TEXT_WEIGHT))
        return p

    def final_norm(self, path: Path, t: TensorEntry) -> Plan:
        cp, ct = self._chip("model.norm.weight")
        dtype = common_dtype(t.dtype, ct.dtype)
        lay = self.lay
        w = decode(self.norm_values(decode(read_rows(Block(t, path), 0, 1)[0], t.dtype),
                                    dtype), dtype)
        w[lay.hb:lay.hb + lay.hc] = decode(read_rows(Block(ct, cp), 0, 1)[0], ct.dtype)
        w[lay.text_dim] = TEXT_NORM
        return Plan("model.norm.weight", dtype, (lay.hidden,), data=encode(w, dtype))


def check_chip_fits(base: Base, chip: _Chip) -> None:
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
                firmware: Firmware | None = None) -> StockReport:
    """Write the stock merge of ``chip_dir`` into ``base_dir``'s model at ``out_dir`` (see
    the module docstring). ``dtype`` (bf16 or fp32, default the chip's) must be the chip's.
    ``firmware`` (:class:`cpu.rv32.merged.Firmware`, the chip being the core): a RISC-V
    program whose memory images replace the chip's, recorded in the manifest."""
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    base_dir, out, chip_dir = Path(base_dir), Path(out_dir), Path(chip_dir)
    inp = read_inputs(base_dir, out, chip_dir, dtype, firmware, say, fits=check_chip_fits)
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
        manifest = _manifest(base, chip, offset, names, dtype, rom_files)
        manifest["layout"] = "stock"
        manifest["stock"] = {**lay.record(), "chip_layers": [0, pl.lc],
                             "base_layers": [pl.lc, pl.lc + int(base.config["num_hidden_layers"])],
                             "rom_states": ROM_STATES if roms else None,
                             "rom_layers": sorted(chip.rom_states),
                             "mtp_dropped": any(t.startswith("mtp.") for t in pl.bt)}
        if firmware is not None:
            manifest["firmware"] = firmware.manifest()
            bridge = _bridge(base, chip)
            if isinstance(bridge, str):
                manifest["bridge"] = {"tool_calls": False, "why": bridge}
            else:
                write_file(tmp / BRIDGE_TABLES, bridge.tensors, {"format": "pt"})
                manifest["bridge"] = {"tool_calls": True, "config": bridge.config,
                                      "tables": BRIDGE_TABLES}
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
    st = json.loads((out / "deltachip.json").read_text())["stock"]
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
