"""Differential check: the compiled weights (engine "hf") against the reference simulator.

Takes: a compiled directory and run options. Gives: :class:`CheckReport` (positions compared,
every :class:`Mismatch`), from :func:`check_dir` (or :func:`check_engine` on a loaded
:class:`backends.hf_engine.HFEngine`).

Modes:
- decode (default): greedy, one token per call; at each position the model's argmax is the
  next token, fed back; it must equal the simulator's next token. After feeding token t the
  recurrent state must hold the memories as they are before step t (writes of steps < t):
  compared at every position when ``mem_every`` is 1, else every ``mem_every`` positions and
  at the end.
- prefill: the simulator's token stream is fed in one call; every position's argmax must be
  the next token, and the final state must hold the final memories.

Batch B runs B streams side by side (``starts``: one start token per row; default the same
start for all). The run of a row ends after a halt token (the halt token is still fed, so
the last step's writes are compared) or after ``steps`` steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from deltachip.errors import UserError
from hdl.ir import Circuit, Token
from hdl.sim import Simulator, format_token
from backends.hf_engine import HFEngine


class CheckError(UserError):
    """Bad options for check."""


@dataclass(frozen=True)
class Mismatch:
    row: int
    position: int
    signal: str
    simulator: str
    model: str

    def __str__(self) -> str:
        r = f"row {self.row} " if self.row else ""
        return f"{r}position {self.position}: {self.signal}: simulator {self.simulator}, model {self.model}"


@dataclass
class CheckReport:
    positions: int = 0
    memory_checks: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _mem_diff(c: Circuit, row: int, pos: int, want: dict[str, list[int]],
              got: dict[str, list[int | None]], limit: int = 8) -> list[Mismatch]:
    out = []
    for name, words in want.items():
        g = got[name]
        w = c.memories[name].width
        for a, (x, y) in enumerate(zip(words, g)):
            if x != y:
                ys = "not a clean word" if y is None else f"0x{y:0{(w + 3) // 4}x}"
                out.append(Mismatch(row, pos, f"{name}[{a}]", f"0x{x:0{(w + 3) // 4}x}", ys))
                if len(out) >= limit:
                    return out
    return out


def check_engine(eng: HFEngine, steps: int, batch: int = 1, prefill: bool = False,
                 starts: Sequence[Token] | None = None, mem_every: int = 1,
                 max_mismatches: int = 20) -> CheckReport:
    c = eng.circuit
    if starts is None:
        if c.start is None:
            raise CheckError(f"circuit '{c.name}' declares no start token: pass --start")
        starts = [c.start] * batch
    starts = list(starts)
    if len(starts) != batch:
        raise CheckError(f"{len(starts)} start tokens for batch {batch}")
    sims = [Simulator(c, eng.roms) for _ in range(batch)]
    rep = CheckReport()
    fmt = lambda t: f"'{format_token(c, t)}'"
    if prefill:
        streams = [sim.run(starts[b], steps) for b, sim in enumerate(sims)]
        n = min(len(s) for s in streams)        # rows are cut to the shortest stream
        ids = torch.tensor([[eng.token_id(t) for t in s[:n]] for s in streams])
        # the memories after the n-1 steps that fed the last position: a fresh run that long
        mems = []
        for b in range(batch):
            sim = Simulator(c, eng.roms)
            sim.run(starts[b], n - 1)
            mems.append(sim.memories)
        pred, cache = eng.prefill(ids)
        for b in range(batch):
            for t in range(n - 1):
                got = int(pred[b, t])
                want = int(ids[b, t + 1])
                if got != want:
                    rep.mismatches.append(Mismatch(b, t, "next token", fmt(eng.token_of(want)),
                                                   _fmt_id(eng, got, fmt)))
            rep.mismatches += _mem_diff(c, b, n - 1, mems[b], eng.read_memories(cache, b))
            rep.memory_checks += 1
        rep.positions = n * batch
        rep.mismatches = rep.mismatches[:max_mismatches]
        return rep
    cache = eng.new_cache(batch)
    cur = list(starts)
    active = [True] * batch
    for t in range(steps + 1):
        pred = eng.decode_step([eng.token_id(tok) for tok in cur], cache)
        rep.positions += sum(active)
        for b in range(batch):
            last = t == steps or c.kinds[cur[b].kind].halt
            if active[b] and (t % mem_every == 0 or last):
                rep.mismatches += _mem_diff(c, b, t, sims[b].memories, eng.read_memories(cache, b))
                rep.memory_checks += 1
        if t == steps or len(rep.mismatches) >= max_mismatches:
            break
        for b in range(batch):
            if not active[b]:
                continue
            if c.kinds[cur[b].kind].halt:       # the halt token was this row's last position
                active[b] = False
                continue
            r = sims[b].step(cur[b])
            got = int(pred[b])
            if got != eng.token_id(r.next):
                rep.mismatches.append(Mismatch(b, t, "next token", fmt(r.next), _fmt_id(eng, got, fmt)))
                active[b] = False
                continue
            cur[b] = r.next
        if not any(active):
            break
    rep.mismatches = rep.mismatches[:max_mismatches]
    return rep


def _fmt_id(eng: HFEngine, tid: int, fmt) -> str:
    try:
        return fmt(eng.token_of(tid))
    except ValueError:
        return f"id {tid}"


def check_dir(path: str | Path, steps: int, dtype: str | None = None, batch: int = 1,
              prefill: bool = False, starts: Sequence[Token] | None = None,
              mem_every: int = 1) -> CheckReport:
    """Load ``path`` with transformers and compare it with the simulator."""
    eng = HFEngine(path, dtype)
    return check_engine(eng, steps, batch, prefill, starts, mem_every)
