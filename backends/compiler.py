"""The backend pipeline in one call: circuit -> scheduled Program -> proof -> tensors -> dir.

Takes: a checked :class:`hdl.ir.Circuit`, a target spec, a dtype. Gives: :class:`Compiled`
(the Program, the numerics, the state dict, config and chip.json dicts) from
:func:`compile_circuit` (everything in memory), and :func:`compile_to_dir`, which writes the
checkpoint one tensor group (a decoder layer, the embedding, the head) at a time, so its
peak memory is about one group whatever the layer count. Stages, each its own module:
``schedule`` (lowering + placement, depth rule), ``exact`` (static proof), ``emit``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from hdl.ir import Circuit
from backends import emit, exact, lanes
from backends.checkpoint import SINGLE_FILE_LIMIT, WeightGroup, prepare_output, write_checkpoint
from backends.lower import Program
from backends.schedule import schedule
from backends.target import Target, get_target


@dataclass
class Compiled:
    program: Program
    numerics: emit.Numerics
    state_dict: dict[str, torch.Tensor]     # empty after compile_to_dir (written, not kept)
    config: dict[str, Any]
    chip: dict[str, Any]


def default_roms(c: Circuit) -> dict[str, list[int]]:
    return {n: list(m.init) for n, m in c.memories.items() if m.init and any(m.init)}


def _plan(c: Circuit, target: str | Target, dtype: str,
          say: Callable[[str], None]) -> emit.Emission:
    """Schedule, allocate lanes, choose numerics and prove ``c`` exact: the emission plan."""
    tgt = get_target(target) if isinstance(target, str) else target
    say("lowering and scheduling")
    prog = schedule(c, tgt)
    say("allocating lanes")
    lanes.allocate(prog)
    say("choosing numerics")
    num = emit.choose_numerics(prog)
    say("proving exactness")
    exact.prove(prog, num, dtype)
    return emit.plan(prog, dtype, num)


def _chip(em: emit.Emission, c: Circuit, roms: dict[str, list[int]] | None,
          nonzero: dict[str, int]) -> dict[str, Any]:
    images = default_roms(c)
    images.update(roms or {})
    return emit.chip_json(em.prog, em.num, em.info, em.dtype, nonzero, images, em.config)


def compile_circuit(c: Circuit, target: str | Target = "compact", dtype: str = "bf16",
                    roms: dict[str, list[int]] | None = None,
                    progress: Callable[[str], None] | None = None) -> Compiled:
    """Compile ``c`` with the whole state dict in memory (for small chips and tests);
    ``roms`` overrides memory images (default: each memory's init)."""
    say = progress or (lambda s: None)
    em = _plan(c, target, dtype, say)
    say("emitting weights")
    sd = emit.state_dict(em)
    chip = _chip(em, c, roms, emit.nonzero_counts(sd))
    return Compiled(em.prog, em.num, sd, em.config, chip)


def compile_to_dir(c: Circuit, out_dir: str | Path, target: str | Target = "compact",
                   dtype: str = "bf16", roms: dict[str, list[int]] | None = None,
                   progress: Callable[[str], None] | None = None,
                   single_file_limit: int = SINGLE_FILE_LIMIT) -> Compiled:
    """Compile ``c`` and write the checkpoint directory ``out_dir`` (see
    :mod:`backends.checkpoint`: an ``out_dir`` that is a file, or a directory that is neither
    empty nor a previous checkpoint, is refused before any work). Each tensor group is built,
    counted (nonzero weights for chip.json) and written before the next is built; above
    ``single_file_limit`` bytes the weights are sharded, one shard per group. The returned
    :class:`Compiled` has an empty state dict."""
    prepare_output(out_dir)
    say = progress or (lambda s: None)
    em = _plan(c, target, dtype, say)
    nonzero: dict[str, int] = {}
    chip: dict[str, Any] = {}

    def maker(i: int, group: str) -> Callable[[], dict[str, torch.Tensor]]:
        def make() -> dict[str, torch.Tensor]:
            say(f"emitting and writing weights: {group} ({i + 1}/{len(em.groups)})")
            tensors = emit.group_tensors(em, group)
            nonzero.update(emit.nonzero_counts(tensors))
            return tensors
        return make

    def make_chip() -> dict[str, Any]:
        chip.update(_chip(em, c, roms, nonzero))
        return chip

    groups = [WeightGroup(g, em.nbytes(g), maker(i, g)) for i, g in enumerate(em.groups)]
    write_checkpoint(out_dir, em.config, groups, make_chip, single_file_limit)
    return Compiled(em.prog, em.num, {}, em.config, chip)
