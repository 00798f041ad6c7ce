"""Differential check: the compiled weights against the reference simulator, or one engine
against another.

Takes: a compiled directory and run options. Gives: :class:`CheckReport` (positions compared,
every :class:`Mismatch`), from :func:`check_dir` (or :func:`check_engine` on a loaded
engine, any :class:`backends.engines.base.ChipEngine`: ``hf`` or ``fast``), and from
:func:`compare_engines` (engine against engine, e.g. fast against hf, bit for bit: the
same next token, the same memories and every residual dim after every sublayer equal).

Modes:
- decode (default): greedy, one token per call; at each position the model's argmax is the
  next token, fed back; it must equal the simulator's next token. After feeding token t the
  recurrent state must hold the memories as they are before step t (writes of steps < t;
  a transparent memory, written at its own position, as it is after step t):
  compared at every position when ``mem_every`` is 1, else every ``mem_every`` positions and
  at the end.
- prefill: the simulator's token stream is fed in calls of at most ``chunk`` positions (the
  cache carries over, so memory stays bounded however many steps are asked for); every
  position's argmax must be the next token, and the state after each call must hold the
  memories as decode defines them for its last position.

Lanes (``lanes=True``, the default, when chip.json has a lane map): at every position, after
every sublayer (each layer's GDN and its MLP), every live residual lane must hold exactly the
value the compiler designed it to hold (:mod:`backends.compile.lanemap`: the Program's neurons on the
token and the simulator's traced memory reads) and the ballast dims their constant; the first
diverging (position, layer, sublayer, lane) of each row is reported with the HDL signal the
lane carries. Each named signal's Program form is also compared with the simulator's value.

Batch B runs B streams side by side (``starts``: one start token per row; default the same
start for all; ``roms``: each row's own memory images over the engine's, so B programs run
in one batch). The run of a row ends after a halt token (the halt token is still fed, so
the last step's writes are compared) or after ``steps`` steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from common.errors import UserError
from contextlib import nullcontext

from hdl.ir import Circuit, Token
from hdl.sim import SimError, Simulator, StepResult, format_token
from backends.engines.base import ChipEngine
from backends.compile.lanemap import LaneDivergence, LaneMap, SignalDivergence

#: Positions fed per prefill call.
PREFILL_CHUNK = 2048


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
    """Positions compared, memory comparisons, residual lane values compared, every token or
    memory :class:`Mismatch`, the first :class:`LaneDivergence` and
    :class:`SignalDivergence` of each batch row, and notes."""
    positions: int = 0
    memory_checks: int = 0
    lane_checks: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    lanes: list[LaneDivergence] = field(default_factory=list)
    signals: list[SignalDivergence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.lanes or self.signals)

    def problems(self) -> list[str]:
        """Every finding as one line (what ``deltachip check`` prints before its summary)."""
        return ([f"MISMATCH {m}" for m in self.mismatches] +
                [f"SIGNAL {s}" for s in self.signals] + [f"LANE {d}" for d in self.lanes])


def _mem_diff(c: Circuit, row: int, pos: int, want: dict[str, list[int]],
              got: dict[str, list[int | None]], limit: int = 8) -> list[Mismatch]:
    out = []
    for name, words in want.items():
        if c.memories[name].table:      # no state holds it: the token tables do
            continue
        g = got[name]
        w = c.memories[name].width
        for a, (x, y) in enumerate(zip(words, g)):
            if x != y:
                ys = "not a clean word" if y is None else f"0x{y:0{(w + 3) // 4}x}"
                out.append(Mismatch(row, pos, f"{name}[{a}]", f"0x{x:0{(w + 3) // 4}x}", ys))
                if len(out) >= limit:
                    return out
    return out


class _Lanes:
    """Lane checking for one run: the chip's :class:`LaneMap` and the rows already found
    diverging (later divergences of a row are consequences of its first)."""

    def __init__(self, eng: ChipEngine, rep: CheckReport):
        self.rep = rep
        self.map = LaneMap(eng.chip["lanemap"], eng.circuit)
        self.done: set[int] = set()

    def compare(self, row: int, pos0: int, tokens: Sequence[Token],
                values: Sequence[Sequence[int]], taps: Sequence[torch.Tensor]) -> None:
        """Positions ``pos0 ..`` of ``row`` (their tokens, the simulator's traced values and
        the model's residual taps [T, dims] per slot)."""
        if row in self.done or not tokens:
            return
        lm = self.map
        V = lm.designed(tokens, values)
        sd = lm.signal_divergence(V, values, row, pos0)
        ld = lm.first_divergence(V, taps, row, pos0)
        self.rep.lane_checks += len(tokens) * lm.checks_per_position
        if sd is not None:
            self.rep.signals.append(sd)
            self.done.add(row)
        if ld is not None:
            self.rep.lanes.append(ld)
            self.done.add(row)


def _lanes(eng: ChipEngine, lanes: bool, rep: CheckReport) -> _Lanes | None:
    if not lanes:
        return None
    if "lanemap" not in eng.chip:
        rep.notes.append("chip.json has no lane map (compiled by an older deltachip): lanes "
                         "not compared; recompile it with `deltachip compile` to compare them")
        return None
    return _Lanes(eng, rep)


def _step(sim: Simulator, tok: Token, trace: bool, last: bool) -> StepResult | None:
    """The simulator's step from ``tok`` (traced for the lane check); at a row's last
    position (a halt token or the step limit) None when the simulator cannot step it (the
    lanes and the transparent memories of that position are then not compared)."""
    try:
        return sim.step(tok, trace=trace)
    except SimError:
        if last:
            return None
        raise


def _want(c: Circuit, before: dict[str, list[int]], sim: Simulator,
          stepped: bool) -> dict[str, list[int]]:
    """What the state holds after a position is fed: each memory as it was before that
    step (``before``), a transparent one (written at its own position) after it, and
    nothing for a transparent one when the simulator could not step."""
    new = [n for n, m in c.memories.items() if m.read_under_write == "new"]
    after = {n: sim.memory(n) for n in new} if stepped else {}
    return {n: after[n] if n in new else ws for n, ws in before.items()
            if n in after or n not in new}


def check_engine(eng: ChipEngine, steps: int, batch: int = 1, prefill: bool = False,
                 starts: Sequence[Token] | None = None, mem_every: int = 1,
                 max_mismatches: int = 20, lanes: bool = True,
                 chunk: int = PREFILL_CHUNK,
                 roms: Sequence[dict[str, list[int]]] | None = None,
                 answers: Sequence[Callable[[Token], Token]] | None = None) -> CheckReport:
    """Compare ``eng`` with the simulator for ``steps`` steps (see the module docstring);
    ``lanes``: also compare every live residual lane after every sublayer; ``roms``: one
    dict of memory images per row (over the engine's own); ``answers``: per row, what the
    outside feeds in place of a token the chip emits (a chip that asks for input: the
    RISC-V core's Want, answered with In(byte)); the emitted token is what both must
    predict, the answer the next position's token."""
    c = eng.circuit
    if starts is None:
        if c.start is None:
            raise CheckError(f"circuit '{c.name}' declares no start token: pass --start")
        starts = [c.start] * batch
    starts = list(starts)
    if len(starts) != batch:
        raise CheckError(f"{len(starts)} start tokens for batch {batch}")
    if chunk < 1:
        raise CheckError(f"prefill chunk must be >= 1, got {chunk}")
    if roms is not None and len(roms) != batch:
        raise CheckError(f"{len(roms)} memory images for batch {batch}")
    answer = list(answers) if answers is not None else [lambda t: t] * batch
    sims = [Simulator(c, eng.roms if roms is None else {**eng.roms, **roms[b]})
            for b in range(batch)]
    rep = CheckReport()
    ln = _lanes(eng, lanes, rep)
    taps_ctx = eng.sublayer_taps(ln.map.tap_dims) if ln else nullcontext({})
    with taps_ctx as taps:
        if prefill:
            _prefill(eng, sims, starts, steps, rep, ln, taps, chunk, max_mismatches, roms,
                     answer)
        else:
            _decode(eng, sims, starts, steps, rep, ln, taps, mem_every, max_mismatches, roms,
                    answer)
    rep.mismatches = rep.mismatches[:max_mismatches]
    return rep


def _fmt(c: Circuit, t: Token) -> str:
    return f"'{format_token(c, t)}'"


def _decode(eng: ChipEngine, sims: list[Simulator], starts: list[Token], steps: int,
            rep: CheckReport, ln: _Lanes | None, taps: dict[int, torch.Tensor],
            mem_every: int, max_mismatches: int,
            roms: Sequence[dict[str, list[int]]] | None,
            answer: Sequence[Callable[[Token], Token]]) -> None:
    c = eng.circuit
    batch = len(sims)
    cache = eng.new_cache(batch, roms)
    cur = list(starts)
    active = [True] * batch
    for t in range(steps + 1):
        pred = eng.decode_step([eng.token_id(tok) for tok in cur], cache)
        rep.positions += sum(active)
        for b in range(batch):
            if not active[b]:
                continue
            last = t == steps or c.kinds[cur[b].kind].halt
            before = sims[b].memories if t % mem_every == 0 or last else None
            r = _step(sims[b], cur[b], ln is not None, last)
            if before is not None:
                rep.mismatches += _mem_diff(c, b, t, _want(c, before, sims[b], r is not None),
                                            eng.read_memories(cache, b))
                rep.memory_checks += 1
            if ln is not None and r is not None:
                ln.compare(b, t, [cur[b]], [r.values], [taps[s][b] for s in range(len(taps))])
            if last:                    # the halt token (or the limit) was this row's last
                active[b] = False
                continue
            got = int(pred[b])
            if got != eng.token_id(r.next):
                rep.mismatches.append(Mismatch(b, t, "next token", _fmt(c, r.next),
                                               _fmt_id(eng, got)))
                active[b] = False
                continue
            cur[b] = answer[b](r.next)
        if not any(active) or len(rep.mismatches) >= max_mismatches:
            break


def _prefill(eng: ChipEngine, sims: list[Simulator], starts: list[Token], steps: int,
             rep: CheckReport, ln: _Lanes | None, taps: dict[int, torch.Tensor], chunk: int,
             max_mismatches: int, roms: Sequence[dict[str, list[int]]] | None,
             answer: Sequence[Callable[[Token], Token]]) -> None:
    """The simulator's streams fed ``chunk`` positions per call; rows are cut to the
    shortest stream (one ends after a halt token or ``steps`` steps). The memories are
    compared after every call, at its last position."""
    c = eng.circuit
    batch = len(sims)
    cache = eng.new_cache(batch, roms)
    cur = list(starts)
    pos = 0
    done = False
    while not done and len(rep.mismatches) < max_mismatches:
        pos0 = pos
        toks: list[list[Token]] = [[] for _ in range(batch)]
        vals: list[list[Sequence[int] | None]] = [[] for _ in range(batch)]
        nexts: list[list[Token]] = [[] for _ in range(batch)]
        wants: list[dict[str, list[int]]] = []
        while pos - pos0 < chunk and not done:
            done = pos == steps or any(c.kinds[t.kind].halt for t in cur)
            at_end = done or pos - pos0 == chunk - 1
            before = [sim.memories for sim in sims] if at_end else []
            for b in range(batch):
                toks[b].append(cur[b])
                r = _step(sims[b], cur[b], ln is not None, done)
                if at_end:  # the memories after the steps that fed this position
                    wants.append(_want(c, before[b], sims[b], r is not None))
                vals[b].append(r.values if r is not None else None)
                if not done:
                    nexts[b].append(r.next)
                    cur[b] = answer[b](r.next)
            pos += 1
        ids = torch.tensor([[eng.token_id(t) for t in row] for row in toks])
        pred, cache = eng.prefill(ids, cache)
        for b in range(batch):
            for i, want in enumerate(nexts[b]):
                got = int(pred[b, i])
                if got != eng.token_id(want):
                    rep.mismatches.append(Mismatch(b, pos0 + i, "next token", _fmt(c, want),
                                                   _fmt_id(eng, got)))
            if ln is not None:
                n = sum(v is not None for v in vals[b])     # the last one may be missing
                ln.compare(b, pos0, toks[b][:n], vals[b][:n],
                           [taps[s][b, :n] for s in range(len(taps))])
            rep.mismatches += _mem_diff(c, b, pos - 1, wants[b], eng.read_memories(cache, b))
            rep.memory_checks += 1
    rep.positions = pos * batch


def _fmt_id(eng: ChipEngine, tid: int) -> str:
    try:
        return _fmt(eng.circuit, eng.token_of(tid))
    except ValueError:
        return f"id {tid}"


def check_dir(path: str | Path, steps: int, dtype: str | None = None, batch: int = 1,
              prefill: bool = False, starts: Sequence[Token] | None = None,
              mem_every: int = 1, lanes: bool = True, engine: str = "hf") -> CheckReport:
    """Load ``path`` on ``engine`` (hf: transformers; fast) and compare it with the
    simulator."""
    return check_engine(load_engine(engine, path, dtype), steps, batch, prefill, starts,
                        mem_every, lanes=lanes)


def load_engine(name: str, path: str | Path, dtype: str | None = None,
                roms: dict[str, list[int]] | None = None) -> ChipEngine:
    """The engine ``name`` (``hf`` or ``fast``) on the chip directory at ``path`` (compiled
    or merged, either layout): :func:`backends.engines.registry.open_engine`."""
    from backends.engines.registry import open_engine
    return open_engine(name, path, dtype, roms)


def compare_engines(eng: ChipEngine, ref: ChipEngine, steps: int, batch: int = 1,
                    starts: Sequence[Token] | None = None, mem_every: int = 1,
                    lanes: bool = True, max_mismatches: int = 20,
                    roms: Sequence[dict[str, list[int]]] | None = None,
                    stream: Sequence[Sequence[Token]] | None = None) -> CheckReport:
    """``eng`` against ``ref`` (e.g. fast against hf) on the same checkpoint, position by
    position, in decode: both are fed the same tokens — ``stream[b]`` when given (e.g. the
    simulator's), else ``eng``'s own argmax after the start token — for ``steps``
    positions or until a halt token has been fed. At every position both argmax ids must be
    equal; with ``lanes``, every residual dim after every sublayer must be equal; the
    memories must be equal every ``mem_every`` positions and at the end."""
    c = eng.circuit
    if starts is None and stream is None:
        if c.start is None:
            raise CheckError(f"circuit '{c.name}' declares no start token: pass --start")
        starts = [c.start] * batch
    rows = [list(s) for s in stream] if stream is not None else [[t] for t in starts]
    batch = len(rows)
    rep = CheckReport()
    ca, cb = eng.new_cache(batch, roms), ref.new_cache(batch, roms)
    n_slots = 2 * len(eng.chip["config"]["layer_types"])
    dims = [torch.arange(eng.chip["config"]["hidden_size"])] * n_slots if lanes else None
    cur = [r[0] for r in rows]
    active = [True] * batch
    with (eng.sublayer_taps(dims) if lanes else nullcontext({})) as ta, \
            (ref.sublayer_taps(dims) if lanes else nullcontext({})) as tb:
        for t in range(steps + 1):
            ids = [eng.token_id(tok) for tok in cur]
            pa, pb = eng.decode_step(ids, ca), ref.decode_step(ids, cb)
            rep.positions += sum(active)
            for b in range(batch):
                if not active[b]:
                    continue
                last = t == steps or c.kinds[cur[b].kind].halt or (
                    stream is not None and t + 1 >= len(rows[b]))
                if int(pa[b]) != int(pb[b]):
                    rep.mismatches.append(Mismatch(b, t, "next token", _fmt_id(ref, int(pb[b])),
                                                   _fmt_id(eng, int(pa[b]))))
                    active[b] = False
                if lanes and active[b]:
                    rep.lane_checks += n_slots * len(dims[0])
                    for s in range(n_slots):
                        diff = torch.nonzero(ta[s][b, 0] != tb[s][b, 0])
                        if len(diff):
                            d = int(diff[0])
                            rep.mismatches.append(Mismatch(
                                b, t, f"residual dim {d} after sublayer {s}",
                                repr(float(tb[s][b, 0, d])), repr(float(ta[s][b, 0, d]))))
                            active[b] = False
                            break
                if active[b] and (t % mem_every == 0 or last):
                    rep.memory_checks += 1
                    ma, mb = eng.read_memories(ca, b), ref.read_memories(cb, b)
                    for name in mb:
                        if ma[name] != mb[name]:
                            a = next(i for i, (x, y) in enumerate(zip(ma[name], mb[name])) if x != y)
                            rep.mismatches.append(Mismatch(b, t, f"{name}[{a}]", str(mb[name][a]),
                                                           str(ma[name][a])))
                            active[b] = False
                            break
                if last:
                    active[b] = False
                elif active[b]:
                    cur[b] = rows[b][t + 1] if stream is not None else eng.token_of(int(pa[b]))
            if not any(active) or len(rep.mismatches) >= max_mismatches:
                break
    rep.mismatches = rep.mismatches[:max_mismatches]
    return rep
