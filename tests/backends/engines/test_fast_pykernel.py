"""The fast engine's numpy kernel (backends/engines/fast/pykernel.py) against its C kernel, bit for bit,
and the choice between them.

Step by step on the examples and random circuits (tests/hdl/ir_fuzz.py), bf16 and fp32: the
same next id, every residual dim after every sublayer (the taps), every recurrent state and
the position equal as bits after every token, and the same free-running ``run``. A value
outside the exact domain stops both streams at the same token with the same error (every
``DC_E_*`` code, each provoked by editing a loaded model in memory). Where the C kernel cannot
be built the engine runs the numpy kernel and says so once on stderr.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backends.compile.pipeline import compile_to_dir
from backends.engines.fast import model as fmodel
from backends.engines.fast import native
from backends.engines.fast.engine import FastEngine
from backends.engines.fast.native import FastError, Native, make_kernel
from backends.engines.fast.pykernel import PyKernel
from common.errors import UserError
from hdl.sim import cbuild

from tests.backends.circuits import EXAMPLES
from tests.backends.verify.test_fuzz import small_circuit  # noqa: E402


@pytest.fixture(autouse=True)
def _auto_kernel(monkeypatch):
    monkeypatch.delenv(native.KERNEL_ENV, raising=False)


def _start(eng: FastEngine, name: str | None = None) -> int:
    text = EXAMPLES[name][1] if name else None
    if text:
        from hdl.sim import parse_token
        return eng.token_id(parse_token(eng.circuit, text))
    return eng.token_id(eng.circuit.start)


def _stream(eng: FastEngine | None, k):
    """A new stream of kernel ``k`` with ``eng``'s ROM images loaded (as FastEngine.new_cache)."""
    s = k.new_state()
    if eng is not None:
        rec = k.recurrent(s, write=True)
        for layer, heads in eng.rom_states(eng.roms).items():
            for vh, st in heads.items():
                rec[eng._gdn[layer], vh] = st.numpy()
    return s


def lockstep(model, kernels, first: int, steps: int, ids=None, eng=None, edit=None):
    """Feed every kernel the same tokens one at a time: ``ids``, or ``first`` and then the
    argmax; after each, the next id (or the error's text), the taps, the recurrent states
    (as bits) and the position must be equal. ``edit(S)`` changes each new stream's states
    first. Returns (tokens fed, the error that stopped the streams or None, the streams)."""
    states = [_stream(eng, k) for k in kernels]
    if edit is not None:
        for k, s in zip(kernels, states):
            edit(k.recurrent(s, write=True))
    L, H = len(model.layers), model.H
    tok = first
    for t in range(steps):
        if ids is not None:
            tok = int(ids[t])
        got = []
        for k, s in zip(kernels, states):
            taps = np.full((1, 2 * L, H), np.nan, dtype=np.float32)
            try:
                nxt, err = int(k.feed(s, [tok], taps)[0]), None
            except FastError as e:
                nxt, err = None, str(e)
            code, layer, val = k.failure(s)
            got.append((nxt, err, taps.view(np.uint32), k.recurrent(s).view(np.uint32).copy(),
                        k.position(s), (code, layer, np.float64(val).view(np.uint64))))
        (a, ea, ta, sa, pa, fa), (b, eb, tb, sb, pb, fb) = got
        assert (a, ea, fa) == (b, eb, fb), (t, (a, ea, fa), (b, eb, fb))
        assert np.array_equal(ta, tb), (t, "taps")
        assert np.array_equal(sa, sb), (t, "recurrent states")
        assert pa == pb, (t, pa, pb)
        if ea is not None:
            return t, ea, states
        tok = a
    return steps, None, states


def _pair(d: Path):
    eng = FastEngine(d)
    assert isinstance(eng.native, Native)
    return eng, eng.native, PyKernel(eng.model)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_python_kernel_equals_c_on_the_examples(compiled, name, dtype):
    eng, c, py = _pair(compiled(name, dtype))
    first = _start(eng, name)
    n, err, _ = lockstep(eng.model, [c, py], first, 80, eng=eng)
    assert err is None and n == 80
    # teacher-forced ids of every kind, then free-running to a halt
    rng = np.random.default_rng(7)
    ids = rng.integers(0, eng.model.vocab, 40)
    n, err, _ = lockstep(eng.model, [c, py], 0, 40, ids=ids, eng=eng)
    assert err is None, err
    halts = [i for i, k in enumerate(eng.circuit.kinds) if k.halt]
    stop = eng.stop_bitmap(halts) if halts else None
    sc, sp = _stream(eng, c), _stream(eng, py)
    oc, op = c.run(sc, first, 150, stop), py.run(sp, first, 150, stop)
    assert oc.tolist() == op.tolist() and len(oc) > 5
    assert np.array_equal(c.recurrent(sc).view(np.uint32), py.recurrent(sp).view(np.uint32))
    assert c.position(sc) == py.position(sp)


@pytest.mark.parametrize("seed", [0, 4, 11, 13, 15, 19])
def test_python_kernel_equals_c_on_random_circuits(tmp_path, seed):
    c, images, start = small_circuit(seed, transparent=0.3)
    assert c is not None
    d = tmp_path / "chip"
    compile_to_dir(c, d, dtype="bf16" if seed % 2 else "fp32", roms=images)
    eng, ck, py = _pair(d)
    n, err, _ = lockstep(eng.model, [ck, py], eng.token_id(start), 30, eng=eng)
    assert err is None and n == 30


def test_a_one_token_vocabulary_runs_on_both(tmp_path):
    """Seed 1 draws a circuit of one token kind without payload: one id, no runner-up.
    Its argmax is that id, clear of nothing (the margin test once compared inf with inf
    and refused it); both kernels run it, equal to each other and to transformers."""
    from backends.verify.check import compare_engines, load_engine
    c, images, start = small_circuit(1, transparent=0.3)
    compile_to_dir(c, tmp_path / "chip", dtype="bf16", roms=images)
    eng, ck, py = _pair(tmp_path / "chip")
    assert eng.model.vocab == 1
    n, err, _ = lockstep(eng.model, [ck, py], eng.token_id(start), 20, eng=eng)
    assert err is None and n == 20
    rep = compare_engines(load_engine("fast", tmp_path / "chip"),
                          load_engine("hf", tmp_path / "chip"), steps=12, starts=[start])
    assert rep.ok and rep.positions >= 12, rep.problems()


# ---- errors: every check, provoked in a model edited in memory ----------------------------

def _first_gdn(m):
    return next(ly for ly in m.layers if ly.kind == 0)


def _edit_embedding(m):
    past = m.embed[1] >= m.NB
    m.embed[2][past] *= np.float32(2.0 ** 12)


def _live_keys(m, n):
    """``n`` key channels of key head 0 on every token (a live default of 64, read now)."""
    ly = _first_gdn(m)
    QK = m.NK * m.DK
    ch = np.arange(QK, QK + n)
    ly.ipd[ch] = 64.0
    ly.delay[ch] = 0
    ly.cda = np.union1d(ly.cda, ch).astype(np.int32)
    return ly


def _edit_queries(m):
    ly = _first_gdn(m)
    ch = np.arange(0, 3)
    ly.ipd[ch] = 64.0
    ly.delay[ch] = 0
    ly.cda = np.union1d(ly.cda, ch).astype(np.int32)


def _edit_beta(m):
    ly = _live_keys(m, 1)
    ly.ipb[m.C + m.V:] = 1.0        # beta's input 1: neither 0 nor beyond the exact range


def _edit_gate_bias_to_the_untouched_mark(m):
    """Every gate bias the bits kernel.c keeps in an output no sum has started (DC_UNTOUCHED,
    a signalling NaN): a sum started from it is a quiet NaN, never taken for untouched."""
    _first_gdn(m).gb.view(np.uint32)[:] = 0x7fa5a5a5


@pytest.mark.parametrize("edit, state, ids, said", [
    (None, None, "vocab", "the embedding: token id outside the vocabulary"),
    (_edit_embedding, None, None, "layer 0: the residual outgrew the pre-norm"),
    (None, 1.0, None, "a silu input outside the range"),
    (_edit_gate_bias_to_the_untouched_mark, None, None, "a silu input outside the range"),
    (lambda m: _live_keys(m, 2), None, None, "a key with more than one nonzero"),
    (_edit_queries, None, None, "a query with more than two nonzeros"),
    (_edit_beta, None, None, "a beta input other than 0"),
    (None, 1e4, None, "a value head's data columns outgrew"),
    (lambda m: m.nf.fill(0.0), None, None, "the lm_head: the argmax is not clear"),
])
def test_both_kernels_stop_at_the_same_value(compiled, edit, state, ids, said):
    d = compiled("stack_machine", "bf16")
    eng = FastEngine(d)
    m = fmodel.load(d, "bf16")
    if edit is not None:
        edit(m)
    kernels = [Native(m), PyKernel(m)]

    def perturb(S):
        S += (np.random.default_rng(1).standard_normal(S.shape) * state).astype(np.float32)
    feed = [m.vocab] if ids == "vocab" else None
    n, err, streams = lockstep(m, kernels, _start(eng), 20, ids=feed, eng=eng,
                      edit=perturb if state is not None else None)
    assert err is not None and said in err, err
    # a stopped stream stays stopped, with the same error
    for k, s in zip(kernels, streams):
        with pytest.raises(FastError) as again:
            k.feed(s, [_start(eng)])
        with pytest.raises(FastError) as run:
            k.run(s, _start(eng), 3)
        assert str(again.value) == str(run.value) == err
        assert k.position(s) == n


# ---- the choice of kernel -------------------------------------------------------------------

MSG = "fast engine: the C kernel could not be built"


@pytest.mark.parametrize("exc", [cbuild.NoCompiler("no C compiler found (set CC, or install gcc)"),
                                 cbuild.BuildError("C compiler gcc failed:\nkernel.c:1: error")])
def test_without_a_c_build_the_engine_runs_the_python_kernel_and_says_so_once(
        compiled, monkeypatch, capsys, exc):
    def fail():
        raise exc
    monkeypatch.setattr(native, "_lib", fail)
    monkeypatch.setattr(native, "_told", False)
    d = compiled("stack_machine", "bf16")
    a, b = FastEngine(d), FastEngine(d)
    assert isinstance(a.native, PyKernel) and isinstance(b.native, PyKernel)
    err = capsys.readouterr().err
    assert err.count(MSG) == 1, err
    assert str(exc).splitlines()[0] in err and "pure-Python kernel" in err
    if isinstance(exc, cbuild.BuildError):
        return
    # the engine on the Python kernel: what it does on C, batch 2 on threads
    from backends.verify.check import compare_engines
    monkeypatch.undo()
    ref = FastEngine(d)
    assert isinstance(ref.native, Native)
    rep = compare_engines(a, ref, steps=40, batch=2)
    assert rep.ok, rep.problems()
    assert rep.lane_checks > 0 and rep.memory_checks > 0


def test_the_kernel_variable(compiled, monkeypatch, capsys):
    d = compiled("counter", "bf16")
    m = fmodel.load(d, "bf16")
    monkeypatch.setenv(native.KERNEL_ENV, "python")
    assert isinstance(make_kernel(m), PyKernel)
    monkeypatch.setenv(native.KERNEL_ENV, "c")
    assert isinstance(make_kernel(m), Native)
    monkeypatch.setenv(native.KERNEL_ENV, "auto")
    assert isinstance(make_kernel(m), Native)

    def fail():
        raise cbuild.NoCompiler("no C compiler found")
    monkeypatch.setattr(native, "_lib", fail)
    monkeypatch.setenv(native.KERNEL_ENV, "c")
    with pytest.raises(cbuild.NoCompiler):
        make_kernel(m)
    monkeypatch.setenv(native.KERNEL_ENV, "rust")
    with pytest.raises(UserError, match="DELTACHIP_FAST_KERNEL"):
        make_kernel(m)
    assert MSG not in capsys.readouterr().err


def test_inexact_sums_stop_both_at_the_same_value(compiled):
    """Weights jiggled off their exact values: the sums are no longer exact, and both kernels
    stop at the same (inexact) value, bit for bit."""
    for name in ("stack_machine", "gcd"):
        for dtype in ("bf16", "fp32"):
            d = compiled(name, dtype)
            m = fmodel.load(d, dtype)
            rng = np.random.default_rng(3)

            def jig(a):
                a *= (1 + 2.0 ** -12 * rng.standard_normal(a.shape)).astype(np.float32)
            for ly in m.layers:
                if ly.kind == 0:
                    for c in (ly.ip, ly.op, ly.gate, ly.up, ly.down):
                        jig(c.val)
                    jig(ly.zb[2])
            past = m.embed[1] >= m.NB
            v = m.embed[2][past]
            jig(v)
            m.embed[2][past] = v
            ids = np.random.default_rng(5).integers(0, m.vocab, 20)
            n, err, _ = lockstep(m, [Native(m), PyKernel(m)], 0, 20, ids=ids)
            assert err is not None and "silu input" in err


# ---- the pieces, against literal transcriptions of kernel.c on inexact values -------------

def _wide(rng, n):
    """float32 values of every magnitude, so that fp32 sums depend on their order."""
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-7, 8, n)).astype(np.float32)


def _c_spmv(c, bias, h, nz):
    """kernel.c's spmv, one float32 operation at a time."""
    out, t = {}, []
    for i in nz:
        hv = np.float32(h[i])
        for e in range(c.ptr[i], c.ptr[i + 1]):
            o = int(c.idx[e])
            if o not in out:
                out[o] = np.float32(0.0) if bias is None else bias[o]
                t.append(o)
            out[o] = np.float32(out[o] + np.float32(c.val[e] * hv))
    return t, np.array([out[o] for o in t], dtype=np.float32)


def test_sums_keep_kernel_c_order():
    from backends.engines.fast import pykernel as pk
    rng = np.random.default_rng(11)
    for trial in range(60):
        n_in, n_out = int(rng.integers(1, 40)), int(rng.integers(1, 30))
        dense = np.where(rng.random((n_out, n_in)) < rng.random(), _wide(rng, n_out * n_in)
                         .reshape(n_out, n_in), 0).astype(np.float32)
        cc = [fmodel.Csc.from_csr(*_csr(w), n_in) for w in (dense, dense[::-1].copy())]
        h = _wide(rng, n_in)
        nz = rng.permutation(n_in)[:int(rng.integers(0, n_in + 1))]
        bias = _wide(rng, n_out) if trial % 2 else None
        want = _c_spmv(cc[0], bias, h, nz)
        got = pk._Csc(cc[0]).spmv(nz, h[nz], bias)
        assert got[0].tolist() == want[0]
        assert np.array_equal(got[1].view(np.uint32), want[1].view(np.uint32))
        # two projections of the same inputs as one: each what it gives alone
        both = pk._Csc(cc[0], cc[1], n_out)
        b2 = None if bias is None else np.concatenate([bias, bias[::-1]])
        t, a = both.spmv(nz, h[nz], b2)
        w1 = _c_spmv(cc[1], None if bias is None else bias[::-1].copy(), h, nz)
        first = t < n_out
        assert t[first].tolist() == want[0] and (t[~first] - n_out).tolist() == w1[0]
        assert np.array_equal(a[first].view(np.uint32), want[1].view(np.uint32))
        assert np.array_equal(a[~first].view(np.uint32), w1[1].view(np.uint32))
        # CSR rows summed in order from a start (zb_out)
        ptr, col, val = _csr(dense)
        rows = rng.integers(0, n_out, 5)
        init = _wide(rng, 5)
        got = pk._Rows(ptr, col, val).sums(rows, init, h)
        for r, i0, g in zip(rows, init, got):
            acc = i0
            for e in range(ptr[r], ptr[r + 1]):
                acc = np.float32(acc + np.float32(val[e] * h[col[e]]))
            assert np.float32(g).view(np.uint32) == acc.view(np.uint32)


def _csr(w):
    r, c = np.nonzero(w)
    ptr = np.zeros(len(w) + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=len(w)), out=ptr[1:])
    return ptr, c.astype(np.int32), w[r, c].astype(np.float32)


def test_bf16_rounding_is_kernel_c_rbf16():
    import torch
    from backends.engines.fast.pykernel import _rbf16
    u = np.random.default_rng(2).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    u = np.concatenate([u, np.array([0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x7F7F8000, 0x8000,
                                     0x18000, 0x80000000, 0x7F800001, 0xFFFFFFFF], np.uint32)])
    a = u.view(np.float32)
    got = _rbf16(a).view(np.uint32)
    nan = np.isnan(a)
    want = torch.from_numpy(a[~nan].copy()).to(torch.bfloat16).float().numpy().view(np.uint32)
    assert np.array_equal(got[~nan], want)
    assert np.array_equal(got[nan], u[nan])         # rbf16 leaves nan as it is


def _c_argmax(m, h):
    """kernel.c's argmax, one double operation at a time: (id, None) or (None, margin)."""
    import math
    ptr, col, val = m.lm
    tops, runners, ids, l1max, bk = [], [], [], 0.0, -1
    for k in range(len(m.kinds[0])):
        nb, r0, u = int(m.kinds[1][k]), int(m.kinds[2][k]), 0
        top, l1, dmin = 0.0, 0.0, math.inf
        for j in range(-1, nb):
            d = 0.0
            for e in range(ptr[r0 + 1 + j], ptr[r0 + 2 + j]):
                t = float(val[e]) * float(h[col[e]])
                d += t
                l1 += abs(t)
            if j < 0:
                top = d
                continue
            if d > 0:
                top += d
                u |= 1 << j
            dmin = min(dmin, abs(d))
        tops.append(top)
        runners.append(top - dmin if nb else -math.inf)
        ids.append(int(m.kinds[0][k]) + u)
        l1max = max(l1max, l1)
        if bk < 0 or top > tops[bk]:
            bk = k
    best, second = tops[bk], runners[bk]
    for k in range(len(tops)):
        if k != bk and tops[k] > second:
            second = tops[k]
    err = l1max * 2.0 ** -16 + max(abs(best), abs(second)) * (2.0 ** -8 if m.dtype == "bf16"
                                                              else 2.0 ** -23)
    return (ids[bk], None) if best - second > 2 * err else (None, best - second)


def test_argmax_is_kernel_c_argmax(compiled):
    """On the final norm's outputs of a real stream, jiggled off their exact values, and on
    random ones (no clear winner): the same id, or the same refusal and margin."""
    from backends.engines.fast import pykernel as pk
    m = fmodel.load(compiled("stack_machine", "bf16"), "bf16")
    py = PyKernel(m)
    rng = np.random.default_rng(4)
    taps = np.zeros((30, 2 * len(m.layers), m.H), dtype=np.float32)
    ids = py.feed(py.new_state(), rng.integers(0, m.vocab, 30), taps)
    hs = taps[:, -1] * m.nf
    seen = {True: 0, False: 0}
    for trial in range(90):
        h = hs[trial % 30].copy()
        if trial >= 30:
            h *= (1 + 2.0 ** -10 * rng.standard_normal(m.H)).astype(np.float32)
        if trial >= 60:
            h = np.where(rng.random(m.H) < 0.5, _wide(rng, m.H), 0).astype(np.float32)
        want, margin = _c_argmax(m, h)
        if trial < 30:
            assert want == ids[trial]
        s = py.new_state()
        try:
            got = py.argmax(s, h)
        except pk._Stop:
            got = None
        assert got == want
        if want is None:
            assert s.err == pk.E_ARGMAX and np.float64(s.err_val).view(np.uint64) == \
                np.float64(margin).view(np.uint64)
        seen[want is not None] += 1
    assert seen[True] > 30 and seen[False] > 5, seen


# ---- a norm reused while the residual is unchanged (kernel.c's norm, native.same_scales) --

def test_a_norm_is_reused_only_where_its_scale_is_the_same(compiled, monkeypatch):
    """The compiler gives every pre-norm one scale past the ballast, so the C kernel reuses a
    norm while nothing was added to the residual. A model whose last layer's second norm
    has four times that scale (still running clean: twice it runs the stack machine into an
    argmax too close to call at position 3) is told apart and both kernels agree bit for bit;
    told wrongly that the scales agree, the C kernel emits another id (so the lockstep
    sees a reuse where it must not be)."""
    d = compiled("stack_machine", "bf16")
    eng = FastEngine(d)
    m = fmodel.load(d, "bf16")
    gdns = [i for i, ly in enumerate(m.layers) if ly.kind == 0]
    same = native.same_scales(m)
    assert same[2 * gdns[0]] == 0 and all(same[2 * i + 1] for i in gdns)
    ly = m.layers[gdns[-1]]
    ly.n2 = ly.n2.copy()
    ly.n2[m.NB:] *= np.float32(4.0)
    same = native.same_scales(m)
    assert same[2 * gdns[-1] + 1] == 0 and same[2 * gdns[-1]] == 1
    n, err, _ = lockstep(m, [Native(m), PyKernel(m)], _start(eng), 60, eng=eng)
    assert err is None and n == 60
    monkeypatch.setattr(native, "same_scales", lambda m: np.ones(2 * len(m.layers), np.uint8))
    with pytest.raises(AssertionError):
        lockstep(m, [Native(m), PyKernel(m)], _start(eng), 60, eng=eng)


# ---- the gate packed one word per entry (native.pack_bf16) -----------------------------------

def test_pack_bf16_holds_each_entry_exactly_or_declines():
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 1 << 16, 500).astype(np.int32)
    val = (rng.standard_normal(500) * 2.0 ** rng.integers(-20, 20, 500)).astype(np.float32)
    val = (val.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)     # bf16 values
    c = fmodel.Csc(np.array([0, 500], dtype=np.int64), idx, val)
    p = native.pack_bf16(c)
    assert p is not None and p.dtype == np.uint32
    assert np.array_equal(p & 0xFFFF, idx)
    assert np.array_equal((p & np.uint32(0xFFFF0000)).view(np.float32), val)
    past = fmodel.Csc(c.ptr, np.where(np.arange(500) == 7, 1 << 16, idx).astype(np.int32), val)
    assert native.pack_bf16(past) is None                       # an index of 17 bits
    fine = val.copy()
    fine[3] = np.float32(1.0 + 2.0 ** -20)
    assert native.pack_bf16(fmodel.Csc(c.ptr, idx, fine)) is None   # not a bf16
    assert native.pack_bf16(fmodel.Csc(np.zeros(1, np.int64), idx[:0], val[:0])).size == 0


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_kernel_reads_a_gate_of_bf16_values_packed(compiled, dtype):
    """A compiled gate's values are bf16 in either dtype: the kernel gets it packed (the
    lockstep tests above run that path against the numpy kernel). A gate jiggled off those
    values goes as it is (test_inexact_sums_stop_both_at_the_same_value runs that path)."""
    m = fmodel.load(compiled("stack_machine", dtype), dtype)

    def packed(k):
        return {k._layers[i].gate_pk != native._FFI.NULL
                for i, ly in enumerate(m.layers) if ly.kind == 0}
    assert packed(Native(m)) == {True}
    for ly in m.layers:
        if ly.kind == 0:
            ly.gate.val *= np.float32(1 + 2.0 ** -12)
    assert packed(Native(m)) == {False}
