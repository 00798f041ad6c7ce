"""The base checkpoint of a merge: read and checked, nothing loaded into memory.

Takes: a local Hugging Face checkpoint directory. Gives: :class:`Base` (its config, its
weight files with every tensor's dtype, shape and byte range, its tokenizer and generation
files) or a :class:`~backends.chipdir.stfile.MergeError` that names what differs from a
Qwen3.5 text model this merge supports: another model type, a config transformers refuses,
weights in another format, a missing, truncated or corrupt shard, or tensors that do not
fit the config (missing, mis-shaped, unexpected: the expected set is transformers' own
``Qwen3_5ForCausalLM`` built on the meta device). Tied and untied word embeddings are both
accepted. A vision-language Qwen3.5 checkpoint (``model_type`` ``qwen3_5``, as Qwen's own
Qwen3.5 releases are) is taken as its text model, as transformers' ``Qwen3_5ForCausalLM``
takes it: the config's ``text_config``, the tensors under ``model.language_model.`` (read
as ``model.``) and the lm_head; the vision tower (``model.visual.``) is left out.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.chipdir.checkpoint import INDEX, SINGLE
from backends.chipdir.stfile import Header, MergeError, TensorEntry, read_header
from common.inputs import InputTooLarge, loads_json, read_bounded
from common.outputs import os_reason, special_kind

MODEL_TYPE = "qwen3_5_text"
ARCHITECTURE = "Qwen3_5ForCausalLM"
#: the vision-language Qwen3.5: its text model's tensors are stored under LANGUAGE_PREFIX
VL_MODEL_TYPE = "qwen3_5"
LANGUAGE_PREFIX = "model.language_model."
VISION_PREFIX = "model.visual."
#: files beside the weights that the merged checkpoint carries over (the tokenizer's are
#: patched with the chip's tokens, the rest copied as they are)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json")
OTHER_FILES = ("generation_config.json",)
#: most bytes read of each JSON file (Qwen's tokenizer.json is about 11 MB)
JSON_LIMITS = {"config.json": 1 << 20, INDEX: 64 << 20, "tokenizer.json": 256 << 20,
               "tokenizer_config.json": 64 << 20}
FLOAT_DTYPES = ("BF16", "F16", "F32")
#: config fields that must be positive integers (the first three always; the others where
#: present), checked before transformers sees the config
REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers")
INT_FIELDS = REQUIRED + ("intermediate_size", "num_attention_heads", "num_key_value_heads",
                         "head_dim", "linear_num_key_heads", "linear_num_value_heads",
                         "linear_key_head_dim", "linear_value_head_dim",
                         "linear_conv_kernel_dim", "full_attention_interval",
                         "max_position_embeddings")
FLOAT_FIELDS = ("rms_norm_eps",)
#: the weight dtypes a config's ``dtype`` (``torch_dtype``) may name (FLOAT_DTYPES')
CONFIG_DTYPES = ("bfloat16", "float16", "float32")
LAYER_RE = re.compile(r"model\.layers\.(\d+)\.")
#: tensors transformers ignores in a Qwen3.5 text checkpoint (the multi-token-prediction head)
IGNORED_PREFIXES = ("mtp.",)


@dataclass
class Base:
    """A checked base checkpoint (see the module docstring)."""
    path: Path
    config: dict[str, Any]
    files: list[Header]                 # weight files, in shard order
    extra: dict[str, Path]              # tokenizer and generation files present, by name
    #: a vision-language Qwen3.5 checkpoint, taken as its text model
    multimodal: bool = False
    #: where its text model's tensors are stored in place of ``model.``
    #: (``model.language_model.``; "" where they are stored as a text model's)
    language_prefix: str = ""

    def text_name(self, stored: str) -> str | None:
        """The text model's name (``Qwen3_5ForCausalLM``'s) of the tensor stored as
        ``stored``; None for one it does not load (the vision tower, the MTP head)."""
        if stored.startswith(IGNORED_PREFIXES) or (self.multimodal and
                                                    stored.startswith(VISION_PREFIX)):
            return None
        if self.language_prefix and stored.startswith(self.language_prefix):
            return "model." + stored[len(self.language_prefix):]
        if self.language_prefix and stored.startswith("model."):
            return None
        return stored

    def stored_name(self, name: str) -> str:
        """The name a text model's tensor ``name`` is stored under."""
        if self.language_prefix and name.startswith("model."):
            return self.language_prefix + name[len("model."):]
        return name

    def tensors(self) -> dict[str, tuple[Header, TensorEntry]]:
        """Every tensor the text model loads, by its text name, with its file."""
        out = {}
        for h in self.files:
            for stored, t in h.tensors.items():
                name = self.text_name(stored)
                if name is not None:
                    out[name] = (h, t)
        return out

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    @property
    def tied(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False))

    @property
    def nbytes(self) -> int:
        return sum(h.size for h in self.files)


def read_json(path: Path, what: str) -> Any:
    """The JSON in ``path`` (read with the bound for its name); MergeError otherwise."""
    try:
        return loads_json(read_bounded(path, JSON_LIMITS.get(path.name, 64 << 20), what))
    except OSError as e:
        raise MergeError(f"{path}: cannot read: {os_reason(e)}") from None
    except InputTooLarge as e:
        raise MergeError(str(e)) from None
    except ValueError as e:
        raise MergeError(f"{path}: not valid JSON: {e}") from None


def read_base(path: str | Path) -> Base:
    """The checkpoint at ``path``, checked (see the module docstring)."""
    d = Path(path)
    if not d.is_dir():
        raise MergeError(f"base {d}: {'no such directory' if not d.exists() else 'not a directory'}"
                         " (give a local Qwen3.5 checkpoint directory)")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        kind = special_kind(cfg_path, follow_symlinks=True)
        if kind is not None:
            raise MergeError(f"{cfg_path}: is {kind}, not a regular file")
        raise MergeError(f"base {d}: no config.json (not a Hugging Face checkpoint directory)")
    cfg = read_json(cfg_path, "a config.json")
    if not isinstance(cfg, dict):
        raise MergeError(f"{cfg_path}: not a JSON object")
    multimodal = cfg.get("model_type") == VL_MODEL_TYPE
    if multimodal:
        cfg = language_config(cfg, cfg_path)
    check_base_config(cfg, cfg_path)
    extra = _extra_files(d)
    for p in extra.values():        # a damaged one named now, before the weights are read
        read_text_file(p)
    files = _weight_files(d)
    prefix = LANGUAGE_PREFIX if multimodal and any(
        n.startswith(LANGUAGE_PREFIX) for h in files for n in h.tensors) else ""
    base = Base(d, cfg, files, extra, multimodal, prefix)
    check_layers(base, cfg_path)
    check_tensors(base)
    return base


#: most bytes read of a tokenizer or generation file the merge copies (beside JSON_LIMITS)
TEXT_LIMIT = 64 << 20


def _extra_files(d: Path) -> dict[str, Path]:
    """The tokenizer and generation files of base ``d`` (:data:`TOKENIZER_FILES`,
    :data:`OTHER_FILES`) that are present, by name; MergeError for one that is there but
    cannot be read as a file (a directory, a FIFO, a device, a symbolic link to nothing or
    to itself): it is never skipped as if it were missing."""
    out = {}
    for n in TOKENIZER_FILES + OTHER_FILES:
        p = d / n
        if p.is_file():
            out[n] = p
        elif os.path.lexists(p):
            kind = special_kind(p, follow_symlinks=True)
            raise MergeError(f"{p}: is {kind}, not a regular file" if kind is not None else
                             f"{p}: a symbolic link that leads to no file (missing, or a loop)")
    return out


def read_text_file(p: Path) -> bytes:
    """The bytes of a tokenizer or generation file the merge copies, read with a bound and
    checked as its readers will take it: a ``.json`` file a JSON object, any other file
    UTF-8 text (a chat template, ``merges.txt``); MergeError otherwise, so a damaged file is
    named by the merge, not met later by whoever loads the merged model."""
    try:
        data = read_bounded(p, JSON_LIMITS.get(p.name, TEXT_LIMIT), f"a base's {p.name}")
    except OSError as e:
        raise MergeError(f"{p}: cannot read: {os_reason(e)}") from None
    except InputTooLarge as e:
        raise MergeError(str(e)) from None
    if p.suffix == ".json":
        try:
            value = loads_json(data)
        except ValueError as e:
            raise MergeError(f"{p}: not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise MergeError(f"{p}: not a JSON object")
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MergeError(f"{p}: not UTF-8 text (byte {e.start:,})") from None
        if p.suffix == ".jinja":
            check_template(p, text)
    return data


def check_template(p: Path, text: str) -> None:
    """MergeError unless ``text`` (chat template file ``p``) compiles as transformers
    compiles a chat template: a truncated or damaged one is named at the merge."""
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template
    try:
        _compile_jinja_template(text)
    except jinja2.TemplateSyntaxError as e:
        raise MergeError(f"{p}: not a valid Jinja chat template (line {e.lineno}: "
                         f"{e.message})") from None


def check_layers(base: Base, where: Path) -> None:
    """MergeError unless the config's ``num_hidden_layers`` is the number of decoder layers
    the weights hold: asked of the tensors' names before transformers builds a model of
    the config (a config claiming a million layers would take minutes to build)."""
    found = {int(m.group(1)) for h in base.files for n in h.tensors
             if (t := base.text_name(n)) is not None and (m := LAYER_RE.match(t))}
    want = base.config["num_hidden_layers"]
    if found == set(range(want)):
        return
    have = (f"layers 0 to {max(found)}" if found == set(range(len(found))) and found else
            f"{len(found):,} layers, numbered {sorted(found)[:3]}...") if found else "no layers"
    raise MergeError(f"{where}: field 'num_hidden_layers' is {want:,}, but the weights hold "
                     f"{have} (model.layers.N): the config does not fit the checkpoint")


def language_config(cfg: dict[str, Any], where: Path) -> dict[str, Any]:
    """The text model's config of a vision-language Qwen3.5 config: its ``text_config`` as
    a ``qwen3_5_text`` config (word embeddings tied as the outer config says, where it
    says)."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise MergeError(f"{where}: model_type is 'qwen3_5' (the vision-language Qwen3.5) but "
                         f"it has no text_config object to take the text model from")
    out = {**text, "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE]}
    if "tie_word_embeddings" in cfg:
        out["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    return out


def check_base_config(cfg: dict[str, Any], where: Path) -> None:
    """MergeError unless ``cfg`` is a Qwen3.5 text config transformers accepts."""
    mt = cfg.get("model_type")
    if cfg.get("auto_map") is not None and "base_config" in cfg:
        raise MergeError(f"{where}: is a routed merge's config (deltachip merge's output, "
                         f"its base in base_config): merge takes a Qwen3.5 text checkpoint; "
                         f"give the base it was made from")
    if mt != MODEL_TYPE:
        raise MergeError(f"{where}: model_type is {json.dumps(mt)}, not '{MODEL_TYPE}': merge "
                         f"takes a Qwen3.5 text checkpoint ({ARCHITECTURE})")
    arch = cfg.get("architectures")
    if arch is not None and (not isinstance(arch, list) or ARCHITECTURE not in arch):
        raise MergeError(f"{where}: architectures is {json.dumps(arch)}, not "
                         f"['{ARCHITECTURE}']: merge takes a Qwen3.5 text checkpoint")
    for key in INT_FIELDS:
        if key not in REQUIRED and cfg.get(key) is None:
            continue
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise MergeError(f"{where}: field '{key}' must be a positive integer, got "
                             f"{json.dumps(v)[:200]}")
    for key in FLOAT_FIELDS:
        v = cfg.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                              or not 0 < v < float("inf")):
            raise MergeError(f"{where}: field '{key}' must be a positive number, got "
                             f"{json.dumps(v)[:200]}")
    for key in ("dtype", "torch_dtype"):
        v = cfg.get(key)
        if v is not None and v not in CONFIG_DTYPES:
            raise MergeError(f"{where}: field '{key}' must be one of "
                             f"{', '.join(CONFIG_DTYPES)}, got {json.dumps(v)[:200]}")
    kinds = cfg.get("layer_types")
    if kinds is not None and (not isinstance(kinds, list) or any(
            k not in ("linear_attention", "full_attention") for k in kinds)):
        raise MergeError(f"{where}: layer_types must list 'linear_attention' and "
                         f"'full_attention' layers, got {json.dumps(kinds)[:200]}")
    if kinds is not None and len(kinds) != cfg["num_hidden_layers"]:
        raise MergeError(f"{where}: layer_types lists {len(kinds):,} layers, but field "
                         f"'num_hidden_layers' is {cfg['num_hidden_layers']:,}")
    try:
        text_config(cfg)
    except Exception as e:          # transformers' validators raise their own classes too
        text = str(e).strip()
        first = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()),
                     e.__class__.__name__)
        raise MergeError(f"{where}: transformers refuses this Qwen3.5 config: {first}") from None


def text_config(cfg: dict[str, Any]):
    """transformers' ``Qwen3_5TextConfig`` of ``cfg``."""
    from transformers import Qwen3_5TextConfig
    return Qwen3_5TextConfig(**{k: v for k, v in cfg.items() if k != "model_type"})


def _weight_files(d: Path) -> list[Header]:
    """The headers of the checkpoint's safetensors files, in shard order."""
    if (d / SINGLE).is_file():
        return [read_header(d / SINGLE)]
    for name in (SINGLE, INDEX):
        kind = special_kind(d / name, follow_symlinks=True)
        if kind is not None:
            raise MergeError(f"{d / name}: is {kind}, not a regular file")
    if not (d / INDEX).is_file():
        other = sorted(p.name for p in d.iterdir() if p.suffix in (".bin", ".pt", ".pth",
                                                                   ".gguf"))
        hint = (f" (it holds {other[0]}: convert the checkpoint to safetensors first)"
                if other else "")
        raise MergeError(f"base {d}: no {SINGLE} and no {INDEX}{hint}")
    index = read_json(d / INDEX, "a weight index")
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap or not all(
            isinstance(v, str) and "/" not in v and v not in ("", ".", "..")
            for v in wmap.values()):
        raise MergeError(f"{d / INDEX}: corrupt (no weight_map of tensor names to shard files)")
    names = list(dict.fromkeys(wmap.values()))
    headers = []
    for name in names:
        if not (d / name).is_file():
            kind = special_kind(d / name, follow_symlinks=True)
            raise MergeError(f"base {d}: shard {name} "
                             f"{f'is {kind}, not a regular file' if kind else 'is missing'} "
                             f"({INDEX} names it)")
        headers.append(read_header(d / name))
    by_name = {h.path.name: h for h in headers}
    for tensor, shard in wmap.items():
        if tensor not in by_name[shard].tensors:
            raise MergeError(f"{d / shard}: has no tensor {tensor} ({INDEX} puts it there)")
    seen: dict[str, Path] = {}
    for h in headers:
        for t in h.tensors:
            if t in seen:
                raise MergeError(f"base {d}: tensor {t} is in two shards ({seen[t].name} and "
                                 f"{h.path.name})")
            seen[t] = h.path
    return headers


def expected_tensors(cfg: dict[str, Any], where: Path | None = None
                     ) -> dict[str, tuple[int, ...]]:
    """Every tensor transformers' ``Qwen3_5ForCausalLM`` loads for ``cfg``, with its shape
    (the lm_head only when untied); MergeError naming ``where`` (the config's file) when
    transformers cannot build a model of it (a field it reads only then, of a wrong type)."""
    import torch
    from transformers import Qwen3_5ForCausalLM
    try:
        with torch.device("meta"):
            model = Qwen3_5ForCausalLM(text_config(cfg))
    except Exception as e:          # transformers' own code on the user's config
        text = str(e).strip()
        first = text.splitlines()[0] if text else ""
        raise MergeError(f"{where or 'the base config'}: transformers cannot build a model of "
                         f"this Qwen3.5 config: {e.__class__.__name__}"
                         + (f": {first[:200]}" if first else "")) from None
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings", False):
        want.pop("lm_head.weight", None)
    return want


def check_tensors(base: Base) -> None:
    """MergeError unless the tensors of ``base`` are exactly what its config makes, in a
    float dtype (an ignored multi-token-prediction head, a vision-language base's vision
    tower, and a tied lm_head, may be there too)."""
    cfg, d = base.config, base.path
    want = expected_tensors(cfg, d / "config.json")
    have = base.tensors()
    stored = {n for h in base.files for n in h.tensors}
    problems = [f"tensor {n} is not part of a Qwen3.5 model (its text model is stored under "
                f"{base.language_prefix})" for n in sorted(stored) if base.text_name(n) is None
                and not n.startswith(IGNORED_PREFIXES) and not n.startswith(VISION_PREFIX)]
    for name, shape in want.items():
        shown = base.stored_name(name)
        if name not in have:
            problems.append(f"tensor {shown} is missing")
        elif have[name][1].shape != shape:
            problems.append(f"tensor {shown} is {list(have[name][1].shape)}, config.json "
                            f"makes it {list(shape)}")
        elif have[name][1].dtype not in FLOAT_DTYPES:
            problems.append(f"tensor {shown} is {have[name][1].dtype}, not a float type")
    tied_head = cfg.get("tie_word_embeddings", False) and "lm_head.weight" in have
    for name in have:
        if name not in want and not (tied_head and name == "lm_head.weight"):
            problems.append(f"tensor {base.stored_name(name)} is not part of a Qwen3.5 text "
                            f"model")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise MergeError(f"base {d}: does not fit its config.json: {problems[0]}{more}")
