"""Emission: a scheduled :class:`backends.compile.program.Program` -> Qwen3.5 tensors and a checkpoint.

Takes: the Program, the dtype. Gives: :class:`Numerics` (every scale constant, all powers
of two), the config and ``chip.json`` dicts, and the tensors (names exactly as
``Qwen3_5ForCausalLM`` uses them) one *group* at a time, so that peak memory is one group
whatever the layer count: :func:`plan` fixes every size and shape (an :class:`Emission`),
:func:`group_tensors` builds one group (the embedding, one chip decoder layer, or the head:
final norm, lm_head and the zero full-attention layer) from it alone, and :mod:`backends.
checkpoint` writes each group as it comes. :func:`state_dict` gives the whole state dict at once.

Layout of the residual stream: dims ``0 .. n_b-1`` hold the ballast B_res on every token;
lane ``l`` of the Program is dim ``n_b + l``. Every pre-norm multiplies by exactly
``2**-m`` (``n_b * B_res**2 / H = 4**m``), so a sublayer reads lane values ``v * 2**-m`` and
the normalised ballast ``cb = sqrt(H / n_b)`` as its bias input.

- MLP neuron ``relu(T)``: gate row = K*T (lanes weighted K*coef*2**m, constant K*c/cb on
  dim 0), up row = 1/(K*cb) on dim 0, down column = the neuron's output weights.
- GDN memory bank (one key head + its GQA value heads): query = Kq * [addr == row] from the
  current token (conv tap kernel-1) via silu(Kq * (matches - nbits + 1)), plus Kq on the
  reserved last row when queries are two-hot; key = Kk * [addr == row and en] from the
  previous token (conv tap kernel-2; a transparent memory's from the current token, kernel-1);
  values = B_v on the ballast columns and Vs * bit on the data columns, from the same token
  as the key; beta = 1 (sigmoid(1024); a transparent RAM whose value heads hold different
  words: sigmoid(1024 * [address's head bits = head] - 512), 1 or 0), decay 0 (a = 0,
  dt_bias = -1024), z = Z (z-gated per packed word); out_proj maps data column -> read lane
  with weight B_v * sqrt(n_bv) / (sqrt(d_v) * Vs * Z).
- Embedding row of token (kind k, payload p): ballast, kind bits, field bits of kind k, and
  the token tables' bits (backends.compile.tabulate: token-only nodes evaluated on the id).
- lm_head row: sum over the kind bits and kind k's payload bits of (2p-1)(2y-1), minus the
  payload width: the correct token scores the number of kind bits, any other at least 2 less.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from common.kinds import DType
from hdl.ir import Circuit
from backends.chipdir.checkpoint import FORMAT, FORMAT_VERSION
from backends.chipdir.chipfile import circuit_to_json
from backends.chipdir.chipschema import kind_ids
from backends.compile import lanemap
from backends.compile.exact import Proof, Proven, exact_cast
from backends.chipdir.memory import head_cell
from backends.compile.program import Form, Program, const, lin
from backends.compile.tabulate import TokenTable

from backends.chipdir.numbers import DTYPES, HF_NAMES

#: value ballast exponent when a memory stores bytes: 2 * 2^60 >= 2^24 * 126 * (32 * 255)^2
BV_BYTE = 30
ZSEL = 256      # z gate slope: an unselected packed word gets z <= Z - 256 (silu = -0.0)


@dataclass(frozen=True)
class Numerics:
    """Every constant of the exact construction (exponents of powers of two)."""
    hidden: int
    n_b: int            # ballast lanes in the residual
    b_res: int          # B_res = 2**b_res
    m: int              # pre-norm scale 2**-m
    cb: int             # normalised ballast = 2**cb
    k: int = 7          # K = 128 for relu units
    kq: int = 7         # key/query magnitude 128 before silu
    vs: int = 5         # Vs = 32
    z: int = 6          # Z = 64
    b_v: int = 26       # value ballast 2**26
    n_bv: int = 1       # value ballast columns per value head


def choose_numerics(prog: Program) -> Numerics:
    """Hidden width, ballast and scales for ``prog`` (valid for bf16 and fp32 alike)."""
    H, n_b = prog.target.hidden_for(prog.n_dims)
    sumsq = prog.dim_sumsq() + 1
    # fp32 needs n_b*B^2 >= 2^24 * sum s^2 (bf16 needs 2^9); keep 2 bits of margin
    e = math.ceil((26 + math.log2(sumsq) - math.log2(n_b)) / 2)
    k4 = round(math.log(H // n_b, 4))
    e = max(e, k4 + 3)                      # mean square >= 16 (eps vanishes)
    m = e - k4                              # n_b * 4^e / H = 4^(e - k4)
    byte = any(p.cell > 1 for p in prog.mems.values())
    return Numerics(hidden=H, n_b=n_b, b_res=e, m=m, cb=k4, b_v=BV_BYTE if byte else 26,
                    n_bv=prog.target.value_ballast)


def addr_match(addr: list[Form], a: int, extra: list[Form] = ()) -> Form | None:
    """sum of bit matches (addr == a) plus ``extra`` bits, minus (count - 1): 1 iff all
    match and all extra bits are 1, <= 0 otherwise. None if ``a`` is not reachable."""
    if a >> len(addr):
        return None
    parts = [(1, x) if (a >> i) & 1 else (-1, x) for i, x in enumerate(addr)]
    c = sum(1 for i in range(len(addr)) if not (a >> i) & 1)
    parts += [(1, x) for x in extra]
    return lin(parts, c - (len(addr) + len(extra) - 1))


class _Mat:
    """A dense fp32 matrix filled from integer forms with power-of-two scales."""

    def __init__(self, rows: int, cols: int, num: Numerics, prog: Program):
        self.w = torch.zeros(rows, cols, dtype=torch.float32)
        self.num = num
        self.dim = prog.dim

    def form(self, row: int, f: Form, scale: float) -> None:
        """Row ``row`` reads ``scale * f`` from the normalised residual."""
        n = self.num
        s_lane = scale * 2.0 ** n.m
        for lane, w in f.t.items():
            self.w[row, n.n_b + self.dim(lane)] += w * s_lane
        if f.c:
            self.w[row, 0] += f.c * scale / 2.0 ** n.cb


def config_dict(prog: Program, num: Numerics, layers: int, inter: int, nk: int, vocab: int,
                dtype: str) -> dict[str, Any]:
    t = prog.target
    return dict(
        architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text",
        vocab_size=vocab, hidden_size=num.hidden, intermediate_size=inter,
        num_hidden_layers=layers + 1, num_attention_heads=1, num_key_value_heads=1, head_dim=64,
        linear_conv_kernel_dim=t.conv_kernel, linear_key_head_dim=t.d_k,
        linear_value_head_dim=t.d_v, linear_num_key_heads=nk,
        linear_num_value_heads=nk * t.v_per_k,
        layer_types=["linear_attention"] * layers + ["full_attention"],
        rms_norm_eps=t.rms_eps, tie_word_embeddings=False, hidden_act="silu",
        max_position_embeddings=1 << 20, dtype=HF_NAMES[dtype],
        full_attention_interval=layers + 1)


def token_table(c: Circuit) -> list[dict[str, Any]]:
    """Per kind: id offset, payload bits, ids (fewer than 2**payload_bits with a bound) and
    fields (payload = fields, first field lowest)."""
    return [{"name": k.name, "offset": off, "payload_bits": k.payload_bits, "ids": k.ids,
             "halt": k.halt,
             "fields": [[f.name, f.width, f.signed] for f in k.fields]}
            for k, off in zip(c.kinds, c.kind_offsets())]


GROUP_EMBED = "embed"       # model.embed_tokens
GROUP_HEAD = "head"         # model.norm, lm_head and the trailing zero full-attention layer
CHUNK_ROWS = 4096           # embedding / lm_head rows built in fp32 at a time


def layer_group(li: int) -> str:
    """The group name of chip decoder layer ``li`` (its own shard in a sharded checkpoint)."""
    return f"layers.{li}"


def model_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shape of every parameter ``Qwen3_5ForCausalLM`` has under ``config``, in the
    model's own order (built on the meta device: no memory)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(**{k: v for k, v in config.items()
                               if k not in ("architectures", "model_type", "dtype")})
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


@dataclass(frozen=True)
class Emission:
    """Everything a tensor of the checkpoint depends on, fixed before any tensor is built
    (made by :func:`plan`): the Program, its numerics, the dtype, the module sizes, the
    config.json dict and, per group (:attr:`groups`), the names and shapes of the model's
    parameters in it. :func:`group_tensors` builds one group from this alone."""
    prog: Program
    num: Numerics
    dtype: DType
    inter: int
    nk: int
    vocab: int
    kinds: list[dict[str, Any]]
    config: dict[str, Any]
    members: dict[str, dict[str, tuple[int, ...]]]     # group -> {name: shape}
    proof: Proof | None = None      # what backends.compile.exact proved (chip.json's "proof")

    @property
    def groups(self) -> list[str]:
        """Group names in file order: the embedding, each chip layer, the head."""
        return list(self.members)

    @property
    def info(self) -> dict[str, Any]:
        """The sizes :func:`chip_json` reads (inter, nk, vocab, kinds)."""
        return {"inter": self.inter, "nk": self.nk, "vocab": self.vocab, "kinds": self.kinds}

    def nbytes(self, group: str) -> int:
        """Bytes the tensors of ``group`` take in ``dtype``."""
        size = DTYPES[self.dtype].itemsize
        return sum(math.prod(s) * size for s in self.members[group].values())


def plan(prog: Program, dtype: str = "fp32", num: Numerics | None = None,
         proof: Proof | None = None) -> Emission:
    """Fix sizes, config and tensor groups for ``prog`` (``num`` defaults to
    :func:`choose_numerics`; ``proof``: what :func:`backends.compile.exact.prove` found, kept for
    chip.json); builds no tensor."""
    num = num or choose_numerics(prog)
    t = prog.target
    L = prog.n_layers
    inter = t.mlp_width or max([1] + [prog.neurons_in(i) for i in range(L)])
    nk = t.k_heads or max([1] + [kh + 1 for p in prog.mems.values() for _, kh in p.banks])
    vocab = prog.circuit.vocab_size
    config = config_dict(prog, num, L, inter, nk, vocab, dtype)
    members: dict[str, dict[str, tuple[int, ...]]] = {GROUP_EMBED: {}}
    members.update({layer_group(i): {} for i in range(L)})
    members[GROUP_HEAD] = {}
    for name, shape in model_shapes(config).items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if name.startswith("model.embed_tokens."):
            g = GROUP_EMBED
        elif m and int(m[1]) < L:
            g = layer_group(int(m[1]))
        else:
            g = GROUP_HEAD
        members[g][name] = shape
    return Emission(prog, num, dtype, inter, nk, vocab, token_table(prog.circuit), config,
                    members, proof)


def run(proven: Proven) -> Emission:
    """The last planning stage: :func:`plan` for a proven program, the proof kept for
    chip.json."""
    return plan(proven.prog, proven.dtype, proven.num, proven.proof)


def _finish(sd: dict[str, torch.Tensor], dtype: str) -> None:
    """Cast every not-yet-cast tensor to ``dtype``, proving each weight representable."""
    td = DTYPES[dtype]
    for k, v in sd.items():
        if v.dtype != td:
            sd[k] = exact_cast(k, v, dtype)


def _embedding(em: Emission) -> dict[str, torch.Tensor]:
    """model.embed_tokens.weight, built CHUNK_ROWS rows at a time straight into ``dtype``."""
    num, prog, H = em.num, em.prog, em.num.hidden
    name = "model.embed_tokens.weight"
    E = torch.zeros(em.vocab, H, dtype=DTYPES[em.dtype])
    E[:, :num.n_b] = 2.0 ** num.b_res
    table = TokenTable(prog.circuit, [nid for nid, _ in prog.token_fns])
    for ki, k in enumerate(em.kinds):
        n = kind_ids(k)
        for lo in range(0, n, CHUNK_ROWS):
            ids = torch.arange(lo, min(n, lo + CHUNK_ROWS))
            blk = torch.zeros(len(ids), H, dtype=torch.float32)
            blk[:, :num.n_b] = 2.0 ** num.b_res
            for i, ln in enumerate(prog.kind_lanes):
                blk[:, num.n_b + prog.dim(ln)] = float((ki >> i) & 1)
            bit = 0
            for fl in prog.field_lanes[ki]:
                for ln in fl:
                    blk[:, num.n_b + prog.dim(ln)] = ((ids >> bit) & 1).float()
                    bit += 1
            for (_, lanes), v in zip(prog.token_fns, table.values(ki, ids.numpy())):
                for i, ln in enumerate(lanes):
                    blk[:, num.n_b + prog.dim(ln)] = torch.from_numpy(
                        ((v >> np.uint64(i)) & np.uint64(1)).astype(np.float32))
            r0 = k["offset"] + lo
            E[r0:r0 + len(ids)] = exact_cast(name, blk, em.dtype, r0 * H)
    return {name: E}


def _layer(em: Emission, li: int) -> dict[str, torch.Tensor]:
    """Every tensor of chip decoder layer ``li`` (GDN memories, MLP neurons), in ``dtype``:
    the attention half made and cast first, then the MLP (one half in float32 at a time)."""
    pre = f"model.layers.{li}."
    sd = _gdn(em, li, pre)
    _finish(sd, em.dtype)
    sd.update(_mlp(em, li, pre))
    _finish(sd, em.dtype)
    z = torch.zeros(em.num.hidden, dtype=torch.float32)
    sd[pre + "input_layernorm.weight"] = z
    sd[pre + "post_attention_layernorm.weight"] = z.clone()
    return sd


def _gdn(em: Emission, li: int, pre: str) -> dict[str, torch.Tensor]:
    """The Gated DeltaNet tensors of layer ``li`` (names under ``pre``), float32: every
    memory bank the layer holds, its read ports' queries and outputs, its write port's keys
    and values, the conv taps that delay keys and values by one token."""
    prog, num, t = em.prog, em.num, em.prog.target
    H = num.hidden
    KQ, VS, Z, BV = (2.0 ** x for x in (num.kq, num.vs, num.z, num.b_v))
    g = t.v_per_k
    nv, dk, dv = em.nk * g, t.d_k, t.d_v
    kd, vd = em.nk * dk, nv * dv
    kern = t.conv_kernel
    z = lambda *s: torch.zeros(*s, dtype=torch.float32)
    wout = BV * math.sqrt(num.n_bv) / (math.sqrt(dv) * VS * Z)
    assert math.log2(wout).is_integer(), wout
    sd: dict[str, torch.Tensor] = {}
    qkv = _Mat(2 * kd + vd, H, num, prog)
    zp = _Mat(vd, H, num, prog)
    out = z(H, vd)
    conv = z(2 * kd + vd, 1, kern)
    conv[:kd, 0, kern - 1] = 1.0                 # queries: current token
    conv[kd:, 0, kern - 2] = 1.0                 # keys, values: previous token
    bm = _Mat(nv, H, num, prog)                  # beta = sigmoid(1024): 1
    bm.w[:, 0] = 1024.0 / 2.0 ** num.cb
    for p in prog.mems.values():
        if not any(bl == li for bl, _ in p.banks):
            continue
        ports = p.reads if p.reads else [None]
        wr = p.writes[0] if p.writes else None
        lowp = p.pack + p.vsel          # the word's address bits within a logical row
        # a write's key row matches every address bit but the value-head ones
        wbits = wr.addr[:p.pack] + wr.addr[lowp:] if wr is not None else []
        for pi, port in enumerate(ports):
            for rb in range(p.rowblocks):
                for sl in range(p.slices):
                    bl, kh = p.bank(pi, rb, sl)
                    if bl != li:
                        continue
                    nrows = -(-p.depth // p.per_row)
                    for i in range(p.rows):
                        a = rb * p.rows + i
                        if a >= nrows:
                            break
                        fq = addr_match(port.addr[lowp:], a) if port is not None else None
                        for r, w in p.key_rows(i):
                            if fq is not None:
                                qkv.form(kh * dk + r, fq, KQ)
                            wa = (a << p.pack) + max(w, 0)  # row r's word, head bits aside
                            if wr is not None and (a << lowp) + max(w, 0) < p.depth:
                                f = addr_match(wbits, wa, [wr.en])
                                if f is not None:
                                    qkv.form(kd + kh * dk + r, f, KQ)
                    if t.two_hot and port is not None and not p.pair:
                        qkv.w[kh * dk + dk - 1, 0] += KQ / 2.0 ** num.cb
                    if p.transparent:   # written at the step's own position
                        for lo, n in ((kd + kh * dk, dk), (2 * kd + kh * g * dv, g * dv)):
                            conv[lo:lo + n, 0, :] = 0.0
                            conv[lo:lo + n, 0, kern - 1] = 1.0
                    for v in range(g):
                        vh = kh * g + v
                        col0 = 2 * kd + vh * dv
                        zp.w[vh * dv:(vh + 1) * dv, 0] = Z / 2.0 ** num.cb
                        if wr is not None:
                            qkv.w[col0:col0 + num.n_bv, 0] = BV / 2.0 ** num.cb
                        if wr is not None and p.vsel:   # beta 1 on the addressed head, else 0
                            bm.w[vh] = 0.0
                            hit = addr_match(wr.addr[p.pack:lowp], v)
                            bm.form(vh, const(-1024) if hit is None else
                                    lin([(1024, hit)], -512), 1.0)
                        for j in range(dv - num.n_bv):
                            col = head_cell(p, t, sl, v, j)
                            if col is None:
                                break
                            wi, r0, ci, b0, nb = col
                            if wr is not None:      # a paired RAM's word: its gated copy
                                d0 = (wi & 1) * p.width if p.pair else 0
                                cell = lin([(1 << i, wr.data[d0 + b0 + i]) for i in range(nb)])
                                qkv.form(col0 + num.n_bv + j, cell, VS)
                            if port is not None:    # (a paired read sums two rows' ballast)
                                out[num.n_b + prog.dim(port.lanes[ci]), vh * dv + num.n_bv + j] = \
                                    2 * wout if p.pair else wout
                                if lowp:        # z gate: this column's word is selected
                                    sel = addr_match(port.addr[:lowp], wi)
                                    zrow = vh * dv + num.n_bv + j
                                    zp.w[zrow] = 0.0
                                    zp.form(zrow, lin([(ZSEL, sel)], Z - ZSEL) if sel is not None
                                            else const(Z - ZSEL), 1.0)
    sd[pre + "linear_attn.in_proj_qkv.weight"] = qkv.w
    sd[pre + "linear_attn.conv1d.weight"] = conv
    sd[pre + "linear_attn.in_proj_z.weight"] = zp.w
    sd[pre + "linear_attn.in_proj_b.weight"] = bm.w
    sd[pre + "linear_attn.in_proj_a.weight"] = z(nv, H)
    sd[pre + "linear_attn.dt_bias"] = torch.full((nv,), -1024.0)
    sd[pre + "linear_attn.A_log"] = z(nv)
    sd[pre + "linear_attn.norm.weight"] = torch.ones(dv)
    sd[pre + "linear_attn.out_proj.weight"] = out
    return sd


def _mlp(em: Emission, li: int, pre: str) -> dict[str, torch.Tensor]:
    """The MLP tensors of layer ``li`` (names under ``pre``), float32: neuron i's gate is its
    pre-activation times K, its up the constant 1/K, its down the weights into its lanes."""
    prog, num, H = em.prog, em.num, em.num.hidden
    K = 2.0 ** num.k
    gate = _Mat(em.inter, H, num, prog)
    up = torch.zeros(em.inter, H, dtype=torch.float32)
    down = torch.zeros(H, em.inter, dtype=torch.float32)
    for ni, n in enumerate(prog.mlp.get(li, [])):
        gate.form(ni, n.gate, K)
        up[ni, 0] = 1.0 / (K * 2.0 ** num.cb)
        for ln, w in n.out.items():
            down[num.n_b + prog.dim(ln), ni] += w
    return {pre + "mlp.gate_proj.weight": gate.w, pre + "mlp.up_proj.weight": up,
            pre + "mlp.down_proj.weight": down}


def _head(em: Emission) -> dict[str, torch.Tensor]:
    """model.norm and lm_head.weight (built CHUNK_ROWS rows at a time into ``dtype``)."""
    num, prog, H = em.num, em.prog, em.num.hidden
    name = "lm_head.weight"
    head = torch.zeros(em.vocab, H, dtype=DTYPES[em.dtype])
    nkb = len(prog.out_kind)
    for ki, k in enumerate(em.kinds):
        kind_part = lin([(2 * (2 * ((ki >> i) & 1) - 1), x) for i, x in enumerate(prog.out_kind)],
                        -sum(2 * ((ki >> i) & 1) - 1 for i in range(nkb)))
        kf = _Mat(1, H, num, prog)
        kf.form(0, kind_part, 1.0)
        ys = [y for fl in prog.out_fields[ki] for y in fl]
        P = len(ys)
        M = torch.zeros(P, H)
        cst = torch.zeros(P)
        for j, y in enumerate(ys):
            for ln, w in y.t.items():
                M[j, num.n_b + prog.dim(ln)] += 2 * w * 2.0 ** num.m
            cst[j] = 2 * y.c - 1
        n = kind_ids(k)
        assert n <= 1 << P, (k["name"], n, P)
        for lo in range(0, n, CHUNK_ROWS):
            ids = torch.arange(lo, min(n, lo + CHUNK_ROWS))
            S = (2 * ((ids[:, None] >> torch.arange(P)[None, :]) & 1) - 1).float()   # [n, P]
            blk = S @ M if P else torch.zeros(len(ids), H)
            if P:
                blk[:, 0] += ((S @ cst) - P) / 2.0 ** num.cb
            blk += kf.w[0]
            r0 = k["offset"] + lo
            head[r0:r0 + len(ids)] = exact_cast(name, blk, em.dtype, r0 * H)
    return {"model.norm.weight": torch.zeros(H, dtype=DTYPES[em.dtype]), name: head}


def group_tensors(em: Emission, group: str) -> dict[str, torch.Tensor]:
    """Every tensor of ``group`` (one of ``em.groups``), in ``em.dtype``, in the model's
    order: the emitted ones plus zeros for every parameter the chip does not use (the
    trailing full-attention layer, which only exists so that caches report a sequence
    length and ``generate()`` works; its o_proj and MLP are zero, so it adds exactly 0).
    Raises ExactnessError for a weight the dtype cannot hold."""
    if group == GROUP_EMBED:
        sd = _embedding(em)
    elif group == GROUP_HEAD:
        sd = _head(em)
    else:
        sd = _layer(em, int(group.removeprefix("layers.")))
    want = em.members[group]
    extra = set(sd) - set(want)
    if extra:
        raise AssertionError(f"tensors the model does not have: {sorted(extra)[:3]}")
    td = DTYPES[em.dtype]
    out: dict[str, torch.Tensor] = {}
    for name, shape in want.items():
        v = sd.pop(name, None)
        if v is None:
            v = torch.zeros(shape, dtype=td)
        elif tuple(v.shape) != shape:
            raise AssertionError(f"{name}: built {tuple(v.shape)}, model has {shape}")
        out[name] = v if v.dtype == td else exact_cast(name, v, em.dtype)
    return out


def state_dict(em: Emission) -> dict[str, torch.Tensor]:
    """Every group's tensors in one dict (what one model.safetensors holds)."""
    sd: dict[str, torch.Tensor] = {}
    for g in em.groups:
        sd.update(group_tensors(em, g))
    return sd


def nonzero_counts(sd: dict[str, torch.Tensor]) -> dict[str, int]:
    """{name: how many of its weights are not zero} (count_nonzero: no mask or int64 copy)."""
    return {k: int(torch.count_nonzero(v)) for k, v in sd.items()}


def chip_json(prog: Program, num: Numerics, info: dict[str, Any], dtype: str,
              nonzero: dict[str, int], roms: dict[str, list[int]],
              config: dict[str, Any]) -> dict[str, Any]:
    """The description ``check`` and the engines need (and a human can read); ``config`` is
    the config.json written beside it (kept, so a config that does not match is caught)."""
    t = prog.target
    c = prog.circuit
    layers = []
    for li in range(prog.n_layers):
        pre = f"model.layers.{li}."
        layers.append({
            "neurons": prog.neurons_in(li),
            "key_heads": prog.kheads_in(li),
            "memories": [p.name for p in prog.mems.values() if any(L == li for L, _ in p.banks)],
            "nonzero_weights": sum(v for k, v in nonzero.items() if k.startswith(pre))})
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "target": {"name": t.name, **{k: v for k, v in asdict(t).items() if k != "name"}},
        "dtype": dtype,
        "numerics": asdict(num),
        "tokens": {"vocab": info["vocab"], "kinds": info["kinds"]},
        "layers": layers,
        "memories": {p.name: {"kind": p.kind, "width": p.width, "depth": p.depth,
                              "layer": p.layer, "last_layer": p.last, "rows_per_bank": p.rows,
                              "rowblocks": p.rowblocks, "slices": p.slices, "pack": p.pack,
                              "pair": p.pair, "transparent": p.transparent, "vsel": p.vsel,
                              "cell_bits": p.cell,
                              "banks": [list(b) for b in p.banks], "key_heads": p.kheads,
                              "read_ports": len(p.reads), "write_ports": len(p.writes)}
                     for p in prog.mems.values()},
        "schedule": prog.sched,
        "lanes": {"count": prog.n_dims, "logical": len(prog.lanes), "ballast": num.n_b,
                  "token": {ln.label: num.n_b + prog.dim(i) for i, ln in enumerate(prog.lanes)
                            if ln.slot < 0}},
        "lanemap": lanemap.record(prog, num),
        "shapes": {"layers": prog.n_layers, "hidden": num.hidden, "intermediate": info["inter"],
                   "key_heads": info["nk"], "value_heads": info["nk"] * t.v_per_k},
        "nonzero_weights": sum(nonzero.values()),
        "circuit": circuit_to_json(c),
        "roms": {k: list(map(int, v)) for k, v in roms.items()},
        "config": config,
    }
