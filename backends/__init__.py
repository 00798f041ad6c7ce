"""From a circuit to weights, and the weights run: the project's backends, by role.

- :mod:`backends.chipdir`: chip directories on disk (compiled, cached, merged), the one
  reader and writer; the floor the others stand on.
- :mod:`backends.compile`: the compiler pipeline, circuit -> chip directory.
- :mod:`backends.engines`: the runtimes (hf, fast, a merged checkpoint's chip) and the one
  registry that turns a name into an engine.
- :mod:`backends.verify`: the compiled weights checked against the circuit.
- :mod:`backends.merge`: a chip merged beside a Qwen3.5 checkpoint, and its tool calls.

Imports point down (chipdir < compile, engines < verify, merge) with no cycle; the compiler
never imports a runtime and a runtime never imports the compiler (tests/test_layers.py).
"""
