"""The compiler: a checked circuit (:class:`hdl.ir.Circuit`) in, a compiled chip directory out.

The stages, top to bottom (:mod:`backends.compile.pipeline` runs them in order, each taking
the previous one's typed result): :mod:`schedule` places the circuit (it calls
:mod:`lower`, which turns IR ops into lanes, ReLU neurons and GDN memory ports, and
:mod:`tabulate` for token-only logic), :mod:`retime` moves neurons to save residual dims,
:mod:`lanes` allocates residual lanes, :mod:`exact` proves every value exact before a weight
is written, and :mod:`emit` writes the Qwen3.5 tensors with :mod:`lanemap` and :mod:`trace`
(what each lane and neuron holds, and which source line made it). :mod:`program` is the
backend's own intermediate form between them; :mod:`rules` the compile rules beyond the
language.

It reads and writes files only through :mod:`backends.chipdir` and never imports a
runtime (:mod:`backends.engines`), the checker or the merge (tests/test_layers.py).
"""
