"""Compile targets: the Qwen3.5 module shapes a chip is compiled for.

Takes: a target spec string (``compact``, ``qwen3.5-4b``, or a path to a Qwen3.5 config
JSON). Gives: :class:`Target`, the per-layer budgets the scheduler must respect and the
shapes the emitter writes.

A ``None`` budget means "free": the compact target sizes its MLP width and head counts to
the largest layer the circuit needs. Head geometry decides how a GDN read is addressed:
when ``d_k`` is a power of 4 a one-hot query is exact; otherwise (d_k = 128) the last row of
every head is reserved and every query is two-hot (address + reserved row).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from common.inputs import InputTooLarge, loads_json, read_bounded


class TargetError(UserError):
    """A bad ``--target`` value."""


#: most ballast lanes a hidden width may spend (n_b * 4**k widths; 2560 = 10 * 4**4)
MAX_BALLAST = 64


def is_power_of_4(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0 and (n.bit_length() - 1) % 2 == 0


@dataclass(frozen=True)
class Target:
    """Module shapes and per-layer budgets.

    Hidden width: the smallest ``n_b * 4**k`` (n_b ballast lanes, 1 <= n_b <= 64, so every
    pre-norm is an exact power of two) that is >= ``min_hidden`` and leaves room for the
    ballast, the chip's lanes and ``base_hidden`` more dims. Every named and config target
    has ``base_hidden = 0``: the chip keeps its own residual stream, as in the routed merge
    layout (the base model's layers on a residual of the base's width, the chip's on their
    own; the only layout measured to keep the base's text logits bit-identical). A widened
    merge (one homogeneous model whose hidden width is the base's plus the chip's lanes)
    compiles with ``base_hidden`` set to the base's width, leaving that block free so the
    base sits beside the chip without moving a chip weight.
    ``mlp_width`` / ``k_heads``: per-layer budgets (None = sized to fit, compact only).
    ``v_per_k``: value heads per key head (GQA group)."""
    name: str
    d_k: int = 64
    d_v: int = 64
    v_per_k: int = 1
    k_heads: int | None = None
    mlp_width: int | None = None
    conv_kernel: int = 4
    min_hidden: int = 64
    base_hidden: int = 0
    rms_eps: float = 1e-6

    @property
    def two_hot(self) -> bool:
        """True when queries must be two-hot (d_k not a power of 4)."""
        return not is_power_of_4(self.d_k)

    @property
    def rows_per_bank(self) -> int:
        """Addressable rows of one key head (the two-hot scheme reserves the last row)."""
        return self.d_k - 1 if self.two_hot else self.d_k

    @property
    def value_ballast(self) -> int:
        """Ballast columns per value head: n_b with n_b * B^2 / d_v a power of 4."""
        for n in (1, 2, 3, 4):
            if self.d_v % n == 0 and is_power_of_4(self.d_v // n):
                return n
        raise TargetError(f"target {self.name}: value head size {self.d_v} has no exact "
                          "ballast (need d_v = n * 4^k with n <= 4)")

    @property
    def cols_per_bank(self) -> int:
        """Data bit columns one key head (and its GQA value heads) holds per row."""
        return self.v_per_k * (self.d_v - self.value_ballast)

    def hidden_for(self, lanes: int) -> tuple[int, int]:
        """(hidden width, ballast lanes n_b) for ``lanes`` signal lanes."""
        best: tuple[int, int] | None = None
        for n_b in range(1, MAX_BALLAST + 1):
            need = max(self.min_hidden, self.base_hidden + lanes + n_b)
            h = n_b
            while h < need:
                h *= 4
            if best is None or h < best[0]:
                best = (h, n_b)
        assert best is not None
        return best


COMPACT = Target("compact", d_k=64, d_v=64, v_per_k=1, k_heads=None, mlp_width=None,
                 min_hidden=64)
QWEN35_4B = Target("qwen3.5-4b", d_k=128, d_v=128, v_per_k=2, k_heads=16, mlp_width=9216)


#: the integer fields of a Qwen3.5 text config a target reads: (lowest, highest, default);
#: a default of None means the field is required. The bounds keep one chip layer's dense
#: weights within a few GB (``hidden_size`` x ``intermediate_size``) and the head geometry
#: within what the GDN construction supports (docs/backend.md, "Targets").
CONFIG_INTS: dict[str, tuple[int, int, int | None]] = {
    "hidden_size": (1, 32768, None),
    "intermediate_size": (1, 131072, None),
    "linear_num_key_heads": (1, 256, None),
    "linear_num_value_heads": (1, 1024, None),
    "linear_key_head_dim": (4, 1024, None),
    "linear_value_head_dim": (4, 1024, None),
    "linear_conv_kernel_dim": (3, 64, 4),
}
DEFAULT_EPS = 1e-6
#: most cells (value heads x d_k x d_v) of one layer's GDN recurrent state: fp32 in the
#: cache, 64 MiB per layer and batch row (qwen3.5-4b: 2 MiB), what `deltachip check` and the
#: engines allocate for every layer
MAX_STATE_CELLS = 1 << 24
#: most columns of one layer's GDN projections (queries, keys, values and z: 2 * key heads *
#: d_k + 2 * value heads * d_v; qwen3.5-4b: 12,288), each a row of hidden weights
MAX_PROJ_WIDTH = 1 << 18
#: the largest config file read (Qwen3.5's config.json is a few KB)
MAX_CONFIG_BYTES = 1 << 20
CONFIG_LIMIT_WHAT = "a Qwen3.5 config.json (one is a few KB)"


def get_target(spec: str) -> Target:
    """The target named ``spec`` or read from the Qwen3.5 config file at path ``spec``."""
    if spec == "compact":
        return COMPACT
    if spec in ("qwen3.5-4b", "qwen3_5-4b", "4b"):
        return QWEN35_4B
    path = Path(spec)
    if not path.is_file():
        raise TargetError(f"unknown target '{spec}': expected compact, qwen3.5-4b or the path "
                          "of a Qwen3.5 config.json")
    try:
        cfg = loads_json(read_bounded(path, MAX_CONFIG_BYTES, CONFIG_LIMIT_WHAT))
    except OSError as e:
        raise TargetError(f"target {spec}: cannot read the config: {e.strerror or e}") from None
    except InputTooLarge as e:
        raise TargetError(f"target {spec}: the config {e.problem}") from None
    except ValueError as e:
        raise TargetError(f"target {spec}: not valid JSON: {e}") from None
    return target_from_config(cfg, spec, path.name)


def target_from_config(cfg: object, spec: str, name: str) -> Target:
    """The target of a parsed Qwen3.5 config (the object itself or its ``text_config``);
    every field it reads is checked, and a TargetError names the first bad one."""
    if not isinstance(cfg, dict):
        raise TargetError(f"target {spec}: not a Qwen3.5 text config (the JSON is "
                          f"{json_kind(cfg)}, not an object)")
    if "text_config" in cfg:
        cfg = cfg["text_config"]
        if not isinstance(cfg, dict):
            raise TargetError(f"target {spec}: field 'text_config' must be an object, got "
                              f"{json_kind(cfg)}")
    v: dict[str, int] = {}
    for key, (lo, hi, default) in CONFIG_INTS.items():
        if key not in cfg:
            if default is None:
                raise TargetError(f"target {spec}: not a Qwen3.5 text config (no field "
                                  f"'{key}')")
            v[key] = default
            continue
        x = cfg[key]
        if not isinstance(x, int) or isinstance(x, bool) or not lo <= x <= hi:
            raise TargetError(f"target {spec}: field '{key}' must be an integer from {lo} to "
                              f"{hi}, got {json.dumps(x)}")
        v[key] = x
    eps = cfg.get("rms_norm_eps", DEFAULT_EPS)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) \
            or eps <= 0:
        raise TargetError(f"target {spec}: field 'rms_norm_eps' must be a finite number > 0, "
                          f"got {json.dumps(eps)}")
    nk, nv = v["linear_num_key_heads"], v["linear_num_value_heads"]
    if nv % nk:
        raise TargetError(f"target {spec}: field 'linear_num_value_heads' ({nv}) must be a "
                          f"multiple of 'linear_num_key_heads' ({nk})")
    cells = nv * v["linear_key_head_dim"] * v["linear_value_head_dim"]
    if cells > MAX_STATE_CELLS:
        raise TargetError(
            f"target {spec}: one layer's GDN recurrent state would take {cells * 4 >> 20:,} MiB "
            f"(linear_num_value_heads {nv} x linear_key_head_dim {v['linear_key_head_dim']} x "
            f"linear_value_head_dim {v['linear_value_head_dim']} x 4 bytes), more than the "
            f"{MAX_STATE_CELLS * 4 >> 20} MiB per layer deltachip allows (`deltachip check` and "
            "the engines hold it for every layer): use fewer or smaller value heads")
    width = 2 * nk * v["linear_key_head_dim"] + 2 * nv * v["linear_value_head_dim"]
    if width > MAX_PROJ_WIDTH:
        raise TargetError(
            f"target {spec}: one layer's GDN projections would be {width:,} columns wide (2 x "
            f"{nk} key heads x {v['linear_key_head_dim']} + 2 x {nv} value heads x "
            f"{v['linear_value_head_dim']}), more than {MAX_PROJ_WIDTH:,}: use fewer or "
            "smaller heads")
    t = Target(name, d_k=v["linear_key_head_dim"], d_v=v["linear_value_head_dim"],
               v_per_k=nv // nk, k_heads=nk, mlp_width=v["intermediate_size"],
               conv_kernel=v["linear_conv_kernel_dim"], rms_eps=float(eps))
    if not any(t.d_v % n == 0 and is_power_of_4(t.d_v // n) for n in (1, 2, 3, 4)):
        raise TargetError(f"target {spec}: field 'linear_value_head_dim' ({t.d_v}) has no exact "
                          "ballast (need n * 4^k with n <= 4)")
    if t.two_hot and not is_power_of_4(t.d_k * 2):
        raise TargetError(f"target {spec}: field 'linear_key_head_dim' ({t.d_k}) must be 4^k "
                          "or 2 * 4^k")
    return t


def json_kind(x: object) -> str:
    """How JSON calls the type of ``x``: 'an array', 'a string', 'null', ..."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number",
            float: "a number"}.get(type(x), type(x).__name__)
