"""Elaboration package: :mod:`files` (parsing and imports), :mod:`values` (types, values,
symbols), :mod:`builder` (IR under construction), :mod:`elaborator` (statements and
expressions). The entry points are in :mod:`hdl.elaborate`."""
