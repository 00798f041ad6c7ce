"""What a float dtype holds exactly: the torch type of each :class:`common.kinds.DType` and
the significant bits of an integer.

Shared by lowering (which keeps every weight within 8 significant bits), the exactness proof,
emission and the engines, so none of them has to import another for these facts.
"""
from __future__ import annotations

import torch

from common.kinds import DType

#: The torch dtype of each DType.
DTYPES: dict[DType, torch.dtype] = {DType.BF16: torch.bfloat16, DType.FP32: torch.float32}

#: The name config.json's ``dtype`` uses for each DType.
HF_NAMES: dict[DType, str] = {DType.BF16: "bfloat16", DType.FP32: "float32"}


def sig_bits(v: int) -> int:
    """How many significant bits the integer ``v`` has (its odd part's length; 0 for 0):
    bf16 holds an integer exactly when this is <= 8, fp32 when it is <= 24."""
    v = abs(v)
    if v == 0:
        return 0
    while v % 2 == 0:
        v //= 2
    return v.bit_length()
