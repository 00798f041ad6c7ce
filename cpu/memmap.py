"""The shipped CPU's memory map and machine conventions (BRIEF §6), as constants.

Every engine (the ISA emulator, the core in the simulator, the compiled weights) and the
firmware's linker script agree on these numbers; ``docs/cpu.md`` describes them in words.
"""
from __future__ import annotations

#: Code ROM: instructions are fetched only from here (read-only; loads are allowed).
CODE_BASE = 0x0000_0000
CODE_SIZE = 256 * 1024
CODE_END = CODE_BASE + CODE_SIZE

#: Read-only data ROM (``.rodata``): loads only.
RODATA_BASE = 0x0004_0000
RODATA_SIZE = 128 * 1024
RODATA_END = RODATA_BASE + RODATA_SIZE

#: RAM: initialised from the ELF's writable segments (``.bss`` zero); the stack starts at
#: its top.
RAM_BASE = 0x0008_0000
RAM_SIZE = 32 * 1024
RAM_END = RAM_BASE + RAM_SIZE
STACK_TOP = RAM_END

#: UART: a byte store (``sb``) to this address prints that byte. Write-only.
UART_TX = 0x1000_0000
#: UART input: a byte load (``lbu``, ``lb``) from this address reads the next byte of the
#: run's input stream (the ``--input`` text; the tool call's text inside a merged model),
#: 0 once it is used up. Read-only; a wider load faults. On the core the load's result
#: comes in the next token (``In``), which whoever runs the core supplies when the core
#: asks for it (``Want``): docs/cpu.md, "Input".
UART_RX = 0x1000_0004
#: Text input (a tool call's text tokens inside a merged model; docs/cpu.md, "Text input"):
#: a byte load from UART_TNEXT moves to the next text token of the run's text stream and
#: reads its length in bytes (at most 255; 0 once the stream is used up); a byte load from
#: UART_TXT + j (j < TEXT_BYTES) reads byte j of the current token (0 past its end). On the
#: core the token comes in as ``Text(id)``, its bytes from table ROMs in the embedding.
UART_TNEXT = 0x1000_0008
UART_TXT = 0x1000_0020
TEXT_BYTES = 32

#: ``ecall`` with a7 = EXIT_SYSCALL ends the program with exit code a0.
EXIT_SYSCALL = 93

#: Register numbers of the ABI registers the conventions use.
REG_SP = 2
REG_A0 = 10
REG_A7 = 17

#: The firmware's input buffer: the loader writes ``--input`` text (NUL-terminated) at the
#: address of this ELF symbol; its capacity in bytes is ``INPUT_SIZE_SYMBOL``.
INPUT_BUFFER_SYMBOL = "__input_buffer"
INPUT_SIZE_SYMBOL = "__input_size"

#: The regions an ELF segment may be loaded into: (name, base, size, writable).
REGIONS: tuple[tuple[str, int, int, bool], ...] = (
    ("code ROM", CODE_BASE, CODE_SIZE, False),
    ("rodata ROM", RODATA_BASE, RODATA_SIZE, False),
    ("RAM", RAM_BASE, RAM_SIZE, True),
)
