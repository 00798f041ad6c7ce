"""Running a recursive computation on a deep stack.

The front end walks syntax trees recursively, and a source may nest (or chain operators)
tens of thousands of levels deep: a flat ``a + b + ... `` of 10,000 terms is a tree 10,000
levels deep. Python's default recursion limit (1,000) and the main thread's C stack (8 MB)
are far too small for that. :func:`call_deep` runs a function in a helper thread with a
:data:`STACK_BYTES` stack (virtual memory: only the pages a call really touches are used) and
a recursion limit of :data:`RECURSION_LIMIT`, returns its result or re-raises its exception
in the caller. Callers bound the depth of what they walk themselves (the parser refuses a
source nested deeper than :data:`hdl.parser.MAX_NESTING`, with its location), so the limit
is never hit in practice; a RecursionError, should it come, reaches the caller as usual.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")

STACK_BYTES = 1 << 30
RECURSION_LIMIT = 1_000_000
_lock = threading.Lock()


def call_deep(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run on a deep stack (see the module docstring). Already on
    such a stack (a nested call), it simply calls ``fn``."""
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}

    def run() -> None:
        _local.deep = True
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:      # re-raised in the caller
            box["error"] = e

    # the stack size and the recursion limit are process-wide: set them for this worker and
    # put them back afterwards (the caller only waits meanwhile), so the main thread's small
    # C stack is never given a recursion limit it cannot hold
    with _lock:
        old_limit = sys.getrecursionlimit()
        old_size = threading.stack_size(STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, RECURSION_LIMIT))
        try:
            worker = threading.Thread(target=run, name="deltachip-deep", daemon=True)
            worker.start()
        finally:
            threading.stack_size(old_size)
        try:
            worker.join()
        finally:
            sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"].with_traceback(box["error"].__traceback__)
    return box["result"]


_local = threading.local()
