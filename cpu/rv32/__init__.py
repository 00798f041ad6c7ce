"""The shipped RV32IM + Zba core, written in the project's HDL (``cpu/rv32/*.hdl``).

- :mod:`cpu.rv32.build`: the core's source, its sizes, the elaborated circuit (cached);
- :mod:`cpu.rv32.loader`: an ELF (+ ``--input`` text) → the memories' initial images;
- :mod:`cpu.rv32.protocol`: reads the core's token stream (instructions, output, exit, fault);
- :mod:`cpu.rv32.engines`: the ``sim`` and ``hf`` engines of ``deltachip run``.

docs/cpu.md ("The core") describes the design and the trace protocol.
"""
