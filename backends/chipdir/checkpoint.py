"""The compiled-chip directory: written safely, read back with clear errors.

A checkpoint directory holds ``config.json`` (a stock Qwen3.5 text config), ``chip.json``
(format :data:`FORMAT`, version :data:`FORMAT_VERSION`; it also carries a copy of the config,
so a mismatch is caught) and the weights in one of Hugging Face's two layouts:
``model.safetensors`` (chips under :data:`SINGLE_FILE_LIMIT` bytes), or one
``model-0000i-of-0000N.safetensors`` shard per :class:`WeightGroup` (the embedding, each
decoder layer, the head) plus ``model.safetensors.index.json`` (``{"metadata":
{"total_size": bytes}, "weight_map": {tensor: shard}}``). ``from_pretrained`` loads either.
``manifest.json`` records the size and sha256 digest of every other file
(:mod:`backends.chipdir.manifest`); a core cache entry may also hold ``verified.json``, the stamp
of its last check.

- :func:`prepare_output` takes the ``-o`` path and returns it as a Path once it is safe to
  write: absent, an empty directory, or a previous deltachip checkpoint (nothing else is ever
  replaced); else :class:`OutputDirError`. Call it before compiling, so bad paths fail fast.
- :func:`write_checkpoint` builds the directory in a temporary directory beside the target
  (named by :func:`common.outputs.temp_name_prefix`, so a killed compile's leftovers are
  swept by the next one), one group's tensors in memory at a time, and renames it into
  place, so a failed or interrupted compile leaves what was there untouched; a full disk or
  another OS error is an OutputDirError naming the path and the reason. The manifest is
  written last, from the files read back.
- :func:`load_chip_json`, :func:`check_config` and :func:`check_weights_file` read a directory
  back and raise :class:`ChipDirError` (exit 2) for a missing directory or file (a shard
  included), a corrupt or truncated one, a chip.json that breaks the schema
  (:mod:`backends.chipdir.chipschema`, naming the field), an older format ("recompile") or a
  config.json that does not match; :func:`check_digests` raises it for a file that differs
  from the manifest (a directory without one, written before deltachip wrote them, is not
  checked).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from backends.chipdir import manifest
from backends.chipdir.chipschema import SchemaError, check_chip
from backends.chipdir.target import json_kind
from common.errors import UserError
from common.inputs import BadJSON, InputTooLarge, loads_json, read_bounded
from common.outputs import (building_dir, disk_shortfall, os_reason, prepare_dir_output,
                            special_kind)

if TYPE_CHECKING:       # reading a checkpoint needs no torch; writing one is given tensors
    import torch

FORMAT = "deltachip-chip"
FORMAT_VERSION = 2          # 2: enum fields in the circuit, the config copy, format_version
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
FILES = ("config.json", SINGLE, "chip.json")        # the single-file layout
SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
SINGLE_FILE_LIMIT = 1 << 30     # bytes of weights up to which one model.safetensors is written
RECOMPILE = "recompile it with `deltachip compile`"
#: the most bytes read of each JSON file of a checkpoint, and why
JSON_LIMITS = {
    "chip.json": (256 << 20, "a chip.json (the RISC-V core's, with its circuit, trace and "
                             "ROM images, is 5 MB)"),
    "config.json": (1 << 20, "a config.json (one is about 1 KB)"),
    INDEX: (64 << 20, "a weight index (one line per tensor)"),
}


def shard_name(i: int, n: int) -> str:
    """The Hugging Face name of shard ``i`` (0-based) of ``n``."""
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def weights_file(path: str | Path) -> Path:
    """The file that names a checkpoint's weights: ``model.safetensors`` if present (as
    transformers prefers it), else ``model.safetensors.index.json`` if present, else the
    (missing) ``model.safetensors``."""
    d = Path(path)
    return d / INDEX if not (d / SINGLE).is_file() and (d / INDEX).is_file() else d / SINGLE


@dataclass(frozen=True)
class WeightGroup:
    """One unit of the weights: ``make()`` builds its tensors (called once, when it is
    written); ``nbytes`` is their total size, known in advance."""
    name: str
    nbytes: int
    make: Callable[[], dict[str, torch.Tensor]]


class ChipDirError(UserError):
    """The directory is not a compiled chip this version can run. ``damage``: whether what
    the directory holds is at fault (True), or it is whole and the engine cannot run it
    (False: :class:`backends.engines.fast.model.FastRefused`), so rewriting it would not help."""
    damage = True


class OutputDirError(UserError):
    """The ``-o`` path cannot take a checkpoint without destroying something: ``-o PATH:
    REASON`` (``path`` and ``reason`` are kept, for callers that word it their own way)."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"-o {path}: {reason}")


def _read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; ChipDirError when it is missing, unreadable or not JSON."""
    if not path.is_file():
        kind = special_kind(path, follow_symlinks=True)
        if kind is not None:
            raise ChipDirError(f"{path}: is {kind}, not a regular file: {RECOMPILE}")
        raise ChipDirError(f"{path.parent}: not a compiled chip directory (no {what})")
    try:
        return loads_json(read_bounded(path, *JSON_LIMITS[path.name]))
    except OSError as e:
        raise ChipDirError(f"{path}: cannot read: {os_reason(e)}") from None
    except InputTooLarge as e:
        raise ChipDirError(f"{e}: {RECOMPILE}") from None
    except BadJSON as e:
        raise ChipDirError(f"{path}: corrupt (JSON {e}): {RECOMPILE}") from None
    except ValueError as e:
        raise ChipDirError(f"{path}: corrupt (not valid JSON: {e}): {RECOMPILE}") from None


def _ours(name: str) -> bool:
    """Whether ``name`` is a file a checkpoint directory may hold (either layout)."""
    return (name in FILES or name in (INDEX, manifest.MANIFEST, manifest.STAMP)
            or SHARD_RE.fullmatch(name) is not None)


def _is_checkpoint(d: Path, entries: list[str]) -> bool:
    """Whether directory ``d`` (holding ``entries``) is a checkpoint deltachip wrote, of any
    format version, with nothing else in it."""
    if "chip.json" not in entries or not all(map(_ours, entries)):
        return False
    try:
        chip = loads_json(read_bounded(d / "chip.json", *JSON_LIMITS["chip.json"]))
    except (OSError, ValueError, InputTooLarge):
        return False
    return isinstance(chip, dict) and str(chip.get("format", "")).startswith(FORMAT)


def prepare_output(path: str | Path) -> Path:
    """``path`` if a checkpoint may be written there (see the module docstring); its parent
    directories are created. Raises OutputDirError naming the path and the reason."""
    return prepare_dir_output(path, OutputDirError, "checkpoint", _is_checkpoint, _ours,
                              " (compile writes a directory: config.json, model.safetensors, "
                              "chip.json)")


def write_checkpoint(out_dir: str | Path, config: dict[str, Any], groups: Sequence[WeightGroup],
                     chip: Callable[[], dict[str, Any]],
                     single_file_limit: int = SINGLE_FILE_LIMIT) -> list[str]:
    """Write config.json, the weights of ``groups`` and chip.json into ``out_dir``, all or
    nothing (see the module docstring), and return the weight files' names.

    Up to ``single_file_limit`` bytes in all, every group goes into one model.safetensors;
    beyond, group i becomes shard i, each built by its ``make()``, saved and freed before
    the next, then the index is written. ``chip()`` is called after the last group (so it
    may use what ``make()`` gathered, e.g. nonzero counts). Tensors must already be in the
    checkpoint's dtype. A disk without room for the groups' bytes is an OutputDirError
    before any group is made."""
    from safetensors.torch import save_file
    out = prepare_output(out_dir)
    total = sum(g.nbytes for g in groups)
    short = disk_shortfall(out, total)
    if short is not None:       # before any weight is built: a big chip takes minutes
        raise OutputDirError(out, f"the checkpoint ({total:,} bytes of weights) {short} "
                                  "(nothing was written)")
    with building_dir(out, OutputDirError, "cannot write the checkpoint") as tmp:
        if total <= single_file_limit:
            tensors: dict[str, torch.Tensor] = {}
            for g in groups:
                tensors.update(g.make())
            save_file(_contiguous(tensors), str(tmp / SINGLE), metadata={"format": "pt"})
            del tensors
            names = [SINGLE]
        else:
            names = [shard_name(i, len(groups)) for i in range(len(groups))]
            weight_map: dict[str, str] = {}
            size = 0
            for g, name in zip(groups, names):
                tensors = _contiguous(g.make())
                save_file(tensors, str(tmp / name), metadata={"format": "pt"})
                weight_map.update(dict.fromkeys(tensors, name))
                size += sum(t.numel() * t.element_size() for t in tensors.values())
                del tensors
            index = {"metadata": {"total_size": size}, "weight_map": weight_map}
            (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "chip.json").write_text(json.dumps(chip()) + "\n")
        manifest.write(tmp, [f.name for f in tmp.iterdir()])     # last: what is on the disk
    return names


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` with each one contiguous (what save_file needs; a no-op for most)."""
    return {k: v.contiguous() for k, v in tensors.items()}


def load_chip_json(path: str | Path) -> dict[str, Any]:
    """chip.json of checkpoint ``path``, of the current format version, or ChipDirError."""
    p = Path(path)
    if not p.exists():
        raise ChipDirError(f"{p}: no such directory")
    if not p.is_dir():
        raise ChipDirError(f"{p}: not a directory (expected one written by `deltachip compile`)")
    cj = p / "chip.json"
    chip = _read_json(cj, "chip.json")
    if not isinstance(chip, dict):
        raise ChipDirError(f"{cj}: not a deltachip chip file (the JSON is not an object)")
    fmt = chip.get("format")
    if not isinstance(fmt, str) or not fmt.startswith(FORMAT):
        raise ChipDirError(f"{cj}: not a deltachip chip file (format {fmt!r})")
    version = chip.get("format_version", 1 if fmt == f"{FORMAT}/1" else None)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ChipDirError(f"{cj}: corrupt (field 'format_version' must be an integer, got "
                           f"{json.dumps(version)}): {RECOMPILE}")
    if version != FORMAT_VERSION:
        raise ChipDirError(f"{cj}: chip format version {version}, but this deltachip reads "
                           f"version {FORMAT_VERSION}: {RECOMPILE}")
    try:
        check_chip(chip)
    except SchemaError as e:
        raise ChipDirError(f"{cj}: corrupt ({e}): {RECOMPILE}") from None
    return chip


def check_config(path: str | Path, chip: dict[str, Any]) -> None:
    """ChipDirError unless ``path``/config.json holds every setting chip.json was built with."""
    cf = Path(path) / "config.json"
    cfg = _read_json(cf, "config.json")
    if not isinstance(cfg, dict):
        raise ChipDirError(f"{cf}: corrupt (not a JSON object): {RECOMPILE}")
    for key, want in chip["config"].items():
        if cfg.get(key) != want:
            got = "missing" if key not in cfg else f"{cfg[key]!r}"
            raise ChipDirError(f"{cf} does not match chip.json: {key} is {got}, chip.json says "
                               f"{want!r}: {RECOMPILE}")


def check_weights_file(path: str | Path) -> None:
    """ChipDirError unless the weights of checkpoint ``path`` are present and whole: one
    model.safetensors, or an index whose every shard is present, parses, and holds the
    tensors the index assigns to it. (Whether they fit config.json is checked on loading.)"""
    from safetensors import SafetensorError, safe_open
    d = Path(path)
    f = weights_file(d)
    if not f.is_file():
        kind = special_kind(f, follow_symlinks=True)
        if kind is not None:
            raise ChipDirError(f"{f}: is {kind}, not a regular file: {RECOMPILE}")
        if any(SHARD_RE.fullmatch(e.name) for e in d.iterdir()):
            raise ChipDirError(f"{path}: {INDEX} is missing (the shards are there): {RECOMPILE}")
        raise ChipDirError(f"{path}: model.safetensors is missing: {RECOMPILE}")
    if f.name == SINGLE:
        shards: dict[str, set[str]] = {SINGLE: set()}
    else:
        index = _read_json(f, INDEX)
        wmap = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wmap, dict) or not wmap or not all(
                isinstance(v, str) and SHARD_RE.fullmatch(v) for v in wmap.values()):
            raise ChipDirError(f"{f}: corrupt (no weight_map of tensor names to shard files): "
                               f"{RECOMPILE}")
        meta = index.get("metadata")
        if not isinstance(meta, dict):      # transformers indexes it as an object
            got = "missing" if "metadata" not in index else json_kind(meta)
            raise ChipDirError(f"{f}: corrupt (field 'metadata' must be an object, got {got}): "
                               f"{RECOMPILE}")
        shards = {}
        for tensor, shard in wmap.items():
            shards.setdefault(shard, set()).add(tensor)
        for shard in sorted(shards):
            if not (d / shard).is_file():
                kind = special_kind(d / shard, follow_symlinks=True)
                raise ChipDirError(f"{path}: shard {shard} "
                                   f"{f'is {kind}, not a regular file' if kind else 'is missing'}"
                                   f" ({INDEX} names it): {RECOMPILE}")
    for shard, want in sorted(shards.items()):
        sf = d / shard
        try:
            with open(sf, "rb"):        # the OS's reason first: safetensors says "No such
                pass                    # file or directory" for a file it may not read
        except OSError as e:
            raise ChipDirError(f"{sf}: cannot read: {os_reason(e)}") from None
        try:
            with safe_open(str(sf), "numpy") as fh:     # the header alone: no torch
                have = set(fh.keys())
        except (SafetensorError, OSError) as e:
            raise ChipDirError(f"{sf}: corrupt or truncated ({e}): {RECOMPILE}") from None
        except MemoryError:         # safetensors maps the whole file: a grown one may not fit
            raise ChipDirError(f"{sf}: corrupt or grown (its {sf.stat().st_size:,} bytes "
                               f"cannot be mapped into memory): {RECOMPILE}") from None
        lost = sorted(want - have)
        if lost:
            raise ChipDirError(f"{sf}: has no tensor {lost[0]} ({INDEX} puts it there): "
                               f"{RECOMPILE}")



def check_digests(path: str | Path) -> None:
    """ChipDirError when checkpoint ``path`` has a manifest.json and a file it lists is
    missing or differs from it in size or digest (:func:`backends.chipdir.manifest.problem`, which
    reads a file again only when its stamp, if any, no longer matches); nothing is checked
    in a directory without a manifest."""
    d = Path(path)
    if not os.path.lexists(d / manifest.MANIFEST):
        return
    why = manifest.problem(d)
    if why is not None:
        raise ChipDirError(f"{d}: {why}: {RECOMPILE}")
