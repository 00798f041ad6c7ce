"""The fast engine's C kernel (``kernel.c``), built with the project's C toolchain and loaded
with cffi.

Takes: a :class:`backends.engines.fast.model.FastModel`. Gives: :class:`Native`, which holds the C
model description (pointers into the model's numpy arrays, kept alive here) and makes
streams: :meth:`Native.new_state`, :meth:`Native.step`, :meth:`Native.feed` (teacher-forced
positions), :meth:`Native.run` (free-running until a stop token), each returning ids or
raising :class:`FastError` with the kernel's reason. Calls release the GIL, so streams on
different threads run on different cores.

The kernel is compiled once per source (cached like the simulator's, ``hdl.sim.cbuild``)
with ``-O2 -ffp-contract=off``: no fused multiply-adds, so every product and sum rounds
where the C source (and transformers) round.

Each layer's MLP gate, read on every token, is handed to the kernel packed where it can be
(:func:`pack_bf16`: one word per entry, the value's bf16 bits over its index, checked exact
here), else as it is; the sums are the same either way.

:func:`make_kernel` picks the kernel an engine runs on: this one, or, where it cannot be
built (no working C compiler, or one that rejects it), the numpy kernel of
:mod:`backends.engines.fast.pykernel` (same interface, same results, much slower), saying so once
per process on stderr. ``DELTACHIP_FAST_KERNEL=python`` picks the numpy kernel, ``=c`` the
C kernel or the build's error; unset (or ``auto``), C with the fallback.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import cffi
import numpy as np

from common.errors import UserError
from hdl.sim import cbuild
from backends.engines.fast.errors import REASONS, FastError, message  # noqa: F401 (re-exported)
from backends.engines.fast.model import FastModel, Layer

SOURCE = Path(__file__).with_name("kernel.c")
CFLAGS = ("-O2", "-ffp-contract=off", "-fno-fast-math")

CDEF = """
typedef struct { const int64_t *ptr; const int32_t *idx; const float *val; } dc_csc;
typedef struct {
    int kind; int gdn; const float *n1, *n2; dc_csc ip; dc_csc zb; const int8_t *delay; dc_csc op;
    dc_csc gate; const uint32_t *gate_pk; dc_csc upr; dc_csc down; const float *gw; const uint8_t *wcol;
    const float *ipb, *ipd; const float *gb, *gd, *ub, *ud;
    const int32_t *cda; int ncda; const uint8_t *cdl; const int32_t *dg; int ndg;
    const int32_t *g_of; const int32_t *g_ptr, *g_in;
} dc_layer;
typedef struct {
    int H, L, G, C, V, NV, NK, DK, DV, VPK, KC, I, NB, NBV, bf16;
    double res_ballast; double res_margin; double gn_margin; float qdiv;
    const dc_layer *layers; const float *nf; int64_t vocab;
    const int64_t *e_ptr; const int32_t *e_col; const float *e_val;
    int nkinds; const int64_t *k_off; const int32_t *k_bits; const int64_t *k_row;
    const int64_t *k_ids;
    const int64_t *lm_ptr; const int32_t *lm_col; const float *lm_val;
    const uint8_t *same_scale;
} dc_model;
typedef struct dc_state dc_state;
dc_state *dc_state_new(const dc_model *m);
void dc_state_free(dc_state *s);
float *dc_state_S(dc_state *s);
float *dc_state_S_write(dc_state *s);
int64_t dc_state_pos(dc_state *s);
typedef struct dc_memo dc_memo;
dc_memo *dc_memo_new(int records, int64_t words);
void dc_memo_free(dc_memo *mm);
void dc_memo_stats(const dc_memo *mm, int64_t *out);
void dc_state_use_memo(dc_state *s, dc_memo *mm);
int dc_state_err(dc_state *s, int *layer, double *val);
int64_t dc_step(const dc_model *m, dc_state *s, int64_t id, float *taps);
int64_t dc_feed(const dc_model *m, dc_state *s, const int64_t *ids, int64_t n, int64_t *out,
                float *taps);
int64_t dc_run(const dc_model *m, dc_state *s, int64_t id, int64_t n, int64_t *out,
               const uint8_t *stop);
"""

_FFI = cffi.FFI()
_FFI.cdef(CDEF.replace("typedef struct dc_state dc_state;", "typedef struct dc_state dc_state;"))

def _lib() -> Any:
    return cbuild.build(SOURCE.read_text(), ffi=_FFI, flags=CFLAGS)


#: The environment variable that picks the kernel (see the module docstring).
KERNEL_ENV = "DELTACHIP_FAST_KERNEL"
_KERNELS = ("auto", "c", "python")
_told = False


def make_kernel(model: FastModel) -> Any:
    """The kernel to run ``model`` on: :class:`Native`, or the numpy kernel
    (:class:`backends.engines.fast.pykernel.PyKernel`) when ``$DELTACHIP_FAST_KERNEL`` says
    ``python`` or the C kernel cannot be built (said once per process on stderr)."""
    global _told
    choice = os.environ.get(KERNEL_ENV, "").strip().lower() or "auto"
    if choice not in _KERNELS:
        raise UserError(f"{KERNEL_ENV}={os.environ[KERNEL_ENV]!r}: expected one of "
                        f"{', '.join(_KERNELS)}")
    if choice != "python":
        try:
            _lib()
        except (cbuild.NoCompiler, cbuild.BuildError, OSError) as e:
            if choice == "c":
                raise
            if not _told:
                _told = True
                why = (str(e).strip().splitlines() or [type(e).__name__])[0]
                print(f"fast engine: the C kernel could not be built ({why}); running the "
                      f"pure-Python kernel, much slower", file=sys.stderr, flush=True)
        else:
            return Native(model)
    from backends.engines.fast.pykernel import PyKernel
    return PyKernel(model)


def same_scales(model: FastModel) -> np.ndarray:
    """[2L] uint8: 1 where a pre-norm (layer l's first at 2l, its second at 2l + 1) has the
    scale of the norm run before it on every dim past the ballast, bit for bit; the kernel
    then reuses that norm's result while nothing was added to the residual in between."""
    same = np.zeros(2 * len(model.layers), dtype=np.uint8)
    prev = None
    for li, ly in enumerate(model.layers):
        if ly.kind != 0:
            continue
        for k, sc in ((2 * li, ly.n1), (2 * li + 1, ly.n2)):
            bits = np.ascontiguousarray(sc[model.NB:], dtype=np.float32).view(np.uint32)
            same[k] = prev is not None and np.array_equal(prev, bits)
            prev = bits
    return same


def pack_bf16(c) -> np.ndarray | None:
    """A CSC weight's entries packed one to a uint32 for the kernel's ``spmv``: the value's
    bf16 bits over its output index, where every index is below 2^16 and every value a bf16
    (its low 16 bits zero), so the word holds the entry exactly; else None (the kernel reads
    ``idx`` and ``val``). Half the bytes per entry: the gate's, read on every token, stay in
    cache."""
    bits = np.ascontiguousarray(c.val, dtype=np.float32).view(np.uint32)
    idx = np.asarray(c.idx)
    if len(idx) and (int(idx.max()) >= 1 << 16 or int(idx.min()) < 0):
        return None
    if np.any(bits & np.uint32(0xFFFF)):
        return None
    return bits | idx.astype(np.uint32)


class Native:
    """The C model of one :class:`FastModel` (see the module docstring)."""

    def __init__(self, model: FastModel, memo_records: int = 0):
        self.model = model
        self.lib = _lib()
        #: how many records a memo holds before it empties itself (0: the kernel's 16,384)
        self.memo_records = memo_records
        self._memos: list[Any] = []
        self._free: list[Any] = []
        self._lock = threading.Lock()
        self._keep: list[Any] = []
        f = _FFI
        m = f.new("dc_model *")
        self._layers = f.new("dc_layer[]", len(model.layers))
        for i, ly in enumerate(model.layers):
            self._fill_layer(self._layers[i], ly)
        for k in ("H", "C", "V", "NV", "NK", "DK", "DV", "VPK", "KC", "I", "NB", "NBV"):
            setattr(m, k, getattr(model, k))
        m.L, m.G, m.bf16 = len(model.layers), model.G, model.dtype == "bf16"
        m.res_ballast, m.res_margin, m.gn_margin = model.res_ballast, model.res_margin, model.gn_margin
        m.qdiv = model.qdiv
        m.layers = self._layers
        m.nf = self._ptr(model.nf, "float")
        m.vocab = model.vocab
        m.e_ptr, m.e_col, m.e_val = (self._ptr(a, t) for a, t in
                                     zip(model.embed, ("int64_t", "int32_t", "float")))
        m.nkinds = len(model.kinds[0])
        m.k_off, m.k_bits, m.k_row, m.k_ids = (
            self._ptr(a, t) for a, t in
            zip(model.kinds, ("int64_t", "int32_t", "int64_t", "int64_t")))
        m.lm_ptr, m.lm_col, m.lm_val = (self._ptr(a, t) for a, t in
                                        zip(model.lm, ("int64_t", "int32_t", "float")))
        m.same_scale = self._ptr(same_scales(model), "uint8_t")
        self.m = m
        self.taps_size = 2 * len(model.layers) * model.H

    def _ptr(self, a: np.ndarray, ctype: str) -> Any:
        dt = {"float": np.float32, "int64_t": np.int64, "int32_t": np.int32, "int8_t": np.int8,
              "uint8_t": np.uint8, "uint32_t": np.uint32}[ctype]
        a = np.ascontiguousarray(a, dtype=dt)
        self._keep.append(a)
        return _FFI.cast(f"{ctype} *", a.ctypes.data)

    def _csc(self, dst: Any, c) -> None:
        dst.ptr, dst.idx, dst.val = (self._ptr(c.ptr, "int64_t"), self._ptr(c.idx, "int32_t"),
                                     self._ptr(c.val, "float"))

    def _fill_layer(self, dst: Any, ly: Layer) -> None:
        dst.kind, dst.gdn = ly.kind, ly.gdn
        if ly.kind != 0:
            return
        dst.n1, dst.n2 = self._ptr(ly.n1, "float"), self._ptr(ly.n2, "float")
        for name in ("ip", "op", "gate", "down"):
            self._csc(getattr(dst, name), getattr(ly, name))
        for name in ("zb", "upr"):
            rows = getattr(dst, name)
            rows.ptr, rows.idx, rows.val = (self._ptr(a, t) for a, t in
                                            zip(getattr(ly, name), ("int64_t", "int32_t", "float")))
        packed = pack_bf16(ly.gate)
        dst.gate_pk = _FFI.NULL if packed is None else self._ptr(packed, "uint32_t")
        dst.delay = self._ptr(ly.delay, "int8_t")
        dst.gw = self._ptr(ly.gw, "float")
        mdl = self.model
        written = np.zeros(mdl.C, dtype=np.uint8)      # conv channels a token can make nonzero
        written[ly.ip.idx] = 1
        written[ly.cda] = 1
        dst.wcol = self._ptr(written[2 * mdl.NK * mdl.DK:], "uint8_t")
        for name in ("ipb", "ipd", "gb", "gd", "ub", "ud"):
            setattr(dst, name, self._ptr(getattr(ly, name), "float"))
        dst.cda, dst.ncda = self._ptr(ly.cda, "int32_t"), len(ly.cda)
        live = np.zeros(len(ly.delay), dtype=np.uint8)
        live[ly.cda] = 1
        dst.cdl = self._ptr(live, "uint8_t")
        dst.dg, dst.ndg = self._ptr(ly.dg, "int32_t"), len(ly.dg)
        dst.g_of, dst.g_ptr, dst.g_in = (self._ptr(a, "int32_t") for a in ly.groups)

    # ---- streams -------------------------------------------------------------------------
    def new_state(self) -> Any:
        s = self.lib.dc_state_new(self.m)
        if s == _FFI.NULL:
            raise MemoryError("the fast engine could not allocate a stream's state")
        return _FFI.gc(s, self.lib.dc_state_free)

    def recurrent(self, s: Any, write: bool = False) -> np.ndarray:
        """The stream's recurrent states, [G, NV, DK, DV] float32, as a view: read-only, or
        with ``write`` writable until the next token is fed (the kernel then lists again
        which columns can be nonzero; take a new view to write after that)."""
        mdl = self.model
        n = mdl.G * mdl.NV * mdl.DK * mdl.DV
        get = self.lib.dc_state_S_write if write else self.lib.dc_state_S
        p = _FFI.gc(get(s), lambda _p, s=s: None)    # the view keeps the stream alive
        a = np.frombuffer(_FFI.buffer(p, 4 * n), dtype=np.float32)
        a = a.reshape(mdl.G, mdl.NV, mdl.DK, mdl.DV)
        a.flags.writeable = write
        return a

    def position(self, s: Any) -> int:
        return int(self.lib.dc_state_pos(s))

    # ---- memos ---------------------------------------------------------------------------
    @contextmanager
    def _memo(self, s: Any) -> Iterator[None]:
        """Lend stream ``s`` a memo for one call: one no other call uses meanwhile (the
        kernel's memos hold what the conv takes from a memo group at given input values,
        the same for every stream of the model, so streams share them one at a time)."""
        with self._lock:
            mm = self._free.pop() if self._free else self._new_memo()
        self.lib.dc_state_use_memo(s, mm)
        try:
            yield
        finally:
            self.lib.dc_state_use_memo(s, _FFI.NULL)
            if mm != _FFI.NULL:
                with self._lock:
                    self._free.append(mm)

    def _new_memo(self) -> Any:
        mm = self.lib.dc_memo_new(self.memo_records, 0)
        if mm == _FFI.NULL:             # no memory for one: this call computes every group
            return mm
        mm = _FFI.gc(mm, self.lib.dc_memo_free)
        self._memos.append(mm)
        return mm

    def memo_stats(self) -> tuple[int, int, int]:
        """(records held, lookups that found one, lookups that made one) over the memos."""
        tot = [0, 0, 0]
        out = _FFI.new("int64_t[3]")
        for mm in self._memos:
            self.lib.dc_memo_stats(mm, out)
            tot = [a + int(b) for a, b in zip(tot, out)]
        return tot[0], tot[1], tot[2]

    def failure(self, s: Any) -> tuple[int, int, float]:
        """(error code, layer, value) of the check that stopped the stream; code 0: none."""
        layer, val = _FFI.new("int *"), _FFI.new("double *")
        code = self.lib.dc_state_err(s, layer, val)
        return int(code), int(layer[0]), float(val[0])

    def error(self, s: Any, where: str = "") -> FastError:
        return message(self.model, self.position(s), *self.failure(s), where)

    def feed(self, s: Any, ids: np.ndarray, taps: np.ndarray | None = None) -> np.ndarray:
        """Teacher-forced: feed ``ids``; the argmax after each. ``taps``: [n, 2L, H] float32
        filled with the residual after every sublayer."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = np.zeros(len(ids), dtype=np.int64)
        tp = _FFI.NULL if taps is None else _FFI.cast("float *", taps.ctypes.data)
        with self._memo(s):
            n = self.lib.dc_feed(self.m, s, _FFI.cast("int64_t *", ids.ctypes.data), len(ids),
                                 _FFI.cast("int64_t *", out.ctypes.data), tp)
        if n != len(ids):
            raise self.error(s)
        return out

    def run(self, s: Any, first: int, n: int, stop: np.ndarray | None = None) -> np.ndarray:
        """Free-running from token ``first``: up to ``n`` tokens fed after it, ending once a
        token whose bit is set in ``stop`` (a packed bitmap over ids) has been fed."""
        out = np.zeros(n, dtype=np.int64)
        sp = _FFI.NULL if stop is None else _FFI.cast("uint8_t *", stop.ctypes.data)
        with self._memo(s):
            k = self.lib.dc_run(self.m, s, int(first), n, _FFI.cast("int64_t *", out.ctypes.data),
                                sp)
        if k < 0:
            raise self.error(s)
        return out[:k]
