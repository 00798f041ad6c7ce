"""The backend pipeline: circuit -> Placed -> Retimed -> Allocated -> Proven -> Emission -> DIR.

Takes: a checked :class:`hdl.ir.Circuit`, a target spec, a :class:`common.kinds.DType`.
Gives, in two steps: :func:`plan_circuit` runs every stage up to the exactness proof and
returns the :class:`backends.compile.emit.Emission` (every size, shape and config fixed, no tensor
built yet); :func:`write_dir` builds and writes the checkpoint from it one tensor group (a
decoder layer, the embedding, the head) at a time, so its peak memory is about one group
whatever the layer count. :func:`compile_to_dir` is both; :func:`compile_circuit` keeps the
whole state dict in memory instead (small chips, tests).

Stages, each its own module with a ``run`` that takes the previous artefact and returns the
next (:mod:`backends.compile.program`, "Stage artefacts"): ``schedule`` (lowering + placement, depth
rule) -> :class:`~backends.compile.program.Placed`; ``retime`` -> :class:`~backends.compile.program.Retimed`
(with the MLP width it kept to); ``lanes`` (allocation) -> :class:`~backends.compile.program.Allocated`;
``exact`` (the static proof, after ``emit.choose_numerics``) -> :class:`backends.compile.exact.Proven`
(numerics and the :class:`backends.compile.exact.Proof`); ``emit`` -> :class:`backends.compile.emit.Emission`.
``trace`` records where every neuron, lane and head came from for chip.json.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

from common.kinds import DType
from hdl.ir import Circuit
from backends.compile import emit, exact, lanes, retime, rules, schedule, trace
from backends.chipdir.checkpoint import SINGLE_FILE_LIMIT, WeightGroup, prepare_output, write_checkpoint
from backends.chipdir.memory import byte_cells_exact
from backends.compile.program import Program
from backends.chipdir.target import Target, get_target

Progress = Callable[[str], None]


@dataclass
class Compiled:
    program: Program
    state_dict: dict[str, torch.Tensor]     # empty after compile_to_dir (written, not kept)
    config: dict[str, Any]
    chip: dict[str, Any]
    proof: exact.Proof | None = None         # what the exactness proof established


def default_roms(circuit: Circuit) -> dict[str, list[int]]:
    """Each memory's own image (its ``init``), where it has a nonzero one."""
    return {name: list(mem.init) for name, mem in circuit.memories.items()
            if mem.init and any(mem.init)}


def bake_tables(circuit: Circuit, roms: dict[str, list[int]] | None) -> Circuit:
    """``circuit`` with the images ``roms`` gives its ``table`` ROMs as their ``init``: a
    table ROM's words are token-table lanes, fixed in the weights at compile time (the
    other memories' images are preloaded state, given to the checkpoint instead)."""
    new = {n: replace(m, init=tuple(roms[n]) + (0,) * (m.depth - len(roms[n])))
           for n, m in circuit.memories.items() if m.table and n in (roms or {})}
    if not new:
        return circuit
    return replace(circuit, memories={**circuit.memories, **new}, _vocab=None)


def _quiet(_: str) -> None:
    pass


def plan_circuit(circuit: Circuit, target: str | Target = "compact",
                 dtype: DType | str = DType.BF16,
                 progress: Progress | None = None,
                 byte_cells: bool | None = None,
                 table_rule: bool = True) -> emit.Emission:
    """Check the compile rules (:mod:`backends.compile.rules`), schedule, retime, allocate lanes,
    choose numerics and prove ``circuit`` exact: the emission plan (no weight built yet).
    ``byte_cells``: let large ROMs store bytes per state cell (None: where exact,
    :func:`backends.chipdir.memory.byte_cells_exact`). ``table_rule=False`` plans past the
    token-table size rule (:func:`backends.compile.rules.check_tables`), for measuring the layers of
    a chip whose tables are refused (benchmarks/core_figures.py); ``deltachip compile``
    always applies it. Raises a UserError for a bad target or dtype, a broken compile rule,
    a depth-rule or exactness error."""
    say = progress or _quiet
    target = get_target(target) if isinstance(target, str) else target
    dtype = DType.parse(dtype)
    rules.check_vocabulary(circuit)
    say("lowering and scheduling")
    if byte_cells is None:
        byte_cells = byte_cells_exact(target, dtype)
    placed = schedule.run(circuit, target, byte_cells)          # Placed: neurons ASAP
    say("retiming")
    retimed = retime.run(placed)                                # Retimed: + the width kept
    say("allocating lanes")
    allocated = lanes.run(retimed)                              # Allocated: residual dims
    say("choosing numerics")
    num = emit.choose_numerics(allocated.prog)
    if table_rule:
        rules.check_tables(circuit, num.hidden, dtype)
    say("proving exactness")
    proven = exact.run(allocated, num, dtype)                   # Proven: + numerics, proof
    return emit.run(proven)                                     # Emission: every shape


@dataclass(frozen=True)
class RulesReport:
    """What :func:`check_rules` found the circuit would compile to."""
    layers: int
    hidden: int
    vocab: int
    memories: int


def check_rules(c: Circuit, target: str = "compact", dtype: str = "bf16") -> RulesReport:
    """Every check of ``deltachip compile`` on ``c`` for ``target`` and ``dtype``, without
    emitting a weight: CompileError (or another UserError) for the first rule broken."""
    em = plan_circuit(c, target, dtype)
    return RulesReport(em.prog.n_layers, em.num.hidden, c.vocab_size, len(c.memories))


def chip_record(emission: emit.Emission, roms: dict[str, list[int]] | None,
                nonzero: dict[str, int]) -> dict[str, Any]:
    """The chip.json dict of ``emission`` (``roms`` over the memories' own images; ``nonzero``:
    nonzero weights per tensor name), its source trace included."""
    images = default_roms(emission.prog.circuit)
    images.update(roms or {})
    chip = emit.chip_json(emission.prog, emission.num, emission.info, emission.dtype, nonzero,
                          images, emission.config)
    chip["trace"] = trace.record(emission.prog, emission.num.n_b)
    if emission.proof is not None:
        chip["proof"] = emission.proof.record()
    return chip


def compile_circuit(circuit: Circuit, target: str | Target = "compact",
                    dtype: DType | str = DType.BF16,
                    roms: dict[str, list[int]] | None = None,
                    progress: Progress | None = None,
                    byte_cells: bool | None = None) -> Compiled:
    """Compile ``circuit`` with the whole state dict in memory (for small chips and tests);
    ``roms`` overrides memory images (default: each memory's init)."""
    emission = plan_circuit(bake_tables(circuit, roms), target, dtype, progress, byte_cells)
    (progress or _quiet)("emitting weights")
    state = emit.state_dict(emission)
    chip = chip_record(emission, roms, emit.nonzero_counts(state))
    return Compiled(emission.prog, state, emission.config, chip, emission.proof)


def write_dir(emission: emit.Emission, out_dir: str | Path,
              roms: dict[str, list[int]] | None = None, progress: Progress | None = None,
              single_file_limit: int = SINGLE_FILE_LIMIT) -> dict[str, Any]:
    """Build and write the checkpoint of ``emission`` into ``out_dir`` (refused, before any
    work, when it is a file or a directory that is neither empty nor a previous checkpoint: see
    :mod:`backends.chipdir.checkpoint`), one tensor group at a time: each is built, counted (nonzero
    weights for chip.json) and written before the next; above ``single_file_limit`` bytes
    the weights are sharded, one shard per group. Returns the chip.json dict written."""
    prepare_output(out_dir)
    say = progress or _quiet
    nonzero: dict[str, int] = {}
    chip: dict[str, Any] = {}

    def maker(i: int, group: str) -> Callable[[], dict[str, torch.Tensor]]:
        def make() -> dict[str, torch.Tensor]:
            say(f"emitting and writing weights: {group} ({i + 1}/{len(emission.groups)})")
            tensors = emit.group_tensors(emission, group)
            nonzero.update(emit.nonzero_counts(tensors))
            return tensors
        return make

    def make_chip() -> dict[str, Any]:
        chip.update(chip_record(emission, roms, nonzero))
        return chip

    groups = [WeightGroup(g, emission.nbytes(g), maker(i, g))
              for i, g in enumerate(emission.groups)]
    write_checkpoint(out_dir, emission.config, groups, make_chip, single_file_limit)
    return chip


def compile_to_dir(circuit: Circuit, out_dir: str | Path, target: str | Target = "compact",
                   dtype: DType | str = DType.BF16, roms: dict[str, list[int]] | None = None,
                   progress: Progress | None = None,
                   single_file_limit: int = SINGLE_FILE_LIMIT,
                   byte_cells: bool | None = None,
                   approve: Callable[[emit.Emission], None] | None = None) -> Compiled:
    """Compile ``circuit`` and write the checkpoint directory ``out_dir`` (:func:`write_dir`; a bad
    ``out_dir`` is refused before compiling). ``approve(emission)``, when given, is called
    once the chip is planned and before any weight is built, and may refuse it by raising
    (what a caller knows about the chip's size: room on another disk). The returned
    :class:`Compiled` has an empty state dict."""
    prepare_output(out_dir)
    emission = plan_circuit(bake_tables(circuit, roms), target, dtype, progress, byte_cells)
    if approve is not None:
        approve(emission)
    chip = write_dir(emission, out_dir, roms, progress, single_file_limit)
    return Compiled(emission.prog, {}, emission.config, chip, emission.proof)
