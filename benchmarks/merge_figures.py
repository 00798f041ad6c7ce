"""Figures of a merge: output size vs base, merge time and peak RSS, load time.

Builds a random Qwen3.5 text base with Qwen3.5-4B's shapes (hidden 2560, vocab 248,320,
GDN 16x128 / 32x128 heads, MLP 9216, full attention every 4th layer) and ``--layers``
layers (32: Qwen3.5-4B's), written tensor by tensor in ``--shards`` shards (nothing is
downloaded), or reuses the one in ``--dir`` (``--keep-base``); compiles the counter example
as the chip, or takes the RISC-V core with a program (``--firmware calc``: the core cache's
qwen3.5-4b entry, compiled on first use); runs ``deltachip merge --layout L`` in a child
process under ``/usr/bin/time -v`` and loads both checkpoints (and the merged tokenizer) in
transformers.

    python benchmarks/merge_figures.py --layers 4 --dir /tmp/merge-figures
    python benchmarks/merge_figures.py --layers 32 --shards 4 --firmware calc
    python benchmarks/merge_figures.py --layers 32 --shards 4 --firmware calc --layout stock --zeros
    python benchmarks/merge_figures.py --layers 4 --firmware calc --call '2**100' --hf-tokens 200
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

SHAPES = dict(vocab_size=248320, hidden_size=2560, intermediate_size=9216,
              num_attention_heads=16, num_key_value_heads=4, head_dim=256,
              linear_num_key_heads=16, linear_key_head_dim=128, linear_num_value_heads=32,
              linear_value_head_dim=128, linear_conv_kernel_dim=4, tie_word_embeddings=True,
              full_attention_interval=4)


def base_shapes(layers: int):
    """The config of a base with ``SHAPES`` and ``layers`` layers, and the shape of every
    tensor it stores (tied: no lm_head)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(num_hidden_layers=layers, layer_types=[
        "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        **SHAPES)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in Qwen3_5ForCausalLM(cfg).state_dict().items()
                  if k != "lm_head.weight"}
    return cfg, shapes


def build_base(d: Path, layers: int, shards: int) -> None:
    from safetensors.torch import save_file
    from tests.merge.bases import make_tokenizer
    cfg, shapes = base_shapes(layers)
    d.mkdir(parents=True)
    names = sorted(shapes)
    per = -(-len(names) // shards)
    wmap, total = {}, 0
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: (torch.randn(shapes[k]) * 0.02).to(torch.bfloat16)
                for k in names[i * per:(i + 1) * per]}
        save_file(part, str(d / fname), metadata={"format": "pt"})
        total += sum(t.numel() * 2 for t in part.values())
        wmap.update(dict.fromkeys(part, fname))
        del part
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": wmap}))
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    cfg.save_pretrained(str(d))
    make_tokenizer(d)


def load_seconds(path: Path, remote: bool) -> float:
    code = ("import time,torch;from transformers import AutoModelForCausalLM as A;"
            "t=time.perf_counter();"
            f"A.from_pretrained({str(path)!r},dtype=torch.bfloat16,trust_remote_code={remote});"
            f"print(time.perf_counter()-t)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(r.stdout.split()[-1])


def tokenizer_seconds(path: Path) -> float:
    code = ("import time;from transformers import AutoTokenizer as T;t=time.perf_counter();"
            f"T.from_pretrained({str(path)!r});print(time.perf_counter()-t)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(r.stdout.split()[-1])


def call_figures(path: Path, expr: str, hf_tokens: int) -> str:
    """A fresh process: load the merged model; generate() from a prompt ending in a calc
    call on ``expr`` (its whole wall time; the first call also loads the fast engine); the
    same call on the bridge's runner from the program's start and resumed where the
    previous call parked it (the chip's tokens, instructions and seconds); and, with
    ``hf_tokens``, the first ``hf_tokens`` chip tokens of the call on the model's own chip
    modules (transformers), the rate of the fallback."""
    code = f"""
import json, sys, time, torch, warnings
warnings.simplefilter("ignore")
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM, AutoTokenizer
m = AutoModelForCausalLM.from_pretrained({str(path)!r}, dtype=torch.bfloat16, trust_remote_code=True)
mod = sys.modules[type(m).__module__]
tok = AutoTokenizer.from_pretrained({str(path)!r}, trust_remote_code=True)
call = json.dumps({{"name": "calc", "arguments": {{"expression": {expr!r}}}}})
ids = tok("<|im_start|>assistant\\n<tool_call>\\n" + call + "\\n</tool_call>", return_tensors="pt").input_ids
def line(what, r):
    return (f"{{what}}: {{r['output'].strip()!r}}: chip {{r['tokens']:,}} tokens, "
            f"{{r['instructions']:,}} instructions, {{r['seconds']:.2f}} s on {{r['engine']}}")
cache = m.new_cache(); t = time.perf_counter()
m.generate(ids, max_new_tokens=60, do_sample=False, cache=cache)
print(line("generate(), first call", cache.calls[0].log[0]) + f"; generate() {{time.perf_counter() - t:.2f}} s")
text = "\\n" + call + "\\n"
# a core that reads text tokens takes the call's ids, one that reads bytes their bytes
arg = (tok(text, add_special_tokens=False).input_ids if "text" in m.config.chip_bridge
       else text.encode())
row = mod.ToolCalls()
for what in ("from the start", "resumed"):
    out, r = m._run_call(arg, row)
    r["output"] = out.decode()
    print(line(f"call {{what}}", r))
if {hf_tokens}:
    m._runner = mod.ModuleChip(m.chip)
    m.config.chip_bridge["max_tokens"] = {hf_tokens}
    out, r = m._run_call(arg, mod.ToolCalls())
    print(f"transformers' modules: first {{r['tokens']:,}} chip tokens of the call in "
          f"{{r['seconds']:.1f}} s, {{r['seconds'] / r['tokens']:.3f}} s a token")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else f"call failed: {r.stderr[-2000:]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/merge-figures"))
    ap.add_argument("--keep-base", action="store_true",
                    help="reuse DIR/base when it is there")
    ap.add_argument("--firmware", default=None, metavar="calc|PROG.elf",
                    help="merge the RISC-V core with this program instead of the counter")
    ap.add_argument("--layout", choices=["routed", "stock"], default="routed")
    ap.add_argument("--zeros", action="store_true",
                    help="also count the bytes of zero elements in the merged weights")
    ap.add_argument("--call", action="append", default=[], metavar="EXPR",
                    help="with --firmware calc: time a tool call of calc on EXPR through the "
                         "merged model (plain generate(), the call at the end of the prompt)")
    ap.add_argument("--hf-tokens", type=int, default=0, metavar="N",
                    help="with --call: also time the call's first N chip tokens on the "
                         "model's own chip modules (transformers)")
    a = ap.parse_args()
    if not (a.keep_base and (a.dir / "base" / "config.json").is_file()):
        shutil.rmtree(a.dir, ignore_errors=True)
        t = time.perf_counter()
        build_base(a.dir / "base", a.layers, a.shards)
        print(f"base built in {time.perf_counter() - t:.1f} s")
    shutil.rmtree(a.dir / "merged", ignore_errors=True)
    if a.firmware:
        chip = ["--firmware", a.firmware]
    else:
        shutil.rmtree(a.dir / "counter", ignore_errors=True)
        # the stock layout wants the chip compiled for the base's module shapes
        target = (["--target", str(a.dir / "base" / "config.json")] if a.layout == "stock"
                  else [])
        subprocess.run([sys.executable, "-m", "deltachip", "compile",
                        str(ROOT / "examples/counter/counter.hdl"), *target, "-o",
                        str(a.dir / "counter")], check=True, capture_output=True)
        chip = ["--chip", str(a.dir / "counter")]
    r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "deltachip", "merge",
                        str(a.dir / "base"), str(a.dir / "merged"), *chip, "--layout",
                        a.layout], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"merge failed ({r.returncode}):\n{r.stdout}{r.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", r.stderr).group(1)
    size = lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())  # noqa: E731
    base, out = size(a.dir / "base"), size(a.dir / "merged")
    print(r.stdout.strip())
    print(f"base {base:,} bytes, merged {out:,} bytes ({out / base:.4f}x, +{out - base:,})")
    print(f"merge: wall {wall}, peak RSS {rss / 1024:.0f} MiB (whole process, python and torch "
          f"included)")
    big = sorted(((f.stat().st_size, f.name) for f in (a.dir / "merged").rglob("*")
                  if f.is_file() and f.stat().st_size > (1 << 20)), reverse=True)
    print("merged files over 1 MiB:", ", ".join(f"{n} {b / 2**20:,.1f} MiB" for b, n in big))
    if a.zeros:
        from benchmarks.merge_stock_fidelity import _zero_bytes
        zeros = _zero_bytes(a.dir / "merged")
        print(f"zeros in the merged weights: {zeros:,} bytes ({zeros / out:.1%} of the files)")
    for expr in a.call:
        print(call_figures(a.dir / "merged", expr, a.hf_tokens))
    print(f"load (bf16): base {load_seconds(a.dir / 'base', False):.1f} s, merged "
          f"{load_seconds(a.dir / 'merged', a.layout == 'routed'):.1f} s; tokenizer: base "
          f"{tokenizer_seconds(a.dir / 'base'):.1f} s, merged "
          f"{tokenizer_seconds(a.dir / 'merged'):.1f} s")


if __name__ == "__main__":
    main()
