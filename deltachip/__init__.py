"""deltachip: compile synchronous circuits into Qwen3.5 transformer weights.

This package is the top floor: the command line (``deltachip.cli``, one module per command in
``deltachip.commands``) and the public Python API (``deltachip.api``, re-exported here)::

    import deltachip
    counter = deltachip.load("examples/counter/counter.hdl")
    chip = deltachip.compile(counter)
    chip.save("build/counter")

The stages live in the library packages below it: ``hdl`` (language, IR, simulator),
``backends`` (weights), ``cpu`` (RISC-V core and ISA emulator), ``firmware``, and ``common``
(errors, safe output writes, shared enums), which none of them may import this package from
(docs/backend.md, "Layers").
"""
__version__ = "0.1.0"

from deltachip.api import (Chip, Circuit, FirmwareRun, Token, check, compile, engines,  # noqa: E402
                           load, load_source, run_elf)

__all__ = ["Chip", "Circuit", "FirmwareRun", "Token", "check", "compile", "engines", "load",
           "load_source", "run_elf", "__version__"]
