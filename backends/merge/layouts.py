"""The merge layouts by name: the one place where ``--layout`` becomes a writer.

Takes: a layout name (``routed`` or ``stock``, :data:`backends.chipdir.merged.LAYOUTS`).
Gives: :class:`Layout` — its writer and what the command says and asks of it — so the
command line never branches on the name.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backends.chipdir.merged import LAYOUTS as NAMES


@dataclass(frozen=True)
class Layout:
    """One merge layout."""
    name: str
    #: whether the core of a ``--firmware`` merge reads the base's text tokens (routed: a
    #: tool call's text ids reach it through its table ROMs; stock: bytes)
    reads_text: bool
    #: ``write(base, out, chip, dtype, progress, firmware, digests, tables)`` -> report
    write: Callable[..., Any]
    #: the summary line's extra words for a report (stock: its widened hidden size)
    detail: Callable[[Any], str]


def _routed(base: Path, out: Path, chip: Any, dtype: str | None, progress: Any,
            firmware: Any, digests: bool, tables: str) -> Any:
    from backends.merge.routed import merge_routed
    return merge_routed(base, out, chip, dtype, progress=progress, tables=tables,
                        firmware=firmware, digests=digests)


def _stock(base: Path, out: Path, chip: Any, dtype: str | None, progress: Any,
           firmware: Any, digests: bool, tables: str) -> Any:
    """``tables`` is the routed layout's: the stock layout stores plain tables always."""
    from backends.merge.stock import merge_stock
    return merge_stock(base, out, chip, dtype, progress=progress, firmware=firmware,
                       digests=digests)


LAYOUTS = {
    "routed": Layout("routed", True, _routed, lambda r: ""),
    "stock": Layout("stock", False, _stock, lambda r: f", hidden {r.hidden:,}"),
}
assert tuple(LAYOUTS) == NAMES
