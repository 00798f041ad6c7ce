"""The fast engine's errors: why a stream stopped (the kernel's codes, DC_E_* in kernel.c) and
the message that says so. Shared by the C kernel's wrapper (:mod:`backends.engines.fast.native`) and
the numpy one (:mod:`backends.engines.fast.pykernel`), which stop at the same token with the same
text.
"""
from __future__ import annotations

from common.errors import UserError
from backends.engines.fast.model import FastModel

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
    ``layer`` (-1: the embedding, L: the lm_head) on value ``val``.

    Every checkpoint deltachip writes keeps these values exact, so a stop means the
    checkpoint is damaged (a weight changed past what the load's checks see) or an engine is
    wrong: the message says how to tell them apart (``deltachip check DIR``, transformers
    against the simulator) and what helps in each case (writing the checkpoint again; the
    hf engine). Code 1 is the stream's own input: an id the chip has no token for."""
    at = ("the lm_head" if layer == len(model.layers) else
          f"layer {layer}" if layer >= 0 else "the embedding")
    head = (f"fast engine: {where}at position {pos}, {at}: "
            f"{REASONS.get(code, f'error {code}')} (value {val:g})")
    if code == 1:
        return FastError(f"{head}: the stream stops (its input names no token of the chip)")
    return FastError(f"{head}: every checkpoint deltachip writes keeps it exact, so the "
                     f"stream stops. `deltachip check {model.path}` runs the checkpoint in "
                     f"transformers against the simulator: if they differ, its weights are "
                     f"damaged: compile it again (a merged checkpoint: merge it again); if "
                     f"they agree, the fast engine is wrong here: run it with --engine hf")
