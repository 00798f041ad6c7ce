"""The fast engine's kernel in numpy: what ``kernel.c`` computes, for when the C kernel cannot
be built (no working C compiler). Much slower, bit for bit the same.

Takes: a :class:`backends.engines.fast.model.FastModel` (the arrays :class:`backends.engines.fast.native.Native`
hands to C). Gives: :class:`PyKernel`, with ``Native``'s interface: :meth:`PyKernel.new_state`
(a :class:`PyState`: position, error, recurrent states ``S`` [G, NV, DK, DV] float32 and the
conv history), :meth:`PyKernel.recurrent` (``S``, writable), :meth:`PyKernel.position`,
:meth:`PyKernel.failure` (code, layer, value of the check that stopped a stream),
:meth:`PyKernel.error` (the :class:`backends.engines.fast.native.FastError` a stopped stream raises),
:meth:`PyKernel.feed` (teacher-forced ids -> the argmax after each, optional taps [n, 2L, H])
and :meth:`PyKernel.run` (free-running from a token until a stop token), each returning the
same ids, states, taps and errors (code, layer, value) as the C kernel.

Same numbers, not just the same tokens: every value is rounded where ``kernel.c`` rounds it
(float32 products and sums, bf16 rounding to nearest even, float64 where C sums in double)
and every sum is taken in C's order: a projection's output from its bias over the inputs in
the order the kernel lists them (the residual's dims as they were first written), a dot
product over its row's entries in order. numpy's own reductions (``sum``, ``add.reduceat``)
may sum pairwise, so sums here are ``cumsum`` along a padded matrix (accumulate is strictly
sequential), the padding ``-0.0`` (``a + -0.0 == a`` for every ``a``, signed zeros included).
Lists whose order C carries from token to token (the residual's dims, the conv inputs due
at each position) are kept in that order; the checks (``DC_E_*``) are made in C's order, so
a stream stops at the same value with the same state.
"""
from __future__ import annotations

import collections

import numpy as np

from backends.engines.fast.model import FastModel
from backends.engines.fast.errors import message

F32 = np.float32
F64 = np.float64
EPS = F32(1e-6)                 # kernel.c's 1e-6f
ONE = F32(1.0)
#: kernel.c's DC_E_* codes
E_TOKEN, E_NORM, E_SILU, E_BETA, E_KEY, E_QUERY, E_GNORM, E_ARGMAX = range(1, 9)
E_BOUND = 10


class _Stop(Exception):
    """A failed check inside a step (the state already carries the code)."""


class PyState:
    """One stream: what ``dc_state`` carries from token to token."""

    def __init__(self, m: FastModel):
        self.pos = 0
        self.err, self.err_layer, self.err_val = 0, 0, 0.0
        self.S = np.zeros((m.G, m.NV, m.DK, m.DV), dtype=F32)
        #: [G, KC, C]: the live-default channels touched at the position of each slot
        self.hmk = np.zeros((m.G, m.KC, m.C), dtype=bool)
        #: per GDN layer and slot: (channels, values) chunks due at the slot's position, in
        #: the order they were filed
        self.due: list[list[list[tuple[np.ndarray, np.ndarray]]]] = [
            [[] for _ in range(m.KC)] for _ in range(m.G)]

    def fail(self, code: int, layer: int, val: float) -> None:
        self.err, self.err_layer, self.err_val = code, layer, float(val)
        raise _Stop


_16, _1, _7FFF, _HI = (np.uint32(v) for v in (16, 1, 0x7FFF, 0xFFFF0000))


def _rbf16(a: np.ndarray) -> np.ndarray:
    """kernel.c's rbf16 on a float32 array: round to nearest even, inf and nan as they are."""
    a = np.ascontiguousarray(a, dtype=F32)
    if a.size == 0:
        return a
    u = a.view(np.uint32)
    r = u >> _16
    r &= _1
    r += u
    r += _7FFF
    r &= _HI
    if np.isnan(a).any():       # inf rounds to itself; nan is left as it is
        r = np.where(np.isnan(a), u, r)
    return r.view(F32)


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The indices starts[0]..starts[0]+lens[0]-1, starts[1].., one after another."""
    n = int(lens.sum())
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lens)
    return np.repeat(starts - (ends - lens), lens) + np.arange(n)


def _seqsum(keys: np.ndarray, terms: np.ndarray, init: np.ndarray | None, n_out: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Sums of ``terms`` by key, each from ``init[key]`` (None: 0) and over its terms in
    their order, as C's ``out[o] += term`` loop: (the keys in the order first met, their
    sums). ``ufunc.at`` applies the terms one by one in the order given. float32; a NaN
    among them (the untouched mark in damaged weights, which the caller then refuses) passes
    through silently, as in C."""
    n = len(keys)
    if n == 1 or np.bincount(keys).max() == 1:      # one term each: the order they came in
        return keys, (np.zeros(n, dtype=terms.dtype) if init is None else init[keys]) + terms
    acc = np.zeros(n_out, dtype=terms.dtype) if init is None else init.copy()
    with np.errstate(invalid="ignore"):
        np.add.at(acc, keys, terms)
    _, first = np.unique(keys, return_index=True)
    t = keys[np.sort(first)]
    return t, acc[t]


_NONE, _NONE32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=F32)


class _Csc:
    """A projection's CSC arrays (``dc_csc``); with ``second``, the two projections of the
    same inputs as one, the second's outputs numbered after the first's ``n_out``: each
    input's entries of the first, then of the second (so each one's sums, and the order
    its outputs are first touched in, are what it gives alone)."""

    def __init__(self, c, second=None, n_out: int = 0):
        self.ptr, self.idx, self.val = (np.asarray(c.ptr, dtype=np.int64),
                                        np.asarray(c.idx, dtype=np.int64),
                                        np.asarray(c.val, dtype=F32))
        if second is not None:
            cols = [np.repeat(np.arange(len(x.ptr) - 1), np.diff(x.ptr)) for x in (c, second)]
            order = np.argsort(np.concatenate(cols), kind="stable")
            self.idx = np.concatenate([self.idx, np.asarray(second.idx, np.int64) + n_out])[order]
            self.val = np.concatenate([self.val, np.asarray(second.val, F32)])[order]
            self.ptr = self.ptr + np.asarray(second.ptr, dtype=np.int64)
        self.empty = len(self.val) == 0
        self.n_out = int(self.idx.max()) + 1 if len(self.idx) else 0

    def spmv(self, nz: np.ndarray, hv: np.ndarray, bias: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray]:
        """kernel.c's spmv: the outputs the inputs ``nz`` (values ``hv``) touch, in the order
        first touched, and their float32 sums from ``bias``."""
        if self.empty or len(nz) == 0:
            return _NONE, _NONE32
        st = self.ptr[nz]
        lens = self.ptr[nz + 1] - st
        e = _ranges(st, lens)
        if len(e) == 0:
            return _NONE, _NONE32
        return _seqsum(self.idx[e], self.val[e] * np.repeat(hv, lens), bias, self.n_out)


class _Rows:
    """CSR rows summed one at a time (``zb_out``): a padded [rows, longest] table."""

    def __init__(self, ptr: np.ndarray, idx: np.ndarray, val: np.ndarray):
        ptr = np.asarray(ptr, dtype=np.int64)
        lens = np.diff(ptr)
        w = int(lens.max()) if len(lens) else 0
        self.idx = np.zeros((len(lens), w), dtype=np.int64)
        self.val = np.zeros((len(lens), w), dtype=F32)
        self.live = np.arange(w)[None, :] < lens[:, None]
        self.idx[self.live] = idx
        self.val[self.live] = val

    def sums(self, rows: np.ndarray, init: np.ndarray, h: np.ndarray) -> np.ndarray:
        """float32 sums of ``rows`` over their entries in order, each from ``init``."""
        t = np.where(self.live[rows], self.val[rows] * h[self.idx[rows]], F32(-0.0))
        M = np.concatenate([init.astype(F32)[:, None], t], axis=1)
        return np.cumsum(M, axis=1)[:, -1]


class _Layer:
    """A GDN layer's arrays as the Python kernel reads them."""

    def __init__(self, ly, m: FastModel):
        self.gdn = ly.gdn
        self.n1, self.n2 = ly.n1.astype(F32), ly.n2.astype(F32)
        self.ip, self.op = _Csc(ly.ip), _Csc(ly.op)
        self.gate_up, self.down = _Csc(ly.gate, ly.up, m.I), _Csc(ly.down)
        self.gub = np.concatenate([ly.gb, ly.ub]).astype(F32)
        self.zb = _Rows(*ly.zb)
        self.delay = np.asarray(ly.delay, dtype=np.int64)
        self.gw = ly.gw.astype(F32)
        self.ipb, self.ipd = ly.ipb.astype(F32), ly.ipd.astype(F32)
        self.gb, self.gd = ly.gb.astype(F32), ly.gd.astype(F32)
        self.ub, self.ud = ly.ub.astype(F32), ly.ud.astype(F32)
        self.cda = np.asarray(ly.cda, dtype=np.int64)
        self.cda_delay = self.delay[self.cda]
        self.cdl = np.zeros(m.C, dtype=bool)
        self.cdl[self.cda] = True
        self.dg = np.asarray(ly.dg, dtype=np.int64)
        self.g_of = np.asarray(ly.groups[0], dtype=np.int64)

    def ip_order(self, nz: np.ndarray) -> np.ndarray:
        """The nonzero inputs in the order kernel.c's in_proj takes them: those outside memo
        groups as they come, then each touched group (in the order first touched) with its
        inputs ascending."""
        g = self.g_of[nz]
        grouped = g >= 0
        if not grouped.any():
            return nz
        gs, dims = g[grouped], nz[grouped]
        first = {}
        for x in gs.tolist():
            first.setdefault(x, len(first))
        rank = np.array([first[x] for x in gs.tolist()])
        return np.concatenate([nz[~grouped], dims[np.lexsort((dims, rank))]])


class PyKernel:
    """The C kernel's interface and results, in numpy (see the module docstring)."""

    def __init__(self, model: FastModel):
        m = self.model = model
        self.taps_size = 2 * len(model.layers) * model.H
        self.bf16 = model.dtype == "bf16"
        self.layers = [_Layer(ly, m) if ly.kind == 0 else None for ly in model.layers]
        self.nf = model.nf.astype(F32)
        self.e_ptr, self.e_col, self.e_val = (np.asarray(model.embed[0], dtype=np.int64),
                                              np.asarray(model.embed[1], dtype=np.int64),
                                              np.asarray(model.embed[2], dtype=F32))
        self.QK = m.NK * m.DK
        self.silu_hi = F32(8.0 if self.bf16 else 17.0)
        self.qdiv = F32(m.qdiv)
        # the argmax: every structured row as a padded table of its entries (in order), each
        # kind as its rows' entries in order (for l1) and its bit rows
        lp = np.asarray(model.lm[0], dtype=np.int64)
        self.lm_col = np.asarray(model.lm[1], dtype=np.int64)
        self.lm_val = np.asarray(model.lm[2], dtype=F64)
        E = len(self.lm_val)
        self.row_e = self._table(lp[:-1], np.diff(lp), E)
        off, bits, row, ids = (np.asarray(a, dtype=np.int64) for a in model.kinds)
        self.k_off, self.k_bits, self.k_row, self.k_ids = off, bits, row, ids
        self.kind_e = self._table(lp[row], lp[row + 1 + bits] - lp[row], E)
        self.kind_r = self._table(row + 1, bits, len(lp) - 1)
        self.kind_rlive = self.kind_r < len(lp) - 1
        self.bit_w = np.int64(1) << np.arange(self.kind_r.shape[1], dtype=np.int64)
        self.err_scale = 2.0 ** -8 if self.bf16 else 2.0 ** -23

    @staticmethod
    def _table(starts: np.ndarray, lens: np.ndarray, pad: int) -> np.ndarray:
        """[len(starts), longest] of starts[i] + 0..lens[i]-1, padded with ``pad``."""
        w = int(lens.max()) if len(lens) else 0
        t = np.full((len(starts), w), pad, dtype=np.int64)
        live = np.arange(w)[None, :] < lens[:, None]
        t[live] = _ranges(starts, lens)
        return t

    def rd(self, a):
        """RD: round to the model dtype (bf16) or leave as float32."""
        return _rbf16(a) if self.bf16 else np.asarray(a, dtype=F32)

    def silu(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """silu_exact over an array: (known, value)."""
        ok = (x == 0) | (x >= self.silu_hi) | (x <= F32(-89.0))
        v = np.where(x == 0, x * F32(0.5), np.where(x >= self.silu_hi, x, F32(-0.0)))
        return ok, v.astype(F32)

    # ---- streams -------------------------------------------------------------------------
    def new_state(self) -> PyState:
        return PyState(self.model)

    def recurrent(self, s: PyState, write: bool = False) -> np.ndarray:
        """The stream's recurrent states, [G, NV, DK, DV] float32, as a view (writable with
        ``write``), as :meth:`backends.engines.fast.native.Native.recurrent`."""
        a = s.S.view()
        a.flags.writeable = write
        return a

    def position(self, s: PyState) -> int:
        return s.pos

    def failure(self, s: PyState) -> tuple[int, int, float]:
        """(error code, layer, value) of the check that stopped the stream; code 0: none."""
        return s.err, s.err_layer, s.err_val

    def error(self, s: PyState, where: str = ""):
        return message(self.model, s.pos, *self.failure(s), where)

    def feed(self, s: PyState, ids: np.ndarray, taps: np.ndarray | None = None) -> np.ndarray:
        """Teacher-forced: feed ``ids``; the argmax after each. ``taps``: [n, 2L, H] float32
        filled with the residual after every sublayer."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros(len(ids), dtype=np.int64)
        for i, t in enumerate(ids.tolist()):
            out[i] = self.step(s, t, None if taps is None else taps[i])
            if out[i] < 0:
                raise self.error(s)
        return out

    def run(self, s: PyState, first: int, n: int, stop: np.ndarray | None = None) -> np.ndarray:
        """Free-running from token ``first``: up to ``n`` tokens fed after it, ending once a
        token whose bit is set in ``stop`` (a packed bitmap over ids) has been fed."""
        out = np.zeros(n, dtype=np.int64)
        tok = int(first)
        for i in range(n):
            if (stop is not None and 0 <= tok >> 3 < len(stop)
                    and (int(stop[tok >> 3]) >> (tok & 7)) & 1):
                return out[:i]
            tok = self.step(s, tok, None)
            if tok < 0:
                raise self.error(s)
            out[i] = tok
        return out

    # ---- one token -------------------------------------------------------------------------
    def step(self, s: PyState, tok: int, taps: np.ndarray | None) -> int:
        """dc_step: feed ``tok``; the next id, or -1 with the stream's error set."""
        if s.err:
            return -1
        try:
            return self._step(s, tok, taps)
        except _Stop:
            return -1

    def _step(self, s: PyState, tok: int, taps: np.ndarray | None) -> int:
        m = self.model
        if tok < 0 or tok >= m.vocab:
            s.fail(E_TOKEN, -1, tok)
        x = np.zeros(m.H, dtype=F32)
        a, b = self.e_ptr[tok], self.e_ptr[tok + 1]
        xl = self.e_col[a:b]
        x[xl] = self.e_val[a:b]
        xm = np.zeros(m.H, dtype=bool)
        xm[xl] = True
        st = [x, xl, xm]
        for li, ly in enumerate(self.layers):
            if ly is not None:
                h, nz = self.norm(s, st, ly.n1, li)
                self.gdn(s, st, ly, li, h, nz)
                if taps is not None:
                    taps[2 * li] = st[0]
                h, nz = self.norm(s, st, ly.n2, li)
                self.mlp(s, st, ly, li, h, nz)
            elif taps is not None:
                taps[2 * li] = st[0]
            if taps is not None:
                taps[2 * li + 1] = st[0]
        h, _ = self.norm(s, st, self.nf, len(self.layers))
        nxt = self.argmax(s, h)
        s.pos += 1
        return nxt

    def norm(self, s: PyState, st: list, scale: np.ndarray, li: int
             ) -> tuple[np.ndarray, np.ndarray]:
        """h = x * scale (dense, +0 where zero) and the nonzero dims past the ballast in the
        residual's order; the ballast must dominate (else DC_E_NORM)."""
        m = self.model
        x, xl, _ = st
        v = x[xl]
        hv = v * scale[xl]
        past = xl >= m.NB
        r = v[past & (v != 0)].astype(F64)
        rest = float(np.cumsum(r * r)[-1]) if len(r) else 0.0
        live = hv != 0
        h = np.zeros(m.H, dtype=F32)
        h[xl[live]] = hv[live]
        if rest * m.res_margin >= m.res_ballast:
            s.fail(E_NORM, li, rest)
        return h, xl[live & past]

    def residual_add(self, st: list, t: np.ndarray, acc: np.ndarray) -> None:
        x, xl, xm = st
        x[t] = self.rd(x[t] + self.rd(acc))
        new = t[~xm[t]]
        if len(new):
            xm[new] = True
            st[1] = np.concatenate([xl, new])

    def gdn(self, s: PyState, st: list, ly: _Layer, li: int, h: np.ndarray, nz: np.ndarray
            ) -> None:
        m = self.model
        C, V, DK, DV, KC, QK, VPK = m.C, m.V, m.DK, m.DV, m.KC, self.QK, m.VPK
        g = ly.gdn
        nz = ly.ip_order(nz)
        prt, pr = ly.ip.spmv(nz, h[nz], ly.ipb)
        slot = s.pos % KC
        hk = s.hmk[g, slot]
        hk[:] = False
        due = s.due[g]
        if len(prt):
            d = ly.delay[prt]
            keep = d >= 0
            prt, pr, d = prt[keep], pr[keep], d[keep]
            hk[prt[ly.cdl[prt]]] = True
            v = self.rd(pr)
            filed = ~((v == 0) | (v <= F32(-89.0)))
            prt, v, d = prt[filed], v[filed], d[filed]
            for dd in np.unique(d).tolist():
                sel = d == dd
                due[(slot + dd) % KC].append((prt[sel], v[sel]))
        # the channels due now, then the live defaults untouched where their tap reads
        chunks = due[slot]
        due[slot] = []
        cda = ly.cda
        if len(cda):
            cd = ly.cda_delay
            ok = cd <= s.pos
            ok[ok] = ~s.hmk[g, (s.pos - cd[ok]) % KC, cda[ok]]
            cda = cda[ok]
        if not chunks and not len(cda):
            return
        chans = np.concatenate([c for c, _ in chunks] + [cda])
        src = np.concatenate([w for _, w in chunks] + [ly.ipd[cda]]).astype(F32)
        known, co_v = self.silu(src)
        if not known.all():
            s.fail(E_SILU, li, src[np.argmin(known)])
        live = co_v != 0
        cs, cv = chans[live], co_v[live]
        co = np.zeros(C, dtype=F32)
        co[cs] = cv
        # heads in the order first marked; per key head its queries (in order) and keys
        qk = cs < 2 * QK
        kh = (cs % QK) // DK
        cnt = np.where(qk, VPK, 1)
        base = np.where(qk, kh * VPK, (cs - 2 * QK) // DV)
        heads = _ranges(base, cnt)
        hu, hfirst = np.unique(heads, return_index=True)
        hl = hu[np.argsort(hfirst)].tolist()
        isq = cs < QK
        q_kh, q_dim = kh[isq], cs[isq] % DK
        isk = qk & ~isq
        k_kh, k_dim = kh[isk], cs[isk] % DK
        ys, yv = [], []
        for hh in hl:
            khh = hh // VPK
            qd = q_dim[q_kh == khh]
            kd = k_dim[k_kh == khh]
            nk, nq = len(kd), len(qd)
            if nk > 1:
                s.fail(E_KEY, li, nk)
            if nq > 2:
                s.fail(E_QUERY, li, nq)
            S = s.S[g, hh]
            if nk == 1:
                ka = int(kd[-1])
                kv = co[QK + khh * DK + ka]
                kn = kv * (ONE / np.sqrt(kv * kv + EPS))
                b = self.rd(ly.zb.sums(np.array([V + hh]), ly.ipb[C + V + hh:C + V + hh + 1], h))[0]
                if b >= F32(17.0):
                    beta = F32(1.0)
                elif b <= F32(-104.0):
                    beta = F32(0.0)
                elif b == 0:
                    beta = F32(0.5)
                else:
                    s.fail(E_BETA, li, b)
                row = S[ka]
                vj = co[2 * QK + hh * DV:2 * QK + (hh + 1) * DV]
                delta = (vj - row * kn) * beta
                row[:] = row + kn * delta
            if nq == 0:
                continue
            q = co[khh * DK + qd]
            ss = F32(0.0)
            for t in range(nq):
                ss = ss + q[t] * q[t]
            inv = ONE / np.sqrt(ss + EPS)
            acc = np.zeros(DV, dtype=F32)
            for t in range(nq):
                acc = acc + S[qd[t]] * ((q[t] * inv) / self.qdiv)
            o = self.rd(acc)
            # gated RMSNorm, statistics from the ballast columns
            o2 = o * o
            sb = np.cumsum(o2[:m.NBV])[-1] if m.NBV else F32(0.0)
            od = o[m.NBV:].astype(F64)
            rest = float(np.cumsum(od * od)[-1]) if len(od) else 0.0
            if rest != 0.0 and rest * m.gn_margin >= float(sb):
                s.fail(E_GNORM, li, rest)
            r = ONE / np.sqrt(sb / F32(DV) + EPS)
            js = np.flatnonzero(o != 0)
            if len(js) == 0:
                continue
            y = self.rd(o[js] * r)
            y = self.rd(ly.gw[js] * y)
            zr = hh * DV + js
            zz = self.rd(ly.zb.sums(zr, ly.ipb[C + zr], h))
            known, sz = self.silu(zz)
            if not known.all():
                s.fail(E_SILU, li, zz[np.argmin(known)])
            y = self.rd(y * sz)
            live = y != 0
            ys.append(zr[live])
            yv.append(y[live])
        if ys:
            t, acc = ly.op.spmv(np.concatenate(ys), np.concatenate(yv), None)
            self.residual_add(st, t, acc)

    def mlp(self, s: PyState, st: list, ly: _Layer, li: int, h: np.ndarray, nz: np.ndarray
            ) -> None:
        m = self.model
        t, a = ly.gate_up.spmv(nz, h[nz], ly.gub)
        up = t >= m.I
        gt, ga = t[~up], a[~up]
        if not len(gt) and not len(ly.dg):
            return
        gm = np.zeros(m.I, dtype=bool)
        gm[gt] = True
        dg = ly.dg[~gm[ly.dg]]
        o = np.concatenate([gt, dg])
        gv = np.concatenate([self.rd(ga), ly.gd[dg]])
        known, act = self.silu(gv)
        if not known.all():
            s.fail(E_SILU, li, gv[np.argmin(known)])
        live = act != 0
        pt, pv = o[live], act[live]
        u = ly.ud.copy()
        u[t[up] - m.I] = self.rd(a[up])
        p = self.rd(pv * u[pt])
        live = p != 0
        t, acc = ly.down.spmv(pt[live], p[live], None)
        self.residual_add(st, t, acc)

    def argmax(self, s: PyState, h: np.ndarray) -> int:
        """The winning id from the structured lm_head rows, clear of the runner-up (else
        DC_E_ARGMAX)."""
        L = len(self.layers)
        t = self.lm_val * h[self.lm_col].astype(F64)
        te = np.append(t, -0.0)
        D = np.zeros((self.row_e.shape[0], self.row_e.shape[1] + 1), dtype=F64)
        D[:, 1:] = te[self.row_e]
        d = np.cumsum(D, axis=1)[:, -1]
        A = np.zeros((self.kind_e.shape[0], self.kind_e.shape[1] + 1), dtype=F64)
        A[:, 1:] = np.append(np.abs(t), 0.0)[self.kind_e]
        l1 = np.cumsum(A, axis=1)[:, -1]
        de = np.append(d, -0.0)
        bitd = de[self.kind_r]
        pos = self.kind_rlive & (bitd > 0)
        T = np.empty((len(self.k_row), bitd.shape[1] + 1), dtype=F64)
        T[:, 0] = d[self.k_row]
        T[:, 1:] = np.where(pos, bitd, -0.0)
        tops = np.cumsum(T, axis=1)[:, -1]
        u = (pos * self.bit_w).sum(axis=1)
        dmin = np.where(self.kind_rlive, np.abs(bitd), np.inf).min(axis=1, initial=np.inf)
        runners = np.where(self.k_bits > 0, tops - dmin, -np.inf)
        # C's loops keep the first of the largest and pass over nan: so do these
        if np.isnan(tops).any():
            bk = 0
            for k in range(1, len(tops)):
                if tops[k] > tops[bk]:
                    bk = k
        else:
            bk = int(np.argmax(tops))
        best, second = float(tops[bk]), float(runners[bk])
        above = np.delete(tops, bk)
        above = above[above > second]
        if len(above):
            second = float(above.max())
        l1 = l1[l1 > 0]
        l1max = float(l1.max()) if len(l1) else 0.0
        # (a vocabulary of one id has no runner-up: second is -inf, and any margin is clear)
        mag = abs(best) if np.isinf(second) else float(np.fmax(abs(best), abs(second)))
        err = l1max * 2.0 ** -16 + mag * self.err_scale
        if not (best - second > 2 * err):
            s.fail(E_ARGMAX, L, best - second)
        elif u[bk] >= self.k_ids[bk]:       # a payload past its kind's bound: no such id
            s.fail(E_BOUND, L, float(u[bk]))
        return int(self.k_off[bk] + u[bk])


class CountingKernel(PyKernel):
    """The numpy kernel, noting each MLP's nonzero input dims at every token: the work of
    the MLP gates, which the sparse kernels pay per nonzero input times its column's
    nonzeros (benchmarks/gate_sources.py names it by signal; tests compare lowerings)."""

    def __init__(self, model) -> None:
        super().__init__(model)
        #: MLP layer -> input dim -> tokens at which it was nonzero
        self.present: dict[int, collections.Counter] = collections.defaultdict(
            collections.Counter)

    def mlp(self, s, st, ly, li, h, nz):
        self.present[li].update(nz.tolist())
        return super().mlp(s, st, ly, li, h, nz)

    def gate_work(self) -> int:
        """Gate multiply-adds so far, over every stream run on this kernel."""
        return sum(n * int(np.diff(self.model.layers[li].gate.ptr)[dim])
                   for li, present in self.present.items() for dim, n in present.items())
