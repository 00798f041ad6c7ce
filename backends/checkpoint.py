"""The compiled-chip directory: written safely, read back with clear errors.

A checkpoint directory holds exactly :data:`FILES`: ``config.json`` (a stock Qwen3.5 text
config), ``model.safetensors`` and ``chip.json`` (format :data:`FORMAT`, version
:data:`FORMAT_VERSION`; it also carries a copy of the config, so a mismatch is caught).

- :func:`prepare_output` takes the ``-o`` path and returns it as a Path once it is safe to
  write: absent, an empty directory, or a previous deltachip checkpoint (nothing else is ever
  replaced); else :class:`OutputDirError`. Call it before compiling, so bad paths fail fast.
- :func:`write_checkpoint` builds the directory in a temporary directory beside the target and
  renames it into place, so a failed or interrupted compile leaves what was there untouched.
- :func:`load_chip_json`, :func:`check_config` and :func:`check_weights_file` read a directory
  back and raise :class:`ChipDirError` (exit 2) for a missing directory or file, a corrupt or
  truncated one, an older format ("recompile") or a config.json that does not match.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from deltachip.errors import UserError
from deltachip.outputs import os_reason

FORMAT = "deltachip-chip"
FORMAT_VERSION = 2          # 2: enum fields in the circuit, the config copy, format_version
FILES = ("config.json", "model.safetensors", "chip.json")
RECOMPILE = "recompile it with `deltachip compile`"


class ChipDirError(UserError):
    """The directory is not a compiled chip this version can run."""


class OutputDirError(UserError):
    """The ``-o`` path cannot take a checkpoint without destroying something."""


def _read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; ChipDirError when it is missing, unreadable or not JSON."""
    if not path.is_file():
        raise ChipDirError(f"{path.parent}: not a compiled chip directory (no {what})")
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ChipDirError(f"{path}: cannot read: {os_reason(e)}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ChipDirError(f"{path}: corrupt (not valid JSON: {e}): {RECOMPILE}") from None


def _is_checkpoint(d: Path, entries: list[str]) -> bool:
    """Whether directory ``d`` (holding ``entries``) is a checkpoint deltachip wrote, of any
    format version, with nothing else in it."""
    if "chip.json" not in entries or not set(entries) <= set(FILES):
        return False
    try:
        chip = json.loads((d / "chip.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(chip, dict) and str(chip.get("format", "")).startswith(FORMAT)


def prepare_output(path: str | Path) -> Path:
    """``path`` if a checkpoint may be written there (see the module docstring); its parent
    directories are created. Raises OutputDirError naming the path and the reason."""
    p = Path(path)
    if p.is_symlink():
        raise OutputDirError(f"-o {p}: is a symbolic link; give the directory itself")
    if p.exists():
        if not p.is_dir():
            raise OutputDirError(f"-o {p}: exists and is not a directory (compile writes a "
                                 "directory: config.json, model.safetensors, chip.json); "
                                 "choose another path")
        try:
            entries = sorted(e.name for e in p.iterdir())
        except OSError as e:
            raise OutputDirError(f"-o {p}: cannot read the directory: {os_reason(e)}") from None
        if entries and not _is_checkpoint(p, entries):
            foreign = [e for e in entries if e not in FILES] or entries
            raise OutputDirError(f"-o {p}: directory is not empty and is not a deltachip "
                                 f"checkpoint (it holds '{foreign[0]}'); refusing to replace "
                                 "it: choose a new or empty directory")
    parent = p.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=f".{p.name}.", dir=parent))     # writable?
    except OSError as e:
        raise OutputDirError(f"-o {p}: cannot write in {parent}: {os_reason(e)}") from None
    return p


def write_checkpoint(out_dir: str | Path, config: dict[str, Any], sd: dict[str, torch.Tensor],
                     chip: dict[str, Any], dtype: torch.dtype) -> None:
    """Write config.json, model.safetensors (tensors cast to ``dtype``; ``sd`` is emptied as
    they are) and chip.json into ``out_dir``, all or nothing (see the module docstring)."""
    from safetensors.torch import save_file
    out = prepare_output(out_dir)
    parent = out.absolute().parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    old = None
    try:
        tensors = {k: v.to(dtype).contiguous() for k, v in sd.items()}
        sd.clear()
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "chip.json").write_text(json.dumps(chip) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)   # as mkdir and open would have made them, not
        for name in FILES:              # mkdtemp's 0700 and safetensors' 0600
            os.chmod(tmp / name, 0o666 & ~umask)
        if out.exists():        # empty, or a previous checkpoint (prepare_output said so)
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=parent))
            os.rename(out, old / out.name)
        os.rename(tmp, out)
    except BaseException:
        if old is not None and not out.exists():
            os.rename(old / out.name, out)      # put the previous checkpoint back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def load_chip_json(path: str | Path) -> dict[str, Any]:
    """chip.json of checkpoint ``path``, of the current format version, or ChipDirError."""
    p = Path(path)
    if not p.exists():
        raise ChipDirError(f"{p}: no such directory")
    if not p.is_dir():
        raise ChipDirError(f"{p}: not a directory (expected one written by `deltachip compile`)")
    cj = p / "chip.json"
    chip = _read_json(cj, "chip.json")
    fmt = chip.get("format") if isinstance(chip, dict) else None
    if not isinstance(fmt, str) or not fmt.startswith(FORMAT):
        raise ChipDirError(f"{cj}: not a deltachip chip file (format {fmt!r})")
    version = chip.get("format_version", 1 if fmt == f"{FORMAT}/1" else None)
    if version != FORMAT_VERSION:
        raise ChipDirError(f"{cj}: chip format version {version}, but this deltachip reads "
                           f"version {FORMAT_VERSION}: {RECOMPILE}")
    missing = [k for k in ("dtype", "target", "numerics", "tokens", "memories", "circuit",
                           "roms", "config") if k not in chip]
    if missing:
        raise ChipDirError(f"{cj}: corrupt (no '{missing[0]}'): {RECOMPILE}")
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
    """ChipDirError unless ``path``/model.safetensors is present and whole (its header parses
    and its tensors cover the file exactly)."""
    from safetensors import SafetensorError, safe_open
    f = Path(path) / "model.safetensors"
    if not f.is_file():
        raise ChipDirError(f"{path}: model.safetensors is missing: {RECOMPILE}")
    try:
        with safe_open(str(f), "pt"):
            pass
    except (SafetensorError, OSError) as e:
        raise ChipDirError(f"{f}: corrupt or truncated ({e}): {RECOMPILE}") from None
