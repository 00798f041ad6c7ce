"""The reference simulator: the golden step semantics of docs/language.md, compiled once.

Takes: a top :class:`hdl.ir.Circuit` (token kinds, memories, one TOKEN_OUT), optional memory
images, and a backend choice. Gives: :class:`Simulator`, whose :meth:`Simulator.step` and
:meth:`Simulator.run` produce the token stream and memory writes, and :class:`StepResult`.

Backends: ``"c"`` (generated C, built with the system C compiler and loaded with cffi),
``"python"`` (generated straight-line Python), ``"auto"`` (C when a compiler works, else
Python). Both implement exactly the op semantics of ``docs/ir.md`` and are tested against each
other on random IR.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from common.errors import UserError
from hdl.ir import Circuit, Token
from hdl.sim import cbuild
from hdl.sim.engines import CStepEngine, PyStepEngine
from hdl.sim.layout import Layout


class SimError(UserError):
    """A simulation cannot proceed: a bad token, memory image or backend, or a circuit that
    emitted a kind index it does not declare."""


@dataclass(frozen=True)
class StepResult:
    """What one step produced.

    ``next``: the next token. ``writes``: the effective memory writes in IR order, as
    ``(memory name, address, data)`` (disabled writes and addresses >= depth are left out).
    ``values``: when tracing, every node's value indexed by node id (0 for sinks), else None;
    :meth:`Simulator.named` turns it into ``{signal name: value}``."""
    next: Token
    writes: list[tuple[str, int, int]]
    values: tuple[int, ...] | None = None


BACKENDS = ("auto", "c", "python")


def _check_words(circuit: Circuit, name: str, words: Sequence[int]) -> list[int]:
    m = circuit.memories[name]
    words = [int(w) for w in words]
    if len(words) > m.depth:
        raise SimError(f"image for {m.kind} '{name}' has {len(words)} words, but {name} holds "
                       f"only {m.depth} (u{m.width}[{m.depth}])")
    for i, w in enumerate(words):
        if not 0 <= w < (1 << m.width):
            raise SimError(f"image for {m.kind} '{name}': word {i} is {w}, which does not fit "
                           f"{m.width} bits")
    return words


class Simulator:
    """Runs a top circuit one step (= one token) at a time.

    ``roms`` maps a memory name to its initial contents (ROM images; a RAM's initial contents
    may be given too); memories not named start from ``Memory.init`` (zeros when empty).
    ``memories`` is the current contents of every memory (a fresh copy on each access);
    ``backend`` the backend actually used ("c" or "python"); ``trace`` the StepResults of the
    last ``run(..., trace=True)``."""

    def __init__(self, circuit: Circuit, roms: Mapping[str, Sequence[int]] | None = None,
                 backend: str = "auto"):
        if backend not in BACKENDS:
            raise SimError(f"unknown simulator backend '{backend}' (expected one of "
                           f"{', '.join(BACKENDS)})")
        if not circuit.kinds:
            raise SimError(f"'{circuit.name}' declares no token kinds: it is a module; "
                           "evaluate it with hdl.sim.evaluate_module")
        circuit.check()
        self.circuit = circuit
        self.layout = Layout.of(circuit)
        self.trace: list[StepResult] = []
        self._engine: CStepEngine | PyStepEngine
        if backend == "python":
            self._engine = PyStepEngine(circuit, self.layout)
        else:
            try:
                self._engine = CStepEngine(circuit, self.layout)
            except cbuild.NoCompiler as e:
                if backend == "c":
                    raise SimError(f"the C simulator backend is unavailable: {e}") from e
                self._engine = PyStepEngine(circuit, self.layout)
        self.backend = self._engine.name
        roms = dict(roms or {})
        for name in roms:
            if name not in circuit.memories:
                known = ", ".join(circuit.memories) or "none"
                raise SimError(f"unknown memory '{name}' (the circuit's memories: {known})")
        for i, (name, m) in enumerate(circuit.memories.items()):
            self._engine.load(i, _check_words(circuit, name, roms.get(name, m.init)))

    # ---- memories -----------------------------------------------------------------------
    @property
    def memories(self) -> dict[str, list[int]]:
        return {name: self._engine.read(i) for i, name in enumerate(self.layout.mem_names)}

    def memory(self, name: str) -> list[int]:
        """The current contents of one memory (cheaper than ``memories`` for one)."""
        if name not in self.circuit.memories:
            raise SimError(f"unknown memory '{name}'")
        return self._engine.read(self.layout.mem_index(name))

    # ---- tokens -------------------------------------------------------------------------
    def _encode(self, tok: Token) -> list[int]:
        kinds = self.circuit.kinds
        if not 0 <= tok.kind < len(kinds):
            raise SimError(f"token kind index {tok.kind} is out of range: the circuit has "
                           f"{len(kinds)} kinds")
        kind = kinds[tok.kind]
        if len(tok.fields) != len(kind.fields):
            raise SimError(f"token {kind.name} has {len(kind.fields)} fields, got "
                           f"{len(tok.fields)}")
        vec = [0] * self.layout.token_len
        vec[0] = tok.kind
        for j, f, v in zip(self.layout.field_offset[tok.kind], kind.fields, tok.fields):
            if not 0 <= v < (1 << f.width):
                raise SimError(f"token {kind.name}: field {f.name} = {v} does not fit "
                               f"{f.width} bits (fields are unsigned encodings)")
            if f.bound is not None and v >= f.bound:
                raise SimError(f"token {kind.name}: field {f.name} = {v} is not below its "
                               f"bound {f.bound}")
            vec[j] = v
        return vec

    def _decode(self, vec: Sequence[int], step: int | None) -> Token:
        k = vec[0]
        if k >= len(self.circuit.kinds):
            where = f"step {step}: " if step is not None else ""
            raise SimError(f"{where}circuit '{self.circuit.name}' emitted token kind "
                           f"index {k}, but it declares only {len(self.circuit.kinds)} kinds")
        tok = Token(k, tuple(vec[j] for j in self.layout.field_offset[k]))
        last = self.circuit.kinds[k].fields[-1:]
        if last and last[0].bound is not None and tok.fields[-1] >= last[0].bound:
            f, loc = last[0], self.circuit.kinds[k].loc
            where = f"step {step}: " if step is not None else ""
            raise SimError(f"{where}circuit '{self.circuit.name}' emitted {self.circuit.kinds[k].name} "
                           f"with {f.name} = {tok.fields[-1]}, not below the bound {f.bound} "
                           f"its kind declares at {loc}")
        return tok

    def named(self, values: Sequence[int]) -> dict[str, int]:
        """``{signal name: value}`` for every named signal, from ``StepResult.values``."""
        return {name: values[nid] for name, nid in self.circuit.names.items()
                if self.circuit.nodes[nid].width}

    # ---- stepping -----------------------------------------------------------------------
    def step(self, tok: Token, trace: bool = False) -> StepResult:
        """One step from ``tok`` with the current memories; applies the writes."""
        out, writes, values = self._engine.step(self._encode(tok), trace)
        names = self.layout.mem_names
        return StepResult(self._decode(out, None), [(names[i], a, d) for i, a, d in writes],
                          tuple(values) if values is not None else None)

    def run(self, start: Token, steps: int, trace: bool = False) -> list[Token]:
        """The token stream from ``start``: ``[start, t1, t2, ...]``, at most ``steps`` steps;
        it ends after the first token of a halt kind (``[start]`` if ``start`` halts). With
        ``trace``, ``self.trace`` receives the StepResult of every step."""
        vec = self._encode(start)
        self.trace = []
        if self.circuit.kinds[start.kind].halt or steps <= 0:
            return [start]
        if trace:
            toks = [start]
            for _ in range(steps):
                r = self.step(toks[-1], trace=True)
                self.trace.append(r)
                toks.append(r.next)
                if self.circuit.kinds[r.next.kind].halt:
                    break
            return toks
        vectors, _ = self._engine.run(vec, steps)
        return [start] + [self._decode(v, i) for i, v in enumerate(vectors)]
