"""safetensors files read and written as bytes, one tensor at a time.

Takes: a ``.safetensors`` path. Gives: :func:`read_header` (every tensor's dtype, shape and
byte range, checked against the file's size, so a truncated or corrupt file is a
:class:`MergeError` naming it before anything is written), :class:`Rows` (a 2-D tensor's
rows read on demand, so a multi-GB table is never held, nor mapped, whole),
:func:`copy_file` (the file,
byte for byte, in bounded chunks) and :func:`write_file` (a new file whose tensors are
byte ranges of other files or bytes in memory, streamed: at most one chunk in memory).
The format: an 8-byte little-endian header length, a JSON header ``{name: {"dtype",
"shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`` padded with spaces to 8
bytes, then the data; offsets count from the end of the header.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np

from common.errors import UserError
from common.inputs import loads_json
from common.outputs import os_reason

#: bytes per element of each safetensors dtype
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
#: the largest header read (a 4B-parameter shard's header is a few tens of KB)
MAX_HEADER = 100 << 20
#: bytes copied per read
CHUNK = 16 << 20


class MergeError(UserError):
    """A merge that cannot be done: bad base, chip or output (nothing was written)."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: ``begin``/``end`` are absolute file offsets."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    path: Path
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    size: int                   # the file's size in bytes


class Rows:
    """The rows of a 2-D tensor of a safetensors file, read on demand as ``numpy`` words of
    ``word`` (the dtype's item size): ``rows[i]`` one row, ``rows[a:b]`` a block. Each read
    is a plain file read, so the process's resident memory holds the rows asked for, not
    the pages of the whole tensor as a memory map would."""

    def __init__(self, path: Path, entry: TensorEntry, word: type):
        self.path, self.entry, self.word = path, entry, np.dtype(word)
        self.shape, self.dtype = entry.shape, self.word
        self.nbytes = entry.nbytes
        self._row = entry.shape[1] * self.word.itemsize

    def __getitem__(self, key: int | slice) -> np.ndarray:
        if isinstance(key, slice):
            a, b, step = key.indices(self.shape[0])
            if step != 1:
                raise ValueError("Rows reads a block of consecutive rows")
            return self._read(a, max(a, b))
        return self._read(key, key + 1)[0]

    def _read(self, a: int, b: int) -> np.ndarray:
        out = np.empty((b - a, self.shape[1]), dtype=self.word)
        with open(self.path, "rb") as f:
            f.seek(self.entry.begin + a * self._row)
            got = f.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise MergeError(f"{self.path}: truncated while reading {self.entry.name}")
        return out


def read_header(path: Path, error: type[UserError] = MergeError) -> Header:
    """The tensors of safetensors file ``path``, checked by safetensors' own rules: the
    header length within the file and :data:`MAX_HEADER`, the header UTF-8 JSON of an
    object, ``__metadata__`` (if any) a map of strings to strings, every tensor a known
    dtype whose byte range fits its shape, the ranges in a row without gap or overlap and
    covering the data exactly (a file shorter is truncated; one longer has bytes after its
    data, which safetensors refuses). ``error`` (MergeError) otherwise, naming the file."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            head = f.read(8)
            if len(head) < 8:
                raise error(f"{path}: truncated or not a safetensors file ({size} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise error(f"{path}: corrupt (its header length field says {n:,} bytes, "
                            f"more than safetensors' limit of {MAX_HEADER:,})")
            if 8 + n > size:
                raise error(f"{path}: corrupt or truncated (its header length field says "
                            f"{n:,} bytes, but only {size - 8:,} follow it)")
            raw = f.read(n)
    except OSError as e:
        raise error(f"{path}: cannot read: {os_reason(e)}") from None
    try:
        header = loads_json(raw.decode("utf-8"))
    except ValueError as e:
        raise error(f"{path}: corrupt (its header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise error(f"{path}: corrupt (its header is not a JSON object)")
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        bad = (next(k for k, v in meta.items() if not isinstance(v, str))
               if isinstance(meta, dict) else None)
        raise error(f"{path}: corrupt (its __metadata__ must map strings to strings"
                    + (f"; {bad!r} is {_kind(meta[bad])})" if bad is not None else
                       f", it is {_kind(meta)})"))
    start = 8 + n
    tensors: dict[str, TensorEntry] = {}
    spans = []
    for name, d in header.items():
        try:
            dtype, shape, (b, e) = d["dtype"], tuple(d["shape"]), d["data_offsets"]
            ok = (dtype in DTYPE_BYTES
                  and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                          for x in shape)
                  and all(isinstance(x, int) and not isinstance(x, bool) for x in (b, e))
                  and e - b == math.prod(shape) * DTYPE_BYTES[dtype] and 0 <= b <= e)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise error(f"{path}: corrupt (tensor {name}: bad dtype, shape or offsets)")
        tensors[name] = TensorEntry(name, dtype, shape, start + b, start + e)
        spans.append((b, e))
    spans.sort()
    end = 0
    for b, e in spans:
        if b != end:
            raise error(f"{path}: corrupt (tensor data overlaps or leaves a gap at byte "
                        f"{start + end:,})")
        end = e
    if start + end > size:
        raise error(f"{path}: truncated (its header needs {start + end:,} bytes, the file "
                    f"has {size:,})")
    if start + end < size:
        raise error(f"{path}: corrupt ({size - start - end:,} bytes follow the end of its "
                    f"tensor data at byte {start + end:,}; safetensors refuses such a file)")
    return Header(Path(path), tensors, dict(meta), size)


def _kind(v: object) -> str:
    """A JSON value's kind, for a message (``a number``, ``an object``, ...)."""
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(v), "a value")


def copy_file(src: Path, dst: Path, size: int) -> None:
    """Copy ``size`` bytes of ``src`` (all of it) to a new file ``dst``; MergeError when
    ``src`` ends early (it changed since it was checked)."""
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        _copy(fi, fo, size, src)


def _copy(fi: BinaryIO, fo: BinaryIO, n: int, src: Path) -> None:
    while n > 0:
        buf = fi.read(min(CHUNK, n))
        if not buf:
            raise MergeError(f"{src}: ended early while copying (was it changed during the "
                             "merge?)")
        fo.write(buf)
        n -= len(buf)


@dataclass(frozen=True)
class OutTensor:
    """A tensor to write: its bytes are ``data`` or bytes ``begin:end`` of file ``src``."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    src: Path | None = None
    begin: int = 0
    data: bytes | None = None


def file_size(tensors: Sequence[OutTensor], metadata: dict[str, str]) -> int:
    """The size of the file :func:`write_file` makes of ``tensors``."""
    return 8 + len(header_bytes(tensors, metadata)) + sum(t.nbytes for t in tensors)


def header_bytes(tensors: Sequence[OutTensor], metadata: dict[str, str]) -> bytes:
    header: dict[str, object] = {"__metadata__": metadata}
    pos = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape),
                          "data_offsets": [pos, pos + t.nbytes]}
        pos += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)


def write_file(dst: Path, tensors: Sequence[OutTensor], metadata: dict[str, str]) -> None:
    """A new safetensors file ``dst`` holding ``tensors`` in order, their bytes copied from
    their sources chunk by chunk."""
    raw = header_bytes(tensors, metadata)
    with open(dst, "xb") as fo:
        fo.write(struct.pack("<Q", len(raw)))
        fo.write(raw)
        for t in tensors:
            if t.data is not None:
                fo.write(t.data)
                continue
            assert t.src is not None
            with open(t.src, "rb") as fi:
                fi.seek(t.begin)
                _copy(fi, fo, t.nbytes, t.src)
