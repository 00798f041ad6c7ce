"""Emission: a scheduled :class:`backends.lower.Program` -> Qwen3.5 tensors and a checkpoint.

Takes: the Program, the dtype. Gives: :class:`Numerics` (every scale constant, all powers
of two), the state dict (names exactly as ``Qwen3_5ForCausalLM`` uses them), the config and
``chip.json`` (:mod:`backends.checkpoint` writes them into a directory).

Layout of the residual stream: dims ``0 .. n_b-1`` hold the ballast B_res on every token;
lane ``l`` of the Program is dim ``n_b + l``. Every pre-norm multiplies by exactly
``2**-m`` (``n_b * B_res**2 / H = 4**m``), so a sublayer reads lane values ``v * 2**-m`` and
the normalised ballast ``cb = sqrt(H / n_b)`` as its bias input.

- MLP neuron ``relu(T)``: gate row = K*T (lanes weighted K*coef*2**m, constant K*c/cb on
  dim 0), up row = 1/(K*cb) on dim 0, down column = the neuron's output weights.
- GDN memory bank (one key head + its GQA value heads): query = Kq * [addr == row] from the
  current token (conv tap kernel-1) via silu(Kq * (matches - nbits + 1)), plus Kq on the
  reserved last row when queries are two-hot; key = Kk * [addr == row and en] from the
  previous token (conv tap kernel-2); values = B_v on the ballast columns and Vs * bit on
  the data columns, from the previous token; beta = 1, decay 0 (a = 0, dt_bias = -1024),
  z = Z; out_proj maps data column -> read lane with weight
  B_v * sqrt(n_bv) / (sqrt(d_v) * Vs * Z).
- Embedding row of token (kind k, payload p): ballast, kind bits, field bits of kind k.
- lm_head row: sum over the kind bits and kind k's payload bits of (2p-1)(2y-1), minus the
  payload width: the correct token scores the number of kind bits, any other at least 2 less.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from hdl.ir import Circuit
from backends.checkpoint import FORMAT, FORMAT_VERSION
from backends.chipfile import circuit_to_json
from backends.lower import Form, Program, lin

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
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
    return Numerics(hidden=H, n_b=n_b, b_res=e, m=m, cb=k4,
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
        max_position_embeddings=1 << 20, dtype={"bf16": "bfloat16", "fp32": "float32"}[dtype],
        full_attention_interval=layers + 1)


def complete_state_dict(config: dict[str, Any], sd: dict[str, torch.Tensor],
                        dtype: torch.dtype = torch.float32) -> None:
    """Add zeros for every parameter of the model that ``sd`` lacks (the trailing
    full-attention layer, which only exists so that caches report a sequence length and
    ``generate()`` works; its output projection and MLP are zero, so it adds exactly 0)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(**{k: v for k, v in config.items() if k not in ("architectures", "model_type", "dtype")})
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    want = model.state_dict()
    extra = set(sd) - set(want)
    if extra:
        raise AssertionError(f"tensors the model does not have: {sorted(extra)[:3]}")
    for k, v in want.items():
        if k not in sd:
            sd[k] = torch.zeros(v.shape, dtype=dtype)
        elif tuple(sd[k].shape) != tuple(v.shape):
            raise AssertionError(f"{k}: built {tuple(sd[k].shape)}, model has {tuple(v.shape)}")


def token_table(c: Circuit) -> list[dict[str, Any]]:
    """Per kind: id offset, payload bits and fields (payload = fields, first field lowest)."""
    return [{"name": k.name, "offset": off, "payload_bits": k.payload_bits, "halt": k.halt,
             "fields": [[f.name, f.width, f.signed] for f in k.fields]}
            for k, off in zip(c.kinds, c.kind_offsets())]


def _finish(sd: dict[str, torch.Tensor], dtype: str) -> None:
    """Cast every not-yet-cast tensor to ``dtype``, proving each weight representable."""
    from backends.exact import check_representable
    td = DTYPES[dtype]
    for k, v in sd.items():
        if v.dtype != td:
            check_representable({k: v}, dtype)
            sd[k] = v.to(td)


def build(prog: Program, dtype: str = "fp32"
          ) -> tuple[Numerics, dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """(numerics, state dict in ``dtype``, sizes, {}); each layer is cast to ``dtype`` as
    soon as it is built (with the representability check), to bound peak memory."""
    num = choose_numerics(prog)
    t = prog.target
    c = prog.circuit
    H = num.hidden
    L = prog.n_layers
    K, KQ, VS, Z, BV = (2.0 ** x for x in (num.k, num.kq, num.vs, num.z, num.b_v))
    inter = t.mlp_width or max([1] + [prog.neurons_in(i) for i in range(L)])
    nk = t.k_heads or max([1] + [kh + 1 for p in prog.mems.values() for _, kh in p.banks])
    g = t.v_per_k
    nv, dk, dv = nk * g, t.d_k, t.d_v
    kd, vd = nk * dk, nv * dv
    kern = t.conv_kernel
    sd: dict[str, torch.Tensor] = {}
    z = lambda *s: torch.zeros(*s, dtype=torch.float32)
    kinds = token_table(c)
    vocab = c.vocab_size
    # ---- embedding ----
    E = z(vocab, H)
    E[:, :num.n_b] = 2.0 ** num.b_res
    for ki, k in enumerate(kinds):
        ids = torch.arange(1 << k["payload_bits"])
        rows = slice(k["offset"], k["offset"] + len(ids))
        for i, ln in enumerate(prog.kind_lanes):
            E[rows, num.n_b + prog.dim(ln)] = float((ki >> i) & 1)
        bit = 0
        for fl in prog.field_lanes[ki]:
            for ln in fl:
                E[rows, num.n_b + prog.dim(ln)] = ((ids >> bit) & 1).float()
                bit += 1
    sd["model.embed_tokens.weight"] = E
    # ---- layers ----
    wout = BV * math.sqrt(num.n_bv) / (math.sqrt(dv) * VS * Z)
    assert math.log2(wout).is_integer(), wout
    for li in range(L):
        pre = f"model.layers.{li}."
        qkv = _Mat(2 * kd + vd, H, num, prog)
        zp = _Mat(vd, H, num, prog)
        out = z(H, vd)
        conv = z(2 * kd + vd, 1, kern)
        conv[:kd, 0, kern - 1] = 1.0                 # queries: current token
        conv[kd:, 0, kern - 2] = 1.0                 # keys, values: previous token
        for p in prog.mems.values():
            if not any(bl == li for bl, _ in p.banks):
                continue
            ports = p.reads if p.reads else [None]
            wr = p.writes[0] if p.writes else None
            for pi, port in enumerate(ports):
                for rb in range(p.rowblocks):
                    for sl in range(p.slices):
                        bl, kh = p.bank(pi, rb, sl)
                        if bl != li:
                            continue
                        nrows = -(-p.depth // (1 << p.pack))
                        for i in range(p.rows):
                            a = rb * p.rows + i
                            if a >= nrows:
                                break
                            if port is not None:
                                f = addr_match(port.addr[p.pack:], a)
                                if f is not None:
                                    qkv.form(kh * dk + i, f, KQ)
                            if wr is not None:
                                f = addr_match(wr.addr, a, [wr.en])
                                if f is not None:
                                    qkv.form(kd + kh * dk + i, f, KQ)
                        if t.two_hot and port is not None:
                            qkv.w[kh * dk + dk - 1, 0] += KQ / 2.0 ** num.cb
                        for v in range(g):
                            vh = kh * g + v
                            col0 = 2 * kd + vh * dv
                            zp.w[vh * dv:(vh + 1) * dv, 0] = Z / 2.0 ** num.cb
                            if wr is not None:
                                qkv.w[col0:col0 + num.n_bv, 0] = BV / 2.0 ** num.cb
                            for j in range(dv - num.n_bv):
                                rbit = sl * t.cols_per_bank + v * (dv - num.n_bv) + j
                                wi, b = divmod(rbit, p.width)
                                if wi >= 1 << p.pack:
                                    break
                                if wr is not None:
                                    qkv.form(col0 + num.n_bv + j, wr.data[b], VS)
                                if port is not None:
                                    out[num.n_b + prog.dim(port.lanes[b]), vh * dv + num.n_bv + j] = wout
                                    if p.pack:      # z gate: this column's word is selected
                                        sel = addr_match(port.addr[:p.pack], wi)
                                        zrow = vh * dv + num.n_bv + j
                                        zp.w[zrow] = 0.0
                                        zp.form(zrow, lin([(ZSEL, sel)], Z - ZSEL), 1.0)
        sd[pre + "linear_attn.in_proj_qkv.weight"] = qkv.w
        sd[pre + "linear_attn.conv1d.weight"] = conv
        sd[pre + "linear_attn.in_proj_z.weight"] = zp.w
        bw = z(nv, H)
        bw[:, 0] = 1024.0 / 2.0 ** num.cb
        sd[pre + "linear_attn.in_proj_b.weight"] = bw
        sd[pre + "linear_attn.in_proj_a.weight"] = z(nv, H)
        sd[pre + "linear_attn.dt_bias"] = torch.full((nv,), -1024.0)
        sd[pre + "linear_attn.A_log"] = z(nv)
        sd[pre + "linear_attn.norm.weight"] = torch.ones(dv)
        sd[pre + "linear_attn.out_proj.weight"] = out
        gate, up = _Mat(inter, H, num, prog), z(inter, H)
        down = z(H, inter)
        for ni, n in enumerate(prog.mlp.get(li, [])):
            gate.form(ni, n.gate, K)
            up[ni, 0] = 1.0 / (K * 2.0 ** num.cb)
            for ln, w in n.out.items():
                down[num.n_b + prog.dim(ln), ni] += w
        sd[pre + "mlp.gate_proj.weight"] = gate.w
        sd[pre + "mlp.up_proj.weight"] = up
        sd[pre + "mlp.down_proj.weight"] = down
        del gate, up, down, qkv, zp, out
        _finish(sd, dtype)
        sd[pre + "input_layernorm.weight"] = z(H)
        sd[pre + "post_attention_layernorm.weight"] = z(H)
    sd["model.norm.weight"] = z(H)
    # ---- lm_head ----
    head = _Mat(vocab, H, num, prog)
    nkb = len(prog.out_kind)
    kind_part = []
    for ki in range(len(kinds)):
        f = lin([(2 * (2 * ((ki >> i) & 1) - 1), x) for i, x in enumerate(prog.out_kind)],
                -sum(2 * ((ki >> i) & 1) - 1 for i in range(nkb)))
        kind_part.append(f)
    for ki, k in enumerate(kinds):
        ys = [y for fl in prog.out_fields[ki] for y in fl]
        P = len(ys)
        ids = torch.arange(1 << P)
        S = (2 * ((ids[:, None] >> torch.arange(P)[None, :]) & 1) - 1).float()   # [2^P, P]
        M = z(P, H)
        cst = z(P)
        for j, y in enumerate(ys):
            for ln, w in y.t.items():
                M[j, num.n_b + prog.dim(ln)] += 2 * w * 2.0 ** num.m
            cst[j] = 2 * y.c - 1
        rows = slice(k["offset"], k["offset"] + (1 << P))
        head.w[rows] = S @ M if P else 0.0
        head.w[rows, 0] += ((S @ cst) - P) / 2.0 ** num.cb if P else 0.0
        kf = _Mat(1, H, num, prog)
        kf.form(0, kind_part[ki], 1.0)
        head.w[rows] += kf.w[0]
    sd["lm_head.weight"] = head.w
    info = {"inter": inter, "nk": nk, "vocab": vocab, "kinds": kinds}
    _finish(sd, dtype)
    return num, sd, info, {}


def rom_state(prog: Program, num: Numerics, name: str, words: list[int]
              ) -> dict[tuple[int, int], torch.Tensor]:
    """Recurrent-state rows holding ``words`` for memory ``name``:
    {(layer, value head): [d_k, d_v] fp32}."""
    p = prog.mems[name]
    t = prog.target
    dv, g = t.d_v, t.v_per_k
    out: dict[tuple[int, int], torch.Tensor] = {}
    VS, BV = 2.0 ** num.vs, 2.0 ** num.b_v
    wt = torch.tensor([int(w) for w in words[:p.depth]] + [0] * max(0, p.depth - len(words)),
                      dtype=torch.int64)
    P = 1 << p.pack
    nrows = -(-p.depth // P)
    wt = torch.cat([wt, torch.zeros(nrows * P - p.depth, dtype=torch.int64)]).view(nrows, P)
    for pi in range(p.ports):
        for rb in range(p.rowblocks):
            lo, hi = rb * p.rows, min(nrows, (rb + 1) * p.rows)
            ws = wt[lo:hi]
            for sl in range(p.slices):
                layer, kh = p.bank(pi, rb, sl)
                for v in range(g):
                    st = torch.zeros(t.d_k, dv, dtype=torch.float32)
                    st[:hi - lo, :num.n_bv] = BV
                    for j in range(dv - num.n_bv):
                        rbit = sl * t.cols_per_bank + v * (dv - num.n_bv) + j
                        wi, b = divmod(rbit, p.width)
                        if wi >= P:
                            break
                        st[:hi - lo, num.n_bv + j] = ((ws[:, wi] >> b) & 1).float() * VS
                    out[(layer, kh * g + v)] = st
    return out


def nonzero_counts(sd: dict[str, torch.Tensor]) -> dict[str, int]:
    return {k: int((v != 0).sum()) for k, v in sd.items()}


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
                              "banks": [list(b) for b in p.banks], "key_heads": p.kheads,
                              "read_ports": len(p.reads), "write_ports": len(p.writes)}
                     for p in prog.mems.values()},
        "lanes": {"count": prog.n_dims, "logical": len(prog.lanes), "ballast": num.n_b,
                  "token": {ln.label: num.n_b + prog.dim(i) for i, ln in enumerate(prog.lanes)
                            if ln.slot < 0}},
        "shapes": {"layers": prog.n_layers, "hidden": num.hidden, "intermediate": info["inter"],
                   "key_heads": info["nk"], "value_heads": info["nk"] * t.v_per_k},
        "nonzero_weights": sum(nonzero.values()),
        "circuit": circuit_to_json(c),
        "roms": {k: list(map(int, v)) for k, v in roms.items()},
        "config": config,
    }
