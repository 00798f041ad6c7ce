"""The chip inside a merged checkpoint, as an engine.

Takes: a directory written by ``deltachip merge``. Gives: :func:`read_manifest` (either
layout), :func:`open_merged` (the hf engine of either layout), :class:`StockEngine` (the
stock layout's: plain transformers on the widened model, below) and, for the routed layout,
:class:`MergedEngine`, the :class:`backends.engines.base.ChipEngine` interface over the merged
model loaded the way its users load it (``AutoModelForCausalLM.from_pretrained(DIR,
trust_remote_code=True)``): every step is a call of the whole merged model with the chip's
ids (``chip_token_offset + id``) and a :class:`RoutedCache`, so the routing, the stored
tables and the chip's layers are what runs; the next token is the argmax of the logits,
which are ``-inf`` on the base's ids. Memory images come from the program being run
(``roms``), as with :class:`backends.engines.hf.HFEngine`; the chip's chip.json is the copy
the merge keeps in ``DIR/deltachip/chip.json``.

``deltachip run PROG.elf --engine hf --model DIR`` runs the core this way
(:class:`cpu.rv32.engines.MergedCore`).

:class:`StockEngine`: the merged checkpoint loaded the way its users load it, by plain
transformers (``AutoModelForCausalLM``, no remote code). Every step is a call of the whole
widened model, chip layers then base layers, with the chip's ids (``offset + id``); the
next token is the argmax over the whole vocabulary (a text id winning there is an error).
The cache starts the chip's layers as the hf engine starts a chip, with the run's memory
images (``roms``) in their GDN states, and leaves the base's layers fresh. Where the chip
sits is :func:`backends.chipdir.stock.stock_dims`.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from backends.chipdir.checkpoint import ChipDirError, load_chip_json
from backends.engines.base import ChipEngine
from backends.engines.hf import HFEngine, load_checked
from backends.chipdir.merged import (DTYPES, FORMAT, LAYOUTS, MANIFEST, MERGED_JSON_LIMITS,  # noqa: F401
                                     MODELING, DIGEST_LIMIT, FORMAT_VERSION, NotRegular,
                                     file_record, read_merged_json)
from backends.chipdir.stock import REMERGE, stock_dims


def load_error(d: Path, e: BaseException) -> ChipDirError:
    """What to say when transformers fails to load merged checkpoint ``d`` (its config, its
    modeling file, its weights or its tokenizer) with ``e``: the first line of the error,
    said of the file that failed where the traceback shows it (:func:`failed_file`)."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    what = f"{e.__class__.__name__}: {first}" if first else e.__class__.__name__
    culprit = failed_file(e)
    where = d / culprit if culprit else d
    return ChipDirError(f"{where}: transformers cannot load the merged checkpoint "
                        f"({what[:300]}): merge it again")


#: where in transformers (a part of its module's file name) a load failed -> the merged
#: checkpoint's file read there
_STAGES = (("dynamic_module_utils", MODELING), ("tokenization_", "tokenizer_config.json"),
           ("configuration_", "config.json"))


def failed_file(e: BaseException) -> str | None:
    """The merged checkpoint's file that ``e`` failed on, read from its traceback (the
    innermost frame that tells): the modeling file when its own code raised or would not
    compile, the tokenizer's config, the model's config; None when no frame tells."""
    if isinstance(e, SyntaxError):          # the only Python source a load compiles
        return MODELING
    for f in reversed(_frames(e)):
        if f.endswith(MODELING):
            return MODELING
        for part, name in _STAGES:
            if part in Path(f).name:
                return name
    return None


def _frames(e: BaseException) -> list[str]:
    """The file names of ``e``'s traceback, outermost first."""
    out, tb = [], e.__traceback__
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


class ChipIds:
    """The steps of an engine over a merged model, whose chip ids start at ``offset``: each
    call runs the whole merged model on the chip's ids shifted there, and the argmax is
    shifted back (:meth:`_chip_ids`)."""
    offset: int
    merged: Path

    def _chip_ids(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1) - self.offset

    @torch.no_grad()
    def decode_step(self, ids: Sequence[int], cache: Any) -> torch.Tensor:
        """One token per row through the merged model; the argmax ids [B] (chip ids)."""
        self.check_ids(ids)
        x = torch.tensor(list(ids), dtype=torch.long)[:, None] + self.offset
        return self._chip_ids(self.model(input_ids=x, cache=cache, use_cache=True
                                         ).logits[:, -1])

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, Any]:
        self.check_ids(ids)
        if self.byte_cells_inexact() and ids.shape[-1] > 1:
            raise ChipDirError(f"{self.merged}: this chip stores bytes in memory cells, which "
                               "fp32 chunked prefill does not read exactly: decode token by "
                               "token")
        cache = cache if cache is not None else self.new_cache(ids.shape[0])
        out = self.model(input_ids=ids + self.offset, cache=cache, use_cache=True)
        return self._chip_ids(out.logits), cache


class MergedEngine(ChipIds, ChipEngine):
    """A routed merged checkpoint's chip (see the module docstring)."""

    name = "hf"

    def __init__(self, path: str | Path, dtype: str | None = None,
                 roms: dict[str, list[int]] | None = None):
        take_merged(self, Path(path), dtype, roms)
        if self.manifest["layout"] != "routed":
            raise ChipDirError(f"{self.merged}: a {self.manifest['layout']} merge; "
                               "open_merged() gives its engine")
        check_files(self.merged, self.manifest)     # as the merge wrote them, before loading
        self.model = self._load_model()
        self.offset = int(self.model.config.chip_token_offset)
        self.config = self.model.chip.model.config

    def _load_model(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_pretrained(str(self.merged), dtype=self.dtype,
                                                             trust_remote_code=True)
        except (Exception, SystemExit) as e:    # the model's own code, run from its
            raise load_error(self.merged, e) from None  # folder: any error, even an exit
        return model.eval()

    def new_cache(self, batch: int = 1,
                  roms: Sequence[dict[str, list[int]]] | None = None) -> Any:
        """A routed cache whose chip part is started with the memory images preloaded: the
        engine's images in every row, or row b's own ``roms[b]``."""
        cache = self.model.new_cache(batch)
        chip = self.model.chip.new_cache(batch)
        rows = _rows(self.row_states(batch, roms))
        # the layers holding the merged images are the run's: its own images, or zero
        for li in sorted(set(self.model.chip.rom_layers) | set(rows)):
            rec = chip.layers[li].recurrent_states[0]
            rec.zero_()
            for b, vh, st in rows.get(li, []):
                rec[b, vh] = st
        cache.chip = chip
        return cache

    def recurrent_state(self, cache: Any, layer: int, row: int) -> torch.Tensor:
        return cache.chip.layers[layer].recurrent_states[0][row]

    def sublayer_taps(self, dims: Sequence[torch.Tensor]):
        """As the hf engine's, on the routed model's chip layers."""
        from backends.engines.hf import sublayer_taps
        return sublayer_taps(self.model.chip.model.layers, dims)


class StockEngine(ChipIds, HFEngine):
    """A stock merged checkpoint's chip in plain transformers (see the module docstring)."""

    name = "hf"

    def __init__(self, path: str | Path, dtype: str | None = None,
                 roms: dict[str, list[int]] | None = None, model: Any = None):
        """``model``: the merged checkpoint already loaded (in this engine's dtype), to share
        it; else it is loaded here."""
        take_merged(self, Path(path), dtype, roms)      # sets self.dims
        if model is None:
            check_files(self.merged, self.manifest)     # as the merge wrote them
        self.model = model if model is not None else load_checked(self.merged, self.dtype,
                                                                  REMERGE)
        self.config = self.model.config
        self.offset = self.dims.offset

    @property
    def chip_layers(self) -> int:
        return self.dims.layers

    def _chip_ids(self, logits: torch.Tensor) -> torch.Tensor:
        ids = logits.argmax(-1) - self.offset
        if bool((ids < 0).any()):
            raise ChipDirError(f"{self.merged}: a text id won on a chip position (the merge "
                               f"does not keep the chip exact): {REMERGE}")
        return ids

    def sublayer_taps(self, dims: Sequence[torch.Tensor]):
        """As the hf engine's, the chip's dims found at their place in the wide residual."""
        return super().sublayer_taps([d + self.dims.start for d in dims])



def is_merged(d: str | Path) -> bool:
    """True when directory ``d`` holds a merge manifest (it may still be refused: a
    ``deltachip.json`` that is not a regular file is one, and is refused by name)."""
    import os
    return os.path.lexists(Path(d) / MANIFEST)


def take_merged(eng: ChipEngine, d: Path, dtype: str | None,
                roms: dict[str, list[int]] | None) -> None:
    """Set up ``eng`` (any :class:`ChipEngine`) for the chip of the merged checkpoint ``d``
    (either layout): ``eng.merged``, ``eng.manifest``, and ChipEngine's reading of chip.json
    from the copy the merge keeps (``eng.path`` is ``d/deltachip``); ``d/config.json`` must
    agree with chip.json (routed: its ``chip_config``; stock: the widened model's shapes,
    :func:`backends.chipdir.stock.stock_dims`)."""
    eng.merged = d
    eng.manifest = read_manifest(d)
    eng.path = d / "deltachip"
    eng.chip = load_chip_json(eng.path)
    eng._take_chip(dtype or eng.manifest.get("dtype"), roms)
    if eng.manifest["layout"] == "stock":
        eng.dims = stock_dims(d, eng.manifest, eng.chip)
    else:
        check_chip_config(d, eng.chip, eng.manifest)


def open_merged(d: str | Path, dtype: str | None = None,
                roms: dict[str, list[int]] | None = None) -> ChipEngine:
    """The hf engine of merged checkpoint ``d``'s chip: :class:`MergedEngine` (routed) or
    :class:`StockEngine` (stock, plain transformers)."""
    if read_manifest(Path(d))["layout"] == "stock":
        return StockEngine(d, dtype, roms)
    return MergedEngine(d, dtype, roms)


def check_chip_config(d: Path, chip: dict[str, Any],
                      manifest: dict[str, Any] | None = None) -> dict[str, list[int]]:
    """ChipDirError unless ``d``/config.json's ``chip_config`` holds every setting of the
    chip's chip.json (and, given the routed merge's ``manifest``, unless the fields the
    modeling file reads agree with it: :func:`check_routed_fields`); gives its
    ``chip_sparse`` (the weights stored as their nonzeros: name -> [out, in, nonzeros])."""
    f = d / "config.json"
    from common.inputs import InputTooLarge
    from common.outputs import os_reason
    try:
        whole = read_merged_json(f)
        cfg, sparse = whole.get("chip_config"), whole.get("chip_sparse") or {}
    except InputTooLarge as e:
        raise ChipDirError(f"{e}: merge it again") from None
    except OSError as e:
        raise ChipDirError(f"{f}: cannot read: {os_reason(e)}: merge it again") from None
    except (ValueError, AttributeError):
        raise ChipDirError(f"{f}: unreadable or not a JSON object: merge it again") from None
    if not (isinstance(sparse, dict) and all(
            isinstance(v, list) and len(v) == 3 and all(type(x) is int and x >= 0 for x in v)
            for v in sparse.values())):
        raise ChipDirError(f"{f}: chip_sparse is not a map of weight names to [out, in, "
                           f"nonzeros]: merge it again")
    for key, want in chip["config"].items():
        got = cfg.get(key, "missing") if isinstance(cfg, dict) else "missing"
        if got != want:
            raise ChipDirError(f"{f} does not match deltachip/chip.json: chip_config.{key} is "
                               f"{got if got == 'missing' else repr(got)}, chip.json says "
                               f"{want!r}: merge it again")
    if manifest is not None:
        check_routed_fields(f, whole, manifest)
    return sparse


def check_routed_fields(f: Path, cfg: dict[str, Any], manifest: dict[str, Any]) -> None:
    """ChipDirError unless the routed merged config ``cfg`` (of file ``f``) agrees with the
    merge's manifest on what the modeling file reads before anything else: the chip's id
    range (``chip_token_offset``, ``chip_vocab_size``, ``vocab_size``), the base's config
    (its sha256), how the tables are stored, the memory-image layers, the number of
    programs and the bridge. A config edited past its digest is named here, never met as a
    traceback in the model."""
    import hashlib
    tokens = manifest.get("tokens") if isinstance(manifest.get("tokens"), dict) else {}
    chip = manifest.get("chip") if isinstance(manifest.get("chip"), dict) else {}
    base = manifest.get("base") if isinstance(manifest.get("base"), dict) else {}
    offset, count = tokens.get("offset"), tokens.get("count")
    if not all(type(v) is int and v > 0 for v in (offset, count)):
        raise ChipDirError(f"{f.parent / MANIFEST}: its token range (tokens.offset, "
                           f"tokens.count) is missing or malformed: merge it again")

    def bad(field: str, want: str) -> ChipDirError:
        got = json.dumps(cfg.get(field, "missing"))
        return ChipDirError(f"{f}: {field} is {got[:80]}, but {want}: merge it again")
    from backends.chipdir.merged import AUTO_MAP, MODEL_TYPE, STOCK_GUARD
    if cfg.get("model_type") != MODEL_TYPE:
        raise bad("model_type", f"a routed merge's is {MODEL_TYPE!r}")
    if cfg.get("hidden_act") != STOCK_GUARD:
        raise bad("hidden_act", "a routed merge's stops a plain model from loading it")
    if cfg.get("auto_map") != AUTO_MAP:
        raise bad("auto_map", f"a routed merge's names {MODELING}'s classes")
    want = {"chip_token_offset": offset, "chip_vocab_size": count, "vocab_size": offset + count}
    for field, value in want.items():
        if type(cfg.get(field)) is not int or cfg[field] != value:
            raise bad(field, f"the merge wrote {value:,} ({MANIFEST}: tokens)")
    b = cfg.get("base_config")
    digest = base.get("config_sha256")
    if not isinstance(b, dict) or (digest is not None and hashlib.sha256(json.dumps(
            b, sort_keys=True).encode()).hexdigest() != digest):
        raise ChipDirError(f"{f}: base_config is not the base's config the merge recorded "
                           f"({MANIFEST}: base.config_sha256): merge it again")
    form = (chip.get("tables") or {}).get("form", "plain") \
        if isinstance(chip.get("tables"), dict) else "plain"
    if cfg.get("chip_tables", "plain") != form:
        raise bad("chip_tables", f"the merge stored the tables {form} ({MANIFEST}: "
                                 "chip.tables.form)")
    if form == "structured" and not (isinstance(cfg.get("chip_tables_shape"), dict) and all(
            type(cfg["chip_tables_shape"].get(k)) is int and cfg["chip_tables_shape"][k] > 0
            for k in ("embed_cols", "embed_palette", "head_kinds", "head_rows"))):
        raise bad("chip_tables_shape", "structured tables need their four sizes")
    layers = cfg.get("chip_rom_layers")
    if layers is not None and not (isinstance(layers, list) and all(
            type(x) is int and x >= 0 for x in layers)):
        raise bad("chip_rom_layers", "it lists layer numbers")
    if cfg.get("chip_bridge") is not None and not isinstance(cfg["chip_bridge"], dict):
        raise bad("chip_bridge", "it is the tool-call bridge's object or null")
    progs = manifest.get("programs")
    n = 1 + (len(progs) if isinstance(progs, list) else 0)
    if type(cfg.get("chip_programs", 1)) is not int or cfg.get("chip_programs", 1) != n:
        raise bad("chip_programs", f"the merge wrote {n} program{'s' if n > 1 else ''} "
                                   f"({MANIFEST}: the firmware and its programs)")
    bridge = manifest.get("bridge")
    has = isinstance(bridge, dict) and bool(bridge.get("tool_calls"))
    if bool(cfg.get("chip_bridge")) != has:
        raise bad("chip_bridge", f"the merge wrote {'one' if has else 'none'} ({MANIFEST}: "
                                 "bridge.tool_calls)")


def _rows(rows: list[dict[int, dict[int, torch.Tensor]]]
          ) -> dict[int, list[tuple[int, int, torch.Tensor]]]:
    """layer -> [(row, value head, state)] of per-row preloaded states."""
    out: dict[int, list[tuple[int, int, torch.Tensor]]] = {}
    for b, states in enumerate(rows):
        for li, heads in states.items():
            out.setdefault(li, []).extend((b, vh, st) for vh, st in heads.items())
    return out


def read_manifest(d: Path, option: str = "--model") -> dict[str, Any]:
    """The manifest of merged checkpoint ``d`` (ChipDirError when ``d`` is not one, naming
    it as the command's ``option`` gave it: ``--model DIR``, or ``""`` for a positional
    MODEL_DIR)."""
    f = d / MANIFEST
    where = f"{option} {d}" if option else str(d)
    if not d.is_dir():
        raise ChipDirError(f"{where}: "
                           f"{'no such directory' if not d.exists() else 'not a directory'}")
    from common.inputs import InputTooLarge
    try:
        m = read_merged_json(f)
    except InputTooLarge as e:
        raise ChipDirError(f"{where}: {e}: merge it again") from None
    except NotRegular as e:
        raise ChipDirError(f"{where}: {MANIFEST} {e.strerror}: merge it again") from None
    except (OSError, ValueError):
        raise ChipDirError(f"{where}: not a checkpoint written by `deltachip merge` (no "
                           f"readable {MANIFEST})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ChipDirError(f"{where}: {MANIFEST} is not a deltachip merge manifest")
    version = m.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION or type(version) is not int:
        raise ChipDirError(f"{where}: {MANIFEST}: format version {json.dumps(version)[:40]}; "
                           f"this deltachip reads version {FORMAT_VERSION} (merge it again with "
                           f"this deltachip)")
    if m.get("layout") not in LAYOUTS:
        raise ChipDirError(f"{where}: layout {m.get('layout')!r}; expected one of "
                           f"{', '.join(LAYOUTS)}: merge it again")
    for key in ("chip", "tokens", "base", "firmware", "bridge"):
        if not isinstance(m.get(key), dict) and (key in ("chip", "tokens", "base")
                                                 or m.get(key) is not None):
            raise ChipDirError(f"{where}: {MANIFEST}: its {key} section is "
                               f"{'missing' if key not in m else 'not an object'}: merge it "
                               f"again")
    if m.get("dtype") not in DTYPES:
        raise ChipDirError(f"{where}: {MANIFEST}: dtype {json.dumps(m.get('dtype'))[:40]}; "
                           f"expected one of {', '.join(DTYPES)}: merge it again")
    return m




#: the files of a merged checkpoint the fast engine reads (beside the chip's shards): the
#: ones whose digests ``run --model --engine fast`` checks
FAST_READS = frozenset({MANIFEST, "config.json", "deltachip/chip.json",
                        "model.safetensors.index.json"})


#: the circuit name of the RISC-V core (cpu/rv32/core.hdl), as a merge manifest records it
CORE_CIRCUIT = "Rv32"


def core_manifest(d: Path) -> dict[str, Any]:
    """The manifest of merged checkpoint ``d`` for ``run --model``: its chip must be the
    RISC-V core (a merge of ``--firmware``), else ChipDirError saying so; its files are
    checked too, whichever engine runs it (:func:`check_files` with :data:`FAST_READS`:
    every file by kind and size, the sha256 of those the fast engine reads; the hf engine
    hashes the rest itself when it loads)."""
    manifest = read_manifest(d)
    chip = manifest.get("chip")
    name = chip.get("name") if isinstance(chip, dict) else None
    if name != CORE_CIRCUIT:
        raise ChipDirError(f"{d}: its chip is {name if isinstance(name, str) else '?'}, not "
                           f"the RISC-V core (cpu/rv32): --model takes a model merged with "
                           f"`deltachip merge BASE_DIR OUT_DIR --firmware PROG`")
    check_files(d, manifest, FAST_READS)
    return manifest


def check_files(d: Path, manifest: dict[str, Any],
                digests: frozenset[str] | None = None) -> None:
    """ChipDirError naming the first file of merged checkpoint ``d`` that is missing, not a
    regular file, of another size or another digest than the manifest's file record says,
    or a weight shard whose header breaks safetensors' rules (before transformers reads any
    of them: a damaged modeling file, config, tokenizer or shard is named, not met as a
    traceback). ``digests``: the files whose sha256 is checked (default: every recorded
    one); the others are checked by kind and size (what a reader that never opens them
    needs: the fast engine's :data:`FAST_READS`). A manifest without a record (an older
    merge) passes."""
    import hashlib
    import stat
    files = manifest.get("files")
    if files is None:
        return
    if not isinstance(files, dict):
        raise ChipDirError(f"{d}: {MANIFEST}: its file record (files) is not an object of "
                           f"file names: merge it again")
    for rel, rec in files.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ChipDirError(f"{d}: {MANIFEST}: its file record names {rel!r}, outside the "
                               f"model's folder: merge it again")
        p = d / rel
        try:
            st = p.stat()
        except OSError as e:
            raise ChipDirError(f"{d}: {rel}: {e.strerror.lower() if e.strerror else e}: "
                               "merge it again") from None
        if not stat.S_ISREG(st.st_mode):
            raise ChipDirError(f"{d}: {rel} is not a regular file: merge it again")
        if not isinstance(rec, dict) or st.st_size != rec.get("bytes"):
            raise ChipDirError(f"{d}: {rel} has {st.st_size:,} bytes, the merge wrote "
                               f"{rec.get('bytes') if isinstance(rec, dict) else '?'}: "
                               "merge it again")
        if rel.endswith(".safetensors"):    # recorded by size only: its header read too
            from backends.chipdir.stfile import read_header
            read_header(p, lambda m: ChipDirError(f"{m}: merge it again"))
        want = rec.get("sha256")
        if want is not None and (digests is None or rel in digests):
            with open(p, "rb") as f:
                got = hashlib.sha256(f.read(DIGEST_LIMIT + 1)).hexdigest()
            if got != want:
                raise ChipDirError(f"{d}: {rel} is not the file the merge wrote (its sha256 "
                                   "differs): merge it again")
