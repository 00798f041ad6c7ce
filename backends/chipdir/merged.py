"""The names and format constants of a merged checkpoint's files (``deltachip.json``, the
modeling file, the routed model's type and ``auto_map``), and how its small JSON files are
read: with a bound, never from a FIFO or a directory. Both the writer
(:mod:`backends.merge.routed`) and the reader (:mod:`backends.engines.merged`) take them from
here; nothing here imports torch."""
from __future__ import annotations

from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
#: a routed merge's config.json ``model_type``: Qwen3.5's own text type, so that
#: transformers' AutoConfig (which AutoTokenizer runs before it reads the tokenizer's files)
#: resolves it without asking whether to run the modeling file; AutoModelForCausalLM without
#: ``trust_remote_code`` is stopped by :data:`STOCK_GUARD`
MODEL_TYPE = "qwen3_5_text"
#: a routed merge's config.json ``hidden_act`` (read by nothing of the routed model, whose
#: layers take the base's and the chip's configs): no activation, so a plain Qwen3.5 model
#: built from this config.json fails at once with this text as the error
STOCK_GUARD = ("deltachip routed merge: load it with trust_remote_code=True "
               "(a plain Qwen3.5 model cannot run it)")
#: where transformers finds the routed model's classes (config.json's ``auto_map``)
AUTO_MAP = {"AutoConfig": "modeling_deltachip.DeltachipRoutedConfig",
            "AutoModelForCausalLM": "modeling_deltachip.DeltachipRoutedForCausalLM"}
MANIFEST = "deltachip.json"
MODELING = "modeling_deltachip.py"
FORMAT = "deltachip-merge"
LAYOUTS = ("routed", "stock")
#: a chip's token tables as one row per id (a compiled chip's, and a routed merge's "plain"
#: tables under ``chip.``): the embedding, the lm_head
PLAIN_TABLES = ("model.embed_tokens.weight", "lm_head.weight")
#: a routed merge's structured token tables (``chip_tables: structured``), by tensor name
#: under ``chip.``: safetensors dtype. The one definition of the format's names:
#: backends/merge/tables.py writes them, the fast engine reads them, and the shipped modeling
#: file's buffers (which cannot import this) are checked to be the same names and dtypes
#: (tests/merge/test_modeling_sealed.py).
TABLE_TENSORS = {"model.embed_tokens.const": "I32", "model.embed_tokens.cols": "I64",
                 "model.embed_tokens.palette": "I32", "model.embed_tokens.codes": "U8",
                 "lm_head.kinds": "I64", "lm_head.basis": "I32"}
#: the dtypes a merged checkpoint is written in (its manifest's ``dtype``)
DTYPES = ("bf16", "fp32")
#: the most bytes read of each JSON file of a merged checkpoint, and why
MERGED_JSON_LIMITS = {
    MANIFEST: (1 << 20, "a merge manifest (one is a few KB)"),
    "config.json": (4 << 20, "a merged config.json (the base's config, itself at most 1 MiB, "
                             "and the chip's)"),
}


def read_merged_json(f: Path) -> Any:
    """The JSON of file ``f`` of a merged checkpoint (``deltachip.json`` or ``config.json``),
    read with its bound (:data:`MERGED_JSON_LIMITS`). Raises InputTooLarge, OSError (a
    directory, a FIFO or another special file: :class:`NotRegular`),
    or ValueError (not UTF-8, not JSON, nested too deeply, a number too long)."""
    from common.inputs import loads_json, read_bounded
    from common.outputs import special_kind
    kind = special_kind(f, follow_symlinks=True)
    if kind is not None:            # a FIFO would block the read, a directory fails it
        raise NotRegular(f, kind)
    return loads_json(read_bounded(f, *MERGED_JSON_LIMITS[f.name]))


class NotRegular(OSError):
    """A path that is a directory, a FIFO, a device or a socket where a file is expected."""

    def __init__(self, path: Path, kind: str):
        super().__init__(f"is {kind}, not a regular file")
        self.kind = kind
        self.strerror = f"is {kind}, not a regular file"


#: files up to this size get a sha256 in the manifest's file record (the weight shards,
#: gigabytes, are recorded by size: a truncated or grown shard is caught without reading it)
DIGEST_LIMIT = 64 << 20


def file_record(root: Path) -> dict[str, dict[str, Any]]:
    """Every file under merge output ``root`` (relative path -> ``bytes``, and ``sha256``
    for files up to :data:`DIGEST_LIMIT`): the manifest's ``files``, written last."""
    import hashlib
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            rec: dict[str, Any] = {"bytes": p.stat().st_size}
            if rec["bytes"] <= DIGEST_LIMIT:
                rec["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
            out[p.relative_to(root).as_posix()] = rec
    return out
