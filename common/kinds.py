"""Closed sets of names that several stages share, as enums instead of bare strings.

- :class:`DType`: the float type a chip's weights are built and run in (``bf16``, ``fp32``).
- :class:`MemKind`: what a memory of the circuit is (``rom``: read-only, loaded before the
  run; ``ram``: written by the circuit).

Both are :class:`enum.StrEnum`, so a member equals its name (``DType.BF16 == "bf16"``), prints
as it (``f"{DType.BF16}"`` is ``bf16``) and goes into JSON as it. :meth:`DType.parse` turns
user text into a member or a :class:`common.errors.UserError` that lists the choices.
"""
from __future__ import annotations

import enum

from common.errors import UserError


class DType(enum.StrEnum):
    """The float type of a chip's weights and of the run."""
    BF16 = "bf16"
    FP32 = "fp32"

    @classmethod
    def parse(cls, value: str | DType, what: str = "dtype") -> DType:
        """``value`` as a member; UserError ``unknown {what} 'x' (expected bf16 or fp32)``."""
        try:
            return cls(value)
        except ValueError:
            raise UserError(f"unknown {what} '{value}' (expected "
                            f"{' or '.join(m.value for m in cls)})") from None


class MemKind(enum.StrEnum):
    """A circuit memory's kind (``docs/ir.md``, "Memories")."""
    ROM = "rom"
    RAM = "ram"
