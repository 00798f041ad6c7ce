"""deltachip firmware: the RV32IM + Zba toolchain (:mod:`firmware.toolchain`), the runtime
(``runtime/``: crt0, linker script, printf), example programs (``programs/``), the ``calc``
big-number calculator (``calc/``) and the ISA test programs (``isa_tests/``).
See docs/firmware.md."""
