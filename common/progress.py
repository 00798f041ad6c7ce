"""A live progress line for long runs: what a polled counter says, redrawn on stderr.

Takes: a ``poll`` callable returning the run's counters now (``instructions`` and, for token
engines, ``tokens``), read from another thread while the run goes on. Gives:
:func:`progress_line`, a context manager that shows, twice a second on standard error,

    ⠙ 1,234,567 instructions · 1,481,003 tokens · 2,512 tokens/s · 0:09:49

and removes the line when the run ends (the program's output on stdout is never touched).
It shows only when standard error is a terminal (or ``DELTACHIP_PROGRESS=1``, for tests and
logs), so pipes and CI logs stay clean. Rates are over the whole run so far. The poll reads
plain integer attributes, which another thread may update meanwhile: a line can lag one
chunk behind, never show a torn value.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

Counters = dict[str, int]


def wanted(stream=None) -> bool:
    """Whether a progress line should show on ``stream`` (default stderr)."""
    flag = os.environ.get("DELTACHIP_PROGRESS")
    if flag is not None:
        return flag not in ("", "0")
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def describe(counts: Counters, seconds: float) -> str:
    """The line's text for ``counts`` after ``seconds`` of running."""
    parts = [f"{counts.get('instructions', 0):,} instructions"]
    rate_of = "instructions"
    if "tokens" in counts:
        parts.append(f"{counts['tokens']:,} tokens")
        rate_of = "tokens"
    if "streams" in counts:
        parts.insert(0, f"{counts['done']:,}/{counts['streams']:,} streams")
    if seconds > 0:
        parts.append(f"{counts.get(rate_of, 0) / seconds:,.0f} {rate_of}/s")
    return " · ".join(parts)


@contextmanager
def progress_line(poll: Callable[[], Counters], enabled: bool | None = None,
                  every: float = 0.5) -> Iterator[None]:
    """Show ``poll()``'s counters on stderr while the block runs (see the module docstring)."""
    if not (wanted() if enabled is None else enabled):
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    t0 = time.perf_counter()

    class _Line(TextColumn):
        def render(self, task):                      # noqa: D401 - rich's column API
            from rich.text import Text
            return Text(describe(poll(), time.perf_counter() - t0))

    console = Console(stderr=True, force_terminal=wanted() and not sys.stderr.isatty() or None)
    with Progress(SpinnerColumn(), _Line(""), TimeElapsedColumn(), console=console,
                  transient=True, refresh_per_second=1 / every) as bar:
        bar.add_task("run", total=None)
        yield
