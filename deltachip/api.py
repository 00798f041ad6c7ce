"""The public Python API: write a circuit, simulate it, compile it into Qwen3.5 weights, check
the weights against the simulator, and run firmware -- what the command line does, as calls.

    import deltachip

    counter = deltachip.load("examples/counter/counter.hdl")
    tokens = counter.simulate(steps=20)            # [Count value=0, ..., Done]
    chip = deltachip.compile(counter, target="compact", dtype="bf16")
    print(chip.layers, chip.hidden, chip.neurons)  # 2 64 35
    chip.save("build/counter")                     # a checkpoint transformers loads
    assert deltachip.check("build/counter", steps=32).ok
    print(chip.explain(source="counter.hdl:14"))   # what that line became

Every function raises :class:`common.errors.UserError` (with the same text the command line
prints) for bad input: a source error, a circuit that breaks the depth rule, an unknown
target, a bad token text, an unloadable ELF, a number out of range. An argument of the wrong
type is a ``TypeError`` naming the function and the parameter, as the standard library's
(``load_source() argument 'text' must be str, not int``), raised before any work. Heavy modules (torch, transformers) are imported
only when a call needs them, so ``import deltachip`` stays cheap.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from common.errors import UserError
from common.kinds import DType

if TYPE_CHECKING:           # for annotations only
    from backends.verify.check import CheckReport
    from backends.compile.emit import Emission
    from hdl import ir


# ---- argument checks -----------------------------------------------------------------------

_PATH = (str, os.PathLike)
#: most batch rows :func:`check` runs (each holds the chip's whole recurrent state)
MAX_BATCH = 1 << 16
#: most steps :meth:`Circuit.simulate` takes: it returns every token (a few hundred bytes
#: each); `deltachip sim` streams them instead
MAX_SIMULATE_STEPS = 10_000_000


def _typed(func: str, name: str, value: Any, types: type | tuple[type, ...], what: str,
           optional: bool = False) -> Any:
    """``value`` if it is one of ``types`` (a bool is not an int here) or, ``optional``,
    None; else TypeError ``func() argument 'name' must be WHAT, not TYPE``."""
    if value is None and optional:
        return value
    kinds = types if isinstance(types, tuple) else (types,)
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    raise TypeError(f"{func}() argument '{name}' must be {what}"
                    f"{' or None' if optional else ''}, not {type(value).__name__}")


def _path(func: str, name: str, value: Any) -> Path:
    """``value`` (str or os.PathLike) as a Path; else TypeError (UserError when empty)."""
    if os.fspath(_typed(func, name, value, _PATH, "str or os.PathLike")) == "":
        raise UserError(f"{func}(): {name} must not be empty")
    return Path(value)


def _count(func: str, name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """``value`` if it is an int from ``lo`` (to ``hi``); TypeError for another type,
    UserError (``steps must be >= 0, got -1``) for one out of range."""
    _typed(func, name, value, int, "int")
    if value < lo:
        raise UserError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise UserError(f"{name} must be <= {hi:,}, got {value:,}")
    return value


def _callback(func: str, name: str, value: Any) -> Callable[[str], None] | None:
    if value is not None and not callable(value):
        raise TypeError(f"{func}() argument '{name}' must be callable or None, not "
                        f"{type(value).__name__}")
    return value


# ---- circuits ------------------------------------------------------------------------------

@dataclass
class Token:
    """One token of a run: its ``kind`` name, its ``fields`` (signed fields signed, enum fields
    as numbers), its vocabulary ``id`` in a compiled chip, and ``text`` as ``deltachip sim``
    prints it (``str(token)``)."""
    kind: str
    fields: dict[str, int]
    id: int
    text: str

    def __str__(self) -> str:
        return self.text


class Circuit:
    """An elaborated top circuit (see :func:`load`): its ``name``, token ``kinds``, ``memories``
    and ``start`` token; ``ir`` is the :class:`hdl.ir.Circuit` itself (docs/ir.md)."""

    def __init__(self, circuit: ir.Circuit):
        from hdl.ir import Circuit as IRCircuit
        _typed("Circuit", "circuit", circuit, IRCircuit, "an hdl.ir.Circuit (use load() or "
               "load_source())")
        if not circuit.kinds:
            raise UserError(f"'{circuit.name}' is a module, not a circuit: load a circuit "
                            "(token kinds and `next`), or wrap the module in one")
        self.ir = circuit

    @property
    def name(self) -> str:
        return self.ir.name

    @property
    def kinds(self) -> list[str]:
        return [k.name for k in self.ir.kinds]

    @property
    def memories(self) -> dict[str, str]:
        """memory name -> ``"rom u16[256]"`` (kind, word type, depth; ``" transparent"``
        after a transparent RAM's, ``" table"`` after a table ROM's)."""
        return {n: f"{m.kind} u{m.width}[{m.depth}]"
                   + " transparent" * (m.read_under_write == "new") + " table" * m.table
                for n, m in self.ir.memories.items()}

    @property
    def start(self) -> Token | None:
        return None if self.ir.start is None else self._token(self.ir.start)

    def __repr__(self) -> str:
        return f"<deltachip.Circuit {self.name}: kinds {', '.join(self.kinds)}>"

    def token(self, text: str) -> Token:
        """The token written ``'Kind field=value ...'`` (as ``deltachip sim --start`` takes it)."""
        from hdl.sim import parse_token
        return self._token(parse_token(self.ir, _typed("token", "text", text, str, "str")))

    def _token(self, tok: ir.Token) -> Token:
        from hdl.sim import format_token
        kind = self.ir.kinds[tok.kind]
        fields = {f.name: (v - (1 << f.width) if f.signed and v >> (f.width - 1) else v)
                  for f, v in zip(kind.fields, tok.fields)}
        return Token(kind.name, fields, self.ir.token_id(tok), format_token(self.ir, tok))

    def _parse(self, start: str | Token | None, func: str = "simulate") -> ir.Token:
        from hdl.sim import parse_token
        _typed(func, "start", start, (str, Token), "str or Token", optional=True)
        if start is None:
            if self.ir.start is None:
                raise UserError(f"circuit '{self.name}' declares no start token: pass "
                                "start='Kind field=value ...'")
            return self.ir.start
        return parse_token(self.ir, start.text if isinstance(start, Token) else start)

    def simulate(self, steps: int = 1000, start: str | Token | None = None,
                 roms: Mapping[str, Sequence[int] | str | Path] | None = None,
                 engine: str = "auto") -> list[Token]:
        """The token stream of the reference simulator from ``start`` (default: the circuit's
        ``start``): ``[start, t1, ...]``, ending after the first halt token or ``steps``
        steps (at most :data:`MAX_SIMULATE_STEPS`). ``roms`` gives memory images by name, as
        word lists or image files (.hex, .bin); ``engine`` is ``auto``, ``c`` or ``python``."""
        from hdl.sim import Simulator
        _count("simulate", "steps", steps, 0, MAX_SIMULATE_STEPS)
        _typed("simulate", "engine", engine, str, "str")
        sim = Simulator(self.ir, roms=self._images(roms), backend=engine)
        return [self._token(t) for t in sim.run(self._parse(start), steps)]

    def _images(self, roms: Mapping[str, Sequence[int] | str | Path] | None,
                func: str = "simulate") -> dict[str, list[int]]:
        """Memory images by name: word lists as given (each word checked against the
        memory's width and depth), paths read as image files."""
        from hdl.images import load_image
        _typed(func, "roms", roms, Mapping, "a mapping of memory names to images", optional=True)
        out = {}
        for name, image in (roms or {}).items():
            mem = self.ir.memories.get(name)
            if mem is None:
                raise UserError(f"circuit '{self.name}' has no memory '{name}' (its memories: "
                                f"{', '.join(self.ir.memories) or 'none'})")
            _typed(func, f"roms['{name}']", image, (*_PATH, Sequence),
                   "a list of ints or the path of an image file")
            if isinstance(image, _PATH):
                out[name] = load_image(image, mem.width, mem.depth, name)
                continue
            if isinstance(image, (bytes, bytearray)) or len(image) > mem.depth:
                raise UserError(f"roms['{name}']: {len(image)} words, but '{name}' holds only "
                                f"{mem.depth} (u{mem.width}[{mem.depth}])"
                                if not isinstance(image, (bytes, bytearray)) else
                                f"roms['{name}'] must be a list of ints, not bytes")
            for i, w in enumerate(image):
                if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w < 1 << mem.width:
                    raise UserError(f"roms['{name}']: word {i} ({w!r}) is not an integer from 0 "
                                    f"to {(1 << mem.width) - 1} (u{mem.width})")
            out[name] = list(image)
        return out


def load(path: str | Path, top: str | None = None) -> Circuit:
    """The circuit ``top`` (default: the file's only circuit) of the ``.hdl`` file ``path``,
    parsed and elaborated; its imports are searched beside it, then in ``stdlib/``."""
    from hdl.frontend import load_circuit
    path = _path("load", "path", path)
    return Circuit(load_circuit(path, _typed("load", "top", top, str, "str", optional=True)))


def load_source(text: str, filename: str = "<string>", top: str | None = None) -> Circuit:
    """Like :func:`load` for source text; ``filename`` names it in messages and locates its
    relative imports and ROM images."""
    from hdl.frontend import load_source as frontend_load_source
    _typed("load_source", "text", text, str, "str")
    filename = str(_path("load_source", "filename", filename))
    top = _typed("load_source", "top", top, str, "str", optional=True)
    return Circuit(frontend_load_source(text, filename, top))


# ---- compiled chips ------------------------------------------------------------------------

class Chip:
    """A circuit compiled for a target and dtype (see :func:`compile`): scheduled, lanes
    allocated and proved exact; weights are built when saved (one layer at a time) or asked
    for. Figures: ``layers``, ``hidden``, ``lanes``, ``neurons``, ``key_heads``,
    ``mlp_width``, ``vocab``, ``nonzero_weights``; ``path`` once saved."""

    def __init__(self, circuit: Circuit, plan: Emission, roms: dict[str, list[int]]):
        self.circuit = circuit
        self.plan = plan
        self.roms = roms
        self.path: Path | None = None
        self._chip: dict[str, Any] | None = None
        self._nonzero: int | None = None

    @property
    def target(self) -> str:
        return self.plan.prog.target.name

    @property
    def dtype(self) -> DType:
        return DType(self.plan.dtype)

    @property
    def layers(self) -> int:
        """Chip decoder layers (the checkpoint adds one empty attention layer)."""
        return self.plan.prog.n_layers

    @property
    def hidden(self) -> int:
        return self.plan.num.hidden

    @property
    def lanes(self) -> int:
        """Residual dims holding the circuit's values (the rest of ``hidden`` is ballast
        and, on model targets, the base model's free block)."""
        return self.plan.prog.n_dims

    @property
    def neurons(self) -> int:
        return sum(self.plan.prog.neurons_in(i) for i in range(self.layers))

    @property
    def key_heads(self) -> int:
        return sum(self.plan.prog.kheads_in(i) for i in range(self.layers))

    @property
    def mlp_width(self) -> int:
        return self.plan.inter

    @property
    def vocab(self) -> int:
        return self.plan.vocab

    @property
    def nonzero_weights(self) -> int:
        """Nonzero weights of the checkpoint (built one tensor group at a time if not saved)."""
        if self._nonzero is None:
            from backends.compile import emit
            self._nonzero = sum(sum(emit.nonzero_counts(emit.group_tensors(self.plan, g)).values())
                                for g in self.plan.groups)
        return self._nonzero

    def __repr__(self) -> str:
        return (f"<deltachip.Chip {self.circuit.name} ({self.target}, {self.dtype}): "
                f"{self.layers} layers, hidden {self.hidden}, {self.neurons} neurons, "
                f"{self.key_heads} key heads>")

    def save(self, path: str | Path, progress: Callable[[str], None] | None = None) -> Path:
        """Write the checkpoint directory (config.json, weights, chip.json; see
        ``deltachip compile``): ``path`` must be new, empty or a previous checkpoint, and is
        replaced only once the new one is complete. Returns it as a Path."""
        from backends.compile.pipeline import write_dir
        path = _path("save", "path", path)
        progress = _callback("save", "progress", progress)
        self._chip = write_dir(self.plan, path, self.roms, progress)
        self._nonzero = self._chip["nonzero_weights"]
        self.path = Path(path)
        return self.path

    def state_dict(self) -> dict[str, Any]:
        """Every tensor of the checkpoint in memory, named as ``Qwen3_5ForCausalLM`` names
        them (for small chips)."""
        from backends.compile import emit
        return emit.state_dict(self.plan)

    def explain(self, layer: int | None = None, source: str | None = None) -> str:
        """``deltachip explain`` without a directory: what every neuron and head of ``layer``
        is for, or what ``source`` (``FILE.hdl:LINE``) became. Give exactly one."""
        from backends.compile.pipeline import chip_record
        from backends.compile.trace import ChipTrace, parse_source
        _typed("explain", "layer", layer, int, "int", optional=True)
        _typed("explain", "source", source, str, "str", optional=True)
        if (layer is None) == (source is None):
            raise UserError("explain: give exactly one of layer=L or source='FILE.hdl:LINE'")
        chip = self._chip or chip_record(self.plan, self.roms, {})
        trace = ChipTrace(chip, f"chip {self.circuit.name}")
        if layer is not None:
            return trace.layer(layer)
        return trace.source(*parse_source(source))


def compile(circuit: Circuit | str | Path, target: str = "compact", dtype: DType | str = "bf16",
            roms: Mapping[str, Sequence[int] | str | Path] | None = None,
            progress: Callable[[str], None] | None = None) -> Chip:
    """Compile ``circuit`` (a :class:`Circuit`, or the path of a .hdl file with one circuit)
    for ``target`` (``compact``, ``qwen3.5-4b`` or the path of a Qwen3.5 config.json) in
    ``dtype`` (``bf16`` or ``fp32``): lowering, depth scheduling, retiming, lane allocation
    and the exactness proof run now; ``roms`` bakes memory images in (default: each
    memory's own). ``progress`` receives a line per stage."""
    from backends.compile.pipeline import bake_tables, plan_circuit
    _typed("compile", "circuit", circuit, (Circuit, *_PATH), "a Circuit, str or os.PathLike")
    target = str(_typed("compile", "target", target, _PATH, "str or os.PathLike"))
    _typed("compile", "dtype", dtype, str, "str or DType")
    progress = _callback("compile", "progress", progress)
    if not isinstance(circuit, Circuit):
        circuit = load(circuit)
    images = circuit._images(roms, "compile")
    return Chip(circuit, plan_circuit(bake_tables(circuit.ir, images), target, dtype, progress),
                images)


def check(chip: Chip | str | Path, steps: int = 64, start: str | Token | None = None,
          dtype: DType | str | None = None, batch: int = 1, prefill: bool = False,
          mem_every: int = 1) -> CheckReport:
    """Run a compiled chip (a saved directory, or a :class:`Chip`, saved to a temporary
    directory first if it was not) in transformers' own Qwen3.5 modules and compare every
    position with the reference simulator, as ``deltachip check`` does. Returns the
    :class:`backends.verify.check.CheckReport` (``ok``, ``positions``, ``mismatches``)."""
    from transformers.utils import logging as hf_logging
    from backends.verify.check import check_engine
    from backends.engines.hf import HFEngine
    from hdl.sim import parse_token
    _typed("check", "chip", chip, (Chip, *_PATH), "a Chip, str or os.PathLike")
    for name, value, lo, hi in (("steps", steps, 0, None), ("batch", batch, 1, MAX_BATCH),
                                ("mem_every", mem_every, 1, None)):
        _count("check", name, value, lo, hi)
    _typed("check", "start", start, (str, Token), "str or Token", optional=True)
    start = start.text if isinstance(start, Token) else start
    _typed("check", "dtype", dtype, str, "str or DType", optional=True)
    _typed("check", "prefill", prefill, bool, "bool")
    if dtype is not None:
        dtype = DType.parse(dtype)
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()           # no "Loading weights" bar, as in the CLI
    try:
        with tempfile.TemporaryDirectory(prefix="deltachip-check-") as tmp:
            if isinstance(chip, Chip) and chip.path is None:
                path = chip.save(Path(tmp) / "chip")
                chip.path = None        # the temporary copy goes with this call
            elif isinstance(chip, Chip):
                path = chip.path
            else:
                path = Path(chip)
            engine = HFEngine(path, dtype)
            starts = None if start is None else [parse_token(engine.circuit, start)] * batch
            return check_engine(engine, steps, batch, prefill, starts, mem_every)
    finally:
        if bar:
            hf_logging.enable_progress_bar()


# ---- firmware ------------------------------------------------------------------------------

@dataclass
class FirmwareRun:
    """The outcome of :func:`run_elf`: ``exit_code`` (a0 of the exit ``ecall``, signed; None
    when the program did not exit), the UART ``output`` bytes, ``instructions`` retired,
    ``fault`` (the machine fault in words, or None) and ``timed_out`` (``max_steps`` ran
    out)."""
    engine: str
    exit_code: int | None
    output: bytes
    instructions: int
    fault: str | None = None
    timed_out: bool = False

    @property
    def text(self) -> str:
        """``output`` decoded as UTF-8 (undecodable bytes replaced)."""
        return self.output.decode("utf-8", "replace")


def engines() -> list[str]:
    """The names :func:`run_elf` (and ``deltachip run --engine``) accepts."""
    from deltachip.commands.run import ENGINES
    return sorted(ENGINES)


def run_elf(path: str | Path, engine: str = "ref", input_text: str | bytes | None = None,
            max_steps: int = 50_000_000) -> FirmwareRun:
    """Run a firmware ELF (built with ``deltachip firmware build``) on a CPU engine until it
    exits, faults or retires ``max_steps`` instructions. ``engine`` is one of
    :func:`engines` (``ref``: the golden ISA emulator; the engines ``deltachip run``
    registers, e.g. ``sim`` and ``hf``, as they land); ``input_text`` is written
    NUL-terminated into the program's input buffer."""
    from deltachip.commands.run import ENGINES
    path = _path("run_elf", "path", path)
    _typed("run_elf", "engine", engine, str, "str")
    _typed("run_elf", "input_text", input_text, (str, bytes, bytearray), "str or bytes",
           optional=True)
    if engine not in ENGINES:
        raise UserError(f"unknown engine '{engine}' (engines: {', '.join(sorted(ENGINES))})")
    _count("run_elf", "max_steps", max_steps, 0)
    if isinstance(input_text, str):
        input_text = input_text.encode("utf-8", "surrogateescape")
    elif input_text is not None:
        input_text = bytes(input_text)
    machine = ENGINES[engine].load()(path, input_text)
    output = bytearray()
    instructions = 0
    while True:
        result = machine.run(min(1 << 22, max_steps - instructions), trace=False)
        instructions += result.instructions
        output += result.output
        if not result.timed_out or instructions >= max_steps:
            break
    return FirmwareRun(engine, result.exit_code, bytes(output), instructions,
                       str(result.fault) if result.fault else None,
                       result.exit_code is None and result.fault is None)
