"""The fast engine (backends/engines/fast) against transformers (engine hf), bit for bit, and the
structural facts it verifies at load.

fast = hf: at every position the same next token, every residual dim after every sublayer
equal and every memory equal (:func:`backends.verify.check.compare_engines`), on the examples and
random circuits (tests/hdl/ir_fuzz.py) in bf16 and fp32, batch 1 and 3; fast = sim through
``check_engine`` (tokens, memories, designed lane values). A checkpoint that breaks a fact
the kernel relies on is refused with the tensor and the fact named.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from backends.chipdir import manifest
from backends.verify.check import check_engine, compare_engines, load_engine
from backends.compile.pipeline import compile_to_dir
from backends.engines.fast.engine import FastEngine
from backends.engines.fast.model import FastRefused

from tests.backends.circuits import EXAMPLES
from tests.backends.verify.test_fuzz import fuzz, small_circuit

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fast_equals_hf_on_the_examples(compiled, name, dtype):
    d = compiled(name, dtype)
    fast, hf = load_engine("fast", d), load_engine("hf", d)
    start = EXAMPLES[name][1]
    starts = None
    if start:
        from hdl.sim import parse_token
        starts = [parse_token(fast.circuit, start)] * 3
    rep = compare_engines(fast, hf, steps=120, batch=3, starts=starts)
    assert rep.ok, "\n".join(rep.problems())
    assert rep.positions > 10 and rep.lane_checks > 0
    assert rep.memory_checks > 0 or not fast.circuit.memories


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_fast_equals_sim_with_lanes(compiled, dtype):
    eng = FastEngine(compiled("stack_machine", dtype))
    for prefill in (False, True):
        rep = check_engine(eng, steps=300, batch=2, prefill=prefill)
        assert rep.ok, "\n".join(rep.problems())
        assert rep.positions > 100 and rep.lane_checks > 10_000


@fuzz(8)
def test_fast_equals_hf_on_random_circuits(tmp_path, seed, dtype):
    c, images, start = small_circuit(seed, transparent=0.3)
    if c is None:
        return
    d = tmp_path / f"s{seed}"
    compile_to_dir(c, d, dtype=dtype, roms=images)
    rep = compare_engines(load_engine("fast", d), load_engine("hf", d), steps=12,
                          starts=[start] * 2)
    assert rep.ok, (seed, rep.problems())


@fuzz(100, slow=True)
def test_fast_equals_hf_on_random_circuits_many(tmp_path, seed, dtype):
    test_fast_equals_hf_on_random_circuits.hypothesis.inner_test(tmp_path, seed, dtype)


# ---- refusals -------------------------------------------------------------------------------

def _tamper(src: Path, dst: Path, edit) -> Path:
    """A copy of ``src`` with its weights edited and recorded in its manifest, as a compiler
    that wrote them would have (so the digest check lets them through to the fast
    engine's own checks)."""
    shutil.copytree(src, dst)
    f = next(dst.glob("*.safetensors"))
    t = load_file(f)
    edit(t)
    save_file(t, f, metadata={"format": "pt"})
    manifest.write(dst, [g.name for g in dst.iterdir() if g.name != manifest.MANIFEST])
    return dst


@pytest.mark.parametrize("edit, said", [
    (lambda t: t["model.layers.0.linear_attn.conv1d.weight"].__setitem__((0, 0, 0), 1.0),
     "conv1d.weight: a channel with more than one tap"),
    (lambda t: t["model.layers.0.linear_attn.in_proj_a.weight"].__setitem__((0, 0), 1.0),
     "in_proj_a.weight is not zero"),
    (lambda t: t["model.layers.0.linear_attn.dt_bias"].fill_(0.0),
     "dt_bias is above -104"),
    (lambda t: t["model.layers.0.input_layernorm.weight"].__setitem__(5, 0.5),
     "1 + weight is not a power of two"),
    (lambda t: t["lm_head.weight"].__setitem__((3, 0), 1.0),
     "lm_head row 3 is not its kind's base row"),
    (lambda t: t["model.embed_tokens.weight"].__setitem__((2, 0), 2.0 ** 10),
     "the ballast dims differ between embedding rows"),
])
def test_a_checkpoint_that_breaks_a_fact_is_refused(compiled, tmp_path, edit, said):
    """A fact every checkpoint deltachip writes holds, broken: damaged weights, to be
    written again (issue 43: not run on hf instead)."""
    from backends.chipdir.checkpoint import ChipDirError
    d = _tamper(compiled("counter", "bf16"), tmp_path / "bad", edit)
    with pytest.raises(ChipDirError) as e:
        FastEngine(d)
    assert not isinstance(e.value, FastRefused) and e.value.damage
    assert said in str(e.value)
    assert str(e.value).endswith(": the weights are damaged (every checkpoint `deltachip "
                                 "compile` and `deltachip merge` write holds it): compile it "
                                 "again (a merged checkpoint: merge it again)")
    assert "--engine hf" not in str(e.value)


def test_a_value_outside_the_exact_domain_stops_the_stream(compiled, tmp_path):
    """A tampered weight that moves a gate pre-activation into silu's inexact range: the
    stream stops with the layer named, instead of running on."""
    def edit(t):
        g = t["model.layers.0.mlp.gate_proj.weight"]
        g[g != 0] = g[g != 0] / 64
    d = _tamper(compiled("counter", "bf16"), tmp_path / "bad", edit)
    eng = FastEngine(d)
    from backends.engines.fast.native import FastError
    with pytest.raises(FastError, match=r"layer 0: a silu input outside"):
        check_engine(eng, steps=12)


def test_rows_helpers_and_ballast_constants(tmp_path):
    """The CSR helpers the kernel's per-output constants are built from, and the refusal of
    a ballast contribution that fp32 cannot hold exactly."""
    import numpy as np
    from backends.engines.fast import model as fm
    a = (np.array([0, 2, 2, 3]), np.array([0, 5, 1], dtype=np.int32),
         np.array([1.0, 2.0, 3.0], dtype=np.float32))
    b = (np.array([0, 1]), np.array([4], dtype=np.int32), np.array([4.0], dtype=np.float32))
    ptr, col, val = fm._stack([a, b])
    assert ptr.tolist() == [0, 2, 2, 3, 4] and col.tolist() == [0, 5, 1, 4]
    ptr, col, val = fm._past((ptr, col, val), 2)
    assert ptr.tolist() == [0, 1, 1, 1, 2] and col.tolist() == [5, 4]
    assert val.tolist() == [2.0, 4.0]
    # the ballast (dims 0, 1) holds 1.0 and 2**24 after the norm: row 0 sums 1 + 2**24,
    # which fp32 cannot hold, row 1 sums 2**24 exactly
    rows = (np.array([0, 2, 3]), np.array([0, 1, 1], dtype=np.int32),
            np.array([1.0, 1.0, 1.0], dtype=np.float32))
    scale = np.ones(4, dtype=np.float32)
    B = np.array([1.0, 2.0 ** 24])
    with pytest.raises(FastRefused, match="not exact in fp32"):
        fm._bias(rows, scale, B, 2, "w", tmp_path)
    ok = (rows[0][1:] - 2, rows[1][2:], rows[2][2:])
    assert fm._bias(ok, scale, B, 2, "w", tmp_path).tolist() == [2.0 ** 24]
    assert fm._live_default(np.array([0.0, -89.0, -100.0, -5.0, 3.0])).tolist() == \
        [False, False, False, True, True]


def test_memo_groups_are_the_small_connected_parts_past_the_ballast():
    """memo_groups: inputs 2 and 3 alone reach outputs 0..39 (80 weights): a group; input 4
    reaches two outputs (too few weights to be worth a lookup); inputs 5..21 form one chain
    of 17 (too many inputs); the ballast input 0 reaches everything and is left out."""
    from backends.engines.fast.model import MAX_GROUP_INPUTS, Csc, memo_groups
    assert MAX_GROUP_INPUTS == 16
    cols: dict[int, list[int]] = {0: list(range(100)), 2: list(range(40)),
                                  3: list(range(40)), 4: [40, 41]}
    for k, i in enumerate(range(5, 22)):        # 5..21 chained through shared outputs
        cols[i] = [50 + k, 51 + k] + [70 + (4 * k + j) % 30 for j in range(4)]
    n_in = 24
    ptr = np.zeros(n_in + 1, dtype=np.int64)
    for i in range(n_in):
        ptr[i + 1] = ptr[i] + len(cols.get(i, []))
    idx = np.concatenate([np.array(cols.get(i, []), dtype=np.int32) for i in range(n_in)])
    of, gptr, inputs = memo_groups(Csc(ptr, idx, np.ones(len(idx), np.float32)), nb=2)
    assert of.tolist() == [-1, -1, 0, 0] + [-1] * (n_in - 4)
    assert gptr.tolist() == [0, 2] and inputs.tolist() == [2, 3]
