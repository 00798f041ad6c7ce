"""Tiny random Qwen3.5 text checkpoints, built locally for the merge tests.

The real architecture at a small width: GDN layers with Qwen3.5-4B's head shapes (16 key
heads x 128, 32 value heads x 128, conv kernel 4) and full attention every 4th layer, a
hidden size of 64, and a byte-level BPE tokenizer carrying Qwen's chat and tool-call special
tokens, its vocabulary padded in the config as Qwen's is (vocab_size > the tokenizer's
length).
"""
from __future__ import annotations

from pathlib import Path

import torch

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
           "<tool_response>", "</tool_response>"]
CORPUS = ["the quick brown fox jumps over the lazy dog. " * 4,
          "def add(a, b):\n    return a + b\n",
          "<|im_start|>user\nwhat is 12 times 34?<|im_end|>\n",
          "numbers 0 1 2 3 4 5 6 7 8 9 and words: compute, tool, call, answer"]
VOCAB = 320             # the config's vocab_size; the tokenizer has about 300 ids
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def tiny_config(tied: bool, layers: int = 4, intermediate: int = 128, vocab: int = VOCAB):
    from transformers import Qwen3_5TextConfig
    return Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        linear_num_key_heads=16, linear_key_head_dim=128, linear_num_value_heads=32,
        linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                     for i in range(layers)],
        full_attention_interval=4, tie_word_embeddings=tied, initializer_range=0.2,
        eos_token_id=2, pad_token_id=0, bos_token_id=None)


def make_tokenizer(path: Path, corpus: list[str] = CORPUS, size: int = 300) -> None:
    """A byte-level BPE of ``size`` ids learnt from ``corpus``, with :data:`SPECIAL` and the
    chat template, saved at ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))


def make_base(path: Path, tied: bool, seed: int = 0, shard_bytes: int | None = None,
              layers: int = 4, intermediate: int = 128) -> Path:
    """A random tiny Qwen3.5 text checkpoint (bf16) with its tokenizer at ``path``;
    ``shard_bytes`` splits the weights into shards with an index; ``intermediate`` its MLP
    width (9,216, Qwen3.5-4B's, takes the RISC-V core compiled for qwen3.5-4b)."""
    from transformers import GenerationConfig, Qwen3_5ForCausalLM
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(tiny_config(tied, layers, intermediate))
    with torch.no_grad():           # norms and GDN gates away from their neutral init
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=2, pad_token_id=0)
    kw = {"max_shard_size": shard_bytes} if shard_bytes else {}
    model.save_pretrained(str(path), **kw)
    make_tokenizer(path)
    return path


def make_vl_base(path: Path, text_base: Path, seed: int = 0) -> Path:
    """A vision-language Qwen3.5 checkpoint (``Qwen3_5ForConditionalGeneration``, bf16) at
    ``path`` whose text model is ``text_base``'s, tensor for tensor, stored as Qwen's own
    Qwen3.5 releases store it: under ``model.language_model.``, beside a random one-block
    vision tower under ``model.visual.``; the config's ``text_config`` is the text base's
    config, ``vision_config`` the tower's; the tokenizer is the text base's."""
    import json
    import shutil
    from safetensors.torch import load_file
    from transformers import GenerationConfig, Qwen3_5Config, Qwen3_5ForConditionalGeneration
    text_cfg = json.loads((text_base / "config.json").read_text())
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  out_hidden_size=text_cfg["hidden_size"], patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2, num_position_embeddings=16)
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(
        text_config=text_cfg, vision_config=vision,
        tie_word_embeddings=text_cfg["tie_word_embeddings"])).to(torch.bfloat16)
    weights = {}
    for f in sorted(text_base.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    with torch.no_grad():
        for name, t in weights.items():
            if name.startswith("model."):
                model.model.language_model.get_parameter(name[len("model."):]).copy_(t)
            else:
                model.get_parameter(name).copy_(t)
    model.generation_config = GenerationConfig(eos_token_id=2, pad_token_id=0)
    model.save_pretrained(str(path))
    for f in text_base.iterdir():
        if f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(f, path / f.name)
    return path
