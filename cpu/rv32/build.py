"""The core's HDL source and sizes, and the elaborated circuit.

Takes: :class:`CoreSizes` (the depths of code ROM, rodata ROM and RAM in words). Gives:
:func:`load_core` → the elaborated :class:`hdl.ir.Circuit` (cached per sizes),
:func:`core_hash` (a digest of every ``.hdl`` file the core is built from, for the compiled
core cache), and :func:`op_codes` (the ``const`` numbers of ``ops.hdl``, so the loader
pre-decodes with the core's own numbering).

:data:`FULL` is the memory map's core (docs/cpu.md). Smaller sizes make a *small core* for
tests of the compiled model: the same circuit with shallower memories (RAM becomes a ring of
``ram_words`` words; the loader refuses a program that does not fit).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:                       # elaborating imports the parser: only load_core does
    from hdl.ir import Circuit

CORE_DIR = Path(__file__).resolve().parent
CORE_FILE = CORE_DIR / "core.hdl"
OPS_FILE = CORE_DIR / "ops.hdl"
_ROOT = CORE_DIR.parent.parent
_STDLIB = _ROOT / "stdlib"


@dataclass(frozen=True)
class CoreSizes:
    """Memory depths in words: code ROM (and its raw copy), rodata ROM, RAM; and the text
    token ids (``Text`` tokens and the depth of its table ROMs: 2, no text vocabulary,
    unless a merged base's tokenizer gives one, :func:`with_text_ids`)."""
    code_words: int = 65536
    rodata_words: int = 32768
    ram_words: int = 8192
    text_ids: int = 2

    @property
    def name(self) -> str:
        mem = (self.code_words, self.rodata_words, self.ram_words)
        head = ("full" if mem == (65536, 32768, 8192)
                else f"c{self.code_words}-r{self.rodata_words}-m{self.ram_words}")
        return head if self.text_ids == 2 else f"{head}-t{self.text_ids}"


def with_text_ids(sizes: "CoreSizes", vocab: int) -> "CoreSizes":
    """``sizes`` with room for a text vocabulary of ``vocab`` ids: the next power of two,
    at least 4 (2 is the core without one: core.hdl leaves its text logic out)."""
    from dataclasses import replace
    return replace(sizes, text_ids=max(4, 1 << (vocab - 1).bit_length()))


FULL = CoreSizes()
#: A small core: 4 KiB code, 1 KiB rodata, 2 KiB RAM.
SMALL = CoreSizes(code_words=1024, rodata_words=256, ram_words=512)
#: The core of the default compiled-model tests: 2 KiB code, 512 B rodata, 512 B RAM.
TINY = CoreSizes(code_words=512, rodata_words=128, ram_words=128)

_CONSTS = {"CODE_WORDS": "code_words", "RODATA_WORDS": "rodata_words", "RAM_WORDS": "ram_words",
           "TEXT_IDS": "text_ids"}
#: the most text ids a core takes (a Text token's id field: 18 bits)
MAX_TEXT_IDS = 1 << 18


def core_source(sizes: CoreSizes = FULL) -> str:
    """core.hdl with its three size consts set to ``sizes``."""
    text = CORE_FILE.read_text()
    for const, attr in _CONSTS.items():
        value = getattr(sizes, attr)
        top = MAX_TEXT_IDS if attr == "text_ids" else getattr(FULL, attr)
        if value < 2 or value & (value - 1) or value > top:
            raise ValueError(f"{attr} must be a power of two in 2..{top}, got {value}")
        text, n = re.subn(rf"^const {const} = \d+;", f"const {const} = {value};", text,
                          flags=re.MULTILINE)
        if n != 1:
            raise AssertionError(f"{CORE_FILE}: expected one 'const {const} = N;' line")
    return text


@lru_cache(maxsize=4)
def load_core(sizes: CoreSizes = FULL) -> Circuit:
    """The elaborated core (messages name core.hdl; imports resolve beside it)."""
    from hdl.frontend import load_source
    return load_source(core_source(sizes), filename=str(CORE_FILE))


def core_hash(sizes: CoreSizes = FULL) -> str:
    """A digest of what goes into the compiled core's weights: the core's source files
    (cpu/rv32/*.hdl, the stdlib), its sizes, and the compiler that turns them into weights
    (:func:`compiler_files`: ``backends.compile.pipeline``, the elaborator and every project module
    they import, the grammar beside them). Engines and tools that only run or read a checkpoint are not in
    it, so editing them keeps the cached core."""
    h = hashlib.sha256(sizes.name.encode())
    files = sorted(CORE_DIR.glob("*.hdl")) + sorted(_STDLIB.glob("*.hdl")) + compiler_files()
    for f in files:
        h.update(str(f.relative_to(_ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


_PACKAGES = ("common", "hdl", "backends")
#: Modules the import closure reaches that only run or read circuits and checkpoints (the
#: simulator's evaluators and their C build, the engines): never followed, never hashed.
_RUN_ONLY = {"hdl/sim/simulator.py", "hdl/sim/engines.py", "hdl/sim/cbuild.py",
             "hdl/sim/waveform.py", "hdl/sim/modules.py", "backends/engines/hf.py",
             "backends/verify/check.py"}


@lru_cache(maxsize=1)
def compiler_files() -> list[Path]:
    """The source files of ``backends/compile/pipeline.py`` and ``hdl/frontend.py`` (what elaborates
    the core) and of every project module they import, directly or not (each file's
    ``import``/``from`` statements, function-local ones included), with the ``.lark``
    grammars of the packages it reaches; sorted.

    Finding them parses every one (a good part of a second); what was found is kept in the
    cache (:func:`closure_record`) with what it depended on, and used while that still
    holds (:func:`_closure_holds`): the same bytes in every file read, the same answer from
    every path asked about, the same grammars beside them. Else it is found again (a
    damaged or stale record named on stderr) and the record written anew."""
    from backends.engines.fast import records
    path = closure_record()
    if path is None:
        return _closure()[0]
    key = _closure_key()
    body, why = records.read(path, CLOSURE_KIND, key)
    if why is None and body is not None:
        why = _closure_holds(body)
        if why is None:
            return [_ROOT / f for f in body["found"]]
        why = f"stale ({why})"
    if why is not None:
        records.say("the record of the compiler's source files", path, why)
    files, facts = _closure()
    records.write(path, CLOSURE_KIND, key, facts)
    return files


#: the kind of :func:`compiler_files`' record
CLOSURE_KIND = "core-compiler-files"


def closure_record() -> Path | None:
    """Where :func:`compiler_files` keeps what it found for this checkout (one record per
    checkout, named by a digest of its path, under ``$DELTACHIP_CACHE/cores``'s sibling
    ``records``); None when the cache folder cannot be used (then it is found every time)."""
    from common.cachedir import cache_dir
    from common.errors import UserError
    try:
        d = cache_dir("records")
    except UserError:
        return None
    tag = hashlib.sha256(str(_ROOT).encode()).hexdigest()[:16]
    return d / f"compiler-files-{tag}.json"


def _closure_key() -> dict[str, str]:
    """What a record of :func:`compiler_files` must have been made for: this checkout, and
    this file's code (which decides what is followed)."""
    return {"root": str(_ROOT),
            "code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}


def _rel(p: Path) -> str:
    return str(p.relative_to(_ROOT))


def _closure() -> tuple[list[Path], dict]:
    """The files (see :func:`compiler_files`), and the facts they were found from: each
    file read with its sha256, every path asked whether it is a file with the answer, and
    the grammars of each folder reached."""
    seen: set[Path] = set()
    read: dict[str, str] = {}
    asked: dict[str, bool] = {}

    def is_file(p: Path) -> bool:
        k = _rel(p)
        if k not in asked:
            asked[k] = p.is_file()
        return asked[k]
    todo = [_ROOT / "backends" / "compile" / "pipeline.py", _ROOT / "hdl" / "frontend.py"]
    while todo:
        f = todo.pop()
        if f in seen or _rel(f) in _RUN_ONLY:
            continue
        seen.add(f)
        data = f.read_bytes()
        read[_rel(f)] = hashlib.sha256(data).hexdigest()
        for mod in _imports(f, data):
            if mod.split(".")[0] not in _PACKAGES:
                continue
            base = _ROOT.joinpath(*mod.split("."))
            for cand in (base.with_suffix(".py"), base / "__init__.py"):
                if is_file(cand):
                    todo.append(cand)
            parent = base.parent / "__init__.py"
            if is_file(parent):
                todo.append(parent)
    folders = sorted({f.parent for f in seen})
    lark = {_rel(d): sorted(g.name for g in d.glob("*.lark")) for d in folders}
    grammars = {d / n for d, names in zip(folders, lark.values()) for n in names}
    files = sorted(seen | grammars)
    return files, {"read": read, "asked": asked, "grammars": lark,
                   "found": [_rel(f) for f in files]}


def _closure_holds(facts: dict) -> str | None:
    """Why the files a record of :func:`compiler_files` found may no longer be the ones
    (a file read then now differs, a path asked about answers otherwise, a folder's
    grammars changed), in words; None when every fact still holds, so the search would
    find them again."""
    try:
        for rel, digest in facts["read"].items():
            try:
                data = (_ROOT / rel).read_bytes()
            except OSError:
                return f"{rel} cannot be read"
            if hashlib.sha256(data).hexdigest() != digest:
                return f"{rel} changed"
        for rel, was in facts["asked"].items():
            if (_ROOT / rel).is_file() != was:
                return f"{rel} {'is gone' if was else 'appeared'}"
        for rel, names in facts["grammars"].items():
            if sorted(g.name for g in (_ROOT / rel).glob("*.lark")) != names:
                return f"the grammars in {rel} changed"
        if not isinstance(facts["found"], list) or not all(isinstance(f, str)
                                                           for f in facts["found"]):
            return "its list of files is not one"
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        return f"it does not hold the facts it should ({e.__class__.__name__}: {e})"
    return None


def _imports(path: Path, data: bytes | None = None) -> list[str]:
    """The dotted module names ``path`` (its bytes ``data``, when read already) imports
    (``from a.b import c`` gives a.b and a.b.c, since c may be a module)."""
    import ast
    text = path.read_text() if data is None else data.decode()
    out: list[str] = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


@lru_cache(maxsize=1)
def op_codes() -> dict[str, int]:
    """``{NAME: value}`` for every ``const NAME = value;`` line of ops.hdl."""
    consts = {}
    for m in re.finditer(r"^const (\w+) = (0x[0-9a-fA-F]+|\d+);", OPS_FILE.read_text(), re.MULTILINE):
        consts[m.group(1)] = int(m.group(2), 0)
    return consts
