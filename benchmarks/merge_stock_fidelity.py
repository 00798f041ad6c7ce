"""Figures of the stock merge: text fidelity against the base, size, merge RSS and time.

Fidelity: tiny random Qwen3.5 bases (tests/merge/bases.py: hidden 64, 4 layers, Qwen3.5-4B's
GDN head shapes), one per ``--seeds`` value; ``--sharp K`` also builds from each one whose
final norm is K times larger, so its next-token distributions are peaked like a trained
model's instead of nearly flat. The counter compiled for each (``--target BASE/config.json``)
and merged with ``--layout stock``. On 16 prompts of ordinary English per base: max |Δlogit|
(the largest over the bases) and mean KL(base || merged) over the prompt positions (the mean
over the bases), and how many 16-token greedy continuations are the base's (summed over the
bases), in bf16 and fp32; beside them the same figures for the base's own bf16 against its
fp32 (what bf16 alone costs). A greedy continuation on such a base flips on any change of
rounding, so one base's 16 are a lottery: the seeds make it a count. ``--wide N`` adds the
same figures on a random base with Qwen3.5-4B's own shapes (hidden 2,560, vocab 248,320)
and N layers, so the layout widens it as it widens the real model (to 2,564).
``--trained STEPS`` adds the same figures on a tiny base per seed trained for STEPS steps
on the project's docs (benchmarks/trained_base.py): a language model's distributions, peaked
where the text is predictable, which a random base's are not. ``--base DIR`` measures a base
you have (a larger trained one from benchmarks/trained_base.py, or a real checkpoint).

Size and resources (``--layers N``, 0 to skip): a random base with Qwen3.5-4B's shapes and N
layers (benchmarks/merge_figures.py), the counter compiled for it, ``deltachip merge
--layout stock`` in a child under ``/usr/bin/time -v``, then both loaded in transformers.

    python benchmarks/merge_stock_fidelity.py --layers 4 --dir /tmp/stock-figures
    python benchmarks/merge_stock_fidelity.py --layers 0 --seeds 1 --wide 4
    python benchmarks/merge_stock_fidelity.py --layers 0 --no-fidelity --trained 800
    python benchmarks/merge_stock_fidelity.py --layers 0 --no-fidelity --base /tmp/tb
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "She opened the door and saw that the garden was full of flowers.",
    "To install the package, run the following command in your terminal:",
    "The meeting has been moved to Thursday at three o'clock.",
    "In 1969, two astronauts walked on the surface of the moon.",
    "Please find attached the report you asked for last week.",
    "The recipe calls for two cups of flour and one egg.",
    "He said that the train would arrive a little later than usual.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The results of the experiment were surprising to everyone involved.",
    "Our store is open from nine in the morning until six in the evening.",
    "The cat sat on the mat and looked out of the window.",
    "Numbers such as 12, 34 and 56 are even; 7 and 9 are odd.",
    "If you have any questions, do not hesitate to contact us.",
    "The history of the city goes back more than two thousand years.",
]


def _load(path: Path, dtype: torch.dtype):
    from transformers import Qwen3_5ForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    return Qwen3_5ForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


def _kl(ref: torch.Tensor, got: torch.Tensor) -> float:
    pr, pg = ref.log_softmax(-1), got.log_softmax(-1)
    return float((pr.exp() * (pr - pg)).sum(-1).mean())


def compare(ref, got, tok, vocab: int, new: int = 16) -> dict:
    """max |Δlogit|, mean KL over prompt positions, greedy continuations equal, and how many
    of ``ref``'s continuations are distinct (a weak model falls into a few of its modes)."""
    worst, kls, same, seen = 0.0, [], 0, set()
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p, return_tensors="pt").input_ids
            lr, lg = ref(ids).logits.double(), got(ids).logits.double()
            worst = max(worst, float((lg[..., :vocab] - lr).abs().max()))
            kls.append(_kl(lr, _text(lg, vocab)))
            gr = ref.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0)
            gg = got.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0)
            same += int(torch.equal(gr, gg))
            seen.add(tuple(gr[0, ids.shape[1]:].tolist()))
    return {"max_dlogit": worst, "mean_kl": sum(kls) / len(kls), "greedy_equal": same,
            "prompts": len(PROMPTS), "distinct": len(seen)}


def _text(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """The text columns' log-probabilities under the whole (merged) softmax."""
    return logits.log_softmax(-1)[..., :vocab]


def fidelity(d: Path, sharp: float, seeds: list[int]) -> list[dict]:
    """The rows of every base (see the module docstring), summed by :func:`totals`."""
    return totals([r for seed in seeds for r in _fidelity(d / f"seed{seed}", sharp, seed)])


def totals(rows: list[dict]) -> list[dict]:
    """One row per (base kind, what): the worst max |Δlogit|, the mean of the mean KLs, the
    greedy continuations equal, the distinct ones and prompts summed."""
    out: dict[tuple[str, str], dict] = {}
    for r in rows:
        t = out.setdefault((r["base"], r["what"]), {**r, "mean_kl": 0.0, "greedy_equal": 0,
                                                     "prompts": 0, "bases": 0,
                                                     "distinct": 0})
        t["max_dlogit"] = max(t["max_dlogit"], r["max_dlogit"])
        t["mean_kl"] += r["mean_kl"]
        t["greedy_equal"] += r["greedy_equal"]
        t["prompts"] += r["prompts"]
        t["distinct"] += r["distinct"]
        t["bases"] += 1
    for t in out.values():
        t["mean_kl"] /= t["bases"]
    return list(out.values())


def _fidelity(d: Path, sharp: float, seed: int) -> list[dict]:
    from tests.merge.bases import make_base
    rows = []
    for name, k in (("tiny", 1.0), (f"tiny, final norm x{sharp:g}", sharp)):
        base = make_base(d / f"base{k:g}", tied=True, seed=seed)
        if k != 1.0:
            m = _load(base, torch.bfloat16)
            with torch.no_grad():
                m.model.norm.weight.copy_((1 + m.model.norm.weight.float()) * k - 1)
            m.save_pretrained(str(base))
        rows += base_rows(name, base, d / f"k{k:g}")
    return rows


def trained(d: Path, seeds: list[int], steps: int) -> list[dict]:
    """:func:`base_rows` on a tiny base per seed trained for ``steps`` steps on the project's
    docs (benchmarks/trained_base.py: a BPE of 1,024 ids; tests/merge/bases.py's layers at
    hidden 128, MLP 256, 4 GDN key heads and 8 value heads of 32, tied; 16 windows of 128
    tokens a step, learning rate 3e-3), summed by :func:`totals`."""
    from benchmarks.trained_base import prepare, train
    from tests.merge.bases import tiny_config
    rows = []
    for seed in seeds:
        path = prepare(d / f"trained{seed}", "docs", 1024)
        cfg = tiny_config(True, intermediate=256, vocab=1024 + 64)
        cfg.hidden_size = 128       # and small GDN heads: trained on 2 cores in minutes
        cfg.linear_num_key_heads, cfg.linear_key_head_dim = 4, 32
        cfg.linear_num_value_heads, cfg.linear_value_head_dim = 8, 32
        rows += base_rows(f"tiny, trained {steps} steps", train(path, cfg, seed, steps),
                          d / f"trained{seed}-out")
    return totals(rows)


def base_rows(name: str, base: Path, d: Path) -> list[dict]:
    """The noise floor of ``base`` and its stock merge with the counter (compiled for it)
    against it, in bf16 and fp32 (rows as :func:`compare` gives them)."""
    import deltachip
    from transformers import AutoTokenizer
    from backends.merge.stock import merge_stock
    vocab = int(json.loads((base / "config.json").read_text())["vocab_size"])
    tok = AutoTokenizer.from_pretrained(str(base))
    b16, b32 = _load(base, torch.bfloat16), _load(base, torch.float32)
    rows = [{"base": name, "what": "base bf16 vs base fp32 (noise floor)",
             **compare(b32, b16, tok, vocab)}]
    for dtype, tdt, ref in (("bf16", torch.bfloat16, b16), ("fp32", torch.float32, b32)):
        circuit = deltachip.load(str(ROOT / "examples/counter/counter.hdl"))
        chip = deltachip.compile(circuit, target=str(base / "config.json"),
                                 dtype=dtype).save(d / f"counter{dtype}")
        out = d / f"stock{dtype}"
        rep = merge_stock(base, out, chip)
        got = compare(ref, _load(out, tdt), tok, vocab)
        rows.append({"base": name, "what": f"stock vs base, {dtype} (hidden {rep.hidden})",
                     **got})
        shutil.rmtree(out)
    return rows


def wide(d: Path, layers: int) -> list[dict]:
    """:func:`base_rows` on a random base with Qwen3.5-4B's shapes (hidden 2560, vocab
    248,320) and ``layers`` layers: the width the real model widens by (2,560 to 2,564)."""
    from benchmarks.merge_figures import build_base
    shutil.rmtree(d, ignore_errors=True)
    build_base(d / "base", layers, 1)
    rows = base_rows(f"Qwen3.5-4B shapes, {layers} layers", d / "base", d)
    shutil.rmtree(d, ignore_errors=True)
    return [{**r, "bases": 1} for r in rows]


def resources(d: Path, layers: int) -> dict:
    import deltachip
    from benchmarks.merge_figures import build_base
    base = d / "base4b"
    if not base.exists():
        build_base(base, layers, 2)
    circuit = deltachip.load(str(ROOT / "examples/counter/counter.hdl"))
    chip = deltachip.compile(circuit, target=str(base / "config.json"),
                             dtype="bf16").save(d / "counter4b")
    out = d / "stock4b"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "deltachip", "merge",
                        str(base), str(out), "--chip", str(chip), "--layout", "stock"],
                       capture_output=True, text=True, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    size = lambda p: sum(f.stat().st_size for f in p.iterdir() if f.is_file())  # noqa: E731
    st = json.loads((out / "deltachip.json").read_text())["stock"]
    zeros = _zero_bytes(out)
    loads = {}
    for what, p in (("base", base), ("stock", out)):
        code = ("import time,torch;t=time.perf_counter();from transformers import "
                "Qwen3_5ForCausalLM as M;M.from_pretrained(%r,dtype=torch.bfloat16);"
                "print(time.perf_counter()-t)" % str(p))
        loads[what] = float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                           text=True, check=True).stdout.split()[-1])
    return {"layers": layers, "base_bytes": size(base), "stock_bytes": size(out),
            "stock_zero_bytes": zeros, "hidden": st["hidden"],
            "merge_wall_s": wall, "merge_peak_rss_mib": rss / 1024,
            "summary": r.stdout.strip(), "load_s": loads}


def _zero_bytes(out: Path) -> int:
    """Bytes of zero elements in the stock checkpoint's tensors (read in chunks)."""
    import numpy as np
    from backends.chipdir.stfile import read_header
    from backends.merge.stock import RAW
    n = 0
    for f in sorted(out.glob("*.safetensors")):
        with open(f, "rb") as fh:
            for t in read_header(f).tensors.values():
                fh.seek(t.begin)
                left = t.nbytes
                while left:
                    buf = fh.read(min(left, 64 << 20))
                    a = np.frombuffer(buf, RAW[t.dtype])
                    n += (a.size - int(np.count_nonzero(a))) * a.itemsize
                    left -= len(buf)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/stock-figures")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--sharp", type=float, default=4.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4],
                    help="one tiny base per seed (default 1 2 3 4)")
    ap.add_argument("--no-fidelity", action="store_true", help="only the size and resources")
    ap.add_argument("--trained", type=int, default=0, metavar="STEPS",
                    help="also the fidelity on a tiny base per seed trained for STEPS steps "
                         "on the project's docs (a language model's peaked distributions)")
    ap.add_argument("--base", type=Path, nargs="+", default=[], metavar="DIR",
                    help="also the fidelity on these Qwen3.5 text checkpoints")
    ap.add_argument("--wide", type=int, default=0, metavar="N",
                    help="also the fidelity on a random base with Qwen3.5-4B's shapes and N "
                         "layers (its width; needs about 15 GB of memory at N = 4)")
    a = ap.parse_args()
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    rows = [] if a.no_fidelity else fidelity(d / "fidelity", a.sharp, a.seeds)
    rows += trained(d / "trained", a.seeds, a.trained) if a.trained else []
    rows += wide(d / "wide", a.wide) if a.wide else []
    given = [{**r, "bases": 1} for i, base in enumerate(a.base)
             for r in base_rows(base.name, base, d / f"base{i}")]
    rows += given
    if len(a.base) > 1:           # and summed over them
        rows += totals([{**r, "base": f"the {len(a.base)} given"} for r in given])
    for row in rows:
        print(f"{row['base']:<26} {row['what']:<40} max|dlogit| {row['max_dlogit']:.3g}  "
              f"mean KL {row['mean_kl']:.3g}  greedy equal {row['greedy_equal']}/"
              f"{row['prompts']} ({row['distinct']} of the reference's distinct; "
              f"{row['bases']} bases)")
    if a.layers:
        print(json.dumps(resources(d, a.layers), indent=2))


if __name__ == "__main__":
    main()
