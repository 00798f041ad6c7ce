"""The pipeline's stages pass typed artefacts (backends/compile/program.py, "Stage artefacts"): each
stage works on its own copy, so an artefact's program never changes once it exists, and the
artefacts compose to exactly what ``plan_circuit`` returns."""
from __future__ import annotations

from pathlib import Path

from tests.backends import circuits  # noqa: E402

from backends.compile import emit, exact, lanes, retime, schedule  # noqa: E402
from backends.compile.pipeline import plan_circuit  # noqa: E402
from backends.compile.program import Allocated, Placed, Retimed  # noqa: E402
from backends.chipdir.target import get_target  # noqa: E402


def _shape(prog):
    """What a later stage could change: lane slots, neurons per layer, dims."""
    return ([ln.slot for ln in prog.lanes],
            {L: [(id(n), n.clear) for n in ns] for L, ns in prog.mlp.items()},
            list(prog.phys), prog.n_phys, prog.sched)


def test_stages_leave_earlier_artefacts_alone():
    c = circuits.alu(8)             # deep enough that retiming moves neurons
    placed = schedule.run(c, get_target("compact"))
    assert isinstance(placed, Placed) and not placed.prog.phys
    before = _shape(placed.prog)
    retimed = retime.run(placed)
    assert isinstance(retimed, Retimed)
    assert retimed.prog.sched["moved_neurons"] > 0
    assert retimed.mlp_width == retimed.prog.sched["mlp_width"]
    assert _shape(placed.prog) == before
    mid = _shape(retimed.prog)
    allocated = lanes.run(retimed)
    assert isinstance(allocated, Allocated)
    assert _shape(retimed.prog) == mid and _shape(placed.prog) == before
    assert allocated.dims == allocated.prog.n_phys < len(allocated.prog.lanes)
    assert any(n.clear for ns in allocated.prog.mlp.values() for n in ns)
    assert not any(n.clear for ns in retimed.prog.mlp.values() for n in ns)
    # the artefacts compose to plan_circuit's emission
    num = emit.choose_numerics(allocated.prog)
    proven = exact.run(allocated, num, "bf16")
    em = emit.run(proven)
    ref = plan_circuit(circuits.alu(8), "compact", "bf16")
    assert em.config == ref.config and em.members == ref.members and em.proof == ref.proof
    assert em.prog.phys == ref.prog.phys and em.num == ref.num


def test_in_place_helpers_agree_with_the_stages():
    """``retime.retime`` + ``lanes.allocate`` on one Program (the helpers tests and benchmarks
    use) give the dims and neurons of the stage artefacts."""
    c = circuits.alu(8)
    t = get_target("compact")
    allocated = lanes.run(retime.run(schedule.run(c, t)))
    prog = schedule.schedule(circuits.alu(8), t)
    lanes.allocate(prog, retime.retime(prog)["mlp_width"])
    assert prog.phys == allocated.prog.phys and prog.n_phys == allocated.prog.n_phys
    assert ({L: len(ns) for L, ns in prog.mlp.items()}
            == {L: len(ns) for L, ns in allocated.prog.mlp.items()})
