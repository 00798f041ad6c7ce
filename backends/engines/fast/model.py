"""The fast engine's model: a compiled checkpoint's weights, sparse, with every structural fact
the kernel relies on verified.

Takes: a checkpoint directory written by ``deltachip compile`` (config.json, chip.json, the
safetensors; read with :mod:`backends.chipdir.weights`, not transformers). Gives:
:class:`FastModel`: numpy arrays (CSC projections, per-dim norm scales, conv delays, the
embedding's CSR rows and the lm_head's per-kind rows) that :mod:`backends.engines.fast.native`
hands to the C kernel.

Verified at load, each refusal a :class:`FastRefused` (a ChipDirError: exit 2) naming the
tensor and the fact: pre-norms are exact power-of-two scales (``1 + w`` a power of two or 0,
the ballast dims constant on every embedding row and written by no layer, so transformers'
RMSNorm is ``x * 2**-m * (1 + w)`` while the ballast dominates, which the kernel checks on
every token); one conv tap of weight 1 per channel; no decay (``in_proj_a`` zero and
``softplus(dt_bias)`` exactly 0); full-attention layers entirely zero (the identity); the
lm_head's rows of each token kind are ``base + sum_j bit_j(u) * delta_j`` exactly, so the
argmax is decoded from ``1 + payload_bits`` rows per kind. What only a token can show
(silu inputs in the exact domain, one-hot keys, at most two-hot queries, beta 0/1/0.5, the
ballast dominating each norm, a clear argmax) the kernel checks on every token.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from backends.chipdir.merged import PLAIN_TABLES, TABLE_TENSORS
from backends.chipdir.checkpoint import ChipDirError, check_config, load_chip_json
from backends.chipdir.weights import Prefixed, Tensors, sparse_rows

#: The largest value-head width the kernel's per-head buffer holds.
MAX_DV = 512
#: The longest conv kernel the kernel's slot table holds.
MAX_KC = 64
#: A memo group of in_proj_qkv (the kernel remembers what the conv takes from a connected
#: part of the weight for each combination of its inputs' values): at most this many inputs,
#: and at least this many weights (a smaller part is cheaper to compute than to look up).
MAX_GROUP_INPUTS = 16
MIN_GROUP_WEIGHTS = 64
#: The most outputs of one projection the kernel's sparse products hold.
MAX_OUT = 1 << 17
#: How many token kinds the kernel's argmax holds.
MAX_KINDS = 4096
#: A pre-norm is exact while the rest of the residual's mean square is below the ballast's
#: by this factor: fp32 needs the rest to vanish in the sum (2^-24, one bit kept); bf16 only
#: that the scale moves by < 2^-10, which the final rounding absorbs (8 significant bits).
MARGIN = {"fp32": 2.0 ** 25, "bf16": 2.0 ** 11}


class FastRefused(ChipDirError):
    """The checkpoint breaks a fact the fast engine relies on (the message names it)."""
    damage = False


@dataclass
class Csc:
    """A weight [out, in] as CSC over its inputs."""
    ptr: np.ndarray
    idx: np.ndarray
    val: np.ndarray

    @staticmethod
    def from_csr(ptr: np.ndarray, col: np.ndarray, val: np.ndarray, n_in: int) -> "Csc":
        row = np.repeat(np.arange(len(ptr) - 1, dtype=np.int32), np.diff(ptr))
        order = np.lexsort((row, col))
        cptr = np.zeros(n_in + 1, dtype=np.int64)
        np.cumsum(np.bincount(col, minlength=n_in), out=cptr[1:])
        return Csc(cptr, np.ascontiguousarray(row[order]), np.ascontiguousarray(val[order]))

    @property
    def nnz(self) -> int:
        return len(self.val)


#: A weight's nonzeros as CSR: (row pointers, columns, values).
Rows = tuple[np.ndarray, np.ndarray, np.ndarray]


def _stack(parts: list[Rows]) -> Rows:
    """The rows of ``parts`` one after another."""
    ptr = [parts[0][0]]
    for p in parts[1:]:
        ptr.append(p[0][1:] + ptr[-1][-1])
    return (np.concatenate(ptr), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]))


def _past(rows: Rows, nb: int) -> Rows:
    """``rows`` without their entries in columns < ``nb``."""
    ptr, col, val = rows
    keep = col >= nb
    r = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    n = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(np.bincount(r[keep], minlength=len(ptr) - 1), out=n[1:])
    return n, np.ascontiguousarray(col[keep]), np.ascontiguousarray(val[keep])


@dataclass
class Layer:
    kind: int                       # 0: Gated DeltaNet; 1: all-zero (identity)
    gdn: int = -1
    n1: np.ndarray | None = None
    n2: np.ndarray | None = None
    ip: Csc | None = None               # the conv channels' rows of in_proj_qkv
    zb: Rows | None = None              # in_proj_z's and in_proj_b's rows past the ballast
    delay: np.ndarray | None = None
    op: Csc | None = None
    gate: Csc | None = None
    up: Csc | None = None
    upr: Rows | None = None             # up_proj's rows past the ballast (the C kernel's)
    down: Csc | None = None
    gw: np.ndarray | None = None
    # what the constant ballast dims contribute (see :func:`_defaults`)
    ipb: np.ndarray | None = None
    ipd: np.ndarray | None = None
    cda: np.ndarray | None = None
    gb: np.ndarray | None = None
    gd: np.ndarray | None = None
    dg: np.ndarray | None = None
    ub: np.ndarray | None = None
    ud: np.ndarray | None = None
    groups: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None   # see :func:`memo_groups`


@dataclass
class FastModel:
    """Everything the kernel reads (see the module docstring)."""
    path: Path
    chip: dict[str, Any]
    dtype: str
    H: int
    C: int
    V: int
    NV: int
    NK: int
    DK: int
    DV: int
    VPK: int
    KC: int
    I: int
    NB: int
    NBV: int
    res_ballast: float
    res_margin: float
    gn_margin: float
    qdiv: float
    layers: list[Layer]
    nf: np.ndarray
    embed: tuple[np.ndarray, np.ndarray, np.ndarray]
    kinds: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # offsets, bits, first row, ids
    lm: tuple[np.ndarray, np.ndarray, np.ndarray]
    nonzero: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def G(self) -> int:
        return sum(1 for ly in self.layers if ly.kind == 0)

    @property
    def vocab(self) -> int:
        return len(self.embed[0]) - 1


def _refuse(path: Path, what: str) -> FastRefused:
    """A checkpoint beyond what the fast engine runs (a shape, a dtype): hf runs it."""
    return FastRefused(f"{path}: the fast engine cannot run this checkpoint: {what} "
                       f"(run it with --engine hf)")


#: what to do with a checkpoint whose weights break a fact every deltachip checkpoint holds
REMAKE = ("the weights are damaged (every checkpoint `deltachip compile` and `deltachip "
          "merge` write holds it): compile it again (a merged checkpoint: merge it again)")


def _damaged(path: Path, what: str) -> ChipDirError:
    """A checkpoint whose weights break a structural fact of every checkpoint deltachip
    writes (the ballast, exact norms, zero full-attention layers, no decay, one conv tap,
    the lm_head's rows per kind): damaged, so it is to be written again, not run elsewhere."""
    return ChipDirError(f"{path}: {what}: {REMAKE}")


def _pow2_or_zero(a: np.ndarray) -> bool:
    a = np.asarray(a, dtype=np.float64)
    m, _ = np.frexp(np.abs(a))
    return bool(np.all((a == 0) | ((m == 0.5) & (a > 0))))


def _rms_scale(B: np.ndarray, H: int, eps: float) -> float:
    """transformers' RMSNorm factor rsqrt(mean(x^2) + eps) in fp32 for a residual that holds
    only the ballast values ``B`` (computed with torch, as the model does)."""
    import torch
    x = torch.zeros(H, dtype=torch.float32)
    x[:len(B)] = torch.tensor(B, dtype=torch.float32)
    return float(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)[0])


def _open(path: Path) -> tuple[dict[str, Any], Tensors | Prefixed]:
    """chip.json and the tensors of the chip at ``path``: a compiled directory, or a merged
    checkpoint (chip.json in ``deltachip/``; routed: the chip's tensors under ``chip.``;
    stock: cut out of the widened model's, :class:`backends.chipdir.stock.StockChip`)."""
    from backends.engines.merged import check_chip_config, is_merged, read_manifest
    if is_merged(path):
        manifest = read_manifest(path)
        chip = load_chip_json(path / "deltachip")
        if manifest["layout"] == "stock":
            from backends.chipdir.stock import StockChip, stock_dims
            return chip, StockChip(Tensors(path), stock_dims(path, manifest, chip))
        sparse = check_chip_config(path, chip)
        return chip, Prefixed(Tensors(path), "chip.", sparse,
                              "BF16" if chip["dtype"] == "bf16" else "F32")
    chip = load_chip_json(path)
    check_config(path, chip)
    return chip, Tensors(path)


def load(path: str | Path, dtype: str | None = None, progress=None) -> FastModel:
    """Read and verify the checkpoint at ``path`` (see the module docstring): a compiled
    directory, or the chip of a routed merged checkpoint, whose token tables may be stored
    in structured form (:mod:`backends.merge.tables`: read as they are stored)."""
    path = Path(path)
    chip, t = _open(path)
    dt = dtype or chip["dtype"]
    if dt != chip["dtype"]:
        raise _refuse(path, f"it was compiled for {chip['dtype']}, not {dt}")
    say = progress or (lambda s: None)
    sh = _Shapes(chip, path)
    say("embedding")
    embed, B = _embedding(t, path, sh, dt)
    r = _rms_scale(B, sh.H, sh.eps)
    if not _pow2_or_zero(np.array([r])) or r == 0:
        raise _damaged(path, f"the pre-norm factor of the ballast is {r}, not a power of two")
    rd = _LayerReader(t, path, sh, dt, B, r)
    layers: list[Layer] = []
    for li, kind in enumerate(sh.cfg["layer_types"]):
        say(f"layer {li}")
        layers.append(rd.layer(li, kind, sum(1 for x in layers if x.kind == 0)))
    # ---- lm_head: per kind, base + sum of bit deltas -----------------------------------
    say("lm_head")
    kinds = _kinds(chip, len(embed[0]) - 1, path)
    lm = (_structured_lm_head(t, path, kinds) if HEAD in t
          else _stored_lm_head(t, path, kinds, dt))
    # a dim the lm_head does not read moves no logit, whatever the final norm does to it (a
    # stock merge keeps the base's factors there: backends/merge/stock.py)
    nf = rd.norm_scale("model.norm.weight", read=np.unique(lm[1]))
    return FastModel(path=path, chip=chip, dtype=dt, H=sh.H, C=sh.C, V=sh.V, NV=sh.nv,
                     NK=sh.nk, DK=sh.dk, DV=sh.dv, VPK=sh.nv // sh.nk, KC=sh.kc, I=sh.I,
                     NB=sh.NB, NBV=sh.NBV, res_ballast=float(np.sum(B * B)),
                     res_margin=MARGIN[dt], gn_margin=MARGIN[dt],
                     qdiv=float(np.float32(sh.dk ** 0.5)), layers=layers, nf=nf,
                     embed=embed, kinds=kinds, lm=lm, nonzero=rd.nonzero)


class _Shapes:
    """A checkpoint's module shapes (config.json, as chip.json keeps it) and ballast widths,
    refused where the kernel cannot take them."""

    def __init__(self, chip: dict[str, Any], path: Path):
        cfg = self.cfg = chip["config"]
        self.H = cfg["hidden_size"]
        self.nk, self.nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        self.dk, self.dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        self.kc = cfg["linear_conv_kernel_dim"]
        self.C, self.V = 2 * self.nk * self.dk + self.nv * self.dv, self.nv * self.dv
        self.I = cfg["intermediate_size"]
        self.eps = float(cfg["rms_norm_eps"])
        num = chip["numerics"]
        self.NB, self.NBV = int(num["n_b"]), int(num["n_bv"])
        dv, nv, nk = self.dv, self.nv, self.nk
        if dv > MAX_DV or dv & (dv - 1) or nv % nk:
            raise _refuse(path, f"value heads of {dv} columns, {nv} per {nk} key heads")
        if self.kc > MAX_KC:
            raise _refuse(path, f"a conv kernel of {self.kc} taps (at most {MAX_KC})")
        widest = max(self.H, self.C + self.V + nv, self.I)
        if widest > MAX_OUT:
            raise _refuse(path, f"a projection of {widest:,} outputs (at most {MAX_OUT:,})")


def _embedding(t: Tensors | Prefixed, path: Path, sh: _Shapes, dt: str
               ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The embedding as CSR rows, and its ballast (float64): the ballast dims hold one
    constant on every row."""
    NB = sh.NB
    e_ptr, e_col, e_val = (sparse_rows(t, EMBED) if EMBED in t
                           else _packed_embedding(t, path, sh.H, dt))
    vocab = len(e_ptr) - 1
    ball = e_col < NB
    per_row = np.add.reduceat(ball.astype(np.int64), e_ptr[:-1]) if len(e_col) else None
    if per_row is None or np.any(per_row != NB):
        raise _damaged(path, f"an embedding row does not hold all {NB} ballast dims")
    B = e_val[ball].reshape(vocab, NB)
    if np.any(B != B[0]):
        raise _damaged(path, "the ballast dims differ between embedding rows")
    return (e_ptr, e_col, e_val), B[0].astype(np.float64)


class _LayerReader:
    """Reads and verifies one decoder layer at a time (:meth:`layer`), counting the
    nonzero weights it keeps."""

    def __init__(self, t: Tensors | Prefixed, path: Path, sh: _Shapes, dt: str,
                 B: np.ndarray, r: float):
        self.t, self.path, self.sh, self.dt, self.B, self.r = t, path, sh, dt, B, r
        self.nonzero = 0

    def norm_scale(self, name: str, read: np.ndarray | None = None) -> np.ndarray:
        """1 + w times the ballast's factor; ``read``: the only dims anything reads after
        the norm (the final norm: the lm_head's columns), the rest scaled by 0."""
        w1 = 1.0 + self.t.get(name).astype(np.float64)
        if read is not None:
            w1 = np.where(np.isin(np.arange(len(w1)), read), w1, 0.0)
        if not _pow2_or_zero(w1):
            raise _damaged(self.path, f"{name}: 1 + weight is not a power of two or 0 on every "
                                      "dim" + (" the lm_head reads" if read is not None else ""))
        return (w1 * self.r).astype(np.float32)

    def zero(self, name: str) -> bool:
        words, kind = self.t.raw(name)
        w = np.asarray(words)
        return not np.any((w & 0x7FFF) if kind == "BF16" else w.view(np.uint32) & 0x7FFFFFFF)

    def no_ballast_writes(self, name: str, ptr: np.ndarray) -> None:
        if ptr[self.sh.NB] != 0:
            raise _damaged(self.path, f"{name} writes into the ballast dims")

    def layer(self, li: int, kind: str, gdn: int) -> Layer:
        """Layer ``li`` (``kind`` from config.json's layer_types; ``gdn``: how many GDN
        layers come before it)."""
        t, path, sh = self.t, self.path, self.sh
        H, C, V, I, NB, kc = sh.H, sh.C, sh.V, sh.I, sh.NB, sh.kc
        pre = f"model.layers.{li}."
        if kind != "linear_attention":
            names = [n for n in t.names() if n.startswith(pre)]
            bad = [n for n in names if not n.endswith("norm.weight") and not self.zero(n)]
            if bad:
                raise _damaged(path, f"{bad[0]}: a full-attention layer with nonzero weights")
            return Layer(kind=1)
        la = pre + "linear_attn."
        if not self.zero(la + "in_proj_a.weight"):
            raise _damaged(path, f"{la}in_proj_a.weight is not zero (a decaying memory)")
        dtb = t.get(la + "dt_bias").astype(np.float64)
        if np.any(dtb > -104):
            raise _damaged(path, f"{la}dt_bias is above -104 (softplus not exactly 0: a decay)")
        if not np.all(np.isfinite(t.get(la + "A_log"))):
            raise _damaged(path, f"{la}A_log is not finite")
        conv = t.get(la + "conv1d.weight").reshape(C, kc)
        taps = np.count_nonzero(conv, axis=1)
        if np.any(taps > 1) or np.any(conv[conv != 0] != 1.0):
            raise _damaged(path, f"{la}conv1d.weight: a channel with more than one tap or a "
                                 f"tap other than 1")
        delay = np.where(taps == 1, kc - 1 - np.argmax(conv != 0, axis=1), -1).astype(np.int8)
        parts = [sparse_rows(t, la + n)
                 for n in ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight")]
        gate = sparse_rows(t, pre + "mlp.gate_proj.weight")
        up = sparse_rows(t, pre + "mlp.up_proj.weight")
        opr = sparse_rows(t, la + "out_proj.weight")
        self.no_ballast_writes(la + "out_proj.weight", opr[0])
        dn = sparse_rows(t, pre + "mlp.down_proj.weight")
        self.no_ballast_writes(pre + "mlp.down_proj.weight", dn[0])
        gw = t.get(la + "norm.weight").astype(np.float32)
        ly = Layer(kind=0, gdn=gdn,
                   n1=self.norm_scale(pre + "input_layernorm.weight"),
                   n2=self.norm_scale(pre + "post_attention_layernorm.weight"),
                   ip=Csc.from_csr(*parts[0], H), zb=_past(_stack(parts[1:]), NB),
                   delay=delay, op=Csc.from_csr(*opr, V),
                   gate=Csc.from_csr(*gate, H), up=Csc.from_csr(*up, H), upr=_past(up, NB),
                   down=Csc.from_csr(*dn, I), gw=gw)
        _defaults(ly, _stack(parts), gate, up, self.B, NB, C, self.dt, path, pre)
        ly.groups = memo_groups(ly.ip, NB)
        self.nonzero += sum(c.nnz for c in (ly.op, ly.gate, ly.up, ly.down)) + \
            sum(len(p[2]) for p in parts)
        return ly


def memo_groups(w: Csc, nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The memo groups of a projection ``w`` (CSC over its inputs): the connected parts of its
    weight over the inputs past the ballast (``nb``) with at most :data:`MAX_GROUP_INPUTS`
    inputs and at least :data:`MIN_GROUP_WEIGHTS` weights. No other input reaches a group's
    outputs, so what they take is a function of the group's input values alone. Returns
    (``of`` [inputs] int32: an input's group or -1, ``ptr`` [groups + 1], ``inputs``
    ascending within each group)."""
    n_in = len(w.ptr) - 1
    col = np.repeat(np.arange(n_in), np.diff(w.ptr))
    keep = col >= nb
    col, row = col[keep], w.idx[keep].astype(np.int64)
    lab = np.arange(n_in)                       # each input's part: the least input in it
    n_out = int(row.max()) + 1 if len(row) else 0
    while True:                                 # spread the least label over the edges
        out = np.full(n_out, n_in)
        np.minimum.at(out, row, lab[col])
        new = lab.copy()
        np.minimum.at(new, col, out[row])
        if np.array_equal(new, lab):
            break
        lab = new
    used = np.zeros(n_in, dtype=bool)
    used[col] = True
    roots, inv = np.unique(lab[used], return_inverse=True)
    inputs = np.flatnonzero(used)
    size = np.bincount(inv, minlength=len(roots))
    weights = np.bincount(inv, weights=np.diff(w.ptr)[inputs], minlength=len(roots))
    chosen = (size <= MAX_GROUP_INPUTS) & (weights >= MIN_GROUP_WEIGHTS)
    gid = np.full(len(roots), -1)
    gid[chosen] = np.arange(int(chosen.sum()))
    of = np.full(n_in, -1, dtype=np.int32)
    of[inputs] = gid[inv]
    members = np.flatnonzero(of >= 0)
    order = members[np.argsort(of[members], kind="stable")]
    ptr = np.zeros(int(chosen.sum()) + 1, dtype=np.int32)
    np.cumsum(np.bincount(of[members], minlength=len(ptr) - 1), out=ptr[1:])
    return of, ptr, order.astype(np.int32)


def _round(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to the model dtype (bf16: round to nearest even, as torch)."""
    if dtype != "bf16":
        return a.astype(np.float32)
    import torch
    return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16).float().numpy()


def _bias(rows: Rows, scale: np.ndarray, B: np.ndarray, NB: int, what: str,
          path: Path) -> np.ndarray:
    """What the ballast inputs (dims < NB, the constant ``B`` times the pre-norm ``scale``,
    both fp32 as the kernel multiplies them) add to every row of a weight: exact in fp32
    (checked), so the kernel may start each touched output's sum from it."""
    ptr, col, val = rows
    h = (B.astype(np.float32) * scale[:NB]).astype(np.float64)
    out = np.zeros(len(ptr) - 1, dtype=np.float64)
    r = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    sel = col < NB
    np.add.at(out, r[sel], val[sel].astype(np.float64) * h[col[sel]])
    if np.any(out.astype(np.float32).astype(np.float64) != out):
        raise _refuse(path, f"{what}: the ballast's contribution is not exact in fp32")
    return out.astype(np.float32)


def _live_default(d: np.ndarray) -> np.ndarray:
    """Where a default pre-activation is not one whose silu is a known zero (0, or below
    -89 where exp(-x) overflows): the kernel reads those outputs on every token."""
    return (d != 0) & ~(d <= -89.0)


def _defaults(ly: Layer, ip: Rows, gate: Rows, up: Rows, B: np.ndarray, NB: int, C: int,
              dtype: str, path: Path, pre: str) -> None:
    """The layer's ballast contributions and the values of untouched outputs.

    On every token the ballast dims hold the same values, so each projection's ballast
    columns add a constant: ``ipb``/``gb``/``ub`` (fp32 sums, exact), from which the kernel
    starts the sum of an output the token's other dims touch, and ``ipd``/``gd``/``ud``
    (rounded), the value of one they do not. ``cda``: conv channels with a tap whose
    default is not a known zero after silu; ``dg``: MLP neurons whose default gate is not a
    known zero — the kernel visits both lists on every token, everything else only when
    touched."""
    ly.ipb = _bias(ip, ly.n1, B, NB, pre + "linear_attn.in_proj_*", path)
    ly.ipd = _round(ly.ipb, dtype)
    ly.cda = np.flatnonzero((ly.delay >= 0) & _live_default(ly.ipd[:C])).astype(np.int32)
    ly.gb = _bias(gate, ly.n2, B, NB, pre + "mlp.gate_proj", path)
    ly.ub = _bias(up, ly.n2, B, NB, pre + "mlp.up_proj", path)
    ly.gd, ly.ud = _round(ly.gb, dtype), _round(ly.ub, dtype)
    ly.dg = np.flatnonzero(_live_default(ly.gd)).astype(np.int32)


def _kinds(chip: dict[str, Any], vocab: int, path: Path
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offset, payload bits, first structured row, ids) of every token kind, from
    chip.json's circuit (ids beyond the circuit's, if any, are one more kind of bits 0
    each)."""
    from backends.chipdir.chipfile import circuit_from_json
    c = circuit_from_json(chip["circuit"], chip.get("roms", {}))
    offs = c.kind_offsets()
    bits = [k.payload_bits for k in c.kinds]
    counts = [k.ids for k in c.kinds] + [1] * (vocab - c.vocab_size)
    if c.vocab_size > vocab:
        raise _damaged(path, f"the vocabulary has {vocab} ids, the circuit {c.vocab_size}")
    offs = list(offs) + list(range(c.vocab_size, vocab))
    bits = bits + [0] * (vocab - c.vocab_size)
    if len(offs) > MAX_KINDS:
        raise _refuse(path, f"{len(offs)} token kinds (at most {MAX_KINDS})")
    rows = np.cumsum([0] + [1 + b for b in bits[:-1]])
    return (np.array(offs, dtype=np.int64), np.array(bits, dtype=np.int32),
            rows.astype(np.int64), np.array(counts, dtype=np.int64))


#: the token tables' names, plain (one row per id)
EMBED, HEAD = PLAIN_TABLES
#: the structured tables of a merged checkpoint (backends/chipdir/merged.py)
PACKED = {k.rpartition(".")[2]: k for k in TABLE_TENSORS if k.startswith("model.embed_tokens.")}
KINDS, BASIS = "lm_head.kinds", "lm_head.basis"
assert {KINDS, BASIS} <= set(TABLE_TENSORS)


def _exact_in(a: np.ndarray, dtype: str) -> np.ndarray:
    """Where float64 values ``a`` are numbers of ``dtype`` (no rounding on the cast)."""
    f = a.astype(np.float32)
    ok = f.astype(np.float64) == a
    if dtype == "bf16":
        ok &= (f.view(np.uint32) & 0xFFFF) == 0
    return ok


def _stored(t: Tensors | Prefixed, name: str, kind: str, path: Path) -> np.ndarray:
    words, dtype = t.raw(name)
    if dtype != kind:
        raise _refuse(path, f"{t.prefix if isinstance(t, Prefixed) else ''}{name} is {dtype}, "
                            f"not {kind}")
    return np.asarray(words)


def _packed_embedding(t: Tensors | Prefixed, path: Path, H: int, dtype: str
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The embedding as CSR rows from its structured form: the constant row, and on
    ``cols`` the palette value each id's code names (what the merged modeling file's
    ``embedding_rows`` gathers), every value checked to be a number of ``dtype``."""
    const = _stored(t, PACKED["const"], "I32", path).view(np.float32)
    cols = _stored(t, PACKED["cols"], "I64", path)
    pal = _stored(t, PACKED["palette"], "I32", path).view(np.float32)
    codes, _ = t.raw(PACKED["codes"])
    U, P = len(cols), len(pal)
    width = -(-U // 8) if P <= 2 else U
    bad = (const.shape != (H,) or codes.ndim != 2 or codes.shape[1] != width or P == 0
           or np.any((cols < 0) | (cols >= H)) or len(np.unique(cols)) != U
           or not np.all(_exact_in(np.concatenate([const, pal]).astype(np.float64), dtype)))
    if bad:
        raise _damaged(path, "the structured embedding is inconsistent (its shapes, columns or "
                            f"values are not those of a {dtype} table)")
    fixed = np.setdiff1d(np.flatnonzero(const), cols)       # nonzero on every row
    F = len(fixed)
    allc = np.concatenate([fixed, cols])
    order = np.argsort(allc, kind="stable")
    allc = allc[order].astype(np.int32)
    live = pal != 0             # the palette's values a row keeps (a -0.0 is dropped, as 0)
    V = codes.shape[0]
    counts = np.zeros(V, dtype=np.int64)
    out_c, out_v = [], []
    for r0 in range(0, V, 1 << 15):
        c = np.asarray(codes[r0:r0 + (1 << 15)])
        idx = np.unpackbits(c, axis=1, bitorder="little")[:, :U] if P <= 2 else c
        if P > 2 and np.any(idx >= P):
            raise _damaged(path, "the structured embedding names a palette value it lacks")
        # which of the row's columns (the fixed ones, then ``cols``; in column order) it keeps
        keep = np.concatenate([np.ones((len(c), F), dtype=bool), live[idx]], axis=1)[:, order]
        rows, at = np.nonzero(keep)
        counts[r0:r0 + len(c)] = np.bincount(rows, minlength=len(c))
        src = order[at]
        vals = np.empty(len(at), dtype=np.float32)
        fx = src < F
        vals[fx] = const[fixed[src[fx]]]
        vals[~fx] = pal[idx[rows[~fx], src[~fx] - F]]
        out_c.append(allc[at])
        out_v.append(vals)
    ptr = np.zeros(V + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, np.concatenate(out_c), np.concatenate(out_v)


def _stored_lm_head(t: Tensors | Prefixed, path: Path, kinds, dtype: str
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lm_head's per-kind rows as a merged checkpoint stores them (``lm_head.kinds``:
    first id, payload bits, first row; ``lm_head.basis``: float32 bits), matched to the
    circuit's kinds, after checking that every id's row (its base plus the deltas of its
    set bits, summed in float64 as the modeling file sums them) is a number of the dtype,
    so that the file's expanded rows are that sum exactly."""
    table = _stored(t, KINDS, "I64", path)
    basis = _stored(t, BASIS, "I32", path).view(np.float32)
    at = {int(r[0]): (int(r[1]), int(r[2])) for r in table} if table.ndim == 2 and \
        table.shape[1:] == (3,) else {}
    used = np.flatnonzero(np.any(basis != 0, axis=0)) if basis.ndim == 2 else np.zeros(0, int)
    out_rows: list[np.ndarray] = []
    for off, nb, n in zip(kinds[0].tolist(), kinds[1].tolist(), kinds[3].tolist()):
        nb_r0 = at.get(off)
        if nb_r0 is None or nb_r0[0] != nb or not 0 <= nb_r0[1] <= len(basis) - 1 - nb:
            raise _damaged(path, f"lm_head.kinds does not hold the circuit's token kind at id "
                                f"{off} ({nb} payload bits)")
        blk = basis[nb_r0[1]:nb_r0[1] + 1 + nb][:, used].astype(np.float64)
        for u0 in range(0, n, 1 << 14):
            u = np.arange(u0, min(n, u0 + (1 << 14)))
            bits = ((u[:, None] >> np.arange(nb)) & 1).astype(np.float64)
            if not np.all(_exact_in(blk[0] + bits @ blk[1:], dtype)):
                raise _damaged(path, f"lm_head row {off + u0}..: its kind's base plus the "
                                    "deltas of its bits is not a number of the dtype")
        out_rows.extend(blk)
    return _rows_csr(np.stack(out_rows), used)


def _rows_csr(S: np.ndarray, used: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense rows ``S`` over columns ``used`` as CSR (row_ptr, column, float32 value)."""
    nzr, nzc = np.nonzero(S)
    sptr = np.zeros(len(S) + 1, dtype=np.int64)
    np.cumsum(np.bincount(nzr, minlength=len(S)), out=sptr[1:])
    return sptr, used[nzc].astype(np.int32), S[nzr, nzc].astype(np.float32)


def _structured_lm_head(t: Tensors, path: Path, kinds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lm_head as per-kind rows [base, delta_0, …] (CSR), after checking that every row
    of every kind equals its base plus the deltas of its payload's set bits, exactly."""
    ptr, col, val = sparse_rows(t, HEAD)
    used = np.unique(col)
    pos = np.searchsorted(used, col)
    out_rows: list[np.ndarray] = []

    def dense(r0: int, r1: int) -> np.ndarray:
        d = np.zeros((r1 - r0, len(used)), dtype=np.float64)
        a, b = ptr[r0], ptr[r1]
        rr = np.repeat(np.arange(r1 - r0), np.diff(ptr[r0:r1 + 1]))
        d[rr, pos[a:b]] = val[a:b]
        return d

    for off, nb, n in zip(kinds[0].tolist(), kinds[1].tolist(), kinds[3].tolist()):
        base = dense(off, off + 1)[0]
        deltas = np.stack([dense(off + (1 << j), off + (1 << j) + 1)[0] - base
                           for j in range(nb)]) if nb else np.zeros((0, len(used)))
        if np.any(deltas.astype(np.float32).astype(np.float64) != deltas):
            raise _refuse(path, "lm_head: a bit's delta is not exact in fp32")
        step = 1 << 14
        for u0 in range(0, n, step):
            u = np.arange(u0, min(n, u0 + step))
            bits = ((u[:, None] >> np.arange(nb)) & 1).astype(np.float64)
            want = base + bits @ deltas
            if np.any(dense(off + u0, off + u0 + len(u)) != want):
                bad = off + u0 + int(np.argmax(np.any(dense(off + u0, off + u0 + len(u)) != want, axis=1)))
                raise _damaged(path, f"lm_head row {bad} is not its kind's base row plus the "
                                    f"deltas of its payload bits")
        out_rows.append(base)
        out_rows.extend(deltas)
    return _rows_csr(np.stack(out_rows), used)
