"""Bank placement (backends/compile/schedule.py, docs/backend.md "Scheduling"): among memories that
could start in the same layer, the ones other memories wait on get its key heads first, then
the smaller ones; a big memory spans layers anyway."""
from __future__ import annotations

from pathlib import Path


from tests.backends import circuits  # noqa: E402
from backends.compile.schedule import schedule  # noqa: E402
from backends.chipdir.target import get_target  # noqa: E402
from hdl.frontend import load_source  # noqa: E402

# `big` (4 key heads: a whole layer of this target) is declared first; `idx` addresses
# `far`'s write, so `far` sits a layer after `idx`
SRC = """
circuit P {
    token Go(a: u8);
    start Go(a: 0);
    rom big: u8[64];
    ram idx: u8[1];
    ram far: u8[16];
    idx[0] <= tok.Go.a;
    far[idx[0][3:0]] <= tok.Go.a;
    next = Go(a: big[tok.Go.a] ^ far[tok.Go.a[3:0]]);
}
"""


def test_a_memory_others_wait_on_gets_the_first_layer(tmp_path):
    target = get_target(circuits.config_target(tmp_path / "c.json", nk=4, nv=4, dk=16))
    prog = schedule(load_source(SRC), target)
    layers = {name: sorted({L for L, _ in m.banks}) for name, m in prog.mems.items()}
    assert prog.mems["big"].kheads == target.k_heads
    # idx first (far waits on it), big after it and into the next layer, far beside big
    # there: two layers of memories, where declaration order (big, idx, far) needs three
    assert layers == {"big": [0, 1], "idx": [0], "far": [1]}
    assert prog.n_layers == 2
