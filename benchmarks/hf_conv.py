"""What one GDN conv call costs in bf16: transformers' own against backends.engines.hf_kernels' fp32 one.

Times ``causal_conv1d_update`` (one decode step: [1, C, 1] input, [1, C, 4] conv state,
silu) at C = 30,912 (qwen3.5-4b-shaped chips) and 8,192 channels, and with ``--prefill T``
also ``causal_conv1d_fn`` over T positions, on random bf16 data, one thread: the original
and the replacement in turn, ``--repeats`` rounds, and prints the medians in ms with
whether the two gave the same bits. torch's bf16 convolution is slow where oneDNN lacks bf16
(``hf_kernels.bf16_conv_slow()``); to see that path on a CPU with AVX-512-BF16 run

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/hf_conv.py

Usage: python benchmarks/hf_conv.py [--channels 30912 8192] [--repeats 7] [--prefill T]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from backends.engines import hf_kernels as hk  # noqa: E402


def timed(fns: list, repeats: int) -> list[float]:
    """The median ms of each of ``fns`` over ``repeats`` rounds that call each once in turn
    (after one warm-up call each)."""
    ms: list[list[float]] = [[] for _ in fns]
    for r in range(repeats + 1):
        for fn, m in zip(fns, ms):
            t = time.perf_counter()
            fn()
            if r:
                m.append(1e3 * (time.perf_counter() - t))
    return [statistics.median(m) for m in ms]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, nargs="+", default=[30912, 8192])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--prefill", type=int, default=0, metavar="T")
    a = ap.parse_args()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    orig = hk.originals(qwen)
    env = " ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
                   if k in os.environ) or "(no env)"
    print(f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"bf16 conv slow: {hk.bf16_conv_slow()}, 1 thread, {env}")
    print("| call | channels | original ms | fp32 replacement ms | speed-up | same bits |")
    print("|---|---|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    for c in a.channels:
        w = torch.randn(c, 4, generator=g).bfloat16()
        state = torch.randn(1, c, 4, generator=g).bfloat16()
        runs = [("decode step", 1, lambda x, s, f: f["causal_conv1d_update"](x, s, w, None, "silu"),
                 lambda x, s: hk.conv_update(orig["causal_conv1d_update"], x, s, w, None, "silu"))]
        if a.prefill:
            runs.append((f"prefill T={a.prefill}", a.prefill,
                         lambda x, s, f: f["causal_conv1d_fn"](x, w, None, "silu"),
                         lambda x, s: hk.conv_fn(orig["causal_conv1d_fn"], x, w, None, "silu")))
        for name, t, run_orig, run_fast in runs:
            x = torch.randn(1, t, c, generator=g).bfloat16().transpose(1, 2)
            s1, s2 = state.clone(), state.clone()
            same = hk._differ(run_fast(x, s1), run_orig(x, s2, orig), "") is None and \
                torch.equal(s1, s2)
            t_orig, t_fast = timed([lambda: run_orig(x, s2, orig), lambda: run_fast(x, s1)],
                                   a.repeats)
            print(f"| {name} | {c:,} | {t_orig:.3f} | {t_fast:.3f} | {t_orig / t_fast:.2g}x | "
                  f"{'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
