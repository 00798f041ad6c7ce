"""deltachip: compile synchronous circuits into Qwen3.5 transformer weights.

This package holds the command-line entry point and the pieces shared by every stage
(errors). The stages live in the top-level packages ``hdl`` (language, IR, simulator),
``backends`` (weights), ``cpu`` (RISC-V core and ISA emulator) and ``firmware``.
"""
__version__ = "0.1.0"
