"""The backend pipeline in one call: circuit -> scheduled Program -> proof -> tensors -> dir.

Takes: a checked :class:`hdl.ir.Circuit`, a target spec, a dtype. Gives: :class:`Compiled`
(the Program, the numerics, the fp32 state dict, config and chip.json dicts) and
:func:`compile_to_dir`, which also writes the checkpoint. Stages, each its own module:
``schedule`` (lowering + placement, depth rule), ``exact`` (static proof), ``emit``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from hdl.ir import Circuit
from backends import emit, exact, lanes
from backends.checkpoint import prepare_output, write_checkpoint
from backends.lower import Program
from backends.schedule import schedule
from backends.target import Target, get_target


@dataclass
class Compiled:
    program: Program
    numerics: emit.Numerics
    state_dict: dict[str, torch.Tensor]
    config: dict[str, Any]
    chip: dict[str, Any]


def default_roms(c: Circuit) -> dict[str, list[int]]:
    return {n: list(m.init) for n, m in c.memories.items() if m.init and any(m.init)}


def compile_circuit(c: Circuit, target: str | Target = "compact", dtype: str = "bf16",
                    roms: dict[str, list[int]] | None = None,
                    progress: Callable[[str], None] | None = None) -> Compiled:
    """Compile ``c``; ``roms`` overrides memory images (default: each memory's init)."""
    say = progress or (lambda s: None)
    tgt = get_target(target) if isinstance(target, str) else target
    say("lowering and scheduling")
    prog = schedule(c, tgt)
    say("allocating lanes")
    lanes.allocate(prog)
    say("choosing numerics")
    num = emit.choose_numerics(prog)
    say("proving exactness")
    exact.prove(prog, num, dtype)
    say("emitting weights")
    num, sd, info, _ = emit.build(prog, dtype)
    images = default_roms(c)
    images.update(roms or {})
    cfg = emit.config_dict(prog, num, prog.n_layers, info["inter"], info["nk"], info["vocab"], dtype)
    emit.complete_state_dict(cfg, sd, emit.DTYPES[dtype])
    nz = emit.nonzero_counts(sd)
    chip = emit.chip_json(prog, num, info, dtype, nz, images, cfg)
    return Compiled(prog, num, sd, cfg, chip)


def compile_to_dir(c: Circuit, out_dir: str | Path, target: str | Target = "compact",
                   dtype: str = "bf16", roms: dict[str, list[int]] | None = None,
                   progress: Callable[[str], None] | None = None) -> Compiled:
    """Compile ``c`` and write the checkpoint directory ``out_dir`` (see
    :mod:`backends.checkpoint`: an ``out_dir`` that is a file, or a directory that is neither
    empty nor a previous checkpoint, is refused before any work)."""
    prepare_output(out_dir)
    comp = compile_circuit(c, target, dtype, roms, progress)
    if progress:
        progress("writing checkpoint")
    write_checkpoint(out_dir, comp.config, comp.state_dict, comp.chip, emit.DTYPES[dtype])
    return comp
