"""fp32 chunked prefill with two-hot queries (d_k = 128) is exact in the backend's layout.

transformers' chunked kernel (``torch_chunk_gated_delta_rule``) scales the l2-normalised
query by ``d**-0.5``; the recurrent kernel divides by ``d**0.5``. For the two-hot query
(address row + reserved row, both 128 before silu) the recurrent kernel reads with
qa = 2^-4 exactly, the chunked one with qa = 2^-4 (1 - 2^-24). The raw core output of a read
is then qa * (stored row), off by one ulp. It does not survive RMSNormGated, because every
stored cell is 0, Vs = 2^5 or the value ballast 2^26 (powers of two):

- each core output cell is qa * 2^a exactly, and the ballast dominates the mean square, so
  mean(o^2) = fl(qa^2) * 2^c = 2^(c-8) (1 - 2^-23) (the data cells are far below its ulp);
- rsqrt of that rounds to 2^(4-c/2) (1 + 2^-23);
- qa * 2^a * that = 2^(a-c/2) (1 + 2^-24 - 2^-47), which rounds to 2^(a-c/2): the designed value.

Within a chunk (writes and reads of the same row), the UT solve, ``v_new`` and the state
update only add and subtract multiples of Vs and 2^26 (exact); a read's intra-chunk term is a
64-term dot product of qa with a telescoping series (+-Vs per rewritten bit, at most one
+-2^26 per ballast cell), whose in-order partial sums are qa * (0 or +-2^k): exact. With a
cell that is not a power of two (Vs = 96) qa * Vs rounds, the residue survives the
cancellation and prefill reads break while decode stays exact (the last test of (b)).

Tests: (a) the scalar argument, over the qa each kernel actually produces (called through
the kernels themselves) and through the real ``Qwen3_5RMSNormGated``; (b) one
``Qwen3_5GatedDeltaNet`` with d_k = d_v = 128 in the emitter's layout (keys/queries 128
before silu, reserved row, Vs = 32, 2 ballast columns of 2^26, z = 64, beta = 1, no decay)
on random write/read streams, prefill == decode == the designed values, bit for bit;
(c) compiled chips on a d_k = 128 config target, fp32: prefill == decode in every hidden
state and logit, and ``check_dir(prefill=True)`` finds no mismatch. ``-m slow`` runs bigger
random versions (longer streams, random fuzz circuits with memories).
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
from transformers.utils import logging as hf_logging

from tests.backends import circuits  # noqa: E402

from hdl.ir import Circuit, Token  # noqa: E402
from hdl.sim import Simulator  # noqa: E402
from backends.verify.check import check_dir  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from backends.engines.hf import HFEngine  # noqa: E402

hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These runs are many small ops: on a shared 2-core machine two OpenMP threads per
    process were measured 10-40x slower than one (decode of 70 tokens: 94 s vs 2.4 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


DK = DV = 128
KQ = 128.0          # key/query magnitude before silu
VS = 32.0           # a stored 1 bit
BV = 2.0 ** 26      # value ballast
N_BV = 2            # ballast columns per value head (n_bv * BV^2 / d_v a power of 4)
Z = 64.0            # z gate (silu(64) == 64)
# designed RMSNormGated output of a read of a written row: ballast cells and a 1 bit
NORM_BALLAST = (DV / N_BV) ** 0.5 * Z       # 8 * 64 = 512
NORM_BIT = VS * (DV / N_BV) ** 0.5 / BV * Z  # 2^-12


# ---------------------------------------------------------------------------------------
# (a) the scalar argument, over the qa values the kernels produce
# ---------------------------------------------------------------------------------------

def kernel_qa(kernel: str) -> float:
    """The read weight qa that ``kernel`` ("chunk" or "recurrent") gives the address row of a
    two-hot query (128 on the address row and on the reserved row, before silu): the kernel
    is called on a state holding 1.0 in (row 0, column 0) with a zero key and beta 0, so its
    output is exactly qa * 1.0."""
    q = torch.zeros(1, 1, 1, DK)
    q[..., 0] = q[..., DK - 1] = KQ
    q = F.silu(q)
    k, v = torch.zeros(1, 1, 1, DK), torch.zeros(1, 1, 1, DV)
    g, beta = torch.zeros(1, 1, 1), torch.zeros(1, 1, 1)
    s0 = torch.zeros(1, 1, DK, DV)
    s0[0, 0, 0, 0] = 1.0
    fn = {"chunk": qwen.torch_chunk_gated_delta_rule,
          "recurrent": qwen.torch_recurrent_gated_delta_rule}[kernel]
    out, _ = fn(q, k, v, g=g, beta=beta, initial_state=s0, output_final_state=True,
                use_qk_l2norm_in_kernel=True)
    return float(out[0, 0, 0, 0])


def read_row(qa: float, bits: torch.Tensor) -> torch.Tensor:
    """The fp32 core output of a read with weight ``qa`` of a row holding ``bits``
    ([N, DV - N_BV] 0/1): qa * (ballast, Vs * bits), each cell one fp32 product."""
    row = torch.cat([torch.full((bits.shape[0], N_BV), BV), VS * bits.float()], -1)
    return torch.tensor(qa, dtype=torch.float32) * row


def designed_read(bits: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.full((bits.shape[0], N_BV), NORM_BALLAST), NORM_BIT * bits.float()], -1)


@pytest.mark.parametrize("kernel", ["chunk", "recurrent"])
def test_two_hot_read_weight_cancels_in_the_norm(kernel):
    qa = kernel_qa(kernel)
    # the premise: qa is 2^-4 or one ulp below it (the chunked kernel's d**-0.5 product)
    assert qa in (2.0 ** -4, 2.0 ** -4 * (1 - 2.0 ** -24)), qa
    # the scalar step: fl(qa * rsqrt(fl(qa^2))) == 1
    t = torch.tensor(qa, dtype=torch.float32)
    assert float(t * torch.rsqrt(t * t)) == 1.0
    # through the real RMSNormGated: every count of set bits, bits at random places, plus
    # the row of all ones and an empty read (all zero: eps keeps it 0)
    gen = torch.Generator().manual_seed(0)
    n = DV - N_BV
    bits = torch.stack([torch.randperm(n, generator=gen) < c for c in range(n + 1)]).float()
    norm = qwen.Qwen3_5RMSNormGated(DV, eps=1e-6)
    zz = torch.full((n + 1, DV), Z)
    with torch.no_grad():
        got = norm(read_row(qa, bits), zz)
        assert torch.equal(got, designed_read(bits))
        assert torch.equal(norm(torch.zeros(1, DV), zz[:1]), torch.zeros(1, DV))


def test_kernels_differ_only_by_one_ulp():
    """Documents the difference the argument has to absorb (if transformers changes the
    chunked kernel's scaling this fails, and the docs' wording should be revisited)."""
    assert kernel_qa("recurrent") == 2.0 ** -4
    assert kernel_qa("chunk") in (2.0 ** -4, 2.0 ** -4 * (1 - 2.0 ** -24))


# ---------------------------------------------------------------------------------------
# (b) one Qwen3_5GatedDeltaNet in the emitter's layout, random streams
# ---------------------------------------------------------------------------------------

NK, G = 2, 2                    # key heads, value heads per key head (GQA, as in qwen3.5-4b)
NV = NK * G
ROWS = DK - 1                   # addressable rows; row DK-1 is reserved (always zero)
KEY_DIM, VAL_DIM = NK * DK, NV * DV
CONV_DIM = 2 * KEY_DIM + VAL_DIM
HIDDEN = CONV_DIM + 8           # dim CONV_DIM is the constant 1 (the normalised ballast)
ONE = CONV_DIM


def gdn_module() -> qwen.Qwen3_5GatedDeltaNet:
    """A fp32 GDN layer whose input x is laid out as its own q/k/v pre-activations
    (in_proj_qkv = identity), with the emitter's conv taps (queries from the current token,
    keys and values from the previous one), beta = 1, no decay, z = Z, out_proj = identity
    on the value heads' normalised outputs."""
    cfg = Qwen3_5TextConfig(
        vocab_size=16, hidden_size=HIDDEN, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, head_dim=64, linear_conv_kernel_dim=4,
        linear_key_head_dim=DK, linear_value_head_dim=DV, linear_num_key_heads=NK,
        linear_num_value_heads=NV, layer_types=["linear_attention"], rms_norm_eps=1e-6)
    m = qwen.Qwen3_5GatedDeltaNet(cfg, 0)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.in_proj_qkv.weight[:, :CONV_DIM] = torch.eye(CONV_DIM)
        m.conv1d.weight[:KEY_DIM, 0, 3] = 1.0
        m.conv1d.weight[KEY_DIM:, 0, 2] = 1.0
        m.in_proj_z.weight[:, ONE] = Z
        m.in_proj_b.weight[:, ONE] = 1024.0
        m.dt_bias.fill_(-1024.0)
        m.norm.weight.fill_(1.0)
        m.out_proj.weight[:VAL_DIM, :VAL_DIM] = torch.eye(VAL_DIM)
    m._cfg = cfg
    return m.eval()


@dataclass
class Step:
    """One token: per key head a read row (None: the address is outside this bank, only the
    reserved row is queried) and a write (row, enable); per value head the data bits the
    token carries (written at the next position when the write is enabled)."""
    reads: list[int | None]
    writes: list[tuple[int, bool]]
    data: torch.Tensor          # [NV, DV - N_BV] 0/1


def random_stream(rng: random.Random, T: int, hot: int) -> list[Step]:
    """T random steps; with probability 1/2 an address comes from ``hot`` rows, so the same
    row is written and read many times inside one 64-token chunk."""
    def row() -> int:
        return rng.randrange(hot) if rng.random() < 0.5 else rng.randrange(ROWS)
    out = []
    for _ in range(T):
        reads = [row() if rng.random() < 0.85 else None for _ in range(NK)]
        writes = [(row(), rng.random() < 0.6) for _ in range(NK)]
        data = torch.tensor([[rng.random() < 0.5 for _ in range(DV - N_BV)]
                             for _ in range(NV)], dtype=torch.float32)
        out.append(Step(reads, writes, data))
    return out


def encode(streams: list[list[Step]], rng: random.Random) -> torch.Tensor:
    """[B, T, HIDDEN] fp32 inputs. Non-matching query/key rows get 128 * (-k), k >= 0 (what
    silu(128 * (matches - nbits + 1)) sees for a word with k wrong bits)."""
    B, T = len(streams), len(streams[0])
    x = torch.zeros(B, T, HIDDEN)
    x[..., ONE] = 1.0
    neg = lambda n: -KQ * torch.tensor([rng.randrange(7) for _ in range(n)], dtype=torch.float32)
    for b, s in enumerate(streams):
        for t, st in enumerate(s):
            for h in range(NK):
                q0, k0 = h * DK, KEY_DIM + h * DK
                x[b, t, q0:q0 + ROWS] = neg(ROWS)
                x[b, t, k0:k0 + ROWS] = neg(ROWS)
                x[b, t, q0 + DK - 1] = KQ                   # the reserved row, every read
                if st.reads[h] is not None:
                    x[b, t, q0 + st.reads[h]] = KQ
                r, en = st.writes[h]
                x[b, t, k0 + r] = KQ if en else -KQ * rng.randrange(2)
            for v in range(NV):
                c0 = 2 * KEY_DIM + v * DV
                x[b, t, c0:c0 + N_BV] = BV
                x[b, t, c0 + N_BV:c0 + DV] = VS * st.data[v]
    return x


def rom_image(rng: random.Random, rows: int) -> dict[tuple[int, int], torch.Tensor]:
    """{(value head, row): bits} for ``rows`` random preloaded rows per value head."""
    return {(v, r): torch.tensor([rng.random() < 0.5 for _ in range(DV - N_BV)],
                                 dtype=torch.float32)
            for v in range(NV) for r in rng.sample(range(ROWS), rows)}


def state_of(mem: dict[tuple[int, int], torch.Tensor]) -> torch.Tensor:
    """[NV, DK, DV] recurrent state holding ``mem``."""
    S = torch.zeros(NV, DK, DV)
    for (v, r), bits in mem.items():
        S[v, r, :N_BV] = BV
        S[v, r, N_BV:] = VS * bits
    return S


def expected(stream: list[Step], rom: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Designed outputs [T, VAL_DIM] (a read sees the writes of earlier tokens) and the final
    state [NV, DK, DV]."""
    mem = dict(rom)
    out = torch.zeros(len(stream), VAL_DIM)
    for t, st in enumerate(stream):
        if t:
            prev = stream[t - 1]
            for h in range(NK):
                r, en = prev.writes[h]
                if en:
                    for v in range(h * G, h * G + G):
                        mem[(v, r)] = prev.data[v]
        for h in range(NK):
            r = st.reads[h]
            for v in range(h * G, h * G + G):
                if r is not None and (v, r) in mem:
                    out[t, v * DV:(v + 1) * DV] = designed_read(mem[(v, r)][None])[0]
    return out, state_of(mem)


def new_cache(m: qwen.Qwen3_5GatedDeltaNet, S0: torch.Tensor, started: bool) -> DynamicCache:
    """A cache with state ``S0`` [B, NV, DK, DV]; ``started`` makes every one-token call use
    the recurrent kernel (as ``HFEngine.new_cache`` does)."""
    cache = DynamicCache(config=m._cfg)
    L = cache.layers[0]
    L.lazy_initialization(conv_states=torch.zeros(S0.shape[0], CONV_DIM, 4),
                          recurrent_states=S0, conv_kernel_size=4)
    L.recurrent_states[0].copy_(S0)         # lazy_initialization allocates zeros
    L.has_previous_state[0] = started
    return cache


def run_gdn(m, x: torch.Tensor, S0: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(outputs [B, T, HIDDEN], final state). mode: "prefill" (one call), "decode" (one call
    per token), "split" (prefill the first half, then two more prefill calls of the rest)."""
    cache = new_cache(m, S0, started=True)
    T = x.shape[1]
    with torch.no_grad():
        if mode == "prefill":
            out = m(x, cache=cache)
        elif mode == "decode":
            out = torch.cat([m(x[:, t:t + 1], cache=cache) for t in range(T)], 1)
        else:
            cuts = sorted({0, T // 2, T // 2 + (T - T // 2) // 3, T})
            out = torch.cat([m(x[:, a:b], cache=cache) for a, b in zip(cuts, cuts[1:]) if b > a], 1)
    return out, cache.layers[0].recurrent_states[0]


def gdn_case(m, seed: int, T: int, batch: int, hot: int, rom_rows: int) -> None:
    rng = random.Random(seed)
    streams = [random_stream(rng, T, hot) for _ in range(batch)]
    roms = [rom_image(rng, rom_rows) for _ in range(batch)]
    x = encode(streams, rng)
    S0 = torch.stack([state_of(r) for r in roms])
    want = [expected(s, r) for s, r in zip(streams, roms)]
    want_out = torch.stack([w[0] for w in want])
    want_state = torch.stack([w[1] for w in want])
    for mode in ("prefill", "decode", "split"):
        out, state = run_gdn(m, x, S0, mode)
        bad = (out[..., :VAL_DIM] != want_out).nonzero()
        assert len(bad) == 0, (mode, seed, T, batch, bad[:4].tolist())
        assert torch.equal(out[..., VAL_DIM:], torch.zeros_like(out[..., VAL_DIM:]))
        assert torch.equal(state, want_state), (mode, seed, T)


@pytest.fixture(scope="module")
def gdn():
    return gdn_module()


@pytest.mark.parametrize("T,batch,hot", [(1, 1, 4), (2, 4, 2), (63, 1, 3), (64, 4, 4),
                                         (65, 1, 2), (130, 4, 8), (300, 1, 6)])
def test_gdn_fp32_prefill_equals_designed_reads(gdn, T, batch, hot):
    """Prefill, decode and split prefill all give the designed read values and state."""
    gdn_case(gdn, seed=1000 * T + batch, T=T, batch=batch, hot=hot, rom_rows=10)


def test_raw_core_output_is_off_but_the_norm_cancels_it(gdn):
    """The chunked path's raw core output (before RMSNormGated) really is qa * row with
    qa != 2^-4, so the test above exercises the cancellation, not a kernel that happens
    to be exact."""
    seen: list[torch.Tensor] = []
    h = gdn.norm.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    try:
        rng = random.Random(5)
        stream = random_stream(rng, 70, 3)
        rom = rom_image(rng, 40)
        x = encode([stream], rng)
        S0 = state_of(rom)[None]
        run_gdn(gdn, x, S0, "prefill")
        raw_prefill = seen[-1]
        seen.clear()
        run_gdn(gdn, x, S0, "decode")
        raw_decode = torch.cat(seen, 0)
    finally:
        h.remove()
    assert not torch.equal(raw_prefill, raw_decode)
    # decode reads with exactly 2^-4: its raw ballast cells are 2^22
    assert set(raw_decode[:, :N_BV].unique().tolist()) <= {0.0, 2.0 ** 22}


def test_non_power_of_two_cells_break_prefill(gdn, monkeypatch):
    """The argument needs every stored cell to be 0 or a power of two: with Vs = 96 the same
    streams give wrong prefill reads (decode, reading with qa = 2^-4 exactly, stays exact),
    so the tests above can fail."""
    me = sys.modules[__name__]
    monkeypatch.setattr(me, "VS", 96.0)
    monkeypatch.setattr(me, "NORM_BIT", 96.0 * (DV / N_BV) ** 0.5 / BV * Z)
    rng = random.Random(3)
    streams = [random_stream(rng, 130, 4) for _ in range(2)]
    roms = [rom_image(rng, 20) for _ in range(2)]
    x = encode(streams, rng)
    S0 = torch.stack([state_of(r) for r in roms])
    want = torch.stack([expected(s, r)[0] for s, r in zip(streams, roms)])
    assert torch.equal(run_gdn(gdn, x, S0, "decode")[0][..., :VAL_DIM], want)
    assert not torch.equal(run_gdn(gdn, x, S0, "prefill")[0][..., :VAL_DIM], want)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
def test_gdn_fp32_prefill_random_many(gdn, seed):
    rng = random.Random(seed)
    T = rng.choice([rng.randint(1, 300), 64 * rng.randint(1, 4), 64 * rng.randint(1, 4) + 1])
    gdn_case(gdn, seed=seed, T=T, batch=rng.choice([1, 4]), hot=rng.randint(1, 12),
             rom_rows=rng.randint(0, ROWS))


# ---------------------------------------------------------------------------------------
# (c) compiled chips on a d_k = 128 target, fp32
# ---------------------------------------------------------------------------------------

def dk128_target(tmp: Path) -> str:
    """The config-file target of test_rules.test_config_target_two_hot_gqa (d_k = d_v = 128,
    2 key heads, 2 value heads each, MLP width 96)."""
    return circuits.config_target(tmp / "dk128.json")


def sim_stream(c: Circuit, roms: dict[str, list[int]], start: Token, steps: int) -> list[int]:
    """The simulator's token ids from ``start`` (at most ``steps`` steps)."""
    return [c.token_id(t) for t in Simulator(c, roms).run(start, steps)]


def prefill_equals_decode(path: Path, starts: list[Token], steps: int) -> int:
    """Feed the simulator's streams (cut to the shortest) through the fp32 model in one
    prefill call and token by token; assert every layer's hidden state and the logits are
    bit-identical; returns the number of positions compared."""
    eng = HFEngine(path, "fp32")
    streams = [sim_stream(eng.circuit, eng.roms, s, steps) for s in starts]
    n = min(map(len, streams))
    ids = torch.tensor([s[:n] for s in streams])
    with torch.no_grad():
        pre = eng.model(input_ids=ids, cache=eng.new_cache(len(starts)), use_cache=True,
                        output_hidden_states=True)
        cache = eng.new_cache(len(starts))
        dec = [eng.model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True,
                         output_hidden_states=True) for t in range(n)]
    for li, h in enumerate(pre.hidden_states):
        hd = torch.cat([d.hidden_states[li] for d in dec], 1)
        bad = (h != hd).nonzero()
        assert len(bad) == 0, (path.name, "hidden state", li, bad[:4].tolist())
    assert torch.equal(pre.logits, torch.cat([d.logits for d in dec], 1))
    return n * len(starts)


CHIPS = {"ram": (circuits.ram_circuit, [Token(0, (3, 7)), Token(0, (1, 200))]),
         "rom": (lambda: circuits.rom_circuit(200, 12), [Token(0, (1, 0)), Token(0, (150, 0))])}
#: a 256x8 RAM: 2 banks of 64 paired rows (slow runs only)
BIG_CHIPS = {**CHIPS, "ram256": (lambda: circuits.ram_circuit(256, 8, 8),
                                 [Token(0, (3, 7)), Token(0, (200, 1))])}


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_compiled_dk128_fp32_prefill_is_exact(tmp_path, name):
    """On the d_k = 128 target, fp32, 150 steps (three prefill chunks), batch 2: a 16x8 RAM
    (every step reads and writes) and a 200x12 ROM (16 words per row, z-gated; two read
    ports)."""
    build, starts = CHIPS[name]
    d = tmp_path / name
    compile_to_dir(build(), d, target=dk128_target(tmp_path), dtype="fp32")
    assert prefill_equals_decode(d, starts, steps=150) > 0
    rep = check_dir(d, steps=150, batch=2, starts=starts, prefill=True)
    assert rep.ok, [str(m) for m in rep.mismatches]


def ram_case(tmp_path: Path, dtype: str, transparent: bool, shape: tuple) -> None:
    """A 256x8 RAM (transparent or not) on the d_k = 128 target: its plan's (pair, vsel,
    rows, key heads) is ``shape``; prefill and decode equal the simulator at every position,
    memories read back word for word (check_dir), and in fp32 prefill equals decode bit for
    bit."""
    from backends.compile.schedule import schedule
    from backends.chipdir.target import get_target
    build = lambda: circuits.ram_circuit(256, 8, 8, transparent=transparent)
    starts = BIG_CHIPS["ram256"][1]
    tgt = dk128_target(tmp_path)
    ram = schedule(build(), get_target(tgt)).mems["ram"]
    assert (ram.pair, ram.vsel, ram.rows, ram.kheads) == shape
    d = tmp_path / "ram256"
    compile_to_dir(build(), d, target=tgt, dtype=dtype)
    if dtype == "fp32":
        assert prefill_equals_decode(d, starts, steps=150) > 0
    for prefill in (False, True):
        rep = check_dir(d, steps=150, batch=2, starts=starts, prefill=prefill)
        assert rep.ok, [str(m) for m in rep.mismatches]
        assert rep.memory_checks > 0


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_ram_on_two_hot_heads_pairs_its_rows(tmp_path, dtype):
    """Key rows i and i + 64 share a query (the word is the address's low bit, picked by
    the z gate; writes carry the data gated into its word's columns), so a key head holds
    128 words: 2 heads (3 with 127 rows and a reserved one)."""
    ram_case(tmp_path, dtype, False, (True, 0, 64, 2))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_transparent_ram_splits_its_words_over_the_value_heads(tmp_path, dtype):
    """A transparent RAM (2 value heads per key head) is written at the step's own
    position, with beta 1 on the value head its address's bit 1 chooses and 0 on the
    other, so each value head holds its own words: 1 key head, and every read sees the
    step's write."""
    ram_case(tmp_path, dtype, True, (True, 1, 64, 1))


def fuzz_circuit(seed: int):
    """A random circuit with at least one memory (tests/backends/verify/test_fuzz.py's generator),
    or (None, None, None)."""
    from tests.backends import test_fuzz
    c, images, start = test_fuzz.small_circuit(seed)
    if c is None or not c.memories:
        return None, None, None
    return c, images, start


def fuzz_case(seed: int, tmp: Path, steps: int = 150) -> int:
    """Compile random circuit ``seed`` (if it has a memory) for the d_k = 128 target in fp32
    and check fp32 prefill against decode and the simulator; returns the positions compared
    (0 when the seed gives no usable circuit)."""
    c, images, start = fuzz_circuit(seed)
    if c is None:
        return 0
    d = tmp / f"s{seed}"
    compile_to_dir(c, d, target=dk128_target(tmp), dtype="fp32", roms=images)
    n = prefill_equals_decode(d, [start], steps=steps)
    rep = check_dir(d, steps=steps, starts=[start], prefill=True)
    assert rep.ok, (seed, [str(m) for m in rep.mismatches])
    return n


@pytest.mark.slow
@pytest.mark.parametrize("block", range(8))
def test_compiled_dk128_fp32_prefill_fuzz(tmp_path, block):
    """Random circuits with memories (seeds 25*block .. 25*block+24; about half have one)."""
    done = [fuzz_case(s, tmp_path) for s in range(25 * block, 25 * block + 25)]
    assert sum(1 for n in done if n) >= 5


def transparent_case(seed: int, tmp: Path, target: str, dtype: str, steps: int) -> None:
    """circuits.transparent_ram_source(seed) compiled for ``target`` in ``dtype``: decode and
    prefill (batch 2, two starts) equal the simulator, memories word for word; in fp32
    prefill equals decode bit for bit."""
    from hdl.frontend import load_source
    c = load_source(circuits.transparent_ram_source(seed), "tram.hdl")
    d = tmp / f"t{seed}{dtype}"
    compile_to_dir(c, d, target=target, dtype=dtype)
    starts = [c.start, Token(0, (5 % (1 << c.kinds[0].fields[0].width), 1))]
    if dtype == "fp32":
        assert prefill_equals_decode(d, starts, steps=steps) > 0
    for prefill in (False, True):
        rep = check_dir(d, steps=steps, batch=2, starts=starts, prefill=prefill)
        assert rep.ok, (seed, [str(m) for m in rep.mismatches])


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_random_transparent_rams(tmp_path, seed):
    """Random transparent RAMs on the d_k = 128 target (value heads split by the address:
    seed 0 with one-hot rows, 5 with paired rows; seed 2's depth 3 is no whole number of
    4-word rows, so its value heads are not split) in fp32 and bf16, and on compact (one
    value head per key head) in bf16."""
    transparent_case(seed, tmp_path, dk128_target(tmp_path), "fp32", 70)
    transparent_case(seed, tmp_path, dk128_target(tmp_path), "bf16", 40)
    transparent_case(seed, tmp_path, "compact", "bf16", 40)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 3, 4] + list(range(6, 40)))
def test_random_transparent_rams_more(tmp_path, seed):
    transparent_case(seed, tmp_path, dk128_target(tmp_path), "fp32", 150)
    transparent_case(seed, tmp_path, "compact", "fp32", 80)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BIG_CHIPS))
def test_compiled_dk128_fp32_prefill_long(tmp_path, name):
    """300 steps (five prefill chunks), batch 4, prefill == decode and the simulator."""
    build, starts = BIG_CHIPS[name]
    d = tmp_path / name
    compile_to_dir(build(), d, target=dk128_target(tmp_path), dtype="fp32")
    prefill_equals_decode(d, starts * 2, steps=300)
    rep = check_dir(d, steps=300, batch=4, starts=starts * 2, prefill=True)
    assert rep.ok, [str(m) for m in rep.mismatches]
