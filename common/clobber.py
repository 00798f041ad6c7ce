"""An output that would replace one of the command's own inputs, refused before anything runs.

Takes: the outputs a command was given (its option and path) and the inputs it reads (files,
and folders whose files it reads). Gives: :func:`refuse_inputs_as_outputs`, which raises a
UserError (exit 2) naming the option, the output and the input it would replace, e.g.
``--vcd: cannot write c.hdl: it is the source file this command reads; choose another
path``. Paths are compared as the files they name (links followed; the same file reached
by two names is one file), and a path inside an input folder counts as that folder's.
Nothing the user owns is replaced: the check runs before the command writes or runs.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from common.errors import UserError


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(out: Path, folder: Path) -> bool:
    """Whether ``out`` (which need not exist) lies inside ``folder``."""
    try:
        parent = out.resolve().parent
        root = folder.resolve()
    except (OSError, RuntimeError):
        return False
    return parent == root or root in parent.parents


def refuse_inputs_as_outputs(outputs: Iterable[tuple[str, str | os.PathLike | None]],
                             inputs: Iterable[tuple[str, str | os.PathLike | None]]) -> None:
    """UserError when an output (``(option, path)``; a None path is skipped) names one of
    the ``inputs`` (``(what it is, path)``: ``"the source file"``, ``"the --inputs file"``,
    ...): the same file, or a path inside an input folder; or when two outputs name the same
    file."""
    ins = [(what, Path(p)) for what, p in inputs if p is not None]
    outs = [(opt, Path(p)) for opt, p in outputs if p is not None]
    for opt, out in outs:
        for what, src in ins:
            if src.is_dir() and not _same(out, src):
                hit = _inside(out, src)
                where = f"it is inside {src}, {what} this command reads"
            else:
                hit = _same(out, src)
                where = f"it is {what} this command reads"
            if hit:
                raise UserError(f"{opt}: cannot write {out}: {where}; choose another path")
    for k, (opt, out) in enumerate(outs):
        for opt2, out2 in outs[k + 1:]:
            if out == out2 or _same(out, out2):
                raise UserError(f"{opt} and {opt2} name the same file ({out}): give each "
                                f"its own path")
