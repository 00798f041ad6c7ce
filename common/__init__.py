"""The floor every package stands on: errors meant for the user (``errors``), safe output
writes (``outputs``), bounded input reads (``inputs``) and the enums several stages share
(``kinds``: dtype, memory kind).

``common`` imports nothing from the project; ``hdl``, ``backends``, ``cpu``, ``firmware``,
``stdlib`` and the command line ``deltachip`` may all import it (docs/backend.md, "Layers").
"""
