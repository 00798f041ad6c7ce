"""The fast engine's errors: why a stream stopped (the kernel's codes, DC_E_* in kernel.c) and
the message that says so. Shared by the C kernel's wrapper (:mod:`backends.fast.native`) and
the numpy one (:mod:`backends.fast.pykernel`), which stop at the same token with the same
text.
"""
from __future__ import annotations

from common.errors import UserError
from backends.fast.model import FastModel

#: The kernel's error codes (kernel.c, DC_E_*) and what each means.
REASONS = {
    1: "token id outside the vocabulary",
    2: "the residual outgrew the pre-norm's exact range (the ballast no longer dominates "
       "its mean square)",
    3: "a silu input outside the range where its value is exact",
    4: "a beta input other than 0 or beyond +-104 (not an exact 0, 1/2 or 1)",
    5: "a key with more than one nonzero (not a row store)",
    6: "a query with more than two nonzeros",
    7: "a value head's data columns outgrew its gated norm's ballast",
    8: "the argmax is not clear of the runner-up by more than rounding could move them",
    10: "the winning payload is past its kind's bound (a bounded last field: no such id)",
}


class FastError(UserError):
    """A stream stopped because a value left what the fast engine computes exactly."""


def message(model: FastModel, pos: int, code: int, layer: int, val: float,
            where: str = "") -> FastError:
    """The error of a stream stopped at position ``pos`` with kernel error ``code`` at
    ``layer`` (-1: the embedding, L: the lm_head) on value ``val``."""
    at = ("the lm_head" if layer == len(model.layers) else
          f"layer {layer}" if layer >= 0 else "the embedding")
    return FastError(f"fast engine: {where}at position {pos}, {at}: "
                     f"{REASONS.get(code, f'error {code}')} (value {val:g}); "
                     f"transformers may compute something else here, so the stream "
                     f"stops (run it with --engine hf)")
