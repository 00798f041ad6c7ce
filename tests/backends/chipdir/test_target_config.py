"""``compile --target CONFIG.json``: every field is checked with a message naming it, and the
exactness proof refuses an eps it cannot prove (issue 9, class 2); golden texts."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from backends.compile.exact import ExactnessError
from backends.chipdir.target import CONFIG_INTS, TargetError, get_target
from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[3]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"
GOOD = {"hidden_size": 256, "intermediate_size": 96, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6}


def _write(tmp_path: Path, cfg) -> str:
    p = tmp_path / "config.json"
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(p)


def _error(tmp_path: Path, cfg) -> str:
    spec = _write(tmp_path, cfg)
    with pytest.raises(TargetError) as e:
        get_target(spec)
    return str(e.value).replace(spec, "CFG")


def test_good_config_reads(tmp_path):
    t = get_target(_write(tmp_path, {"text_config": GOOD}))
    assert (t.d_k, t.d_v, t.v_per_k, t.k_heads, t.mlp_width, t.base_hidden) == (64, 64, 2, 2, 96, 0)


@pytest.mark.parametrize("cfg, kind", [([1, 2], "an array"), ('"x"', "a string"),
                                       ("null", "null"), ("3", "a number")])
def test_not_an_object(tmp_path, cfg, kind):
    assert _error(tmp_path, cfg) == (f"target CFG: not a Qwen3.5 text config (the JSON is "
                                     f"{kind}, not an object)")


def test_text_config_not_an_object(tmp_path):
    assert _error(tmp_path, {"text_config": [GOOD]}) == \
        "target CFG: field 'text_config' must be an object, got an array"


def test_not_json(tmp_path):
    assert _error(tmp_path, "{").startswith("target CFG: not valid JSON: Expecting property name")


@pytest.mark.parametrize("field", [f for f, (_, _, d) in CONFIG_INTS.items() if d is None])
def test_missing_field(tmp_path, field):
    cfg = {k: v for k, v in GOOD.items() if k != field}
    assert _error(tmp_path, cfg) == f"target CFG: not a Qwen3.5 text config (no field '{field}')"


@pytest.mark.parametrize("field", sorted(CONFIG_INTS))
@pytest.mark.parametrize("value", ["low", -1, "high", 64.0, "64", True, None])
def test_bad_integer_field(tmp_path, field, value):
    lo, hi, _ = CONFIG_INTS[field]
    value = {"low": lo - 1, "high": hi + 1}.get(value, value) if isinstance(value, str) and \
        value in ("low", "high") else value
    assert _error(tmp_path, {**GOOD, field: value}) == (
        f"target CFG: field '{field}' must be an integer from {lo} to {hi}, got "
        f"{json.dumps(value)}")


def test_absurd_hidden_size_is_refused_before_any_allocation(tmp_path):
    assert _error(tmp_path, {**GOOD, "hidden_size": 10 ** 9}) == (
        "target CFG: field 'hidden_size' must be an integer from 1 to 32768, got 1000000000")


@pytest.mark.parametrize("eps, shown", [(math.nan, "NaN"), (math.inf, "Infinity"), (-1e-6, "-1e-06"),
                                        (0, "0"), ("1e-6", '"1e-6"'), (None, "null")])
def test_bad_eps(tmp_path, eps, shown):
    assert _error(tmp_path, {**GOOD, "rms_norm_eps": eps}) == (
        f"target CFG: field 'rms_norm_eps' must be a finite number > 0, got {shown}")


@pytest.mark.parametrize("change, message", [
    ({"linear_num_value_heads": 3}, "field 'linear_num_value_heads' (3) must be a multiple of "
                                    "'linear_num_key_heads' (2)"),
    ({"linear_value_head_dim": 20}, "field 'linear_value_head_dim' (20) has no exact ballast "
                                    "(need n * 4^k with n <= 4)"),
    ({"linear_key_head_dim": 48}, "field 'linear_key_head_dim' (48) must be 4^k or 2 * 4^k"),
])
def test_inconsistent_fields(tmp_path, change, message):
    assert _error(tmp_path, {**GOOD, **change}) == f"target CFG: {message}"


@pytest.mark.parametrize("eps", [1e12, 1e30])
def test_huge_eps_is_refused_at_compile_time(tmp_path, eps):
    from backends.compile.pipeline import compile_circuit
    from hdl.frontend import load_circuit
    spec = _write(tmp_path, {**GOOD, "rms_norm_eps": eps})
    with pytest.raises(ExactnessError) as e:
        compile_circuit(load_circuit(str(COUNTER)), spec)
    assert str(e.value).startswith(f"Counter: error: cannot prove the compiled weights exact: "
                                   f"rms_norm_eps {eps!r} is too large: the residual pre-norm "
                                   "computes rsqrt(")


@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_an_eps_the_proof_accepts_checks_exact(tmp_path, eps):
    """The proof's verdict is the truth: an eps it accepts (0.1 vanishes against this chip's
    mean square 2^22) runs exact in transformers."""
    from backends.verify.check import check_dir
    from backends.compile.pipeline import compile_to_dir
    from hdl.frontend import load_circuit
    comp = compile_to_dir(load_circuit(str(COUNTER)), tmp_path / "ck",
                          _write(tmp_path, {**GOOD, "rms_norm_eps": eps}))
    assert comp.config["rms_norm_eps"] == eps
    rep = check_dir(tmp_path / "ck", steps=12, dtype="fp32")
    assert rep.ok, [str(m) for m in rep.mismatches]


def test_cli_reports_the_field(tmp_path, capsys):
    spec = _write(tmp_path, {**GOOD, "linear_num_key_heads": 0})
    assert main(["compile", str(COUNTER), "-o", str(tmp_path / "out"), "--target", spec]) == 2
    assert capsys.readouterr().err == (f"target {spec}: field 'linear_num_key_heads' must be an "
                                       "integer from 1 to 256, got 0\n")
    assert not (tmp_path / "out").exists()


# ---- issue 28, class 9: refuse at compile what cannot run --------------------------------
#: the largest GDN state a layer may have: 256 value heads of 256 x 256 (64 MiB in fp32)
AT_STATE_LIMIT = {**GOOD, "linear_num_key_heads": 64, "linear_num_value_heads": 256,
                  "linear_key_head_dim": 256, "linear_value_head_dim": 256}


def test_config_at_every_upper_bound_is_refused_at_compile(tmp_path, capsys):
    """Every field at its upper bound used to compile, then `check` died allocating 4 GB for
    one layer's recurrent state."""
    spec = _write(tmp_path, {k: hi for k, (lo, hi, d) in CONFIG_INTS.items()})
    assert main(["compile", str(COUNTER), "-o", str(tmp_path / "out"), "--target", spec]) == 2
    assert capsys.readouterr().err == (
        f"target {spec}: one layer's GDN recurrent state would take 4,096 MiB "
        "(linear_num_value_heads 1024 x linear_key_head_dim 1024 x linear_value_head_dim 1024 "
        "x 4 bytes), more than the 64 MiB per layer deltachip allows (`deltachip check` and the "
        "engines hold it for every layer): use fewer or smaller value heads\n")
    assert not (tmp_path / "out").exists()


def test_projection_width_is_bounded(tmp_path):
    cfg = {**GOOD, "linear_num_key_heads": 256, "linear_num_value_heads": 256,
           "linear_key_head_dim": 512, "linear_value_head_dim": 16}
    assert _error(tmp_path, cfg) == (
        "target CFG: one layer's GDN projections would be 270,336 columns wide (2 x 256 key "
        "heads x 512 + 2 x 256 value heads x 16), more than 262,144: use fewer or smaller heads")


def test_config_at_the_state_limit_runs(tmp_path):
    """The largest state accepted compiles and checks exact (64 MiB per layer)."""
    from backends.verify.check import check_dir
    from backends.compile.pipeline import compile_to_dir
    from hdl.frontend import load_circuit
    spec = _write(tmp_path, AT_STATE_LIMIT)
    compile_to_dir(load_circuit(str(COUNTER)), tmp_path / "ck", spec)
    rep = check_dir(tmp_path / "ck", steps=12)
    assert rep.ok, [str(m) for m in rep.mismatches]
