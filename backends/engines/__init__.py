"""The runtimes: engines that run a chip directory's weights, one token per clock.

:mod:`base` is the protocol every engine implements (:class:`base.ChipEngine`) and what they
share; :mod:`registry` is the only place where an engine's name (``hf``, ``fast``) and a
directory's kind (compiled, core cache entry, routed or stock merge) become an engine
(:func:`registry.open_engine`). :mod:`hf` runs the weights in transformers' own Qwen3.5
modules, :mod:`fast` runs them sparsely in the project's C kernel, :mod:`merged` is the chip
inside a merged checkpoint.

Engines read directories through :mod:`backends.chipdir` and never import the compiler
(tests/test_layers.py).
"""
