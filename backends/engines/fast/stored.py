"""The fast engine's model in its stored sparse form: made once per checkpoint, then
memory-mapped at every load.

Takes: a checkpoint directory (what ``deltachip compile`` or the core cache writes, with its
``manifest.json``), the dtype and its chip.json. Gives: :func:`load`, the checkpoint's
:class:`backends.engines.fast.model.FastModel`, equal array for array to what
:func:`backends.engines.fast.model.load` makes from the safetensors: that load (seconds for the
RISC-V core: every weight read, made sparse and verified) is done once, and its arrays are
written as one safetensors file that later loads map without reading (a few hundredths of
a second from the page cache).

Where: a checkpoint in the core cache (``$DELTACHIP_CACHE/cores/ENTRY``) keeps its sparse
form beside its weights, in ``ENTRY/fast/`` (removed with the entry); any other checkpoint's
goes to ``$DELTACHIP_CACHE/fast/KEY/``, never into the user's directory. ``KEY`` is a
digest of the checkpoint's manifest.json: of the size and sha256 of each of its files,
which the engine has checked the files against before it gets here
(:func:`backends.chipdir.checkpoint.check_digests`, the core cache's own check).

What it holds: ``model.safetensors`` (every array of the model, named ``layers.3.ip.ptr``,
``embed.0``, …; the scalars, the layers' kinds and the arrays' places as JSON in its
``__metadata__``, with the format, the checkpoint's key and a digest of the code that makes
the model, :data:`SOURCES`) and a ``manifest.json`` of its size and sha256
(:mod:`backends.chipdir.manifest`, stamped once hashed, so a load hashes it again only when the
file changed). Checked at every load, in this order: the manifest (size, and the digest
unless the stamp still matches), the safetensors header (safetensors' own rules: a
truncated file or one with bytes past its data is refused), the format, the key and the
code's digest (else it is stale: made for another checkpoint or by another version of the
engine), and every array it should hold there with its dtype, rank and alignment. One that
fails is rebuilt from the checkpoint, with a line on stderr naming it and why; never used.
The structural checks of :func:`backends.engines.fast.model.load` run when it is made, not again.

Written to a temporary directory beside its place, renamed into place once whole
(:func:`common.outputs.building_dir`); a process killed while writing leaves a temporary
the next write sweeps. Where it cannot be written (no manifest to key it, a full disk, a
folder deltachip may not write in) the model is loaded from the checkpoint as before, the
reason said once on stderr. Checkpoints of less than :data:`STORE_FROM` bytes of weights
(they load in well under a second) and merged checkpoints are always loaded from their
files.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from backends.chipdir import manifest
from backends.chipdir.checkpoint import ChipDirError
from backends.engines.fast import model as fmodel
from backends.engines.fast.model import Csc, FastModel, Layer
from backends.chipdir import weights as fweights
from backends.chipdir.weights import Tensors
from common.errors import UserError

#: the format named in the stored form's metadata, and its version
FORMAT, VERSION = "deltachip-fast-model", "1"
#: the stored form's files (the arrays; their manifest)
WEIGHTS = "model.safetensors"
#: the folder of a core cache entry that holds its sparse form
BESIDE = "fast"
#: the cache (under ``$DELTACHIP_CACHE``) of the sparse forms of other checkpoints
CACHE = "fast"
#: the code that makes the model: a stored form made by other code is stale
SOURCES = (Path(__file__).with_name("model.py"), Path(fweights.__file__), Path(__file__))
#: checkpoints with fewer bytes in their files than this load from them (fast enough)
STORE_FROM = 64 << 20
#: FastModel fields not stored: the checkpoint's path and chip.json (the engine has both)
_GIVEN = ("path", "chip", "layers")


class StoredError(UserError):
    """The sparse form cannot be written (the message names it and why)."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def source_digest() -> str:
    """A digest of :data:`SOURCES` (what a stored form must have been made by)."""
    h = hashlib.sha256()
    for f in SOURCES:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def checkpoint_key(path: Path) -> tuple[str, int] | None:
    """(a digest of ``path``'s manifest.json, the bytes of the files it lists), or None
    when there is none (or it cannot be read as a manifest)."""
    from common.inputs import InputTooLarge, read_bounded
    try:
        raw = read_bounded(path / manifest.MANIFEST, *manifest.LIMIT)
        files = json.loads(raw)["files"]
        size = sum(int(f["size"]) for f in files.values())
    except (OSError, InputTooLarge, ValueError, KeyError, TypeError, AttributeError,
            RecursionError):
        return None
    return hashlib.sha256(raw).hexdigest(), size


def place(path: Path, key: str) -> Path:
    """Where the sparse form of checkpoint ``path`` (keyed ``key``) lives: beside its
    weights for a core cache entry, else in the cache (:func:`common.cachedir.cache_dir`:
    CacheDirError when it cannot be used)."""
    from common.cachedir import cache_dir, cache_root
    cores = cache_root() / "cores"
    try:
        in_cache = path.resolve().parent == cores.resolve()
    except OSError:
        in_cache = False
    if in_cache:
        return path / BESIDE
    return cache_dir(CACHE) / key[:32]


# ---- the model as named arrays and JSON ------------------------------------------------------

def _flatten(obj: Any, prefix: str, arrays: dict[str, np.ndarray], skip: tuple[str, ...] = ()
             ) -> dict[str, Any]:
    """The fields of dataclass ``obj`` as JSON (``{"value": v}`` for a scalar or None;
    ``{"array": 1}``, ``{"csc": 1}`` or ``{"tuple": n}`` for what goes to ``arrays`` under
    ``prefix + field``)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in skip:
            continue
        v, name = getattr(obj, f.name), prefix + f.name
        if isinstance(v, np.ndarray):
            arrays[name] = v
            out[f.name] = {"array": 1}
        elif isinstance(v, Csc):
            arrays.update({f"{name}.ptr": v.ptr, f"{name}.idx": v.idx, f"{name}.val": v.val})
            out[f.name] = {"csc": 1}
        elif isinstance(v, tuple):
            arrays.update({f"{name}.{i}": a for i, a in enumerate(v)})
            out[f.name] = {"tuple": len(v)}
        else:
            out[f.name] = {"value": v.item() if isinstance(v, np.generic) else v}
    return out


def flatten(m: FastModel) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``m``'s arrays by name and the JSON that places them (see the module docstring)."""
    arrays: dict[str, np.ndarray] = {}
    meta = _flatten(m, "", arrays, _GIVEN)
    meta["layers"] = [_flatten(ly, f"layers.{i}.", arrays) for i, ly in enumerate(m.layers)]
    return {k: np.ascontiguousarray(a) for k, a in arrays.items()}, meta


class _Damaged(Exception):
    """A stored form that does not hold what its metadata says (the message says what)."""


def _unflatten(cls: type, fields: dict[str, Any], prefix: str, t: Tensors,
               expect: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """The keyword arguments of ``cls`` but :data:`_GIVEN` from ``fields`` (see
    :func:`_flatten`): every one, the arrays memory-mapped from ``t`` and checked against
    ``expect`` (name -> dtype, rank)."""
    def get(name: str) -> np.ndarray:
        if name not in expect:
            raise _Damaged(f"it names an array {name} no model has")
        if name not in t:
            raise _Damaged(f"it lacks the array {name}")
        words, dtype = t.raw(name)
        a = np.asarray(words)
        want_dtype, want_rank = expect.pop(name)
        if dtype != want_dtype or a.ndim != want_rank:
            raise _Damaged(f"{name} is {dtype} of rank {a.ndim}, not {want_dtype} of rank "
                           f"{want_rank}")
        if a.size and a.ctypes.data % a.itemsize:
            raise _Damaged(f"{name} is not aligned to its {a.itemsize}-byte words")
        return a

    names = {f.name for f in dataclasses.fields(cls)} - set(_GIVEN)
    if not isinstance(fields, dict) or set(fields) != names:
        raise _Damaged(f"its metadata does not name the fields of {cls.__name__}")
    out: dict[str, Any] = {}
    for k, d in fields.items():
        name = prefix + k
        if not isinstance(d, dict):
            raise _Damaged(f"its metadata for {name} is not an object")
        if "value" in d:
            out[k] = d["value"]
        elif "array" in d:
            out[k] = get(name)
        elif "csc" in d:
            out[k] = Csc(get(f"{name}.ptr"), get(f"{name}.idx"), get(f"{name}.val"))
        elif isinstance(d.get("tuple"), int):
            out[k] = tuple(get(f"{name}.{i}") for i in range(d["tuple"]))
        else:
            raise _Damaged(f"its metadata for {name} is not one this engine writes")
    return out


_KINDS = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.int32): "I32",
          np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8"}


def first_difference(a: Any, b: Any, name: str = "model") -> str | None:
    """Where two models (or parts: dataclasses, tuples, lists, arrays, scalars) differ, in
    words, or None when they are the same: every array of the same dtype, shape and bytes
    (bit for bit: -0.0 is not 0.0), every other value equal."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return f"{name}: an array and {type(b if isinstance(a, np.ndarray) else a).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{name}: {a.dtype} {a.shape} and {b.dtype} {b.shape}"
        if np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            return f"{name}: the values differ"
        return None
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        for f in dataclasses.fields(a):
            why = first_difference(getattr(a, f.name), getattr(b, f.name), f"{name}.{f.name}")
            if why:
                return why
        return None
    if isinstance(a, (tuple, list)) and type(a) is type(b):
        if len(a) != len(b):
            return f"{name}: {len(a)} and {len(b)} items"
        return next((w for i, (x, y) in enumerate(zip(a, b))
                     if (w := first_difference(x, y, f"{name}[{i}]"))), None)
    if type(a) is not type(b) or a != b:
        return f"{name}: {a!r} and {b!r}"
    return None


# ---- reading and writing ---------------------------------------------------------------------

def read(d: Path, key: str, path: Path, chip: dict[str, Any]) -> FastModel | str:
    """The model stored in ``d`` for the checkpoint ``path`` keyed ``key``, or what is wrong
    with ``d``, in words (``damaged (…)``, ``stale (…)``)."""
    if d.is_symlink() or not d.is_dir():
        return "damaged (it is not a directory)"
    why = manifest.problem(d, write_stamp=True)
    if why is not None:
        return f"damaged ({why})"
    try:
        t = Tensors(d)
    except ChipDirError as e:
        return f"damaged ({e})"
    md = t.metadata
    if md.get("format") != FORMAT:
        return f"damaged (its metadata does not name the format {FORMAT})"
    if md.get("version") != VERSION:
        return f"stale (format version {md.get('version')}, not {VERSION})"
    if md.get("source") != source_digest():
        return "stale (made by another version of the fast engine)"
    if md.get("checkpoint") != key:
        return "stale (made for another checkpoint: its digests differ)"
    try:
        meta = json.loads(md.get("model", ""))
        expect = json.loads(md.get("arrays", ""))
        expect = {k: (v[0], v[1]) for k, v in expect.items()}
        layers = [Layer(**_unflatten(Layer, ly, f"layers.{i}.", t, expect))
                  for i, ly in enumerate(meta.pop("layers"))]
        m = FastModel(path=path, chip=chip, layers=layers,
                      **_unflatten(FastModel, meta, "", t, expect))
    except (_Damaged, ValueError, TypeError, KeyError, AttributeError, IndexError,
            ChipDirError) as e:
        return f"damaged ({e})"
    if expect:
        return f"damaged (it lacks the array {sorted(expect)[0]})"
    return m


def write(m: FastModel, d: Path, key: str) -> None:
    """Store ``m`` (the model of the checkpoint keyed ``key``) in directory ``d``, replacing
    what is there (see the module docstring); StoredError when it cannot be written."""
    from safetensors.numpy import save_file
    from common.outputs import building_dir, disk_shortfall
    arrays, meta = flatten(m)
    kinds = {}
    for name, a in arrays.items():
        if a.dtype not in _KINDS:
            raise AssertionError(f"{name}: {a.dtype} is not a dtype the stored form holds")
        kinds[name] = [_KINDS[a.dtype], a.ndim]
    metadata = {"format": FORMAT, "version": VERSION, "source": source_digest(),
                "checkpoint": key, "model": json.dumps(meta), "arrays": json.dumps(kinds)}
    need = sum(a.nbytes for a in arrays.values()) + (1 << 20)
    short = disk_shortfall(d, need)
    if short is not None:
        raise StoredError(f"cannot write {d}: it {short}")

    def error(p: Path, why: str) -> StoredError:
        return StoredError(f"cannot write {p}: {why}")
    d.parent.mkdir(parents=True, exist_ok=True)
    from common.outputs import sweep_stale
    sweep_stale(d)
    with building_dir(d, error, "writing the fast engine's sparse form failed") as tmp:
        save_file(arrays, str(tmp / WEIGHTS), metadata=metadata)
        manifest.write(tmp, [WEIGHTS])
    manifest.stamp(d)


def load(path: str | Path, dtype: str | None, chip: dict[str, Any],
         progress: Callable[[str], None] | None = None) -> FastModel:
    """The fast model of checkpoint ``path`` (see the module docstring): mapped from its
    sparse form, made and stored first when there is none or it is stale or damaged."""
    path = Path(path)
    if dtype not in (None, chip.get("dtype")):          # the checkpoint's load refuses it
        return fmodel.load(path, dtype, progress)
    keyed = checkpoint_key(path)
    if keyed is None or keyed[1] < STORE_FROM:
        return fmodel.load(path, dtype, progress)
    key = keyed[0]
    try:
        d = place(path, key)
    except UserError as e:
        _say(f"fast engine: not storing the sparse form of {path}: {e}")
        return fmodel.load(path, dtype, progress)
    if os.path.lexists(d):
        got = read(d, key, path, chip)
        if isinstance(got, FastModel):
            return got
        _say(f"fast engine: the sparse form at {d} is {got}; rebuilding it")
    else:
        _say(f"fast engine: storing the sparse form of {path} in {d} (first load only)")
    m = fmodel.load(path, dtype, progress)
    try:
        write(m, d, key)
    except (StoredError, OSError) as e:
        why = str(e) if isinstance(e, StoredError) else f"cannot write {d}: {e}"
        _say(f"fast engine: {why}; not stored (the next load tries again)")
    return m
