"""Trained (not random) Qwen3.5 text bases for the stock layout's fidelity figures.

A random base's next-token distributions are nearly flat, so its greedy text flips on any
change of rounding; a language model's are peaked where the text is predictable. Nothing
can be downloaded here, so this trains one: ``prepare`` learns a byte-level BPE (Qwen's chat
and tool-call special tokens included) from a corpus and stores the corpus as token ids;
``train`` trains a Qwen3.5 text model (transformers' own ``Qwen3_5ForCausalLM``, GDN layers
and full attention every 4th) on next-token prediction over it and saves it in bf16 with the
tokenizer, a checkpoint ``deltachip merge`` takes as a base.

Corpora: ``docs`` is the project's own prose (README.md, docs/, the examples' READMEs);
``system`` adds the Python standard library's sources (outside its tests) and vim's help
files where the machine has them (``/usr/share/vim/vim*/doc/*.txt``): about 23 MB of
English prose and code on the machine the figures were measured on.

    python benchmarks/trained_base.py prepare /tmp/tb --corpus system --ids 4096
    python benchmarks/trained_base.py train /tmp/tb --hidden 512 --layers 8 \\
        --intermediate 1024 --seconds 300 --device cuda      # or --steps N on the CPU

``train`` needs only torch and transformers (it reads ``corpus.npy`` and ``meta.json``, not
the tokenizer), so it runs where the project is not installed; the loss goes on stderr.
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def corpus(kind: str = "docs") -> list[str]:
    """The texts of corpus ``kind`` (see the module docstring), in a fixed order."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").glob("*/README.md"))]
    if kind == "system":
        lib = Path(sysconfig.get_paths()["stdlib"])
        files += sorted(p for p in lib.rglob("*.py")
                        if not {"test", "tests", "site-packages"} & set(p.parts))
        files += sorted(Path(p) for p in glob.glob("/usr/share/vim/vim*/doc/*.txt"))
    elif kind != "docs":
        raise SystemExit(f"error: unknown corpus {kind!r} (docs or system)")
    return [f.read_text(errors="replace") for f in files]


def prepare(path: Path, kind: str = "docs", ids: int = 1024) -> Path:
    """A BPE of ``ids`` ids learnt from :func:`corpus` ``kind`` (the tests' tokenizer
    recipe, tests/merge/bases.py) saved at ``path``, the corpus as token ids
    (``corpus.npy``, uint16) and ``meta.json`` (the vocabulary size the model gets)."""
    from transformers import AutoTokenizer
    sys.path.insert(0, str(ROOT))
    from tests.merge.bases import make_tokenizer
    texts = corpus(kind)
    path.mkdir(parents=True, exist_ok=True)
    make_tokenizer(path, texts, ids)
    tok = AutoTokenizer.from_pretrained(str(path))
    data = np.fromiter((t for x in texts for t in tok(x).input_ids), dtype=np.uint16)
    np.save(path / "corpus.npy", data)
    (path / "meta.json").write_text(json.dumps(
        {"corpus": kind, "ids": len(tok), "vocab_size": ids + 64, "tokens": int(data.size)}))
    print(f"{path}: corpus {kind!r}, {data.size:,} tokens, {len(tok)} ids", file=sys.stderr)
    return path


def config(vocab: int, hidden: int, layers: int, intermediate: int, heads: int):
    """A Qwen3.5 text config of that size: GDN layers with ``heads`` key heads and twice as
    many value heads (64 wide), full attention every 4th layer, tied embeddings."""
    from transformers import Qwen3_5TextConfig
    return Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=max(2, hidden // 64),
        num_key_value_heads=max(1, hidden // 256), head_dim=64,
        linear_num_key_heads=heads, linear_key_head_dim=64,
        linear_num_value_heads=2 * heads, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                     for i in range(layers)],
        full_attention_interval=4, tie_word_embeddings=True, eos_token_id=2, pad_token_id=0,
        bos_token_id=None)


def train(path: Path, cfg, seed: int = 1, steps: int = 0, seconds: float = 0.0,
          device: str = "cpu", batch: int = 16, window: int = 128, lr: float = 3e-3) -> Path:
    """AdamW (weight decay 0.01, gradients clipped at 1, a one-cycle learning rate peaking
    at ``lr`` after 10 % of the steps) on next-token prediction over ``path``/corpus.npy:
    ``batch`` random windows of ``window`` tokens a step. ``steps`` fixes the number of
    steps; ``seconds`` instead sizes it from the pace of 5 trial steps (gradients thrown
    away) so the run ends near that wall time. fp32 weights (bf16 autocast on CUDA), saved
    in bf16 beside the tokenizer."""
    from transformers import GenerationConfig, Qwen3_5ForCausalLM
    data = torch.from_numpy(np.load(path / "corpus.npy").astype(np.int64))
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def step_loss(g: torch.Generator) -> torch.Tensor:
        at = torch.randint(0, len(data) - window, (batch,), generator=g)
        x = torch.stack([data[i:i + window] for i in at.tolist()]).to(device)
        with torch.autocast("cuda", torch.bfloat16, enabled=device.startswith("cuda")):
            loss = model(x, labels=x).loss
        loss.backward()
        return loss

    if not steps:
        trial = torch.Generator().manual_seed(-seed)
        for i in range(5):
            if i == 2:
                t = time.perf_counter()
            step_loss(trial)
            opt.zero_grad()
        steps = max(40, int(0.9 * seconds / ((time.perf_counter() - t) / 3)))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for step in range(steps):
        loss = step_loss(g)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"trained base seed {seed}: step {step + 1}/{steps}, loss {loss.item():.3f}"
                  f", {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    model = model.eval().to("cpu", torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=2, pad_token_id=0)
    model.save_pretrained(str(path), max_shard_size="15MB")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("prepare", help="learn the tokenizer, store the corpus as token ids")
    p.add_argument("dir", type=Path)
    p.add_argument("--corpus", default="docs", choices=["docs", "system"])
    p.add_argument("--ids", type=int, default=1024)
    t = sub.add_parser("train", help="train a base on a prepared corpus, save it in bf16")
    t.add_argument("dir", type=Path)
    t.add_argument("--hidden", type=int, default=128)
    t.add_argument("--layers", type=int, default=4)
    t.add_argument("--intermediate", type=int, default=256)
    t.add_argument("--heads", type=int, default=4, help="GDN key heads (value heads: twice)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--steps", type=int, default=0)
    t.add_argument("--seconds", type=float, default=0.0)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--window", type=int, default=128)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--device", default="cpu")
    a = ap.parse_args()
    if a.verb == "prepare":
        prepare(a.dir, a.corpus, a.ids)
        return
    if not (a.steps or a.seconds):
        raise SystemExit("error: train needs --steps or --seconds")
    vocab = json.loads((a.dir / "meta.json").read_text())["vocab_size"]
    cfg = config(vocab, a.hidden, a.layers, a.intermediate, a.heads)
    train(a.dir, cfg, a.seed, a.steps, a.seconds, a.device, a.batch, a.window, a.lr)


if __name__ == "__main__":
    main()
