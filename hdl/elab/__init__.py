"""Elaboration package, in pipeline order:

- :mod:`files` - parse each file once, resolve imports (search path, cycles);
- :mod:`values` - types, expression values, symbols, the per-path state;
- :mod:`builder` - the IR under construction (folding, sharing, wires, loops, emission);
- :mod:`base`, :mod:`exprs`, :mod:`stmts`, :mod:`elaborator` - the elaborator itself
  (shared state, expressions, statements, files/modules/circuits).

The entry points are in :mod:`hdl.elaborate` and :mod:`hdl.frontend`.
"""
